//! Issue 21 over real TLS and a real store: a session receives its node's pending command after
//! the Welcome; a command enqueued while connected arrives within the poll interval, and a
//! session never sends the same command twice; a reconnect resends an unanswered command (cause
//! `hello`); an answer is recorded once; a result naming another node's command records nothing;
//! the approver set a node reports lands in `node_trust_reports`; a JoinResponse carries the
//! signed trust bundle a Welcome carries, in `--role all` and through the api of the split roles.
//!
//! The commands go through the real queue (`commands::command_queue::enqueue_command` signing
//! with a real worker key under the deployment's command-signing root).

use crate::common;

use std::sync::Arc;
use std::time::Duration as StdDuration;

use commands::command_queue::{enqueue_command, EnqueueRequest, WorkerSigner};
use commands::{Clock, SystemClock};
use common::{start, Env, Node};
use domain::pki::statement::{verify, TrustBundleStatement};
use domain::pki::{CommandSigningRoot, KeyRole, PrivateKey, Signature};
use domain::quorum::{ApproverSet, ApproverSetOffer};
use domain::trust_bundle::BundleConfig;
use events::schema::{command_stream, CommandDispatched};
use events::store::testkit::TestDb;
use events::store::{EventStore, LogStore};
use prost::Message;
use proto::gateway_message::Body;
use proto::{node_message, GatewayMessage, NodeMessage};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::Streaming;

/// Publishes a trust bundle with the deployment's command-signing root and no approvers.
async fn publish_bundle(env: &Env) -> u64 {
    let root = env.keys.command_signing_root.cert_der().to_vec();
    let settled = commands::quorum::settle_trust_bundle(
        &env.store,
        &SystemClock,
        &BundleConfig {
            trust_domain: domain::quorum::TrustDomain::new(common::TD).unwrap(),
            command_signing_roots: vec![root.clone()],
            active_root: root,
            approvers: ApproverSetOffer {
                set: ApproverSet::none(),
                epoch: 0,
                signatures: vec![],
            },
            floor: 0,
            pin: None,
        },
    )
    .await
    .unwrap();
    settled.version
}

fn worker(env: &Env) -> WorkerSigner {
    let root = &env.keys.command_signing_root;
    let key =
        PrivateKey::from_pkcs8_der(KeyRole::CommandSigningRoot, root.private_key().pkcs8_der())
            .unwrap();
    let root =
        CommandSigningRoot::from_parts(&env.keys.trust_domain, root.cert_der().to_vec(), key)
            .unwrap();
    WorkerSigner::new(
        root,
        env.keys.trust_domain.clone(),
        "gateway-test",
        time::Duration::hours(1),
    )
}

/// Enqueues `diag.ping` (not destructive, no batch) for `node_id`; its command id.
async fn enqueue(env: &Env, signer: &WorkerSigner, node_id: &str) -> String {
    let answer = enqueue_command(
        &env.store,
        &SystemClock,
        signer,
        &EnqueueRequest {
            node_id: node_id.into(),
            kind: "diag.ping".into(),
            payload: Vec::new(),
            batch_id: None,
            caller: "test".into(),
            lifetime_us: None,
        },
    )
    .await
    .unwrap();
    assert!(!answer.held && !answer.destructive);
    answer.command_id
}

pub(crate) fn hello(trust_version: u64, epoch: u64, digest: Vec<u8>) -> NodeMessage {
    NodeMessage {
        body: Some(node_message::Body::Hello(proto::Hello {
            trust_version,
            agent_version: "test".into(),
            approver_set_epoch: epoch,
            approver_set_sha256: digest,
            revocation_list: false,
            ..Default::default()
        })),
    }
}

fn status(trust_version: u64, epoch: u64, digest: Vec<u8>) -> NodeMessage {
    NodeMessage {
        body: Some(node_message::Body::Status(proto::StatusReport {
            client_time_ms: 0,
            trust_version,
            approver_set_epoch: epoch,
            approver_set_sha256: digest,
        })),
    }
}

pub(crate) fn succeeded(command_id: &str) -> NodeMessage {
    NodeMessage {
        body: Some(node_message::Body::Result(proto::CommandResult {
            command_id: command_id.into(),
            outcome: proto::CommandOutcome::Succeeded as i32,
            detail: "pong".into(),
            output_tail: b"pong\n".to_vec(),
            started_at_ms: 1,
            finished_at_ms: 2,
            ..Default::default()
        })),
    }
}

/// A node's open session: what it sends, what it receives.
pub(crate) struct Session {
    tx: mpsc::Sender<NodeMessage>,
    stream: Streaming<GatewayMessage>,
}

impl Session {
    /// Opens a session with `first` (a Hello) and reads the Welcome.
    pub(crate) async fn open(
        env: &Env,
        node: &Node,
        first: NodeMessage,
    ) -> (Session, proto::Welcome) {
        let mut c = env.client(Some(node)).await.unwrap();
        let (tx, rx) = mpsc::channel(64);
        tx.send(first).await.unwrap();
        let stream = c
            .session(ReceiverStream::new(rx))
            .await
            .unwrap()
            .into_inner();
        let mut s = Session { tx, stream };
        match s.next(StdDuration::from_secs(10)).await {
            Some(Body::Welcome(w)) => (s, w),
            other => panic!("expected a Welcome first, got {other:?}"),
        }
    }

    pub(crate) async fn send(&self, m: NodeMessage) {
        self.tx.send(m).await.unwrap();
    }

    /// The next message within `within`, or `None`.
    pub(crate) async fn next(&mut self, within: StdDuration) -> Option<Body> {
        match tokio::time::timeout(within, self.stream.next()).await {
            Ok(Some(Ok(GatewayMessage { body }))) => body,
            Ok(Some(Err(s))) => panic!("the session failed: {s:?}"),
            Ok(None) | Err(_) => None,
        }
    }

    /// The next message, which must be a command, within `within`.
    pub(crate) async fn command(&mut self, within: StdDuration) -> proto::Command {
        match self.next(within).await {
            Some(Body::Command(c)) => c,
            other => panic!("expected a command within {within:?}, got {other:?}"),
        }
    }
}

/// The causes of the command's `command.dispatched` events, in order.
async fn dispatch_causes(store: &EventStore, command_id: &str) -> Vec<String> {
    store
        .read_stream(&command_stream(command_id))
        .await
        .unwrap()
        .iter()
        .filter(|e| e.event_type == "command.dispatched")
        .map(|e| {
            let d: CommandDispatched = e.decode().unwrap();
            d.cause
        })
        .collect()
}

/// How many events of `event_type` the command's stream holds.
async fn count(store: &EventStore, command_id: &str, event_type: &str) -> usize {
    store
        .read_stream(&command_stream(command_id))
        .await
        .unwrap()
        .iter()
        .filter(|e| e.event_type == event_type)
        .count()
}

/// Waits up to 10 s for the gateway to count `n` results of `outcome`.
async fn results_counted(env: &Env, outcome: &str, n: u64) {
    let results = &env.gateway.sources.metrics.commands.results;
    for _ in 0..100 {
        if results.get(outcome) >= n {
            break;
        }
        tokio::time::sleep(StdDuration::from_millis(100)).await;
    }
    assert_eq!(results.get(outcome), n, "results {outcome}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_receives_its_pending_command_after_the_welcome() {
    let db = TestDb::postgres().await.unwrap();
    let env = start(db.store().await.unwrap(), |_| {}).await;
    publish_bundle(&env).await;
    let node = env.join_node(&env.token(1).await).await;
    let signer = worker(&env);
    let id = enqueue(&env, &signer, &node.node_id).await;
    let (mut s, _) = Session::open(&env, &node, hello(1, 0, vec![])).await;
    let c = s.command(StdDuration::from_secs(5)).await;
    assert_eq!(c.command_id, id);
    assert!(!c.body.is_empty() && c.signature.len() == 64 && c.signer_chain.len() == 1);
    assert!(c.batch_approval.is_none() && c.batch_proof.is_none());
    // The body the node gets verifies under the published root, for this node.
    let signed = domain::command::SignedCommand {
        body: c.body.clone(),
        signature: c.signature.clone(),
        worker_chain: c.signer_chain.clone(),
    };
    let verified = domain::command::verify_command(
        &signed,
        &[env.keys.command_signing_root.cert_der().to_vec()],
        &env.keys.trust_domain,
        &node.node_id,
        SystemClock.now_us() / 1000,
    );
    assert!(verified.is_ok(), "{verified:?}");
    assert_eq!(dispatch_causes(&env.store, &id).await, vec!["ready"]);
    // Nothing else is sent.
    assert!(s.next(StdDuration::from_millis(800)).await.is_none());
    env.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_enqueued_while_connected_arrives_within_the_poll_interval_and_only_once() {
    let db = TestDb::sqlite().unwrap();
    let env = start(db.store().await.unwrap(), |c| {
        c.command_poll_interval = StdDuration::from_millis(250)
    })
    .await;
    publish_bundle(&env).await;
    let node = env.join_node(&env.token(1).await).await;
    let signer = worker(&env);
    let (mut s, _) = Session::open(&env, &node, hello(1, 0, vec![])).await;
    assert!(s.next(StdDuration::from_millis(500)).await.is_none());
    let first = enqueue(&env, &signer, &node.node_id).await;
    let enqueued_at = std::time::Instant::now();
    let c = s.command(StdDuration::from_secs(3)).await;
    assert_eq!(c.command_id, first);
    // One poll interval, and room for a loaded machine's scheduling.
    assert!(
        enqueued_at.elapsed() < StdDuration::from_millis(250 + 750),
        "arrived after {:?}",
        enqueued_at.elapsed()
    );
    // A second command wakes the session again: only the new one is sent, the unanswered first
    // one is not sent twice.
    let second = enqueue(&env, &signer, &node.node_id).await;
    let c = s.command(StdDuration::from_secs(3)).await;
    assert_eq!(c.command_id, second);
    assert!(s.next(StdDuration::from_millis(800)).await.is_none());
    assert_eq!(dispatch_causes(&env.store, &first).await, vec!["ready"]);
    assert_eq!(dispatch_causes(&env.store, &second).await, vec!["ready"]);
    env.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnect_resends_an_unanswered_command_and_an_answer_is_recorded_once() {
    let db = TestDb::postgres().await.unwrap();
    let env = start(db.store().await.unwrap(), |_| {}).await;
    publish_bundle(&env).await;
    let node = env.join_node(&env.token(1).await).await;
    let signer = worker(&env);
    let id = enqueue(&env, &signer, &node.node_id).await;
    let (mut s, _) = Session::open(&env, &node, hello(1, 0, vec![])).await;
    assert_eq!(s.command(StdDuration::from_secs(5)).await.command_id, id);
    drop(s);
    // The next session gets it again, as a resend.
    let (mut s, _) = Session::open(&env, &node, hello(1, 0, vec![])).await;
    assert_eq!(s.command(StdDuration::from_secs(5)).await.command_id, id);
    assert_eq!(
        dispatch_causes(&env.store, &id).await,
        vec!["ready", "hello"]
    );
    // The node answers twice (a redelivered answer): one result is recorded.
    s.send(succeeded(&id)).await;
    s.send(succeeded(&id)).await;
    results_counted(&env, "ignored", 1).await;
    assert_eq!(
        env.gateway.sources.metrics.commands.results.get("recorded"),
        1
    );
    assert_eq!(count(&env.store, &id, "command.result.recorded").await, 1);
    drop(s);
    // Answered: a new session sends nothing.
    let (mut s, _) = Session::open(&env, &node, hello(1, 0, vec![])).await;
    assert!(s.next(StdDuration::from_millis(800)).await.is_none());
    assert_eq!(
        dispatch_causes(&env.store, &id).await,
        vec!["ready", "hello"]
    );
    env.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_result_naming_another_nodes_command_records_nothing() {
    let db = TestDb::sqlite().unwrap();
    let env = start(db.store().await.unwrap(), |_| {}).await;
    publish_bundle(&env).await;
    let token = env.token(2).await;
    let a = env.join_node(&token).await;
    let b = env.join_node(&token).await;
    let signer = worker(&env);
    let id = enqueue(&env, &signer, &a.node_id).await;
    // B's session claims A's command.
    let (sb, _) = Session::open(&env, &b, hello(1, 0, vec![])).await;
    sb.send(succeeded(&id)).await;
    results_counted(&env, "ignored", 1).await;
    assert_eq!(count(&env.store, &id, "command.result.recorded").await, 0);
    assert_eq!(count(&env.store, &id, "command.rejected").await, 0);
    // A result for no queue command is refused at the edge.
    sb.send(succeeded("cmd_not-a-command")).await;
    results_counted(&env, "invalid", 1).await;
    // A's own answer is recorded.
    let (mut sa, _) = Session::open(&env, &a, hello(1, 0, vec![])).await;
    assert_eq!(sa.command(StdDuration::from_secs(5)).await.command_id, id);
    sa.send(succeeded(&id)).await;
    results_counted(&env, "recorded", 1).await;
    assert_eq!(count(&env.store, &id, "command.result.recorded").await, 1);
    env.gateway.shutdown().await;
}

/// Waits up to 10 s until `node_id`'s recorded approver set is `want` (epoch, digest).
async fn approver_set_becomes(env: &Env, node_id: &str, want: (u64, Option<Vec<u8>>)) {
    let mut seen = None;
    for _ in 0..100 {
        let sets = commands::quorum::bundle::read::connected_approver_sets(
            &env.store,
            SystemClock.now_us(),
        )
        .await
        .unwrap();
        seen = sets
            .into_iter()
            .find(|s| s.node_id == node_id)
            .map(|s| (s.epoch, s.sha256));
        if seen.as_ref() == Some(&want) {
            return;
        }
        tokio::time::sleep(StdDuration::from_millis(100)).await;
    }
    panic!("{node_id}'s approver set is {seen:?}, not {want:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approver_set_a_node_reports_lands_in_the_projection_on_postgres() {
    let db = TestDb::postgres().await.unwrap();
    approver_set_reports(start(db.store().await.unwrap(), |_| {}).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approver_set_a_node_reports_lands_in_the_projection_on_sqlite() {
    let db = TestDb::sqlite().unwrap();
    approver_set_reports(start(db.store().await.unwrap(), |_| {}).await).await;
}

async fn approver_set_reports(env: Env) {
    let node = env.join_node(&env.token(1).await).await;
    let (s, _) = Session::open(&env, &node, hello(3, 1, vec![1; 32])).await;
    approver_set_becomes(&env, &node.node_id, (1, Some(vec![1; 32]))).await;
    // The same version with the set taken at epoch 2.
    s.send(status(3, 2, vec![2; 32])).await;
    approver_set_becomes(&env, &node.node_id, (2, Some(vec![2; 32]))).await;
    // A late, older report does not pair an old set with the newer version; a newer one does.
    s.send(status(2, 1, vec![1; 32])).await;
    s.send(status(4, 3, vec![3; 32])).await;
    approver_set_becomes(&env, &node.node_id, (3, Some(vec![3; 32]))).await;
    drop(s);
    // The end is recorded (connected false) before the next session's Hello.
    let trust_stream = format!("node-trust/{}", node.node_id);
    for _ in 0..100 {
        if env.store.read_stream(&trust_stream).await.unwrap().len() == 4 {
            break;
        }
        tokio::time::sleep(StdDuration::from_millis(100)).await;
    }
    // A Hello without keys: NULL (read as epoch 0, no digest).
    let (_s, _) = Session::open(&env, &node, hello(4, 0, vec![])).await;
    approver_set_becomes(&env, &node.node_id, (0, None)).await;
    let epochs: Vec<(u64, Vec<u8>)> = env
        .store
        .read_stream(&trust_stream)
        .await
        .unwrap()
        .iter()
        .map(|e| {
            let r: events::schema::NodeTrustReported = e.decode().unwrap();
            (r.approver_set_epoch, r.approver_set_sha256)
        })
        .collect();
    // Hello, the set change, the newer version (the older report is not recorded), the end,
    // the second Hello.
    assert_eq!(
        epochs,
        vec![
            (1, vec![1; 32]),
            (2, vec![2; 32]),
            (3, vec![3; 32]),
            (0, vec![]),
            (0, vec![]),
        ]
    );
    env.gateway.shutdown().await;
}

/// The JoinResponse's trust bundle: (version, bundle, signature), its signature checked.
fn join_trust(env: &Env, signed: &proto::SignedJoinResponse) -> (u64, Vec<u8>) {
    let resp = proto::JoinResponse::decode(signed.response.as_slice()).unwrap();
    assert!(
        resp.trust_roots.is_empty(),
        "the PKI root no longer travels"
    );
    let sig = Signature::from_bytes(&resp.trust_bundle_signature).expect("64-byte signature");
    verify(
        env.keys.join_signing.public_key(),
        &TrustBundleStatement {
            trust_domain: common::TD,
            bundle: &resp.signed_trust_bundle,
        },
        &sig,
    )
    .expect("the bundle is signed by the JoinService key (purpose trust-bundle)");
    let bundle = proto::TrustBundle::decode(resp.signed_trust_bundle.as_slice()).unwrap();
    assert_eq!(bundle.version, resp.trust_version);
    assert_eq!(bundle.trust_domain, common::TD);
    (resp.trust_version, resp.signed_trust_bundle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_response_carries_the_signed_trust_bundle_a_welcome_carries() {
    let db = TestDb::sqlite().unwrap();
    let env = start(db.store().await.unwrap(), |_| {}).await;
    let version = publish_bundle(&env).await;
    assert!(version >= 1);
    let token = env.token(2).await;
    let (req, key) = env.join_request(&token);
    let mut c = env.client(None).await.unwrap();
    let signed = c.join(req).await.unwrap().into_inner();
    let (join_version, join_bundle) = join_trust(&env, &signed);
    assert_eq!(join_version, version);
    let resp = proto::JoinResponse::decode(signed.response.as_slice()).unwrap();
    let node = Node {
        node_id: resp.node_id,
        chain: resp.certificate_chain,
        key,
    };
    let (_s, welcome) = Session::open(&env, &node, hello(0, 0, vec![])).await;
    assert_eq!(welcome.trust_version, join_version);
    assert_eq!(welcome.signed_trust_bundle, join_bundle);

    // The api of the split roles answers the same.
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let api = gateway::split::api::start_api(
        env.store.clone(),
        env.keys.clone(),
        env.join.clone(),
        clock,
        gateway::split::api::ApiConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            names: vec!["localhost".into()],
            certificate_lifetime: time::Duration::days(1),
            limits: gateway::edge::limits::EdgeLimits::internal(),
            health_listen: None,
        },
    )
    .await
    .unwrap();
    let identity = common::internal_identity(&env.keys);
    let relay = gateway::split::relay::ApiClient::new(
        &format!("localhost:{}", api.addr.port()),
        env.keys.serving_ca.cert_der(),
        identity.0,
        identity.1,
    )
    .unwrap();
    let (req, _) = env.join_request(&token);
    let signed = relay.join(req).await.unwrap();
    let (api_version, api_bundle) = join_trust(&env, &signed);
    assert_eq!((api_version, api_bundle), (join_version, join_bundle));
    api.shutdown().await;
    env.gateway.shutdown().await;
}
