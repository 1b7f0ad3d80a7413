//! Command dispatch benchmark (harness = false), on Postgres (`DATABASE_URL`, as the tests):
//! signed commands through one gateway to N connected nodes (default 100), each node a real mTLS
//! session in this process that verifies every command as bcd does
//! (`domain::command::verify_command`: the worker certificate against the root, then the
//! signature) and answers a `CommandResult`.
//!
//! 1. enqueue: `commands::command_queue::enqueue_command` (decide, sign with the worker key,
//!    append, project), one caller, C commands (default 2,000, spread over the nodes);
//!    reference: the raw ES256 sign of the same body in the same run;
//! 2. dispatch and execute: the nodes connect, receive their backlog (at most 64 per fetch),
//!    verify, answer; from the first Hello to the last answer recorded in the log, commands/s;
//!    reference: the CPU the nodes' verifications alone need (two raw ES256 verifies each);
//! 3. live latency: with every session idle, one command at a time, enqueue's return to the
//!    answer recorded, p50 / p99 (bounded below by the poll interval, 250 ms by default).
//!
//! `cargo bench -p gateway --bench dispatch` (env: BENCH_NODES, BENCH_COMMANDS, BENCH_LIVE).

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use commands::command_queue::{
    command_list, enqueue_command, CommandFilter, EnqueueRequest, WorkerSigner,
};
use commands::SystemClock;
use domain::command::{sign_command, verify_command, CommandBody, SignedCommand};
use domain::pki::{issue_worker_certificate, KeyRole, PrivateKey, Serial, TrustDomain};
use events::store::testkit::TestDb;
use prost::Message;
use tokio_stream::StreamExt;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// Commands the nodes answered succeeded, as the log's projection counts them.
async fn answered(store: &events::store::EventStore) -> usize {
    command_list(
        store,
        &CommandFilter {
            status: Some("succeeded".into()),
            limit: u32::MAX,
            ..CommandFilter::default()
        },
    )
    .await
    .map(|v| v.len())
    .unwrap_or(0)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    let nodes_n = env_usize("BENCH_NODES", 100);
    let commands_n = env_usize("BENCH_COMMANDS", 2_000);
    let live_n = env_usize("BENCH_LIVE", 50);

    let db = TestDb::postgres().await.unwrap();
    let store = db.store().await.unwrap();
    let env = common::start(store.clone(), |_| {}).await;
    let td = TrustDomain::new(common::TD).unwrap();
    let token = env.token(u32::try_from(nodes_n).unwrap_or(u32::MAX)).await;
    let mut nodes = Vec::with_capacity(nodes_n);
    for _ in 0..nodes_n {
        let (req, key) = env.join_request(&token);
        let signed = gateway::join::wire::join(env.join.joins(), &req)
            .await
            .unwrap();
        let resp = proto::JoinResponse::decode(signed.response.as_slice()).unwrap();
        nodes.push(common::Node {
            node_id: resp.node_id,
            chain: resp.certificate_chain,
            key,
        });
    }
    let root_der = env.keys.command_signing_root.cert_der().to_vec();

    // 1. Enqueue C commands, round-robin over the nodes, with no session open.
    let signer = WorkerSigner::new(
        domain::pki::CommandSigningRoot::from_parts(
            &td,
            root_der.clone(),
            PrivateKey::from_pkcs8_der(
                KeyRole::CommandSigningRoot,
                env.keys.command_signing_root.private_key().pkcs8_der(),
            )
            .unwrap(),
        )
        .unwrap(),
        td.clone(),
        "bench-worker",
        time::Duration::hours(24),
    );
    let t = Instant::now();
    for i in 0..commands_n {
        enqueue_command(
            &store,
            &SystemClock,
            &signer,
            &EnqueueRequest {
                node_id: nodes[i % nodes_n].node_id.clone(),
                kind: "diag.ping".into(),
                payload: Vec::new(),
                batch_id: None,
                caller: "bench".into(),
                lifetime_us: None,
            },
        )
        .await
        .unwrap();
    }
    let enqueue = t.elapsed();
    // The reference: the raw signature of such a body, as many times.
    let worker_key = PrivateKey::generate(KeyRole::Worker).unwrap();
    let now = time::OffsetDateTime::now_utc();
    let worker = issue_worker_certificate(
        &env.keys.command_signing_root,
        worker_key.public_key(),
        "bench-reference",
        &Serial::generate().unwrap(),
        time::Duration::hours(1),
        now,
    )
    .unwrap();
    let now_ms = now.unix_timestamp() * 1000;
    let body = CommandBody {
        command_id: "cmd_0".into(),
        node_id: nodes[0].node_id.clone(),
        tenant_id: "t".into(),
        kind: "diag.ping".into(),
        payload_type_url: "type.googleapis.com/bc.command.v1.DiagPing".into(),
        payload: Vec::new(),
        batch_id: Vec::new(),
        issued_at_ms: now_ms,
        not_after_ms: now_ms + 3_600_000,
    };
    let t = Instant::now();
    let mut reference: Option<SignedCommand> = None;
    for _ in 0..commands_n {
        reference = Some(sign_command(&worker_key, &worker.der, &body, &td).unwrap());
    }
    let raw_sign = t.elapsed();
    let reference = reference.unwrap();
    let roots = vec![root_der.clone()];
    let t = Instant::now();
    for _ in 0..commands_n {
        verify_command(&reference, &roots, &td, &nodes[0].node_id, now_ms).unwrap();
    }
    let raw_verify = t.elapsed();
    println!(
        "enqueue {commands_n} commands, one caller: {:.0} /s ({:.0} µs each); raw sign of the body {:.0} µs: {:.2}x",
        commands_n as f64 / enqueue.as_secs_f64(),
        enqueue.as_secs_f64() * 1e6 / commands_n as f64,
        raw_sign.as_secs_f64() * 1e6 / commands_n as f64,
        enqueue.as_secs_f64() / raw_sign.as_secs_f64()
    );

    // 2. The nodes connect and work through their backlog.
    let done = Arc::new(AtomicUsize::new(0));
    let t = Instant::now();
    let mut tasks = Vec::new();
    for node in &nodes {
        let mut c = env.client(Some(node)).await.unwrap();
        let (tx, mut inbound) = common::grpc_session(&mut c, 128).await.unwrap();
        let (roots, td, node_id, done) = (
            roots.clone(),
            td.clone(),
            node.node_id.clone(),
            done.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let _client = c;
            let mut server_ms = 0i64;
            while let Some(Ok(msg)) = inbound.next().await {
                match msg.body {
                    Some(proto::gateway_message::Body::Welcome(w)) => server_ms = w.server_time_ms,
                    Some(proto::gateway_message::Body::Command(cmd)) => {
                        let signed = SignedCommand {
                            body: cmd.body,
                            signature: cmd.signature,
                            worker_chain: cmd.signer_chain,
                        };
                        let verified = verify_command(&signed, &roots, &td, &node_id, server_ms);
                        let outcome = if verified.is_ok() {
                            proto::CommandOutcome::Succeeded
                        } else {
                            proto::CommandOutcome::Rejected
                        };
                        let result = proto::NodeMessage {
                            body: Some(proto::node_message::Body::Result(proto::CommandResult {
                                command_id: cmd.command_id,
                                outcome: outcome as i32,
                                ..Default::default()
                            })),
                        };
                        done.fetch_add(1, Ordering::Relaxed);
                        if tx.send(result).await.is_err() {
                            break;
                        }
                    }
                    _ => {}
                }
            }
        }));
    }
    while answered(&store).await < commands_n {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let dispatch = t.elapsed();
    println!(
        "dispatch and execute {commands_n} commands to {nodes_n} nodes through one gateway (TLS, verify on the node, answer recorded): \
         {:.0} /s over {:.2} s; the nodes' verifies alone {:.0} µs each ({:.0} /s on one core)",
        commands_n as f64 / dispatch.as_secs_f64(),
        dispatch.as_secs_f64(),
        raw_verify.as_secs_f64() * 1e6 / commands_n as f64,
        commands_n as f64 / raw_verify.as_secs_f64()
    );

    // 3. Live: one command at a time to idle sessions.
    let mut latencies = Vec::with_capacity(live_n);
    for i in 0..live_n {
        let before = answered(&store).await;
        let t = Instant::now();
        enqueue_command(
            &store,
            &SystemClock,
            &signer,
            &EnqueueRequest {
                node_id: nodes[i % nodes_n].node_id.clone(),
                kind: "diag.ping".into(),
                payload: Vec::new(),
                batch_id: None,
                caller: "bench".into(),
                lifetime_us: None,
            },
        )
        .await
        .unwrap();
        let enqueued = Instant::now();
        while answered(&store).await <= before {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        latencies.push(enqueued.elapsed());
        let _ = t;
    }
    latencies.sort();
    println!(
        "live: enqueue returned -> answer recorded, {live_n} commands to idle sessions: p50 {:.0} ms, p99 {:.0} ms (poll interval 250 ms)",
        pct(&latencies, 0.5).as_secs_f64() * 1e3,
        pct(&latencies, 0.99).as_secs_f64() * 1e3,
    );
    for t in tasks {
        t.abort();
    }
    env.gateway.shutdown().await;
}
