//! Gateway benchmarks (harness = false), on Postgres (`DATABASE_URL`, as the tests):
//!
//! 1. start: a gateway over a store with N revoked, unexpired certificates in `node_certs`
//!    (default 100,000), from `start()` until a TLS client completes a call; reference: the raw
//!    read of those rows alone (`projections::identity::read::revoked_unexpired`);
//! 2. revocation commit to session closed, p50 / p99, with S live sessions (default 2,000) held
//!    by one load generator over real TLS (on the session wire, as bcd holds them; gRPC Session
//!    streams with `BENCH_WIRE=grpc`), revoking R nodes (default 200) one after another;
//! 3. memory per live session: process RSS (server and client in this one process) before and
//!    after opening the S sessions, divided by S.
//!
//! `cargo bench -p gateway --bench gateway` (env: BENCH_REVOKED, BENCH_SESSIONS, BENCH_REVOKE,
//! BENCH_WIRE).

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use events::store::testkit::TestDb;
use events::store::EventStore;
use tokio_stream::StreamExt;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse().ok()))
        })
        .unwrap_or(0)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn seed_revoked(store: &EventStore, n: usize) {
    assert!(
        matches!(store, EventStore::Postgres(_)),
        "the benchmark runs on Postgres"
    );
    let far =
        (time::OffsetDateTime::now_utc() + time::Duration::hours(20)).unix_timestamp() * 1_000_000;
    projections::identity::reference::seed_revoked_certs(store, n as u64, far)
        .await
        .unwrap();
}

/// One live session, on either wire.
enum Held {
    Grpc {
        _tx: tokio::sync::mpsc::Sender<proto::NodeMessage>,
        inbound: Box<tonic::Streaming<proto::GatewayMessage>>,
        _client: Box<proto::node_service_client::NodeServiceClient<tonic::transport::Channel>>,
    },
    Wire(Box<common::WireConn>, proto::session_wire::FrameReader),
}

impl Held {
    /// A session of `node`, welcomed.
    async fn open(env: &common::Env, node: &common::Node, wire: bool) -> Held {
        let identity = (node.chain.clone(), node.key.pkcs8_der().to_vec());
        if wire {
            let (conn, reader) =
                common::wire_session(env.gateway.addr, env.keys.serving_ca.cert_der(), identity)
                    .await
                    .unwrap();
            return Held::Wire(Box::new(conn), reader);
        }
        let mut c = env.client(Some(node)).await.unwrap();
        let (tx, mut inbound) = common::grpc_session(&mut c, 2).await.unwrap();
        let _welcome = inbound.next().await.unwrap().unwrap();
        Held::Grpc {
            _tx: tx,
            inbound: Box::new(inbound),
            _client: Box::new(c),
        }
    }

    /// The session's next message.
    async fn next(&mut self) -> proto::GatewayMessage {
        match self {
            Held::Grpc { inbound, .. } => inbound.next().await.unwrap().unwrap(),
            Held::Wire(conn, reader) => common::wire_message(conn, reader).await.unwrap(),
        }
    }
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let revoked_n = env_usize("BENCH_REVOKED", 100_000);
    let sessions_n = env_usize("BENCH_SESSIONS", 2_000);
    let revoke_n = env_usize("BENCH_REVOKE", 200).min(sessions_n);
    // The session wire (what bcd speaks) unless BENCH_WIRE=grpc.
    let wire = std::env::var("BENCH_WIRE").as_deref() != Ok("grpc");

    // 1. Start with many revoked certificates.
    let db = TestDb::postgres().await.unwrap();
    let store = db.store().await.unwrap();
    seed_revoked(&store, revoked_n).await;
    let t = Instant::now();
    let rows = projections::identity::read::revoked_unexpired(&store, None, 0)
        .await
        .unwrap();
    let raw_select = t.elapsed();
    assert_eq!(rows.len(), revoked_n);
    let t = Instant::now();
    // Every session comes from 127.0.0.1: the edge's connection caps (per peer too) must hold
    // them all, or the handshakes past the cap are refused.
    let env = common::start(store.clone(), |c| {
        c.limits.max_connections = sessions_n + 64;
        c.limits.max_connections_per_peer = sessions_n + 32;
    })
    .await;
    let started = t.elapsed();
    let mut c = env.client(None).await.unwrap();
    let token = env
        .token(u32::try_from(sessions_n).unwrap_or(u32::MAX))
        .await;
    let _ = c.join(env.join_request(&token).0).await.unwrap();
    let serving = t.elapsed();
    assert_eq!(env.gateway.sources.revoked.len(), revoked_n);
    println!(
        "start with {revoked_n} revoked certificates: serving after {:.0} ms (start() {:.0} ms; \
         first Join answered at {:.0} ms, includes token creation); raw read of the rows {:.0} ms",
        started.as_secs_f64() * 1e3,
        started.as_secs_f64() * 1e3,
        serving.as_secs_f64() * 1e3,
        raw_select.as_secs_f64() * 1e3
    );

    // 2. Many live sessions.
    let mut nodes = Vec::with_capacity(sessions_n);
    let t = Instant::now();
    for _ in 1..sessions_n {
        let (req, key) = env.join_request(&token);
        let signed = gateway::join::wire::join(env.join.joins(), &req)
            .await
            .unwrap();
        let resp =
            <proto::JoinResponse as prost::Message>::decode(signed.response.as_slice()).unwrap();
        nodes.push(common::Node {
            node_id: resp.node_id,
            chain: resp.certificate_chain,
            key,
        });
    }
    let extra = env.join_node(&env.token(1).await).await;
    nodes.push(extra);
    println!(
        "joined {} nodes in {:.1} s",
        nodes.len(),
        t.elapsed().as_secs_f64()
    );
    let rss_before = rss_kib();
    let t = Instant::now();
    let mut streams = Vec::with_capacity(nodes.len());
    for node in &nodes {
        streams.push(Held::open(&env, node, wire).await);
    }
    let rss_after = rss_kib();
    println!(
        "{} live sessions ({}) opened in {:.1} s; RSS {} KiB -> {} KiB: {:.1} KiB per session \
         (server and client sides together, one process)",
        env.gateway.sources.sessions.len(),
        if wire { "session wire" } else { "gRPC" },
        t.elapsed().as_secs_f64(),
        rss_before,
        rss_after,
        (rss_after.saturating_sub(rss_before)) as f64 / nodes.len() as f64
    );

    // Revoke one node at a time; time from the command's commit (its return) to the notice.
    // First through the gateway's own store (its commit wakes the hub in process), then through
    // a second store on the same database (another pool and listener: what another process
    // is), which the gateway hears of only by the commit notification.
    let other_store = EventStore::connect(db.url()).await.unwrap();
    let other = commands::identity::JoinService::new(
        other_store,
        env.keys.clone(),
        std::sync::Arc::new(commands::SystemClock),
        commands::identity::IdentityConfig::new(env.keys.trust_domain.clone()),
    )
    .unwrap();
    let revoke_other = revoke_n.min(nodes.len().saturating_sub(revoke_n));
    for (label, from_other, range) in [
        ("in process", false, 0..revoke_n),
        (
            "from another store (notified)",
            true,
            revoke_n..revoke_n + revoke_other,
        ),
    ] {
        let mut latencies = Vec::with_capacity(range.len());
        for i in range {
            let node = &nodes[i];
            if from_other {
                other.revoke_identity(&node.node_id, "bench").await.unwrap();
            } else {
                env.join
                    .revoke_identity(&node.node_id, "bench")
                    .await
                    .unwrap();
            }
            let committed = Instant::now();
            let msg = tokio::time::timeout(Duration::from_secs(10), streams[i].next())
                .await
                .expect("notice within 10 s");
            assert!(matches!(
                msg.body,
                Some(proto::gateway_message::Body::Revocation(_))
            ));
            latencies.push(committed.elapsed());
        }
        if latencies.is_empty() {
            continue;
        }
        latencies.sort();
        println!(
            "revocation commit -> RevocationNotice received, {label}, {} live sessions, {} revocations: \
             p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
            sessions_n,
            latencies.len(),
            pct(&latencies, 0.50).as_secs_f64() * 1e3,
            pct(&latencies, 0.99).as_secs_f64() * 1e3,
            latencies.last().copied().unwrap_or_default().as_secs_f64() * 1e3
        );
    }
    drop(streams);
    env.gateway.shutdown().await;
}
