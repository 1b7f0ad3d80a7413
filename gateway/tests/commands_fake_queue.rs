//! The session's command path over real TLS against a queue held in memory
//! (`gateway::run::start_with_queue`), so the wiring (the Welcome, the poller's wake, a
//! reconnect's resend, results under the mTLS node id) is checked on its own; `commands_session`
//! checks the same against the store's queue. A node flooding results of commands it was never
//! sent is cut off after a bounded few store reads (issue 40).

use crate::commands_session::{hello, succeeded, Session};
use crate::common::{Env, TD};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration as StdDuration;

use commands::command_queue::{DispatchCause, NodeAnswer, NodeAnswerOutcome, RunnableCommand};
use commands::identity::{IdentityConfig, JoinService};
use commands::{Clock, SystemClock};
use domain::command::SignedCommand;
use domain::pki::{KeySet, KeySetLifetimes, TrustDomain};
use events::store::testkit::TestDb;
use gateway::node_commands::dispatch::{Queue, QueueFuture};
use gateway::run::GatewayConfig;
use proto::node_message;
use time::OffsetDateTime;

/// Positions far above the test store's log, so the poller (which starts at the log's head)
/// sees every command added after it started.
const FIRST_POSITION: i64 = 1_000_000;

#[derive(Default)]
struct State {
    /// (node, command id, position), oldest first.
    commands: Vec<(String, String, i64)>,
    dispatched: Vec<(String, DispatchCause)>,
    answered: HashMap<String, NodeAnswer>,
    /// Results the gateway read from this (in-memory) store.
    answer_calls: usize,
}

#[derive(Default)]
struct MemQueue(Mutex<State>);

impl MemQueue {
    fn add(&self, node: &str) -> String {
        let mut s = self.0.lock().unwrap();
        let n = s.commands.len();
        let id = format!("cmd_{n:032x}");
        let position = FIRST_POSITION + n as i64;
        s.commands.push((node.to_owned(), id.clone(), position));
        id
    }

    fn causes(&self, id: &str) -> Vec<DispatchCause> {
        let s = self.0.lock().unwrap();
        s.dispatched
            .iter()
            .filter(|(c, _)| c == id)
            .map(|(_, cause)| *cause)
            .collect()
    }
}

impl Queue for MemQueue {
    fn pending<'a>(
        &'a self,
        node_id: &'a str,
        limit: u32,
    ) -> QueueFuture<'a, Vec<RunnableCommand>> {
        let s = self.0.lock().unwrap();
        let out = s
            .commands
            .iter()
            .filter(|(n, c, _)| n == node_id && !s.answered.contains_key(c))
            .take(limit as usize)
            .map(|(_, c, _)| RunnableCommand {
                command_id: c.clone(),
                signed: SignedCommand {
                    body: c.as_bytes().to_vec(),
                    signature: vec![1; 64],
                    worker_chain: vec![vec![2]],
                },
                approval: None,
                proof: None,
                dispatched_before: s.dispatched.iter().any(|(d, _)| d == c),
            })
            .collect();
        Box::pin(async move { Ok(out) })
    }

    fn dispatched<'a>(
        &'a self,
        _node_id: &'a str,
        ids: &'a [String],
        cause: DispatchCause,
    ) -> QueueFuture<'a, Vec<String>> {
        let mut s = self.0.lock().unwrap();
        s.dispatched
            .extend(ids.iter().map(|id| (id.clone(), cause)));
        let recorded = ids.to_vec();
        Box::pin(async move { Ok(recorded) })
    }

    fn answer<'a>(&'a self, node_id: &'a str, answer: &'a NodeAnswer) -> QueueFuture<'a, bool> {
        let mut s = self.0.lock().unwrap();
        s.answer_calls += 1;
        let mine = s
            .commands
            .iter()
            .any(|(n, c, _)| n == node_id && *c == answer.command_id);
        let recorded = mine && !s.answered.contains_key(&answer.command_id);
        if recorded {
            s.answered.insert(answer.command_id.clone(), answer.clone());
        }
        Box::pin(async move { Ok(recorded) })
    }

    fn ready(&self, after: i64, limit: u32) -> QueueFuture<'_, (Vec<String>, i64)> {
        let s = self.0.lock().unwrap();
        let newer: Vec<&(String, String, i64)> = s
            .commands
            .iter()
            .filter(|(_, _, p)| *p > after)
            .take(limit as usize)
            .collect();
        let next = newer.last().map_or(after, |(_, _, p)| *p);
        let nodes = newer.iter().map(|(n, _, _)| n.clone()).collect();
        Box::pin(async move { Ok((nodes, next)) })
    }
}

async fn start(store: events::store::EventStore, queue: Arc<MemQueue>) -> Env {
    let keys = Arc::new(
        KeySet::generate(
            TrustDomain::new(TD).unwrap(),
            OffsetDateTime::now_utc() - time::Duration::days(1),
            KeySetLifetimes::default(),
        )
        .unwrap(),
    );
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let join = Arc::new(
        JoinService::new(
            store.clone(),
            keys.clone(),
            clock.clone(),
            IdentityConfig::new(keys.trust_domain.clone()),
        )
        .unwrap(),
    );
    let mut cfg = GatewayConfig::new("127.0.0.1:0".parse().unwrap());
    cfg.command_poll_interval = StdDuration::from_millis(250);
    let gateway = gateway::run::start_with_queue(
        store.clone(),
        keys.clone(),
        join.clone(),
        clock,
        cfg,
        queue,
    )
    .await
    .unwrap();
    Env {
        store,
        keys,
        join,
        gateway,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_sends_pending_and_woken_commands_once_resends_after_a_reconnect_and_records_answers_of_its_own_node(
) {
    let db = TestDb::sqlite().unwrap();
    let queue = Arc::new(MemQueue::default());
    let env = start(db.store().await.unwrap(), queue.clone()).await;
    let token = env.token(2).await;
    let a = env.join_node(&token).await;
    let b = env.join_node(&token).await;
    let first = queue.add(&a.node_id);

    // After the Welcome: the pending command.
    let (mut s, _) = Session::open(&env, &a, hello(0, 0, vec![])).await;
    let c = s.command(StdDuration::from_secs(5)).await;
    assert_eq!(c.command_id, first);
    assert_eq!(c.body, first.as_bytes());
    assert_eq!(queue.causes(&first), vec![DispatchCause::Ready]);

    // Enqueued while connected: the poller wakes the session within its interval; the
    // unanswered first command is not sent again.
    let second = queue.add(&a.node_id);
    let added = std::time::Instant::now();
    let c = s.command(StdDuration::from_secs(3)).await;
    assert_eq!(c.command_id, second);
    assert!(
        added.elapsed() < StdDuration::from_millis(1_000),
        "{:?}",
        added.elapsed()
    );
    assert!(s.next(StdDuration::from_millis(600)).await.is_none());

    // A reconnect resends both, cause hello.
    drop(s);
    let (mut s, _) = Session::open(&env, &a, hello(0, 0, vec![])).await;
    let mut resent = vec![
        s.command(StdDuration::from_secs(5)).await.command_id,
        s.command(StdDuration::from_secs(5)).await.command_id,
    ];
    resent.sort();
    assert_eq!(resent, vec![first.clone(), second.clone()]);
    assert_eq!(
        queue.causes(&first),
        vec![DispatchCause::Ready, DispatchCause::Hello]
    );

    // B claims A's command: nothing recorded.
    let (sb, _) = Session::open(&env, &b, hello(0, 0, vec![])).await;
    sb.send(succeeded(&first)).await;
    // A rejects its second with a long output; the first succeeds, answered twice.
    let long = proto::CommandResult {
        command_id: second.clone(),
        outcome: proto::CommandOutcome::Rejected as i32,
        reject_reason: proto::CommandRejectReason::BatchUnapproved as i32,
        detail: "leaf-used: abc".into(),
        output_tail: vec![b'z'; 10_000],
        ..Default::default()
    };
    s.send(proto::NodeMessage {
        body: Some(node_message::Body::Result(long)),
    })
    .await;
    s.send(succeeded(&first)).await;
    s.send(succeeded(&first)).await;
    let results = &env.gateway.sources.metrics.commands.results;
    for _ in 0..100 {
        if results.get("recorded") + results.get("ignored") >= 4 {
            break;
        }
        tokio::time::sleep(StdDuration::from_millis(50)).await;
    }
    assert_eq!((results.get("recorded"), results.get("ignored")), (2, 2));
    let answered = queue.0.lock().unwrap().answered.clone();
    assert_eq!(answered.len(), 2);
    assert_eq!(answered[&first].outcome, NodeAnswerOutcome::Succeeded);
    let rejected = &answered[&second];
    assert_eq!(
        rejected.outcome,
        NodeAnswerOutcome::Rejected {
            reason: "BATCH_UNAPPROVED".into()
        }
    );
    assert_eq!(rejected.detail, "leaf-used: abc");
    assert_eq!(rejected.output_tail.len(), 4096);
    let page = env.gateway.sources.render();
    for line in [
        "bc_command_results_total{outcome=\"recorded\"} 2",
        "bc_command_results_total{outcome=\"ignored\"} 2",
        "bc_commands_dispatched_total 4",
        "bc_command_dispatch_errors_total 0",
    ] {
        assert!(page.lines().any(|l| l == line), "{line} not in {page}");
    }
    // Everything answered: a new session gets nothing.
    drop(s);
    let (mut s, _) = Session::open(&env, &a, hello(0, 0, vec![])).await;
    assert!(s.next(StdDuration::from_millis(600)).await.is_none());
    env.gateway.shutdown().await;
}

/// Issue 40, item 8: a node sends 20,000 results for commands it was never sent (the attack's
/// count). The gateway reads at most a handful from the store
/// (`gateway::node_commands::dispatch::UNSOLICITED_READS`), ends the session with
/// RESOURCE_EXHAUSTED and a 60 s retry hint, and counts it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_flooding_results_of_commands_it_never_got_is_cut_off_after_a_few_store_reads() {
    use tokio_stream::StreamExt;
    let db = TestDb::sqlite().unwrap();
    let queue = Arc::new(MemQueue::default());
    let env = start(db.store().await.unwrap(), queue.clone()).await;
    let node = env.join_node(&env.token(1).await).await;
    let mut client = env.client(Some(&node)).await.unwrap();
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tx.send(hello(0, 0, vec![])).await.unwrap();
    let mut stream = client
        .session(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .unwrap()
        .into_inner();
    match tokio::time::timeout(StdDuration::from_secs(10), stream.next()).await {
        Ok(Some(Ok(proto::GatewayMessage {
            body: Some(proto::gateway_message::Body::Welcome(_)),
        }))) => {}
        other => panic!("expected a Welcome, got {other:?}"),
    }
    let flood = tokio::spawn(async move {
        for n in 0..20_000u64 {
            let id = format!("cmd_{:032x}", 0xf000_0000 + n);
            if tx.send(succeeded(&id)).await.is_err() {
                return n;
            }
        }
        // Keep the stream open: only the gateway ends this session.
        tokio::time::sleep(StdDuration::from_secs(60)).await;
        20_000
    });
    let end = tokio::time::timeout(StdDuration::from_secs(20), stream.next()).await;
    let reads = queue.0.lock().unwrap().answer_calls;
    assert!(
        reads <= 4,
        "{reads} store reads for results of commands the session never sent"
    );
    let status = match end {
        Ok(Some(Err(status))) => status,
        other => panic!("the session went on: {other:?}"),
    };
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    assert_eq!(
        status.message(),
        "this session sent 64 results for commands it was not sent; the gateway ended it: reconnect in 60 s"
    );
    assert_eq!(
        status
            .metadata()
            .get("grpc-retry-pushback-ms")
            .and_then(|v| v.to_str().ok()),
        Some("60000")
    );
    flood.abort();
    let page = env.gateway.sources.render();
    for line in [
        "bc_command_sessions_cut_total 1",
        "bc_command_results_total{outcome=\"ignored\"} 4",
        "bc_command_results_total{outcome=\"unsolicited\"} 60",
    ] {
        assert!(page.lines().any(|l| l == line), "{line} not in {page}");
    }
    env.gateway.shutdown().await;
}
