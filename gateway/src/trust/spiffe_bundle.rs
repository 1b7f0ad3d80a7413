//! The SPIFFE bundle endpoint: the trust domain's bundle (`domain::trust_bundle::spiffe`) over
//! HTTPS at [`BUNDLE_PATH`], on a listener of its own, with the SPIFFE Federation
//! specification's `https_web` profile (`docs/GATEWAY.md`, `docs/DECISIONS.md` "Issue 41: the
//! SPIFFE bundle endpoint").
//!
//! The listener presents the gateway's serving certificate (the same resolver as the agent
//! endpoint, so it follows renewals and `[tls]` files) and asks for no client certificate: the
//! specification forbids client authentication on a bundle endpoint. TLS 1.2 and 1.3 (rustls'
//! AEAD suites only), HTTP/1.1, one request per connection. The document's `spiffe_sequence` is
//! the published trust bundle's version, read from the store at most once per
//! [`REFRESH_AFTER`], so a new version is served within that time without a restart. It must
//! never answer anything but the bundle, and never read a secret.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use events::store::EventStore;
use rustls::server::ResolvesServerCert;
use rustls::ServerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::Mutex;
use tokio_rustls::TlsAcceptor;

use crate::edge::limits::{ConnectionCaps, EdgeLimits};
use crate::edge::tls::{provider, without_resumption, TlsSetupError};

/// The one path the bundle is served at.
pub const BUNDLE_PATH: &str = "/bundle.json";
/// How long a rendered document is served before the published version is read again.
pub const REFRESH_AFTER: Duration = Duration::from_secs(1);
/// Connections open at once, in all and from one address.
const MAX_CONNECTIONS: usize = 64;
const MAX_PER_PEER: usize = 8;
/// The TLS handshake and the request head must be done within this.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// A request head longer than this is answered 431.
const MAX_HEAD: usize = 8 * 1024;

/// Where the endpoint listens and the refresh hint it publishes (`[spiffe_bundle]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpiffeBundleEndpoint {
    pub listen: SocketAddr,
    /// `spiffe_refresh_hint`, in seconds (at least 1).
    pub refresh_hint_secs: u64,
}

/// The document as last rendered, and when.
struct Rendered {
    at: Instant,
    body: Arc<String>,
}

/// What answers a request: the store to read the version from, the root, the hint, the cache.
struct Source {
    store: EventStore,
    root_ca_der: Vec<u8>,
    refresh_hint_secs: u64,
    cache: Mutex<Option<Rendered>>,
}

impl Source {
    /// The current document: the cached one while younger than [`REFRESH_AFTER`], else rendered
    /// again at the published version (0 while none is published).
    async fn document(&self) -> Result<Arc<String>, String> {
        let mut cache = self.cache.lock().await;
        if let Some(r) = cache.as_ref().filter(|r| r.at.elapsed() < REFRESH_AFTER) {
            return Ok(r.body.clone());
        }
        let version = commands::quorum::read_published_content(&self.store)
            .await
            .map_err(|e| e.to_string())?
            .map_or(0, |row| row.version);
        let authorities = domain::trust_bundle::x509_authorities(&self.root_ca_der);
        let body = Arc::new(
            domain::trust_bundle::render_spiffe_bundle(
                &authorities,
                version,
                self.refresh_hint_secs,
            )
            .map_err(|e| e.to_string())?,
        );
        *cache = Some(Rendered {
            at: Instant::now(),
            body: body.clone(),
        });
        Ok(body)
    }
}

/// The TLS configuration: the serving certificate's resolver, no client authentication, no
/// resumption, HTTP/1.1 by ALPN.
pub(crate) fn server_config(
    resolver: Arc<dyn ResolvesServerCert>,
) -> Result<ServerConfig, TlsSetupError> {
    let mut config = ServerConfig::builder_with_provider(provider())
        .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
        .with_no_client_auth()
        .with_cert_resolver(resolver);
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    without_resumption(&mut config);
    Ok(config)
}

/// Binds the endpoint's listener (the caller reports a failure as a start error) and returns
/// it with the address it got.
pub async fn bind(endpoint: &SpiffeBundleEndpoint) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(endpoint.listen).await?;
    let addr = listener.local_addr()?;
    Ok((listener, addr))
}

/// Starts serving the bundle on `listener` (until the task is aborted); a TLS setup failure is
/// the caller's start error.
pub fn spawn(
    listener: TcpListener,
    resolver: Arc<dyn ResolvesServerCert>,
    store: EventStore,
    root_ca_der: Vec<u8>,
    refresh_hint_secs: u64,
) -> Result<tokio::task::JoinHandle<()>, TlsSetupError> {
    let acceptor = TlsAcceptor::from(Arc::new(server_config(resolver)?));
    let source = Arc::new(Source {
        store,
        root_ca_der,
        refresh_hint_secs,
        cache: Mutex::new(None),
    });
    Ok(tokio::spawn(serve(listener, acceptor, source)))
}

/// What a public HTTPS document endpoint answers (this one, and the OIDC issuer's documents in
/// `crate::publish::oidc`): the whole HTTP/1.1 response to one request head (`None`: a head
/// over [`MAX_HEAD`]).
pub(crate) trait Documents: Send + Sync + 'static {
    fn answer<'a>(
        &'a self,
        head: &'a Option<Vec<u8>>,
    ) -> Pin<Box<dyn Future<Output = Vec<u8>> + Send + 'a>>;
}

impl Documents for Source {
    fn answer<'a>(
        &'a self,
        head: &'a Option<Vec<u8>>,
    ) -> Pin<Box<dyn Future<Output = Vec<u8>> + Send + 'a>> {
        Box::pin(answer(head, self))
    }
}

/// Serves `documents` on `listener` until the task is dropped: at most [`MAX_CONNECTIONS`]
/// connections ([`MAX_PER_PEER`] a peer), one request each, [`REQUEST_TIMEOUT`] for the TLS
/// handshake and the request head.
pub(crate) async fn serve<D: Documents>(
    listener: TcpListener,
    acceptor: TlsAcceptor,
    documents: Arc<D>,
) {
    let caps = ConnectionCaps::new(&EdgeLimits {
        max_connections: MAX_CONNECTIONS,
        max_connections_per_peer: MAX_PER_PEER,
        ..EdgeLimits::public()
    });
    loop {
        let Ok((tcp, remote)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Ok(permit) = caps.admit(remote.ip()) else {
            drop(tcp);
            continue;
        };
        let (acceptor, documents) = (acceptor.clone(), documents.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let head = tokio::time::timeout(REQUEST_TIMEOUT, async {
                let mut tls = acceptor.accept(tcp).await.ok()?;
                let head = read_head(&mut tls).await;
                Some((tls, head))
            })
            .await;
            let Ok(Some((mut tls, head))) = head else {
                return;
            };
            let answer = documents.answer(&head).await;
            let _ = tls.write_all(&answer).await;
            let _ = tls.shutdown().await;
        });
    }
}

/// The request head: the bytes up to the blank line, or `None` past [`MAX_HEAD`].
pub(crate) async fn read_head<S: AsyncReadExt + Unpin>(stream: &mut S) -> Option<Vec<u8>> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
        if seen.len() > MAX_HEAD {
            return None;
        }
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    Some(seen)
}

/// The response to a request head: the bundle for `GET` (or `HEAD`) of [`BUNDLE_PATH`] (a query
/// string is ignored), 404 for another path, 405 for another method, 431 for a head too long,
/// 503 when the store cannot be read.
async fn answer(head: &Option<Vec<u8>>, source: &Source) -> Vec<u8> {
    let Some(head) = head else {
        return response(
            "431 Request Header Fields Too Large",
            "text/plain",
            "",
            false,
        );
    };
    let line = head.split(|b| *b == b'\r').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    if method != "GET" && method != "HEAD" {
        return response("405 Method Not Allowed", "text/plain", "GET only\n", false);
    }
    if path != BUNDLE_PATH {
        let body = format!("not found: the SPIFFE bundle is at {BUNDLE_PATH}\n");
        return response("404 Not Found", "text/plain", &body, method == "HEAD");
    }
    match source.document().await {
        Ok(body) => response("200 OK", "application/json", &body, method == "HEAD"),
        Err(e) => {
            tracing::warn!(error = %e, "SPIFFE bundle endpoint: the published trust bundle cannot be read");
            response(
                "503 Service Unavailable",
                "text/plain",
                "the trust bundle cannot be read now; try again\n",
                method == "HEAD",
            )
        }
    }
}

fn response(status: &str, content_type: &str, body: &str, head_only: bool) -> Vec<u8> {
    let mut out = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}; charset=utf-8\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n{}\r\n",
        body.len(),
        if status.starts_with("405") { "Allow: GET, HEAD\r\n" } else { "" }
    )
    .into_bytes();
    if !head_only {
        out.extend_from_slice(body.as_bytes());
    }
    out
}

/// The SPIFFE bundle endpoint on its own listener, when `[spiffe_bundle]` asks for one
/// (this module); its task joins `background`.
pub(crate) async fn start(
    endpoint: Option<&SpiffeBundleEndpoint>,
    resolver: Arc<dyn ResolvesServerCert>,
    read_store: &EventStore,
    root_ca_der: &[u8],
    background: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Result<Option<SocketAddr>, crate::publish::PublishStartError> {
    let Some(endpoint) = endpoint else {
        return Ok(None);
    };
    let (listener, addr) =
        bind(endpoint)
            .await
            .map_err(|source| crate::publish::PublishStartError::Listen {
                addr: endpoint.listen,
                source,
            })?;
    background.push(spawn(
        listener,
        resolver,
        read_store.clone(),
        root_ca_der.to_vec(),
        endpoint.refresh_hint_secs,
    )?);
    Ok(Some(addr))
}
