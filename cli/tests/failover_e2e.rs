//! Failover end to end with the real `bcctl` on Postgres (issue 25, "Must show"): two
//! `bcctl serve --role api` replicas (A, B) and two `bcctl serve --role gateway` (G1 relaying
//! to A, G2 to B; a gateway relays to one api) on one primary. 100 in-test agents
//! (`failover_e2e/agent.rs`: bcd's own join, verification, storage and renewal, over pinned
//! TLS 1.3), half through each gateway, a bounded number at a time, join and renew twice over
//! mTLS. Once a third have joined, the api replica leading the audit sequencer is SIGKILLed and
//! restarted about 2 s later on the same internal port.
//!
//! Then: every agent holds a chain that webpki verifies under the node CA; every error an agent
//! saw is UNAVAILABLE (the gateway's answer while its api is down) or the refused retry of a
//! join whose answer was lost (the api committed, then died before answering; since issue 40
//! such a retry is answered again, so none is expected), and there are no more of those than
//! calls in flight through the killed replica's gateway at the kill; the
//! log, read position by position (`failover_e2e/log_check.rs`), has strictly increasing
//! positions, no event id twice, every stream's versions 1..n, every held certificate issued by
//! exactly one event, and every other one the answer of a lost join; the survivor takes the
//! audit sequencer's leadership; `bcctl audit seal --all` then `bcctl audit verify --tenant
//! default` pass. A summary line gives the counts and the takeover time.
//!
//! Run: `cargo test -p cli --test suite failover_e2e:: -- --nocapture` (Postgres at
//! `DATABASE_URL`, default `postgres://postgres@127.0.0.1:5432/postgres`; the test makes its
//! own database).

#[path = "failover_e2e/agent.rs"]
mod agent;
#[path = "failover_e2e/deploy.rs"]
pub mod deploy;
#[path = "failover_e2e/log_check.rs"]
mod log_check;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use commands::identity::NodeAdmin;
use commands::SystemClock;
use events::store::testkit::TestDb;
use events::store::EventStore;
use tokio::sync::Semaphore;

use agent::{run_agent, AgentOutcome, Call, Fleet, SeenError};
use deploy::{bcctl, ok, Deployment, API_NAMES, LEADERSHIP_TAKEN, SECRET, SEQUENCER_TASK};
use log_check::{check_log, cross_check, read_log, verify_chain};

const AGENTS: usize = 100;
/// The gateway's answer while its api does not answer (gateway/src/split/relay.rs).
const RELAY_UNAVAILABLE: &str = "the control plane's api is unavailable; retry later";
/// Agents at work at once, per gateway.
/// Agents at work at once, per gateway. A renewal's new mTLS connection waits bcd's 2 s
/// `FIRST_READ_TIMEOUT` (the gateway sends nothing before the client's HTTP/2 preface), so
/// most agents wait at any moment and the bound is set by connections, not by CPU.
const PER_GATEWAY: usize = 16;
const RENEWALS: usize = 2;
/// Joins completed before the kill.
const KILL_AFTER_JOINS: usize = AGENTS / 3;
/// How long the killed replica stays down.
const DOWN_FOR: Duration = Duration::from_secs(2);
/// The bound on the agents' whole run (each retries until then).
/// A bound for liveness only (a run takes about a third of it), not a speed check.
const AGENTS_DEADLINE: Duration = Duration::from_secs(90);

/// Whether the `leadership taken task=audit-sequencer` lines must be there: always (the
/// api replicas log them, cli/src/serve/leader.rs).
fn leader_lines_required() -> bool {
    true
}

/// The replica to kill: the one whose log says it leads the audit sequencer (and that its log
/// said so); panics when neither logged it within 30 s.
fn replica_to_kill(d: &Deployment) -> (usize, bool) {
    match d.wait_sequencer_leader(Duration::from_secs(30)) {
        Some(leader) => (leader, true),
        None => panic!(
            "no replica logged `{LEADERSHIP_TAKEN}` for {SEQUENCER_TASK}:\n{}",
            d.logs()
        ),
    }
}

/// Counts the `leadership taken` lines of the audit sequencer in `log`.
fn takeovers(log: &str) -> usize {
    log.lines()
        .filter(|l| l.contains(LEADERSHIP_TAKEN) && l.contains(SEQUENCER_TASK))
        .count()
}

/// Polls (async) until `done`, at most `within`; whether it was done.
async fn poll(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while !done() {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    true
}

/// What happened around the kill.
struct Kill {
    victim: usize,
    by_log: bool,
    before: Instant,
    after: Instant,
    takeover: Option<Duration>,
    survivor_led_already: bool,
    restarted_in: Duration,
}

/// Waits for a third of the joins, kills the leader, watches the survivor take over, and
/// restarts the killed replica after [`DOWN_FOR`].
async fn kill_and_restart(d: &mut Deployment, fleet: &Fleet) -> Kill {
    let joined = poll(Duration::from_secs(40), || {
        fleet.joined.load(Ordering::SeqCst) >= KILL_AFTER_JOINS
    })
    .await;
    assert!(
        joined,
        "{KILL_AFTER_JOINS} joins did not complete:\n{}",
        d.logs()
    );
    let (victim, by_log) = tokio::task::block_in_place(|| replica_to_kill(d));
    let survivor = 1 - victim;
    let survivor_led_already = deploy::leads_sequencer(&d.api_log(survivor));
    let taken_before = takeovers(&d.api_log(survivor));
    let before = Instant::now();
    d.kill_api(victim);
    let after = Instant::now();
    let expect_takeover = (by_log || leader_lines_required()) && !survivor_led_already;
    let mut takeover = None;
    let down_until = after + DOWN_FOR;
    while Instant::now() < down_until || (expect_takeover && takeover.is_none()) {
        if takeover.is_none() && takeovers(&d.api_log(survivor)) > taken_before {
            takeover = Some(before.elapsed());
        }
        if after.elapsed() > Duration::from_secs(30) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let respawned = Instant::now();
    d.spawn_api(victim);
    let ready = poll(Duration::from_secs(60), || d.api_ready(victim)).await;
    assert!(ready, "the restarted replica did not listen:\n{}", d.logs());
    Kill {
        victim,
        by_log,
        before,
        after,
        takeover,
        survivor_led_already,
        restarted_in: respawned.elapsed(),
    }
}

/// Sends SIGTERM to every server (a clean stop: held refusal counts are written) and waits.
fn stop_all(d: &mut Deployment) {
    let mut procs: Vec<&mut crate::support::Proc> = d.gateways.iter_mut().collect();
    procs.extend(d.apis.iter_mut().flatten());
    for p in &procs {
        let pid = p.child.id().to_string();
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status();
    }
    for p in procs {
        p.wait_exit(Duration::from_secs(30));
    }
}

/// Whether an error is one of the clean ones: the gateway's UNAVAILABLE while its api is down
/// (or a connection reset then), or the refused retry of a join whose answer was lost.
fn clean(e: &SeenError) -> bool {
    match e.code.as_str() {
        "Unavailable" => e.message == RELAY_UNAVAILABLE,
        "transport" => e.message.contains("reset") || e.message.contains("closed"),
        "PermissionDenied" => e.call == Call::Join && e.lost_answer,
        _ => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_apis_two_gateways_one_api_sigkilled() {
    let db = TestDb::postgres().await.expect("postgres test db");
    let tmp = tempfile::tempdir().expect("tempdir");
    let t0 = Instant::now();
    let mut d = tokio::task::block_in_place(|| {
        let mut d = Deployment::create(tmp.path(), db.url());
        // One after the other: each settles the trust bundle at start.
        d.start_api(0);
        d.start_api(1);
        d.start_gateway(0);
        d.start_gateway(1);
        d
    });
    let store = EventStore::open(db.url()).await.expect("open the store");
    let public = d.public.clone();
    let pins = public.pins().expect("pins");
    let fleet = Arc::new(Fleet {
        serving_ca: pins.serving_ca,
        join_signing_pin: pins.join_signing,
        join_signing: public.join_signing.clone(),
        join_encryption: public.join_encryption.clone(),
        trust_domain: public.trust_domain.clone(),
        gateways: d.gateway_addrs.clone(),
        admin: NodeAdmin::new(store.clone(), Arc::new(SystemClock)),
        deadline: Instant::now() + AGENTS_DEADLINE,
        renewals: RENEWALS,
        attempts: Mutex::new(Vec::new()),
        joined: AtomicUsize::new(0),
        renewed: AtomicUsize::new(0),
    });
    let mut tokens = Vec::new();
    for _ in 0..AGENTS {
        tokens.push(fleet.new_token().await.expect("a token"));
    }
    let setup = t0.elapsed();

    let gates = [
        Arc::new(Semaphore::new(PER_GATEWAY)),
        Arc::new(Semaphore::new(PER_GATEWAY)),
    ];
    let mut tasks = Vec::new();
    for (index, token) in tokens.into_iter().enumerate() {
        let gateway = index % 2;
        let gate = gates[gateway].clone();
        let fleet = fleet.clone();
        let dir = tmp.path().join(format!("agent-{index}"));
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire_owned().await.expect("semaphore");
            run_agent(fleet, index, gateway, token, &dir).await
        }));
    }
    let run_start = Instant::now();
    let kill = kill_and_restart(&mut d, &fleet).await;
    let mut agents: Vec<AgentOutcome> = Vec::new();
    for task in tasks {
        agents.push(task.await.expect("an agent task"));
    }
    let run_time = run_start.elapsed();

    // The leadership moved to the survivor (when the replicas log it).
    let survivor = 1 - kill.victim;
    let must_move = kill.by_log || leader_lines_required();
    if must_move && !kill.survivor_led_already {
        assert!(
            kill.takeover.is_some(),
            "the survivor {} did not log `{LEADERSHIP_TAKEN}` for {SEQUENCER_TASK} after the \
             kill:\n{}",
            API_NAMES[survivor],
            d.logs()
        );
    }
    let leader_after = d.sequencer_leader().map(|i| API_NAMES[i]);
    if must_move {
        assert_eq!(
            leader_after,
            Some(API_NAMES[survivor]),
            "the survivor leads the sequencer after the restart:\n{}",
            d.logs()
        );
    }

    // Every agent finished and holds a chain that verifies under the node CA.
    for a in &agents {
        assert!(
            a.failed.is_none(),
            "agent {} (gateway G{}) failed: {:?}; its errors: {:?}\n{}",
            a.index,
            a.gateway + 1,
            a.failed,
            a.errors,
            d.logs()
        );
        assert_eq!(a.renewals, RENEWALS, "agent {}", a.index);
        verify_chain(&public.node_ca_der, &a.chain)
            .unwrap_or_else(|e| panic!("agent {}'s chain: {e}", a.index));
        let leaf = domain::pki::NodeIdentity::from_leaf_der(&a.chain[0], &public.trust_domain)
            .unwrap_or_else(|e| panic!("agent {}'s leaf: {e}", a.index));
        assert_eq!(Some(leaf.spiffe_id.node.to_string()), a.node_id);
    }
    // Every error is a clean one, and the kill was felt.
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    for a in &agents {
        for e in &a.errors {
            assert!(clean(e), "agent {} saw {e:?}", a.index);
            let kind = format!(
                "{:?} {}{}",
                e.call,
                e.code,
                if e.lost_answer { " (lost answer)" } else { "" }
            );
            *by_kind.entry(kind).or_default() += 1;
        }
    }
    let felt = agents
        .iter()
        .filter(|a| a.gateway == kill.victim && !a.errors.is_empty())
        .count();
    assert!(felt > 0, "no agent of G{} saw the kill", kill.victim + 1);
    let attempts = fleet
        .attempts
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    let in_flight = attempts
        .iter()
        .filter(|c| c.gateway == kill.victim && c.start <= kill.after && c.end >= kill.before)
        .count();
    let failed_calls = |call: Call| attempts.iter().filter(|c| c.call == call && !c.ok).count();
    let calls = format!(
        "{} ({} joins, {} renewals failed)",
        attempts.len(),
        failed_calls(Call::Join),
        failed_calls(Call::Renew)
    );
    for a in agents.iter().filter(|a| !a.lost_joins.is_empty()) {
        assert_eq!(
            a.gateway, kill.victim,
            "agent {} lost a join through the survivor",
            a.index
        );
    }

    // The log, once every writer stopped.
    stop_all(&mut d);
    let events = read_log(&store).await;
    let facts = check_log(&events);
    let checked = cross_check(&facts, &agents);
    assert!(
        checked.lost <= in_flight,
        "{} joins lost their answer, more than the {in_flight} calls in flight at the kill",
        checked.lost
    );
    assert_eq!(checked.held, AGENTS * (1 + RENEWALS));

    // The trail: sealed, then verified from the database.
    let pki = d.pki.display().to_string();
    let mut seal = bcctl(&["audit", "seal", "--all", "--json", "--pki", &pki]);
    seal.args(["--database-url", db.url()])
        .env("BC_DEPLOYMENT_SECRET", SECRET);
    ok(seal);
    let mut verify = bcctl(&[
        "audit", "verify", "--tenant", "default", "--json", "--pki", &pki,
    ]);
    verify.args(["--database-url", db.url()]);
    let verified = ok(verify);

    let joins = agents.iter().filter(|a| a.node_id.is_some()).count();
    let renewals: usize = agents.iter().map(|a| a.renewals).sum();
    let retries: usize = agents.iter().map(|a| a.retries).sum();
    eprintln!(
        "failover summary: agents {AGENTS}, joins {joins} (+{} re-joined after a lost answer), \
         renewals {renewals}, retries {retries}, errors by kind {by_kind:?}, calls {}, in flight \
         at the kill {in_flight}, events checked {} ({} streams, {} node streams, {} \
         certificates), leader before {} ({}), after {}, takeover {}, killed replica listening \
         again {} ms after its restart, agents' run {:.1} s, setup {:.1} s; audit verify: {}",
        checked.lost,
        calls,
        facts.events,
        facts.streams,
        facts.node_streams,
        facts.issued.len(),
        API_NAMES[kill.victim],
        if kill.by_log {
            "by its log line"
        } else {
            "FALLBACK: no leadership line, killed A"
        },
        leader_after.unwrap_or("none logged"),
        match (kill.takeover, kill.survivor_led_already) {
            (_, true) => "none needed (the survivor led already)".to_owned(),
            (Some(t), _) => format!(
                "{} ms after the SIGKILL (polled every 20 ms)",
                t.as_millis()
            ),
            (None, _) => "not logged".to_owned(),
        },
        kill.restarted_in.as_millis(),
        run_time.as_secs_f64(),
        setup.as_secs_f64(),
        verified.trim()
    );
    drop(d);
    drop(db);
}
