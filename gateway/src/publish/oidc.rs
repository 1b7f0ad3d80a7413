//! Workload identity's publication (issue 43 item 2; spec 003 "Workload identity",
//! `docs/WORKLOAD-IDENTITY.md`): the OIDC discovery document at `<issuer
//! path>/.well-known/openid-configuration` and the issuer's JWK Set at `<issuer
//! path>/.well-known/jwks.json`, over HTTPS on a listener of its own (`[oidc] listen`).
//!
//! GET and HEAD, public (no client certificate), `Cache-Control: public, max-age=300`,
//! `Access-Control-Allow-Origin: *`. The JWK Set is read from the store on every request, so a
//! key added shows at once; the discovery document is the configuration's. The listener is
//! the SPIFFE bundle endpoint's server ([`crate::trust::spiffe_bundle::serve`]): the gateway's serving
//! certificate, TLS 1.2 and 1.3, HTTP/1.1, one request per connection, 64 connections (8 per
//! address). It never reads a secret: a split gateway serves it from its read store.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use domain::oidc::discovery::CACHE_MAX_AGE_SECS;
use domain::oidc::IssuerUrl;
use events::store::EventStore;
use rustls::server::ResolvesServerCert;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

use crate::publish::PublishStartError;
use crate::trust::spiffe_bundle::{serve, server_config, Documents};

/// Where the documents are served and for which issuer (`[oidc]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OidcPublication {
    /// The listener.
    pub listen: SocketAddr,
    /// The issuer URL: its path is where the documents are.
    pub issuer: IssuerUrl,
}

/// What answers a request.
struct Source {
    store: EventStore,
    issuer: IssuerUrl,
    discovery: String,
}

/// Binds the listener, when `[oidc] listen` asks for one, and serves there (the task joins
/// `background`); the address it got.
pub async fn start(
    publication: Option<&OidcPublication>,
    resolver: Arc<dyn ResolvesServerCert>,
    store: &EventStore,
    background: &mut Vec<JoinHandle<()>>,
) -> Result<Option<SocketAddr>, PublishStartError> {
    let Some(p) = publication else {
        return Ok(None);
    };
    let listen_error = |source| PublishStartError::Listen {
        addr: p.listen,
        source,
    };
    let listener = TcpListener::bind(p.listen).await.map_err(listen_error)?;
    let addr = listener.local_addr().map_err(listen_error)?;
    let acceptor = TlsAcceptor::from(Arc::new(server_config(resolver)?));
    let source = Arc::new(Source {
        store: store.clone(),
        issuer: p.issuer.clone(),
        discovery: domain::oidc::discovery_document(&p.issuer).to_string(),
    });
    background.push(tokio::spawn(serve(listener, acceptor, source)));
    Ok(Some(addr))
}

impl Documents for Source {
    fn answer<'a>(
        &'a self,
        head: &'a Option<Vec<u8>>,
    ) -> Pin<Box<dyn Future<Output = Vec<u8>> + Send + 'a>> {
        Box::pin(answer(head, self))
    }
}

/// The response to a request head: the discovery document or the JWK Set for GET or HEAD of
/// their paths (a query string is ignored), 404 elsewhere, 405 for another method, 431 for a
/// head too long, 503 when the store cannot be read.
async fn answer(head: &Option<Vec<u8>>, source: &Source) -> Vec<u8> {
    let Some(head) = head else {
        return response("431 Request Header Fields Too Large", "", false, false);
    };
    let line = head.split(|b| *b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    if method != "GET" && method != "HEAD" {
        return response("405 Method Not Allowed", "GET or HEAD only\n", false, false);
    }
    let head_only = method == "HEAD";
    if path == source.issuer.discovery_path() {
        return response("200 OK", &source.discovery, head_only, true);
    }
    if path != source.issuer.jwks_path() {
        let body = format!(
            "not found: the issuer's documents are at {} and {}\n",
            source.issuer.discovery_path(),
            source.issuer.jwks_path()
        );
        return response("404 Not Found", &body, head_only, false);
    }
    match commands::oidc::jwks(&source.store).await {
        Ok(jwks) => response("200 OK", &jwks.to_string(), head_only, true),
        Err(e) => {
            tracing::warn!(error = %e, "OIDC JWK Set: the keys cannot be read");
            let body = "the keys cannot be read now; try again\n";
            response("503 Service Unavailable", body, head_only, false)
        }
    }
}

/// An HTTP/1.1 response: a JSON document (`json`) public and cached for
/// [`CACHE_MAX_AGE_SECS`], or plain text not cached; both for any origin.
fn response(status: &str, body: &str, head_only: bool, json: bool) -> Vec<u8> {
    let (content_type, cache) = if json {
        (
            "application/json",
            format!("public, max-age={CACHE_MAX_AGE_SECS}"),
        )
    } else {
        ("text/plain; charset=utf-8", "no-store".to_string())
    };
    let allow = if status.starts_with("405") {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nCache-Control: {cache}\r\nAccess-Control-Allow-Origin: *\r\nConnection: close\r\n{allow}\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    out
}
