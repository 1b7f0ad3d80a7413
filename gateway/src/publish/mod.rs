//! What the gateway publishes to anyone, beside the agent-facing endpoint: the node CA's
//! revocation list ([`crl`]), kept current and served over plain HTTP, and pushed to nodes over
//! their sessions; workload identity's OIDC discovery document and JWK Set ([`oidc`]).
//!
//! Nothing here may hold a key a split gateway must not hold: a split gateway gets what it
//! publishes from the api and checks it against the public node CA certificate before serving it.

pub mod crl;
pub mod crl_http;
pub mod oidc;

use std::net::SocketAddr;

use events::store::LogHub;
use tokio::task::JoinHandle;

use crate::publish::crl::{CrlOptions, CrlSigner, CrlWatch};

/// Why a publication listener (the SPIFFE bundle endpoint, the OIDC documents) could not start;
/// the gateway reports it as its start error.
#[derive(Debug, thiserror::Error)]
pub enum PublishStartError {
    #[error("cannot listen on {addr}: {source} (is another server using the port?)")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("TLS: {0}")]
    Tls(#[from] crate::edge::tls::TlsSetupError),
}

/// The revocation list kept current, and the tasks doing it.
pub struct Published {
    /// The current list.
    pub current: CrlWatch,
    /// The signing task and, when served, the HTTP listener.
    pub tasks: Vec<JoinHandle<()>>,
}

/// Starts keeping the list current (subscribed to `hub` now, before the gateway serves) and,
/// when `options.listen` is set, serving it: what was started and the HTTP address; `Err` is the
/// address that could not be bound.
pub async fn start(
    signer: &CrlSigner,
    node_ca_der: &[u8],
    hub: &LogHub,
    options: CrlOptions,
) -> Result<(Published, Option<SocketAddr>), (SocketAddr, std::io::Error)> {
    let (current, task) = crl::start(
        signer.clone(),
        node_ca_der.to_vec(),
        hub.subscribe(),
        options,
    );
    let mut tasks = vec![task];
    let addr = match options.listen {
        Some(at) => {
            let (addr, server) = crl_http::listen(at, current.clone())
                .await
                .map_err(|e| (at, e))?;
            tasks.push(server);
            Some(addr)
        }
        None => None,
    };
    Ok((Published { current, tasks }, addr))
}
