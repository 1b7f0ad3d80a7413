//! The boot server's HTTP: a deliberately small HTTP/1.1 server on tokio (iPXE's client asks one
//! `GET` per connection). One request per connection, headers at most [`MAX_HEAD`] bytes read
//! within [`READ_TIMEOUT`], `GET` (and `HEAD`) only, every answer `Connection: close` with its
//! `Content-Length`. Anything else is answered 400 or 405 and the connection closed.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The largest request head read.
pub const MAX_HEAD: usize = 8 * 1024;
/// How long a client may take to send its request head.
pub const READ_TIMEOUT: StdDuration = StdDuration::from_secs(10);

/// One request as the handler sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpRequest {
    /// `GET` or `HEAD`.
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The query, without the `?` (empty: none).
    pub query: String,
    /// The connection's peer address.
    pub peer: IpAddr,
}

/// One answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpResponse {
    /// The status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
}

impl HttpResponse {
    /// A `text/plain` answer.
    pub fn text(status: u16, body: &str) -> HttpResponse {
        HttpResponse {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.as_bytes().to_vec(),
        }
    }

    /// An `application/json` answer.
    pub fn json(status: u16, value: &serde_json::Value) -> HttpResponse {
        let mut body = value.to_string().into_bytes();
        body.push(b'\n');
        HttpResponse {
            status,
            content_type: "application/json",
            body,
        }
    }

    fn reason(&self) -> &'static str {
        match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            429 => "Too Many Requests",
            500 => "Internal Server Error",
            502 => "Bad Gateway",
            503 => "Service Unavailable",
            _ => "Unknown",
        }
    }

    /// The bytes on the wire (no body for `HEAD`).
    pub fn to_wire(&self, head_only: bool) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n",
            self.status,
            self.reason(),
            self.content_type,
            self.body.len()
        )
        .into_bytes();
        if !head_only {
            out.extend_from_slice(&self.body);
        }
        out
    }
}

/// Parses a request head (up to its blank line); the error is the 400 answer's text.
pub fn parse_head(head: &[u8], peer: IpAddr) -> Result<HttpRequest, String> {
    let text = std::str::from_utf8(head).map_err(|_| "the request is not text".to_owned())?;
    let line = text.lines().next().unwrap_or_default();
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("not an HTTP/1.x request line".to_owned());
    };
    if !version.starts_with("HTTP/1.") {
        return Err("not an HTTP/1.x request line".to_owned());
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    Ok(HttpRequest {
        method: method.to_owned(),
        path: path.to_owned(),
        query: query.to_owned(),
        peer,
    })
}

/// The handler: a request in, a response out.
pub type Handler =
    Arc<dyn Fn(HttpRequest) -> Pin<Box<dyn Future<Output = HttpResponse> + Send>> + Send + Sync>;

async fn read_head(stream: &mut TcpStream) -> Result<Vec<u8>, String> {
    let mut head = Vec::with_capacity(512);
    let mut buf = [0u8; 1024];
    loop {
        let n = stream
            .read(&mut buf)
            .await
            .map_err(|e| format!("reading the request: {e}"))?;
        if n == 0 {
            return Err("the client closed before its request ended".to_owned());
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
            head.truncate(end);
            return Ok(head);
        }
        if head.len() > MAX_HEAD {
            return Err(format!("the request head is over {MAX_HEAD} bytes"));
        }
    }
}

async fn one(mut stream: TcpStream, peer: SocketAddr, handler: Handler) {
    let head = match tokio::time::timeout(READ_TIMEOUT, read_head(&mut stream)).await {
        Ok(Ok(head)) => head,
        Ok(Err(why)) => {
            let _ = stream
                .write_all(&HttpResponse::text(400, &format!("{why}\n")).to_wire(false))
                .await;
            return;
        }
        Err(_) => return,
    };
    let (response, head_only) = match parse_head(&head, peer.ip()) {
        Ok(request) if request.method == "GET" || request.method == "HEAD" => {
            let head_only = request.method == "HEAD";
            (handler(request).await, head_only)
        }
        Ok(_) => (
            HttpResponse::text(405, "only GET is answered here\n"),
            false,
        ),
        Err(why) => (HttpResponse::text(400, &format!("{why}\n")), false),
    };
    let _ = stream.write_all(&response.to_wire(head_only)).await;
    let _ = stream.shutdown().await;
}

/// Serves `listener` with `handler` until `stop` turns true.
pub async fn serve(listener: TcpListener, handler: Handler, mut stop: watch::Receiver<bool>) {
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    tokio::spawn(one(stream, peer, handler.clone()));
                }
                Err(e) => {
                    super::log_line::site_log(format_args!("boot server: accept failed: {e}"));
                    tokio::time::sleep(StdDuration::from_millis(100)).await;
                }
            },
            _ = stop.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    #[test]
    fn request_lines() {
        let peer = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let r = parse_head(b"GET /boot.ipxe?mac=aa HTTP/1.1\r\nHost: x", peer).unwrap();
        assert_eq!(
            (r.path.as_str(), r.query.as_str()),
            ("/boot.ipxe", "mac=aa")
        );
        assert!(parse_head(b"GET /x", peer).is_err());
        assert!(parse_head(b"GET /x SPDY/3", peer).is_err());
        let wire = HttpResponse::text(404, "no\n").to_wire(false);
        assert_eq!(
            String::from_utf8(wire).unwrap(),
            "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 3\r\nCache-Control: no-store\r\nConnection: close\r\n\r\nno\n"
        );
    }
}
