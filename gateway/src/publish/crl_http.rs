//! The node CA's revocation list over plain HTTP (`[crl] listen` of `bcctl serve`): `GET` or
//! `HEAD` of [`CRL_PATH`] answers the current list, DER, `Content-Type: application/pkix-crl`
//! (RFC 5280 §4.2.1.13 and RFC 2585: a CRL distribution point is plain HTTP, the list being
//! signed and public). 503 until the first list is signed, 404 for any other path, 405 for any
//! other method. One request per connection; the listener holds at most
//! [`MAX_CONNECTIONS`] connections, [`MAX_PER_PEER`] from one address, and gives a request head
//! 5 s.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::publish::crl::CrlWatch;

/// The path the list is served at.
pub const CRL_PATH: &str = "/node-ca.crl";
/// Connections the listener holds at once.
pub const MAX_CONNECTIONS: usize = 256;
/// Connections one address holds at once.
pub const MAX_PER_PEER: usize = 16;
/// Largest request head read.
const MAX_HEAD: usize = 8 * 1024;

/// Binds `at` and serves `current` there: the bound address and the serving task.
pub async fn listen(
    at: std::net::SocketAddr,
    current: CrlWatch,
) -> std::io::Result<(std::net::SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind(at).await?;
    let addr = listener.local_addr()?;
    tracing::info!(%addr, path = CRL_PATH, "serving the node CA revocation list over HTTP");
    Ok((addr, tokio::spawn(serve(listener, current))))
}

/// Serves `current` on `listener` until the task is aborted.
pub async fn serve(listener: TcpListener, current: CrlWatch) {
    let caps = crate::edge::limits::ConnectionCaps::new(&crate::edge::limits::EdgeLimits {
        max_connections: MAX_CONNECTIONS,
        max_connections_per_peer: MAX_PER_PEER,
        ..crate::edge::limits::EdgeLimits::public()
    });
    loop {
        let Ok((stream, remote)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let Ok(permit) = caps.admit(remote.ip()) else {
            drop(stream);
            continue;
        };
        let current = current.clone();
        tokio::spawn(async move {
            let _permit = permit;
            answer(stream, current).await;
        });
    }
}

/// The request line's method and path, once the head is read.
async fn request_line(stream: &mut TcpStream) -> Option<(String, String)> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 2048];
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => {
                    seen.extend_from_slice(&buf[..n]);
                    if seen.windows(4).any(|w| w == b"\r\n\r\n") {
                        return true;
                    }
                    if seen.len() > MAX_HEAD {
                        return false;
                    }
                }
            }
        }
    })
    .await;
    if !matches!(read, Ok(true)) {
        return None;
    }
    let line = seen.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.trim_end();
    let mut parts = line.split(' ');
    let method = parts.next()?.to_owned();
    let target = parts.next()?;
    let path = target.split('?').next().unwrap_or(target).to_owned();
    Some((method, path))
}

async fn answer(mut stream: TcpStream, current: CrlWatch) {
    let Some((method, path)) = request_line(&mut stream).await else {
        return;
    };
    let list = current.borrow().clone();
    let (status, kind, body): (&str, &str, Vec<u8>) = match (method.as_str(), path.as_str()) {
        ("GET" | "HEAD", CRL_PATH) => match list {
            Some(list) => ("200 OK", "application/pkix-crl", list.der.clone()),
            None => (
                "503 Service Unavailable",
                "text/plain; charset=utf-8",
                b"no revocation list signed yet; retry in a few seconds\n".to_vec(),
            ),
        },
        (_, CRL_PATH) => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            b"GET or HEAD only\n".to_vec(),
        ),
        _ => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            format!("the revocation list is at {CRL_PATH}\n").into_bytes(),
        ),
    };
    let allow = if status.starts_with("405") {
        "Allow: GET, HEAD\r\n"
    } else {
        ""
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {}\r\nCache-Control: no-cache\r\n{allow}Connection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes()).await;
    if method != "HEAD" {
        let _ = stream.write_all(&body).await;
    }
    let _ = stream.shutdown().await;
}
