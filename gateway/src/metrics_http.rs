//! The tiny HTTP/1.1 responder of the Prometheus pages: the gateway's ([`crate::metrics`]) and
//! the api process's ([`crate::watch`]), each on its own (loopback by default) port.
//!
//! The responder holds at most [`METRICS_MAX_CONNECTIONS`] connections, [`METRICS_MAX_PER_PEER`]
//! of them from one address (issue 40: limits per peer below the global cap on every
//! listener); more are closed at accept.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// Writes a family's `# HELP` and `# TYPE` lines.
pub fn family(out: &mut String, name: &str, help: &str, kind: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Writes one sample per label value.
pub fn labeled(out: &mut String, name: &str, label: &str, values: &BTreeMap<String, u64>) {
    for (k, v) in values {
        let escaped = k.replace('\\', "\\\\").replace('"', "\\\"");
        let _ = writeln!(out, "{name}{{{label}=\"{escaped}\"}} {v}");
    }
}

/// What makes a page: the Prometheus text exposition (format 0.0.4) at the time of the request.
pub type Page = Arc<dyn Fn() -> String + Send + Sync>;

/// Connections the metrics responder holds at once (each for at most 5 s).
pub const METRICS_MAX_CONNECTIONS: usize = 64;
/// Of those, from one peer address.
pub const METRICS_MAX_PER_PEER: usize = 16;

/// Serves the page `render` makes to `GET /metrics` (any path, in fact) on `listener` until the
/// task is dropped: the page is made afresh for every request.
pub async fn serve_page(listener: TcpListener, render: Page) {
    let caps = crate::edge::limits::ConnectionCaps::new(&crate::edge::limits::EdgeLimits {
        max_connections: METRICS_MAX_CONNECTIONS,
        max_connections_per_peer: METRICS_MAX_PER_PEER,
        ..crate::edge::limits::EdgeLimits::public()
    });
    loop {
        let Ok((mut stream, remote)) = listener.accept().await else {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            continue;
        };
        let Ok(permit) = caps.admit(remote.ip()) else {
            drop(stream);
            continue;
        };
        let render = render.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let mut buf = [0u8; 2048];
            // Read the request head (we answer the same page to any request).
            let read = tokio::time::timeout(std::time::Duration::from_secs(5), async {
                let mut seen = Vec::new();
                loop {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            seen.extend_from_slice(&buf[..n]);
                            if seen.windows(4).any(|w| w == b"\r\n\r\n") || seen.len() > 16 * 1024 {
                                break;
                            }
                        }
                    }
                }
                seen
            })
            .await
            .unwrap_or_default();
            let (status, body) = if read.starts_with(b"GET ") {
                ("200 OK", render())
            } else {
                ("405 Method Not Allowed", "GET only\n".to_string())
            };
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = stream.write_all(head.as_bytes()).await;
            let _ = stream.write_all(body.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Issue 40, item 7: one address holding its 16 connections closes its 17th at accept and
    /// leaves the page to another address.
    #[tokio::test]
    async fn one_address_holds_at_most_its_share_of_the_metrics_listener() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(serve_page(listener, Arc::new(|| "bc_test 1\n".to_string())));
        let from = |ip: &str| {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(format!("{ip}:0").parse().unwrap()).unwrap();
            socket.connect(addr)
        };
        let mut held = Vec::new();
        for _ in 0..METRICS_MAX_PER_PEER {
            held.push(from("127.0.0.2").await.unwrap());
        }
        let mut over = from("127.0.0.2").await.unwrap();
        let mut byte = [0u8; 1];
        let closed = tokio::time::timeout(Duration::from_secs(1), over.read(&mut byte)).await;
        assert!(
            matches!(closed, Ok(Ok(0)) | Ok(Err(_))),
            "the 17th connection of one address is closed at accept: {closed:?}"
        );
        let mut other = from("127.0.0.1").await.unwrap();
        other
            .write_all(b"GET /metrics HTTP/1.1\r\n\r\n")
            .await
            .unwrap();
        let mut page = String::new();
        tokio::time::timeout(Duration::from_secs(2), other.read_to_string(&mut page))
            .await
            .expect("answered within 2 s")
            .unwrap();
        assert!(page.starts_with("HTTP/1.1 200 OK"), "{page}");
        server.abort();
    }
}
