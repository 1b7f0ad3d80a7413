//! [`run_site`]: `bcd node`'s loop for the agent's own identity, the lease task and the boot
//! server side by side, until the node loop ends (a revocation, an expiry) or SIGTERM/SIGINT,
//! after which the lease is released (when held) before it returns.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use super::agent::{load_site_identity, AgentError, SiteShared};
use super::boot::answer;
use super::http::{serve, Handler};
use super::lease::{hold_lease, RELEASE_TIMEOUT};
use super::log_line::site_log;
use crate::files::DataDir;
use crate::node::{run_node, NodeExit, NodeOptions};

/// What `bcd site` prints when a signal stopped it (exit status 0).
pub const STOPPED_MESSAGE: &str = "bcd site: stopped";

/// How `bcd site` runs.
#[derive(Debug, Clone)]
pub struct SiteOptions {
    /// The node loop's options (the same as `bcd node`'s).
    pub node: NodeOptions,
    /// The boot server's address (`--listen`, else `[site] listen`; there is no default).
    pub listen: String,
}

/// How `bcd site` ended.
#[derive(Debug, thiserror::Error)]
pub enum SiteExit {
    /// SIGTERM or SIGINT: the lease was released (when held).
    #[error("{STOPPED_MESSAGE}")]
    Stopped,
    /// The node loop ended (revoked, expired, the identity stopped loading...).
    #[error("{0}")]
    Node(NodeExit),
    /// The identity is not a site agent's, or does not load.
    #[error("bcd site: {0}")]
    Identity(#[from] AgentError),
    /// The boot server cannot listen.
    #[error("bcd site: cannot listen on {addr} ([site] listen, --listen): {reason}")]
    Listen {
        /// The address.
        addr: String,
        /// Why.
        reason: String,
    },
}

type Signals = (tokio::signal::unix::Signal, tokio::signal::unix::Signal);

fn stop_signals() -> std::io::Result<Signals> {
    use tokio::signal::unix::{signal, SignalKind};
    Ok((
        signal(SignalKind::terminate())?,
        signal(SignalKind::interrupt())?,
    ))
}

async fn stopped(signals: &mut Option<Signals>) {
    match signals {
        Some((term, int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        None => std::future::pending().await,
    }
}

/// Runs `bcd site` (see the module documentation).
pub async fn run_site(dir: &DataDir, options: &SiteOptions) -> SiteExit {
    let loaded = match load_site_identity(dir, &options.node) {
        Ok(loaded) => loaded,
        Err(e) => return SiteExit::Identity(e),
    };
    let listener = match TcpListener::bind(&options.listen).await {
        Ok(listener) => listener,
        Err(e) => {
            return SiteExit::Listen {
                addr: options.listen.clone(),
                reason: e.to_string(),
            }
        }
    };
    let shown = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| options.listen.clone());
    site_log(format_args!(
        "site agent {} (site {}); boot server on http://{shown}/boot.ipxe",
        loaded.leaf.spiffe_id.node, loaded.leaf.spiffe_id.site
    ));
    // Installed before anything is held, so a signal always releases.
    let mut signals = match stop_signals() {
        Ok(signals) => Some(signals),
        Err(e) => {
            site_log(format_args!(
                "cannot handle SIGTERM/SIGINT ({e}): the lease lapses on its own when stopped"
            ));
            None
        }
    };
    let shared = Arc::new(SiteShared::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let lease = tokio::spawn(hold_lease(
        dir.clone(),
        options.node.clone(),
        shared.clone(),
        stop_rx.clone(),
    ));
    let for_http = shared.clone();
    let handler: Handler = Arc::new(move |request| Box::pin(answer(for_http.clone(), request)));
    let http = tokio::spawn(serve(listener, handler, stop_rx));
    let exit = tokio::select! {
        exit = run_node(dir, &options.node) => SiteExit::Node(exit),
        _ = stopped(&mut signals) => {
            site_log("stopping (signal): releasing the boot lease");
            SiteExit::Stopped
        }
    };
    let _ = stop_tx.send(true);
    // The lease task releases on its way out; give it the RELEASE's time and a little more.
    let _ = tokio::time::timeout(RELEASE_TIMEOUT + StdDuration::from_secs(1), lease).await;
    shared.drop_holding();
    http.abort();
    // Wait for the server task to be dropped, so its listener is closed before a re-run (after
    // an x509pop re-join) binds the address again.
    let _ = http.await;
    exit
}
