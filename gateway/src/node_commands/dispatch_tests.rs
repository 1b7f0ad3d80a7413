//! The session's command rules against a fake queue: nothing before the Welcome, each command
//! sent once per session with its cause, a resend in a new session, the fetch bound, a failed
//! dispatch record sends nothing and retries, answers counted by outcome, results for commands
//! the session did not send bounded (issue 40).

use std::collections::HashSet;
use std::sync::Mutex;

use domain::command::SignedCommand;

use super::*;

#[derive(Default)]
struct State {
    /// (node, command id), oldest first.
    commands: Vec<(String, String)>,
    dispatched: Vec<(Vec<String>, DispatchCause)>,
    answered: HashSet<String>,
    fail_dispatch: bool,
    /// Commands the queue cancels at dispatch (their node's certificate no longer allows them).
    cancel: HashSet<String>,
    /// Results read from the (fake) store.
    answer_calls: usize,
}

#[derive(Default)]
struct FakeQueue(Mutex<State>);

fn id(n: usize) -> String {
    format!("cmd_{n:032x}")
}

impl FakeQueue {
    fn add(&self, node: &str, n: usize) {
        self.0
            .lock()
            .unwrap()
            .commands
            .push((node.to_owned(), id(n)));
    }

    fn dispatched(&self) -> Vec<(Vec<String>, DispatchCause)> {
        self.0.lock().unwrap().dispatched.clone()
    }
}

impl Queue for FakeQueue {
    fn pending<'a>(
        &'a self,
        node_id: &'a str,
        limit: u32,
    ) -> QueueFuture<'a, Vec<RunnableCommand>> {
        let s = self.0.lock().unwrap();
        let out = s
            .commands
            .iter()
            .filter(|(n, c)| n == node_id && !s.answered.contains(c))
            .take(limit as usize)
            .map(|(_, c)| RunnableCommand {
                command_id: c.clone(),
                signed: SignedCommand {
                    body: c.as_bytes().to_vec(),
                    signature: vec![1; 64],
                    worker_chain: vec![vec![2]],
                },
                approval: None,
                proof: None,
                dispatched_before: s.dispatched.iter().any(|(ids, _)| ids.contains(c)),
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
        let result = if s.fail_dispatch {
            Err(CommandQueueError::NotFound("the store is down".into()))
        } else {
            let recorded: Vec<String> = ids
                .iter()
                .filter(|id| !s.cancel.contains(*id))
                .cloned()
                .collect();
            s.dispatched.push((recorded.clone(), cause));
            Ok(recorded)
        };
        Box::pin(async move { result })
    }

    fn answer<'a>(&'a self, node_id: &'a str, answer: &'a NodeAnswer) -> QueueFuture<'a, bool> {
        let mut s = self.0.lock().unwrap();
        s.answer_calls += 1;
        let mine = s
            .commands
            .iter()
            .any(|(n, c)| n == node_id && *c == answer.command_id);
        let recorded = mine && s.answered.insert(answer.command_id.clone());
        Box::pin(async move { Ok(recorded) })
    }

    fn ready(&self, after: i64, _limit: u32) -> QueueFuture<'_, (Vec<String>, i64)> {
        Box::pin(async move { Ok((Vec::new(), after)) })
    }
}

type Rx = mpsc::Receiver<crate::node_commands::dispatch::SessionItem>;

fn session(queue: &Arc<FakeQueue>, node: &str) -> (SessionCommands, Arc<CommandCounters>) {
    let counters = Arc::new(CommandCounters::default());
    let q: Arc<dyn Queue> = queue.clone();
    (
        SessionCommands::new(q, node.to_owned(), counters.clone()),
        counters,
    )
}

/// The command ids waiting in `rx`.
fn received(rx: &mut Rx) -> Vec<String> {
    let mut ids = Vec::new();
    while let Ok(Ok(message)) = rx.try_recv() {
        if let GatewayMessage {
            body: Some(gateway_message::Body::Command(c)),
        } = *message
        {
            ids.push(c.command_id);
        } else {
            break;
        }
    }
    ids
}

fn result(command_id: &str) -> proto::CommandResult {
    proto::CommandResult {
        command_id: command_id.to_owned(),
        outcome: proto::CommandOutcome::Rejected as i32,
        reject_reason: proto::CommandRejectReason::UnbatchedLimit as i32,
        ..Default::default()
    }
}

#[tokio::test]
async fn each_command_is_sent_once_per_session_after_the_welcome() {
    let queue = Arc::new(FakeQueue::default());
    queue.add("n1", 1);
    queue.add("n2", 2);
    let (tx, mut rx) = mpsc::channel(128);
    let (mut s, counters) = session(&queue, "n1");
    s.dispatch(&tx).await.unwrap();
    assert_eq!(
        received(&mut rx),
        Vec::<String>::new(),
        "before the Welcome"
    );
    s.welcomed();
    s.dispatch(&tx).await.unwrap();
    assert_eq!(received(&mut rx), vec![id(1)]);
    // Woken again: nothing new, nothing sent twice.
    s.dispatch(&tx).await.unwrap();
    assert_eq!(received(&mut rx), Vec::<String>::new());
    queue.add("n1", 3);
    s.dispatch(&tx).await.unwrap();
    assert_eq!(received(&mut rx), vec![id(3)]);
    assert_eq!(
        queue.dispatched(),
        vec![
            (vec![id(1)], DispatchCause::Ready),
            (vec![id(3)], DispatchCause::Ready)
        ]
    );
    assert_eq!(counters.dispatched.load(Ordering::Relaxed), 2);
    assert_eq!(s.unanswered(), 2);
    // A new session (a reconnect) resends both, as resends.
    let (mut again, _) = session(&queue, "n1");
    again.welcomed();
    again.dispatch(&tx).await.unwrap();
    assert_eq!(received(&mut rx), vec![id(1), id(3)]);
    assert_eq!(
        queue.dispatched()[2],
        (vec![id(1), id(3)], DispatchCause::Hello)
    );
}

#[tokio::test]
async fn only_the_commands_the_dispatch_record_answers_are_sent() {
    // Issue 40 item 16: the queue cancels a command its node's certificate no longer allows
    // instead of recording its dispatch; the session must not send it.
    let queue = Arc::new(FakeQueue::default());
    for n in 1..=3 {
        queue.add("n1", n);
    }
    queue.0.lock().unwrap().cancel.insert(id(2));
    let (tx, mut rx) = mpsc::channel(128);
    let (mut s, counters) = session(&queue, "n1");
    s.welcomed();
    s.dispatch(&tx).await.unwrap();
    assert_eq!(received(&mut rx), vec![id(1), id(3)]);
    assert_eq!(counters.dispatched.load(Ordering::Relaxed), 2);
    assert_eq!(s.unanswered(), 2);
}

#[tokio::test]
async fn answers_are_counted_by_outcome_and_a_full_fetch_continues_after_one() {
    let queue = Arc::new(FakeQueue::default());
    for n in 0..70 {
        queue.add("n1", n);
    }
    queue.add("n2", 100);
    let (tx, mut rx) = mpsc::channel(128);
    let (mut s, counters) = session(&queue, "n1");
    s.welcomed();
    s.dispatch(&tx).await.unwrap();
    assert_eq!(received(&mut rx).len(), FETCH_LIMIT as usize);
    // An answer when the fetch was full asks for another fetch, which sends the 65th.
    assert!(s.answer(&result(&id(0))).await.unwrap());
    s.dispatch(&tx).await.unwrap();
    assert_eq!(received(&mut rx), vec![id(64)]);
    // The same answer again, another node's command, an invalid result.
    assert!(!s.answer(&result(&id(0))).await.unwrap());
    assert!(!s.answer(&result(&id(100))).await.unwrap());
    assert!(!s.answer(&result("cmd_x")).await.unwrap());
    let no_outcome = proto::CommandResult {
        outcome: 0,
        ..result(&id(1))
    };
    assert!(!s.answer(&no_outcome).await.unwrap());
    for (outcome, n) in [
        ("recorded", 1),
        ("ignored", 2),
        ("invalid", 2),
        ("error", 0),
    ] {
        assert_eq!(counters.results.get(outcome), n, "{outcome}");
    }
    assert_eq!(s.unanswered(), 64);
    assert_eq!(queue.0.lock().unwrap().answered.len(), 1);
}

#[tokio::test]
async fn a_dispatch_that_cannot_be_recorded_sends_nothing_and_is_retried() {
    let queue = Arc::new(FakeQueue::default());
    queue.add("n1", 1);
    queue.0.lock().unwrap().fail_dispatch = true;
    let (tx, mut rx) = mpsc::channel(128);
    let (mut s, counters) = session(&queue, "n1");
    s.welcomed();
    s.dispatch(&tx).await.unwrap();
    assert_eq!(received(&mut rx), Vec::<String>::new());
    assert_eq!(counters.dispatch_errors.load(Ordering::Relaxed), 1);
    assert!(s.retry_at().is_some());
    queue.0.lock().unwrap().fail_dispatch = false;
    s.dispatch(&tx).await.unwrap();
    assert_eq!(received(&mut rx), vec![id(1)]);
    assert!(s.retry_at().is_none());
    // A closed session is the only error.
    queue.add("n1", 2);
    drop(rx);
    assert_eq!(s.dispatch(&tx).await, Err(SessionClosed));
}

/// Issue 40, item 8: a node sending results for commands it never got (20,000 in the attack)
/// costs at most [`UNSOLICITED_READS`] store reads and a log line or two, and its session is
/// ended at [`UNSOLICITED_CUTOFF`] with RESOURCE_EXHAUSTED and a retry hint.
#[tokio::test]
async fn results_for_commands_never_sent_are_bounded_and_the_session_cut_off() {
    let queue = Arc::new(FakeQueue::default());
    queue.add("n1", 1);
    let (tx, mut rx) = mpsc::channel(128);
    let (mut s, counters) = session(&queue, "n1");
    s.welcomed();
    s.dispatch(&tx).await.unwrap();
    assert_eq!(received(&mut rx), vec![id(1)]);
    let mut ended = None;
    let mut sent = 0u32;
    for n in 0..20_000usize {
        sent += 1;
        match s.answer(&result(&id(1_000 + n))).await {
            Ok(again) => assert!(!again),
            Err(status) => {
                ended = Some(status);
                break;
            }
        }
    }
    let status = ended.expect("the session is ended");
    assert_eq!(sent, UNSOLICITED_CUTOFF);
    assert_eq!(status.code(), tonic::Code::ResourceExhausted);
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
    assert_eq!(
        queue.0.lock().unwrap().answer_calls,
        UNSOLICITED_READS as usize,
        "store reads for results of commands never sent"
    );
    assert_eq!(
        counters.results.get("ignored"),
        u64::from(UNSOLICITED_READS)
    );
    assert_eq!(
        counters.results.get("unsolicited"),
        u64::from(UNSOLICITED_CUTOFF - UNSOLICITED_READS)
    );
    assert_eq!(counters.sessions_cut.load(Ordering::Relaxed), 1);
    // One line for the process per 10 s, however many results: the first one only here.
    assert_eq!(counters.result_lines.load(Ordering::Relaxed), 1);
    // The command it was sent is still answered and recorded.
    let (mut next, _) = session(&queue, "n1");
    next.welcomed();
    next.dispatch(&tx).await.unwrap();
    assert!(!next.answer(&result(&id(1))).await.unwrap());
    assert_eq!(queue.0.lock().unwrap().answered.len(), 1);
}
