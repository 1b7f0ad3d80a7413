//! Memory per live node session on the gateway, server side alone (issue 25; C17 in
//! `benchmarks/RESULTS.md`), on Postgres (`DATABASE_URL`, as the tests):
//!
//! 1. this process starts a gateway over a fresh database and joins `BENCH_SESSIONS` nodes
//!    (default 10,000) through the JoinService in process, as the C6 bench does;
//! 2. it writes their identities to a file and starts itself again as the load generator
//!    (`SESSION_MEMORY_ROLE=clients`): a second process that opens, for each node, one mTLS
//!    connection with its session, sends Hello, waits for the Welcome and then holds the
//!    session idle. First on the session wire (ALPN `bc-session/1`, what bcd speaks: the
//!    figure), then, once those have closed, as gRPC Session streams over HTTP/2 (for
//!    comparison; the allocator keeps what the first phase freed, so compare its heap, not its
//!    RSS);
//! 3. the figure of each phase: the gateway process's `VmRSS` (and `Pss` from `smaps_rollup`)
//!    before the client process starts and once every session is live and has been idle for
//!    `BENCH_SETTLE_MS` (default 3,000), the difference divided by the number of sessions.
//!    Then the client process exits and the RSS once the sessions have closed is printed too
//!    (what the allocator gives back).
//!
//! 4. the reference, same run: the floor any transport over mTLS pays. A plain rustls acceptor
//!    in this process (the gateway's own server configuration and client verifier) holds the
//!    same number of connections, each a task waiting to read after the handshake, opened by
//!    the client process the same way with nothing sent after the handshake. Its figure is the
//!    live heap per connection (mimalloc keeps what the sessions freed resident, so the RSS
//!    after them says little); compare it with the sessions' live heap.
//!
//! Both processes raise their `RLIMIT_NOFILE` to the hard limit. The gateway's allocator is
//! mimalloc, as in `bcctl` (cli/src/main.rs), the binary that runs gateways, wrapped to count
//! the heap bytes and blocks live, printed beside the RSS: what the code holds per session,
//! apart from what the allocator keeps around it.
//!
//! `cargo bench -p gateway --bench session_memory` (env: BENCH_SESSIONS, BENCH_SETTLE_MS,
//! BENCH_CLIENT_TASKS: connections opened at once by the client process, default 16).

#[path = "../tests/common/mod.rs"]
mod common;

use std::alloc::{GlobalAlloc, Layout};
use std::io::Write as _;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use events::store::testkit::TestDb;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio_stream::StreamExt;

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// mimalloc, counting the bytes and blocks live (what the code holds, apart from what the
/// allocator keeps around it).
struct Counting;

static LIVE_BYTES: AtomicI64 = AtomicI64::new(0);
static LIVE_BLOCKS: AtomicI64 = AtomicI64::new(0);
/// Live bytes by size class: class k holds blocks of 2^(k-1) < size <= 2^k bytes.
static CLASS_BYTES: [AtomicI64; 32] = [const { AtomicI64::new(0) }; 32];

fn class(size: usize) -> usize {
    (usize::BITS - size.saturating_sub(1).leading_zeros()).min(31) as usize
}

fn count(size: usize, sign: i64) {
    LIVE_BYTES.fetch_add(sign * size as i64, Ordering::Relaxed);
    LIVE_BLOCKS.fetch_add(sign, Ordering::Relaxed);
    CLASS_BYTES[class(size)].fetch_add(sign * size as i64, Ordering::Relaxed);
}

// SAFETY: every call is passed to mimalloc unchanged; the counters only add and subtract.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { mimalloc::MiMalloc.alloc(layout) };
        if !p.is_null() {
            count(layout.size(), 1);
        }
        p
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) };
        if !p.is_null() {
            count(layout.size(), 1);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { mimalloc::MiMalloc.dealloc(ptr, layout) };
        count(layout.size(), -1);
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { mimalloc::MiMalloc.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(layout.size(), -1);
            count(new_size, 1);
        }
        p
    }
}

const ROLE_VAR: &str = "SESSION_MEMORY_ROLE";
const FILE_VAR: &str = "SESSION_MEMORY_FILE";
/// The client process's [`Mode`] (`wire`, `grpc`, `tls`).
const MODE_VAR: &str = "SESSION_MEMORY_MODE";
/// The reference acceptor's address, for mode `tls`.
const ADDR_VAR: &str = "SESSION_MEMORY_ADDR";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit; returns the soft limit now.
fn raise_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return 0;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                return raised.rlim_cur;
            }
        }
    }
    lim.rlim_cur
}

/// A field in KiB of a `/proc/self` file (`status`: VmRSS, RssAnon; `smaps_rollup`: Pss).
fn proc_kib(file: &str, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/self/{file}"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field) && l[field.len()..].starts_with(':'))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

#[derive(Clone, Copy, Debug)]
struct Memory {
    rss: u64,
    anon: u64,
    pss: u64,
    /// Heap bytes and blocks the process holds (the counting allocator).
    heap: i64,
    blocks: i64,
    classes: [i64; 32],
}

fn memory() -> Memory {
    Memory {
        rss: proc_kib("status", "VmRSS"),
        anon: proc_kib("status", "RssAnon"),
        pss: proc_kib("smaps_rollup", "Pss"),
        heap: LIVE_BYTES.load(Ordering::Relaxed),
        blocks: LIVE_BLOCKS.load(Ordering::Relaxed),
        classes: std::array::from_fn(|k| CLASS_BYTES[k].load(Ordering::Relaxed)),
    }
}

fn main() {
    let nofile = raise_nofile();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    if std::env::var(ROLE_VAR).as_deref() == Ok("clients") {
        runtime.block_on(clients());
    } else {
        runtime.block_on(server(nofile));
    }
}

/// The gateway's process: joins the nodes, starts the client process, measures.
async fn server(nofile: u64) {
    let n = env_usize("BENCH_SESSIONS", 10_000).max(1);
    let settle = Duration::from_millis(env_usize("BENCH_SETTLE_MS", 3_000) as u64);
    assert!(
        nofile as usize > n + 200,
        "RLIMIT_NOFILE is {nofile} in the gateway's process: raise the hard limit (ulimit -Hn) above {} for {n} sessions",
        n + 200
    );
    let db = TestDb::postgres().await.unwrap();
    let store = db.store().await.unwrap();
    let env = common::start(store.clone(), |cfg| {
        // One address (127.0.0.1) holds every session: the caps must admit them all.
        cfg.limits.max_connections = n + 64;
        cfg.limits.max_connections_per_peer = n + 32;
    })
    .await;

    let t = Instant::now();
    let token = env.token(u32::try_from(n).unwrap_or(u32::MAX)).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nodes");
    {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        writeln!(out, "{}", env.gateway.addr).unwrap();
        writeln!(out, "{}", hex::encode(env.keys.serving_ca.cert_der())).unwrap();
        for _ in 0..n {
            let (req, key) = env.join_request(&token);
            let signed = gateway::join::wire::join(env.join.joins(), &req)
                .await
                .unwrap();
            let resp = <proto::JoinResponse as prost::Message>::decode(signed.response.as_slice())
                .unwrap();
            let chain: Vec<String> = resp.certificate_chain.iter().map(hex::encode).collect();
            writeln!(out, "{} {}", hex::encode(key.pkcs8_der()), chain.join(" ")).unwrap();
        }
        out.flush().unwrap();
    }
    println!(
        "joined {n} nodes in {:.1} s (in this process, through the JoinService)",
        t.elapsed().as_secs_f64()
    );
    // Let the allocator return what the joins freed before the baseline.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let wire = sessions(&env, n, settle, &path, Mode::Wire).await;
    sessions(&env, n, settle, &path, Mode::Grpc).await;
    tls_floor(&env, n, &path, wire).await;
    env.gateway.shutdown().await;
}

/// How the client process holds its sessions.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The session wire (ALPN `bc-session/1`), as bcd speaks it.
    Wire,
    /// A gRPC Session stream over HTTP/2.
    Grpc,
    /// The reference: nothing after the handshake, to a plain rustls acceptor.
    TlsOnly,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Wire => "wire",
            Mode::Grpc => "grpc",
            Mode::TlsOnly => "tls",
        }
    }

    fn parse(name: &str) -> Mode {
        match name {
            "grpc" => Mode::Grpc,
            "tls" => Mode::TlsOnly,
            _ => Mode::Wire,
        }
    }
}

/// One phase: `n` sessions held idle by the client process in `mode`; prints the memory they
/// cost the gateway and returns their live heap (bytes for all `n`).
async fn sessions(
    env: &common::Env,
    n: usize,
    settle: Duration,
    path: &std::path::Path,
    mode: Mode,
) -> i64 {
    let before = memory();
    let t = Instant::now();
    let (mut child, pid) = start_clients(path, mode, None).await;
    let opened = t.elapsed();
    let deadline = Instant::now() + Duration::from_secs(60);
    while env.gateway.sources.sessions.len() < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        env.gateway.sources.sessions.len(),
        n,
        "the gateway sees every session"
    );
    tokio::time::sleep(settle).await;
    let after = memory();
    let per = |a: u64, b: u64| a.saturating_sub(b) as f64 / n as f64;
    println!(
        "[{}] {n} live sessions, held idle by another process (pid {pid}), opened in {:.1} s; \
         gateway process VmRSS {} KiB -> {} KiB (RssAnon {} -> {}, Pss {} -> {}): {:.1} KiB per \
         session (Pss {:.1}), server side alone; heap held {:.1} KiB in {:.0} blocks per session",
        mode.name(),
        opened.as_secs_f64(),
        before.rss,
        after.rss,
        before.anon,
        after.anon,
        before.pss,
        after.pss,
        per(after.rss, before.rss),
        per(after.pss, before.pss),
        (after.heap - before.heap) as f64 / 1024.0 / n as f64,
        (after.blocks - before.blocks) as f64 / n as f64,
    );
    let classes: Vec<String> = (0..32)
        .filter_map(|k| {
            let d = (after.classes[k] - before.classes[k]) as f64 / n as f64;
            (d.abs() >= 64.0).then(|| format!("<={} B: {:.0} B", 1u64 << k, d))
        })
        .collect();
    println!(
        "[{}] heap held per session by block size: {}",
        mode.name(),
        classes.join(", ")
    );

    // The client process exits when its stdin closes; the sessions end with it.
    stop_clients(&mut child).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while !env.gateway.sources.sessions.is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let closed = memory();
    println!(
        "[{}] after the sessions closed ({} left): VmRSS {} KiB ({:.1} KiB per closed session \
         still held), heap {:.1} KiB per closed session still held",
        mode.name(),
        env.gateway.sources.sessions.len(),
        closed.rss,
        per(closed.rss, before.rss),
        (closed.heap - before.heap) as f64 / 1024.0 / n as f64,
    );
    after.heap - before.heap
}

/// Starts the client process on the nodes file (with `gateway` in place of the address in it,
/// if given); returns once it prints that every connection is up.
async fn start_clients(
    path: &std::path::Path,
    mode: Mode,
    gateway: Option<std::net::SocketAddr>,
) -> (tokio::process::Child, u32) {
    let mut command = tokio::process::Command::new(std::env::current_exe().unwrap());
    command
        .env(ROLE_VAR, "clients")
        .env(FILE_VAR, path)
        .env(MODE_VAR, mode.name());
    if let Some(addr) = gateway {
        command.env(ADDR_VAR, addr.to_string());
    }
    let mut child = command
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("the client process starts");
    let pid = child.id().unwrap_or(0);
    let n = std::fs::read_to_string(path).unwrap().lines().count() - 2;
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut live = 0usize;
    while let Some(line) = lines.next_line().await.unwrap() {
        if let Some(count) = line.strip_prefix("live ") {
            live = count.parse().unwrap();
            break;
        }
        println!("clients: {line}");
    }
    assert_eq!(live, n, "the client process holds every connection");
    (child, pid)
}

/// Closes the client process's stdin, on which it exits, and waits for it.
async fn stop_clients(child: &mut tokio::process::Child) {
    drop(child.stdin.take());
    let status = tokio::time::timeout(Duration::from_secs(60), child.wait())
        .await
        .expect("the client process exits within 60 s")
        .unwrap();
    assert!(status.success(), "the client process failed: {status}");
}

/// The reference: `n` mTLS connections held by a plain rustls acceptor with the gateway's
/// server configuration, each a task waiting to read; prints their live heap per connection
/// beside the sessions' (`session_heap`, bytes for all `n`).
async fn tls_floor(env: &common::Env, n: usize, path: &std::path::Path, session_heap: i64) {
    use domain::pki::{KeyRole, PrivateKey, Serial, ServingCertificateRequest, ServingRole};
    use tokio::io::AsyncReadExt as _;
    let td = domain::pki::TrustDomain::new(common::TD).unwrap();
    let key = PrivateKey::generate(KeyRole::Serving).unwrap();
    let issued = domain::pki::issue_serving_certificate(
        &env.keys.serving_ca,
        key.public_key(),
        &ServingCertificateRequest {
            dns_names: vec!["localhost".into()],
            ip_addresses: Vec::new(),
            role: ServingRole::Gateway,
            serial: Serial::generate().unwrap(),
            lifetime: time::Duration::hours(1),
        },
        time::OffsetDateTime::now_utc(),
    )
    .unwrap();
    let verifier = gateway::edge::tls::node_client_verifier(
        env.keys.node_ca.cert_der(),
        td,
        std::sync::Arc::new(gateway::revocation::revoked::RevokedSerials::new()),
        std::sync::Arc::new(gateway::edge::tls::RefusalCounters::default()),
        None,
    )
    .unwrap();
    let config = gateway::edge::tls::server_config(
        vec![issued.der, env.keys.serving_ca.cert_der().to_vec()],
        key.pkcs8_der().to_vec(),
        std::sync::Arc::new(verifier),
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let held = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let accepting = {
        let held = held.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let held = held.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    held.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let mut byte = [0u8; 1];
                    let _ = tls.read(&mut byte).await;
                    held.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                });
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let before = memory();
    let (mut child, _) = start_clients(path, Mode::TlsOnly, Some(addr)).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while held.load(std::sync::atomic::Ordering::Relaxed) < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        held.load(std::sync::atomic::Ordering::Relaxed),
        n,
        "the acceptor holds every connection"
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = memory();
    let floor = (after.heap - before.heap) as f64 / 1024.0 / n as f64;
    let ours = session_heap as f64 / 1024.0 / n as f64;
    println!(
        "reference: {n} idle mTLS connections, no HTTP/2 (a rustls acceptor with the gateway's \
         server configuration): heap held {floor:.1} KiB in {:.0} blocks per connection; the \
         sessions' {ours:.1} KiB is {:.2}x that",
        (after.blocks - before.blocks) as f64 / n as f64,
        ours / floor
    );
    stop_clients(&mut child).await;
    accepting.abort();
}

/// One node's identity as the server wrote it.
struct Identity {
    key: Vec<u8>,
    chain: Vec<Vec<u8>>,
}

/// The client process: opens a Session per node, prints `live N`, holds them until stdin closes.
async fn clients() {
    let path = std::env::var(FILE_VAR).expect("the nodes file");
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let addr: std::net::SocketAddr = lines.next().unwrap().parse().unwrap();
    let ca = hex::decode(lines.next().unwrap()).unwrap();
    let nodes: Vec<Identity> = lines
        .map(|l| {
            let mut parts = l.split(' ');
            let key = hex::decode(parts.next().unwrap()).unwrap();
            let chain = parts.map(|c| hex::decode(c).unwrap()).collect();
            Identity { key, chain }
        })
        .collect();
    drop(text);
    let tasks = env_usize("BENCH_CLIENT_TASKS", 16).max(1);
    let mode = Mode::parse(&std::env::var(MODE_VAR).unwrap_or_default());
    if mode == Mode::TlsOnly {
        let floor = std::env::var(ADDR_VAR).expect("the acceptor's address");
        return tls_only_clients(floor.parse().unwrap(), &ca, nodes, tasks).await;
    }
    let ca = std::sync::Arc::new(ca);
    if mode == Mode::Wire {
        return wire_clients(addr, ca, nodes, tasks).await;
    }
    hold_all(nodes, tasks, move |chain, key| {
        let ca = ca.clone();
        async move {
            let mut c = common::connect(addr, &ca, Some((chain, key)))
                .await
                .unwrap();
            let (tx, mut inbound) = common::grpc_session(&mut c, 2).await.unwrap();
            let welcome = inbound.next().await.unwrap().unwrap();
            assert!(matches!(
                welcome.body,
                Some(proto::gateway_message::Body::Welcome(_))
            ));
            (tx, inbound, c)
        }
    })
    .await;
}

/// The client process on the session wire: TLS with ALPN `bc-session/1`, Open, Hello, Welcome.
async fn wire_clients(
    addr: std::net::SocketAddr,
    ca: std::sync::Arc<Vec<u8>>,
    nodes: Vec<Identity>,
    tasks: usize,
) {
    hold_all(nodes, tasks, move |chain, key| {
        let ca = ca.clone();
        async move { common::wire_session(addr, &ca, (chain, key)).await.unwrap() }
    })
    .await;
}

/// The reference's client process: one mTLS connection per node to `addr`, nothing sent after
/// the handshake.
async fn tls_only_clients(
    addr: std::net::SocketAddr,
    ca: &[u8],
    nodes: Vec<Identity>,
    tasks: usize,
) {
    let ca = std::sync::Arc::new(ca.to_vec());
    hold_all(nodes, tasks, move |chain, key| {
        let ca = ca.clone();
        async move {
            let config = common::client_tls(&ca, Some((chain, key))).unwrap();
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
                .connect(name, tcp)
                .await
                .unwrap()
        }
    })
    .await;
}

/// Opens one connection per node with `open(chain, key)`, `tasks` at a time, prints `live N`,
/// and holds them all until the server closes this process's stdin.
async fn hold_all<T, F, Fut>(nodes: Vec<Identity>, tasks: usize, open: F)
where
    T: Send + 'static,
    F: Fn(Vec<Vec<u8>>, Vec<u8>) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = T> + Send,
{
    let nodes = std::sync::Arc::new(nodes);
    let mut set = tokio::task::JoinSet::new();
    for k in 0..tasks {
        let nodes = nodes.clone();
        let open = open.clone();
        set.spawn(async move {
            let mut held = Vec::new();
            for node in nodes.iter().skip(k).step_by(tasks) {
                held.push(open(node.chain.clone(), node.key.clone()).await);
            }
            held
        });
    }
    let mut held = Vec::with_capacity(nodes.len());
    while let Some(r) = set.join_next().await {
        held.extend(r.unwrap());
    }
    println!("live {}", held.len());
    let _ = std::io::stdout().flush();
    let mut sink = Vec::new();
    let _ = tokio::io::stdin().read_to_end(&mut sink).await;
    drop(held);
}
