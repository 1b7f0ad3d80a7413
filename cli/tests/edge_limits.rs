//! The edge limits of a real `bcctl up` process (the `all` role, SQLite), attacked as an
//! outsider without a client certificate would: half-sent 4 MiB Joins multiplexed on one
//! connection (the server's RSS, read from `/proc/<pid>/status`, must stay bounded), TLS
//! connections that never send the HTTP/2 preface, more connections than the caps, more streams
//! than the stream limit (written as raw HTTP/2 frames, since a well-behaved client would wait),
//! an idle connection and one past its maximum age.
//!
//! Run: `cargo test -p cli --test suite edge_limits::`.

use crate::support::{bcctl_bin, Proc};

use std::fs;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use bytes::{BufMut, Bytes, BytesMut};
use rustls::pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio_rustls::client::TlsStream;

const JOIN_PATH: &str = "/bc.wire.v1.NodeService/Join";

struct Server {
    proc: Proc,
    addr: SocketAddr,
    serving_ca_der: Vec<u8>,
    _dir: tempfile::TempDir,
}

/// `bcctl up` with `config` as its `--config` file (empty: the defaults).
fn start(config: &str) -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("serve.toml");
    fs::write(&cfg, config).expect("config");
    let log = dir.path().join("bcctl.log");
    let child = Command::new(bcctl_bin())
        .args(["up", "--port", "0", "--json", "--dir"])
        .arg(dir.path().join(".bcctl"))
        .arg("--config")
        .arg(&cfg)
        .env_remove("BC_DEPLOYMENT_SECRET")
        .env_remove("DATABASE_URL")
        .env("BC_METRICS_LISTEN", "off")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(fs::File::create(&log).expect("log")))
        .spawn()
        .expect("spawn bcctl up");
    let mut proc = Proc {
        name: "bcctl up".into(),
        child,
        log,
    };
    let stdout = proc.child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        if let Some(Ok(line)) = lines.next() {
            let _ = tx.send(line);
        }
        for _ in lines {}
    });
    let line = rx
        .recv_timeout(Duration::from_secs(120))
        .unwrap_or_else(|_| panic!("bcctl up printed nothing; its log:\n{}", proc.log_text()));
    let facts: serde_json::Value = serde_json::from_str(&line).expect("bcctl up --json");
    let addr: SocketAddr = facts["address"]
        .as_str()
        .expect("address")
        .parse()
        .expect("address");
    let pem = fs::read_to_string(facts["servingCa"].as_str().expect("servingCa")).expect("pem");
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    Server {
        proc,
        addr,
        serving_ca_der: STANDARD.decode(body).expect("PEM"),
        _dir: dir,
    }
}

impl Server {
    fn rss_kib(&self) -> u64 {
        let status = fs::read_to_string(format!("/proc/{}/status", self.proc.child.id()))
            .expect("/proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS")
    }

    fn tls_config(&self) -> Arc<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from(self.serving_ca_der.clone()))
            .expect("serving CA");
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_root_certificates(roots)
        .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec()];
        Arc::new(config)
    }

    /// A TLS connection without a client certificate from `source` (an address on loopback).
    async fn tls_from(&self, source: &str) -> std::io::Result<TlsStream<TcpStream>> {
        let socket = TcpSocket::new_v4()?;
        socket.bind(format!("{source}:0").parse().expect("source"))?;
        let tcp = socket.connect(self.addr).await?;
        let connector = tokio_rustls::TlsConnector::from(self.tls_config());
        let name = ServerName::try_from("localhost").expect("name");
        connector.connect(name, tcp).await
    }

    async fn tls(&self) -> TlsStream<TcpStream> {
        self.tls_from("127.0.0.1").await.expect("TLS connection")
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

/// Whether the server closed `tls` within `within` (a read ends or fails); false when the
/// connection is still open then.
async fn closed_within(tls: &mut TlsStream<TcpStream>, within: Duration) -> bool {
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, tls.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue,
        }
    }
}

// ---- raw HTTP/2 frames (RFC 9113), for what a polite client library would not do ----

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const END_HEADERS: u8 = 0x4;
const ACK: u8 = 0x1;
const REFUSED_STREAM: u32 = 0x7;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(9 + payload.len());
    let len = u32::try_from(payload.len()).expect("frame length");
    f.extend_from_slice(&len.to_be_bytes()[1..]);
    f.push(kind);
    f.push(flags);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// A request header block: HPACK literals without indexing, no Huffman coding.
fn join_headers() -> Vec<u8> {
    let mut block = Vec::new();
    for (name, value) in [
        (":method", "POST"),
        (":scheme", "https"),
        (":path", JOIN_PATH),
        (":authority", "localhost"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ] {
        block.push(0x00);
        block.push(u8::try_from(name.len()).expect("short name"));
        block.extend_from_slice(name.as_bytes());
        block.push(u8::try_from(value.len()).expect("short value"));
        block.extend_from_slice(value.as_bytes());
    }
    block
}

struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

/// The client preface and an empty SETTINGS.
async fn h2_start(tls: &mut TlsStream<TcpStream>) {
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(SETTINGS, 0, 0, &[]));
    tls.write_all(&out).await.expect("preface");
    tls.flush().await.expect("flush");
}

/// The next frame, answering the server's SETTINGS and PINGs on the way; `None` at the end of
/// the connection or after `within`.
async fn next_frame(tls: &mut TlsStream<TcpStream>, within: Duration) -> Option<Frame> {
    let read = async {
        let mut head = [0u8; 9];
        tls.read_exact(&mut head).await.ok()?;
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let mut payload = vec![0u8; len];
        tls.read_exact(&mut payload).await.ok()?;
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        Some(Frame {
            kind: head[3],
            flags: head[4],
            stream,
            payload,
        })
    };
    let f = tokio::time::timeout(within, read).await.ok()??;
    if f.kind == SETTINGS && f.flags & ACK == 0 {
        tls.write_all(&frame(SETTINGS, ACK, 0, &[])).await.ok()?;
    }
    if f.kind == PING && f.flags & ACK == 0 {
        tls.write_all(&frame(PING, ACK, 0, &f.payload)).await.ok()?;
    }
    Some(f)
}

/// Frames until the server sends GOAWAY (true) or `within` passes or the connection ends (false).
async fn goaway_within(tls: &mut TlsStream<TcpStream>, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        match next_frame(tls, left).await {
            Some(f) if f.kind == GOAWAY => return true,
            Some(_) => continue,
            None => return false,
        }
    }
    false
}

/// A `grpc-message` header as text.
fn percent_decoded(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(x) = u8::from_str_radix(&v[i + 1..i + 3], 16) {
                out.push(x);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

// ---- the attacks ----

/// A gRPC message header announcing `len` bytes, then `len - 1` of them: never finished.
fn half_sent_message(len: usize) -> Bytes {
    let mut b = BytesMut::with_capacity(len + 4);
    b.put_u8(0);
    b.put_u32(u32::try_from(len).expect("length"));
    b.resize(len + 4, 0x0a);
    b.freeze()
}

/// Opens up to `streams` Join streams on one h2 connection (waiting at most 2 s for the server
/// to allow each) and sends each a half message of `len` bytes. Returns the held streams and
/// their response futures.
async fn half_sent_joins(
    server: &Server,
    streams: usize,
    len: usize,
) -> (
    Vec<(h2::client::ResponseFuture, h2::SendStream<Bytes>)>,
    h2::client::SendRequest<Bytes>,
) {
    let tls = server.tls().await;
    let (mut client, conn) = h2::client::Builder::new()
        .initial_window_size(1 << 20)
        .handshake::<_, Bytes>(tls)
        .await
        .expect("h2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let body = half_sent_message(len);
    let mut held = Vec::new();
    for _ in 0..streams {
        client = match tokio::time::timeout(Duration::from_secs(2), client.clone().ready()).await {
            Ok(Ok(c)) => c,
            _ => break,
        };
        let request = http::Request::post(format!("https://localhost{JOIN_PATH}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .expect("request");
        let Ok((response, mut send)) = client.send_request(request, false) else {
            break;
        };
        let _ = send.send_data(body.clone(), false);
        held.push((response, send));
    }
    (held, client)
}

/// The largest growth of the server's RSS over `within`, sampled every 100 ms.
async fn peak_growth_kib(server: &Server, base: u64, within: Duration) -> u64 {
    let deadline = Instant::now() + within;
    let mut peak = 0;
    while Instant::now() < deadline {
        peak = peak.max(server.rss_kib().saturating_sub(base));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    peak
}

#[test]
fn half_sent_4_mib_joins_on_one_connection_keep_the_server_memory_bounded() {
    let server = start("");
    let rt = runtime();
    rt.block_on(async {
        // Warm up: one connection through the whole stack.
        let mut warm = server.tls().await;
        h2_start(&mut warm).await;
        let _ = next_frame(&mut warm, Duration::from_secs(5)).await;
        drop(warm);
        tokio::time::sleep(Duration::from_millis(500)).await;
        let base = server.rss_kib();

        // The attack found: 60 Joins announcing 4 MiB (tonic's old limit) each, all but one
        // byte sent, on one connection without a client certificate.
        let (held, _client) = half_sent_joins(&server, 60, 4 * 1024 * 1024 - 64).await;
        let first = peak_growth_kib(&server, base, Duration::from_secs(6)).await;
        drop(held);
        // The same just under the message limit, 60 streams at once: the server holds as
        // many as it allows and refuses the others.
        let (held, _client2) = half_sent_joins(&server, 60, 64 * 1024 - 16).await;
        let second = peak_growth_kib(&server, base, Duration::from_secs(4)).await;
        let (mut pending, mut refused) = (0, 0);
        for (response, _send) in held {
            match tokio::time::timeout(Duration::from_millis(20), response).await {
                Err(_) => pending += 1,
                Ok(Err(e)) if e.reason() == Some(h2::Reason::REFUSED_STREAM) => refused += 1,
                Ok(other) => panic!("a half-sent join was answered: {other:?}"),
            }
        }
        eprintln!(
            "RSS growth: {first} KiB (60 x 4 MiB), {second} KiB (60 x 64 KiB), base {base} KiB"
        );
        assert!(
            first < 40 * 1024,
            "60 half-sent 4 MiB joins grew the server by {first} KiB"
        );
        assert!(
            second < 40 * 1024,
            "60 half-sent 64 KiB joins grew the server by {second} KiB"
        );
        // Whether a stream over the limit is refused by the server or held back by the h2
        // client (once it has read the server's SETTINGS) depends on timing; the exact count of
        // refusals on raw frames is `streams_over_the_limit_on_one_connection_are_refused`.
        // Here: none answered (above), every one accounted for, and the memory bounded.
        assert_eq!(
            pending + refused,
            60,
            "streams held and refused on one connection"
        );
    });
}

#[test]
fn a_join_announcing_more_than_the_message_limit_is_answered_out_of_range() {
    let server = start("");
    let rt = runtime();
    rt.block_on(async {
        let (held, _client) = half_sent_joins(&server, 1, 64 * 1024 + 1).await;
        let (response, _send) = held.into_iter().next().expect("one stream");
        let response = tokio::time::timeout(Duration::from_secs(10), response)
            .await
            .expect("an answer without the rest of the message")
            .expect("response");
        let status = response
            .headers()
            .get("grpc-status")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let message = response
            .headers()
            .get("grpc-message")
            .and_then(|v| v.to_str().ok())
            .map(percent_decoded);
        assert_eq!(status.as_deref(), Some("11"), "OUT_OF_RANGE");
        assert_eq!(
            message.as_deref(),
            Some("Error, decoded message length too large: found 65537 bytes, the limit is: 65536 bytes")
        );
    });
}

#[test]
fn tls_connections_that_never_send_the_preface_are_closed_after_the_handshake_timeout() {
    let server = start("[limits]\nhandshake_timeout = \"1s\"\n");
    let rt = runtime();
    rt.block_on(async {
        let mut idle = Vec::new();
        for _ in 0..50 {
            idle.push(server.tls().await);
        }
        let started = Instant::now();
        let mut closed = 0;
        for c in &mut idle {
            if closed_within(c, Duration::from_secs(8).saturating_sub(started.elapsed())).await {
                closed += 1;
            }
        }
        assert_eq!(
            closed, 50,
            "connections closed within 8 s of a 1 s handshake timeout"
        );
    });
}

#[test]
fn connections_over_the_per_peer_and_the_global_cap_are_closed_at_accept() {
    let server = start(
        "[limits]\nmax_connections = 5\nmax_connections_per_peer = 3\nhandshake_timeout = \"60s\"\n",
    );
    let rt = runtime();
    rt.block_on(async {
        let mut a = Vec::new();
        for i in 0..3 {
            a.push(
                server
                    .tls_from("127.0.0.1")
                    .await
                    .unwrap_or_else(|e| panic!("peer a #{i}: {e}")),
            );
        }
        let over_peer = server.tls_from("127.0.0.1").await;
        assert!(
            over_peer.is_err(),
            "a fourth connection from one peer was served"
        );
        let mut b = Vec::new();
        for i in 0..2 {
            b.push(
                server
                    .tls_from("127.0.0.2")
                    .await
                    .unwrap_or_else(|e| panic!("peer b #{i}: {e}")),
            );
        }
        let over_all = server.tls_from("127.0.0.3").await;
        assert!(over_all.is_err(), "a sixth connection was served");
        // A closed connection frees its place.
        drop(a.pop());
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match server.tls_from("127.0.0.1").await {
                Ok(c) => {
                    a.push(c);
                    break;
                }
                Err(e) if Instant::now() > deadline => panic!("no place freed: {e}"),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    });
}

#[test]
fn streams_over_the_limit_on_one_connection_are_refused() {
    let server = start("[limits]\nmax_streams_per_connection = 4\n");
    let rt = runtime();
    rt.block_on(async {
        let mut tls = server.tls().await;
        h2_start(&mut tls).await;
        // Ten half-open Join streams at once, whatever the server's SETTINGS say.
        let block = join_headers();
        let mut out = Vec::new();
        let ids: Vec<u32> = (0..10).map(|i| 1 + 2 * i).collect();
        for id in &ids {
            out.extend(frame(HEADERS, END_HEADERS, *id, &block));
        }
        tls.write_all(&out).await.expect("headers");
        tls.flush().await.expect("flush");
        let mut refused = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            let Some(f) = next_frame(&mut tls, left).await else {
                break;
            };
            if f.kind == RST_STREAM {
                let code =
                    u32::from_be_bytes([f.payload[0], f.payload[1], f.payload[2], f.payload[3]]);
                assert_eq!(code, REFUSED_STREAM, "stream {} reset", f.stream);
                refused.push(f.stream);
                if refused.len() == 6 {
                    break;
                }
            }
            assert_ne!(f.kind, DATA, "no stream sent its message");
        }
        refused.sort_unstable();
        assert_eq!(
            refused,
            ids[4..].to_vec(),
            "the streams past the fourth are refused"
        );
    });
}

#[test]
fn an_idle_connection_is_closed_and_one_with_an_open_stream_is_not() {
    let server = start("[limits]\nidle_timeout = \"1s\"\n");
    let rt = runtime();
    rt.block_on(async {
        let mut idle = server.tls().await;
        h2_start(&mut idle).await;
        let mut busy = server.tls().await;
        h2_start(&mut busy).await;
        busy.write_all(&frame(HEADERS, END_HEADERS, 1, &join_headers()))
            .await
            .expect("headers");
        busy.flush().await.expect("flush");
        assert!(
            goaway_within(&mut idle, Duration::from_secs(8)).await,
            "GOAWAY on the idle connection"
        );
        assert!(closed_within(&mut idle, Duration::from_secs(5)).await);
        assert!(
            !goaway_within(&mut busy, Duration::from_secs(3)).await,
            "a connection with an open stream is not idle"
        );
    });
}

#[test]
fn a_connection_past_its_maximum_age_is_closed_after_the_grace() {
    let server = start("[limits]\nmax_connection_age = \"2s\"\nconnection_age_grace = \"1s\"\n");
    let rt = runtime();
    rt.block_on(async {
        let mut tls = server.tls().await;
        h2_start(&mut tls).await;
        // A stream that never ends keeps the connection past the GOAWAY until the grace ends.
        tls.write_all(&frame(HEADERS, END_HEADERS, 1, &join_headers()))
            .await
            .expect("headers");
        tls.flush().await.expect("flush");
        let started = Instant::now();
        assert!(
            goaway_within(&mut tls, Duration::from_secs(10)).await,
            "GOAWAY at the age"
        );
        assert!(
            closed_within(&mut tls, Duration::from_secs(8)).await,
            "closed after the grace"
        );
        assert!(started.elapsed() < Duration::from_secs(15));
    });
}
