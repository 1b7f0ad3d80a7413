//! Identity benchmark (issue 3), on Postgres:
//!
//! 1. token joins per second and renewals per second through the command layer
//!    (`JoinService::join` / `renew`: open the sealed token, check the CSR, decide, sign the
//!    certificate, append, project, commit; then the one JoinResponse signature the edge adds,
//!    `gateway::wire`, made here by the same `domain::pki::statement::sign` over bytes of the
//!    body's size, so the figure still counts it) at 1 and 16 concurrent callers,
//!    next to the raw commit rate measured in the same run (a single-row `INSERT` + `COMMIT`,
//!    `projections::identity::reference::raw_commit`, at the same concurrency). Agent-side work (key generation, CSR, sealing the
//!    token, the renew proof) is done before the clock starts; server-side signatures are
//!    included.
//! 2. a rebuild of every projection (`commands::every_projection`, what `bcctl rebuild` rebuilds:
//!    identity, quorum, audit checkpoints) from a 1,000,000-event log, next to a raw read of the
//!    same events without projecting. The log: the real joins and renewals of part 1, then
//!    synthetic but valid identity events appended through the store in large transactions
//!    (per node: `node.joined`, `node.certificate.issued`, 2 × (`node.renew_proof.used`,
//!    `node.certificate.issued`) with a real certificate's DER, its `token.used`, one
//!    `security.join.refused`; a `token.created` per 100 nodes), 1,000 nodes per transaction,
//!    projected inline in that transaction (one bulk `apply_all` over its events in log order),
//!    until 1,000,000 events. After the rebuilds the tables' digest must equal the inline one.
//!
//! Run: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench -p commands --bench identity`
//! (`IDENTITY_BENCH_EVENTS` changes the log size, `IDENTITY_BENCH_JOINS` the joins per round).

use std::sync::Arc;
use std::time::{Duration, Instant};

use commands::identity::{IdentityConfig, JoinRequest, JoinService, NewToken};
use commands::{Clock, SimClock};
use domain::identity::{
    open_join, HardwareClaims, JoinCommand, JoinContext, JoinInput, JoinState, RenewInput,
    TokenState,
};
use domain::identity::{ExpectBinding, TokenRole};

#[path = "support/token_join.rs"]
mod token_join;
use token_join::token_join;

use domain::pki::statement::{sign, JoinResponseStatement, RenewPop};
use domain::pki::{
    build_csr, seal_token, KeyRole, KeySet, KeySetLifetimes, NodeId, PrivateKey, Serial,
    TokenSecret, TrustDomain,
};
use events::schema::{
    JoinRefused, JoinTokenCreated, JoinTokenUsed, NodeCertificateIssued, NodeJoined, RenewProofUsed,
};
use events::store::testkit::TestDb;
use events::store::{EventStore, ExpectedVersion, LogStore, LogTx};
use events::{new_event_id, NewEvent};
use projections::identity::reference;

const ROUNDS: usize = 3;

/// Bytes the size of an encoded JoinResponse with this chain (the encoding is the edge's,
/// `gateway::wire`; its cost beside the signature is a copy).
fn stand_in_body(chain: &[Vec<u8>]) -> Vec<u8> {
    let mut body = vec![0u8; 160];
    for der in chain {
        body.extend_from_slice(der);
    }
    body
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Agent {
    key: PrivateKey,
    csr: Vec<u8>,
}

impl Agent {
    fn new() -> Agent {
        let key = PrivateKey::generate(KeyRole::Node).expect("key");
        let csr = build_csr(&key).expect("csr");
        Agent { key, csr }
    }
    fn csr_sha256(&self) -> [u8; 32] {
        domain::identity::sha256(&self.csr)
    }
    /// `secret` sealed to the JoinService encryption key for this agent's CSR.
    fn seal(&self, keys: &KeySet, secret: &TokenSecret) -> Vec<u8> {
        seal_token(
            keys.join_encryption.public_key(),
            secret,
            &self.csr_sha256(),
        )
        .expect("seal")
        .as_bytes()
        .to_vec()
    }
}

struct Joined {
    agent: Agent,
    node_id: String,
    leaf: Vec<u8>,
}

/// One round of joins: `callers` tasks, each with its own token and `per_caller` prepared
/// requests. Returns joins per second and the joined nodes.
async fn join_round(
    svc: &Arc<JoinService>,
    keys: &KeySet,
    callers: usize,
    per_caller: usize,
) -> (f64, Vec<Joined>) {
    let mut work = Vec::new();
    for _ in 0..callers {
        let created = svc
            .create_token(&NewToken {
                tenant_id: "bench".into(),
                site_id: "site-1".into(),
                pool_id: "pool-1".into(),
                role: TokenRole::Node,
                uses: u32::try_from(per_caller).expect("uses"),
                ttl_seconds: 86_400,
                expect: ExpectBinding::default(),
                allow_reclaim: false,
                reclaim_node_id: None,
                for_node_id: None,
                require_approval: false,
            })
            .await
            .expect("token");
        let secret = TokenSecret::parse(&created.secret).expect("secret");
        let mut reqs = Vec::new();
        for _ in 0..per_caller {
            let agent = Agent::new();
            let req = JoinRequest {
                attestor: String::new(),
                input: JoinInput {
                    csr_der: agent.csr.clone(),
                    sealed_token: agent.seal(keys, &secret),
                    role: "node".into(),
                    claims: HardwareClaims::default(),
                    attestation: Vec::new(),
                    report: Default::default(),
                },
            };
            reqs.push((agent, req));
        }
        work.push(reqs);
    }
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for reqs in work {
        let svc = svc.clone();
        tasks.spawn(async move {
            let mut out = Vec::new();
            for (agent, req) in reqs {
                let body = svc.join(&req).await.expect("join");
                let signature = sign(
                    &svc.joins().keys().join_signing,
                    &JoinResponseStatement {
                        csr_sha256: body.csr_sha256,
                        response: &stand_in_body(&body.certificate_chain),
                    },
                )
                .expect("sign");
                std::hint::black_box(signature);
                let leaf = body.certificate_chain.first().cloned().expect("leaf");
                out.push(Joined {
                    agent,
                    node_id: body.node_id,
                    leaf,
                });
            }
            out
        });
    }
    let mut joined = Vec::new();
    while let Some(r) = tasks.join_next().await {
        joined.extend(r.expect("task"));
    }
    let elapsed = start.elapsed();
    (joined.len() as f64 / elapsed.as_secs_f64(), joined)
}

/// A join's own CPU, with no database at all: open the sealed token (ECDH, AES-GCM), verify the
/// CSR, decide (which signs the certificate), sign the JoinResponse. `n` prepared requests on
/// this thread. Returns joins per second of one core: the ceiling our side puts on joins, next
/// to the database's share measured by `benchmarks/sql/join_floor.sh`.
fn cpu_only_joins(keys: &KeySet, n: usize) -> f64 {
    let secret = TokenSecret::generate().expect("secret");
    let token = TokenState {
        token_id: "tok_cpu".into(),
        tenant_id: "bench".into(),
        site_id: "site-1".into(),
        pool_id: "pool-1".into(),
        role: TokenRole::Node,
        uses_total: u32::MAX,
        uses_left: u32::MAX,
        expires_at_us: i64::MAX,
        secret_hash: secret.hash(),
        expect: ExpectBinding::default(),
        allow_reclaim: false,
        reclaim_node_id: None,
        for_node_id: None,
        require_approval: false,
        revoked: false,
    };
    let inputs: Vec<JoinInput> = (0..n)
        .map(|_| {
            let agent = Agent::new();
            JoinInput {
                sealed_token: agent.seal(keys, &secret),
                csr_der: agent.csr,
                role: "node".into(),
                claims: HardwareClaims::default(),
                attestation: Vec::new(),
                report: Default::default(),
            }
        })
        .collect();
    let ctx = JoinContext {
        trust_domain: &keys.trust_domain,
        node_ca: &keys.node_ca,
        join_encryption: &keys.join_encryption,
        leaf_lifetime: time::Duration::hours(24),
        ramdisk_lifetime: time::Duration::hours(2),
    };
    let state = JoinState {
        token: Some(token),
        ..JoinState::default()
    };
    let now = time::OffsetDateTime::now_utc();
    let start = Instant::now();
    for input in &inputs {
        let opened = open_join(&ctx, input).expect("opens");
        let csr_sha256 = *opened.csr.sha256();
        let cmd = JoinCommand {
            opened,
            new_node_id: NodeId::new(&format!("node_{}", uuid::Uuid::new_v4().simple()))
                .expect("node id"),
            serial: Serial::generate().expect("serial"),
        };
        let der = token_join(&ctx, &cmd, &state, now)
            .expect("joins")
            .outcome
            .certificate_der;
        let mut chain = vec![der, keys.node_ca.cert_der().to_vec()];
        chain.push(keys.root_ca.cert_der().to_vec());
        let body = stand_in_body(&chain);
        let signature = sign(
            &keys.join_signing,
            &JoinResponseStatement {
                csr_sha256,
                response: &body,
            },
        )
        .expect("sign");
        std::hint::black_box(signature);
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// One round of renewals of `nodes`, spread over `callers` tasks. Returns renewals per second.
async fn renew_round(
    svc: &Arc<JoinService>,
    clock: &SimClock,
    nodes: Vec<Joined>,
    callers: usize,
) -> f64 {
    let now_ms = clock.now_us() / 1000;
    let mut work: Vec<Vec<RenewInput>> = (0..callers).map(|_| Vec::new()).collect();
    let n = nodes.len();
    for (i, node) in nodes.into_iter().enumerate() {
        let next = Agent::new();
        let pop = RenewPop {
            csr_sha256: next.csr_sha256(),
            node_id: NodeId::new(&node.node_id).expect("node id"),
            client_time_ms: u64::try_from(now_ms).expect("time"),
        };
        let sig = sign(&node.agent.key, &pop).expect("pop");
        work[i % callers].push(RenewInput {
            csr_der: next.csr,
            chain: vec![node.leaf],
            client_time_ms: u64::try_from(now_ms).expect("time"),
            signature: sig.as_bytes().to_vec(),
            key_attestation: None,
        });
    }
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for reqs in work {
        let svc = svc.clone();
        tasks.spawn(async move {
            for req in reqs {
                svc.renew(&req).await.expect("renew");
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("task");
    }
    n as f64 / start.elapsed().as_secs_f64()
}

/// Raw commit rate: `callers` tasks each doing single-row INSERT + COMMIT, `total` in all.
async fn raw_commits(store: &EventStore, callers: usize, total: usize) -> f64 {
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..callers {
        let store = store.clone();
        let n = total / callers;
        tasks.spawn(async move {
            for i in 0..n {
                reference::raw_commit(&store, vec![i as u8; 64])
                    .await
                    .expect("insert and commit");
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("task");
    }
    (total / callers * callers) as f64 / start.elapsed().as_secs_f64()
}

/// Appends synthetic but valid identity events until the log holds `target` events.
async fn fill_log(store: &EventStore, target: i64, der: &[u8], start_us: i64) -> i64 {
    let mut head = store.head_position().await.expect("head");
    let bar = indicatif::ProgressBar::new(u64::try_from(target).unwrap_or(0));
    bar.set_message("generating the log");
    let mut node = 0u64;
    let mut serial = 0u64;
    let now = start_us;
    while head < target {
        let mut tx = store.begin().await.expect("begin");
        let mut recorded = Vec::new();
        // 100 nodes sharing one token per chunk.
        for _ in 0..10 {
            let token_id = format!("tok_syn_{node:012}");
            let mut token_events = vec![NewEvent::from_payload(
                new_event_id(),
                "syn",
                now,
                &JoinTokenCreated {
                    token_id: token_id.clone(),
                    tenant_id: "syn".into(),
                    site_id: "site-1".into(),
                    pool_id: "pool-1".into(),
                    role: "node".into(),
                    uses: 100,
                    expires_at_us: now + 86_400_000_000,
                    secret_sha256: domain::identity::sha256(token_id.as_bytes()).to_vec(),
                    ..Default::default()
                },
            )];
            let mut refusals = Vec::new();
            for k in 0..100u32 {
                node += 1;
                let node_id = format!("node_syn_{node:012}");
                token_events.push(NewEvent::from_payload(
                    new_event_id(),
                    "syn",
                    now,
                    &JoinTokenUsed {
                        token_id: token_id.clone(),
                        use_number: k + 1,
                        node_id: node_id.clone(),
                        uses_left: 99 - k,
                        ..Default::default()
                    },
                ));
                let mut evs = vec![NewEvent::from_payload(
                    new_event_id(),
                    "syn",
                    now,
                    &NodeJoined {
                        node_id: node_id.clone(),
                        tenant_id: "syn".into(),
                        site_id: "site-1".into(),
                        pool_id: "pool-1".into(),
                        role: "node".into(),
                        attestor: "join-token".into(),
                        node_key: "unattested".into(),
                        token_id: token_id.clone(),
                        identity_generation: 1,
                        ..Default::default()
                    },
                )];
                for r in 0..3 {
                    if r > 0 {
                        let mut subject = [0u8; 32];
                        subject[..8].copy_from_slice(&serial.to_be_bytes());
                        subject[8] = 0xaa;
                        evs.push(NewEvent::from_payload(
                            new_event_id(),
                            "syn",
                            now,
                            &RenewProofUsed {
                                node_id: node_id.clone(),
                                subject: subject.to_vec(),
                                expires_at_us: now + 120_000_000,
                            },
                        ));
                    }
                    serial += 1;
                    evs.push(NewEvent::from_payload(
                        new_event_id(),
                        "syn",
                        now,
                        &NodeCertificateIssued {
                            node_id: node_id.clone(),
                            serial: format!("{serial:032x}"),
                            der: der.to_vec(),
                            not_before_us: now,
                            not_after_us: now + 86_400_000_000,
                            identity_generation: 1,
                            cause: if r == 0 { "join" } else { "renew" }.into(),
                            ..Default::default()
                        },
                    ));
                }
                let stream = format!("node/{node_id}");
                let appended = tx
                    .append(&stream, ExpectedVersion::NoStream, &evs)
                    .await
                    .expect("append node");
                recorded.extend(appended.recorded(&stream, &evs));
                refusals.push(NewEvent::from_payload(
                    new_event_id(),
                    "root",
                    now,
                    &JoinRefused {
                        refusal: "join-token:unknown-token".into(),
                        attestor: "join-token".into(),
                        window_start_us: now - now.rem_euclid(60_000_000),
                        csr_sha256: vec![7; 32],
                        ..Default::default()
                    },
                ));
            }
            let stream = format!("token/{token_id}");
            let appended = tx
                .append(&stream, ExpectedVersion::NoStream, &token_events)
                .await
                .expect("append token");
            recorded.extend(appended.recorded(&stream, &token_events));
            let appended = tx
                .append("tenant/root", ExpectedVersion::Any, &refusals)
                .await
                .expect("append refusals");
            recorded.extend(appended.recorded("tenant/root", &refusals));
        }
        // Projected inline, in the same transaction, in log order.
        recorded.sort_by_key(|e| e.position);
        projections::apply_all(&projections::identity::all(), &mut tx, &recorded)
            .await
            .expect("project");
        tx.commit().await.expect("commit");
        head = store.head_position().await.expect("head");
        bar.set_position(u64::try_from(head).unwrap_or(0));
    }
    bar.finish_and_clear();
    head
}

async fn rebuild_round(store: &EventStore) -> (f64, Duration, u64) {
    let head = store.head_position().await.expect("head");
    let bar = indicatif::ProgressBar::new(u64::try_from(head).unwrap_or(0));
    let all = commands::every_projection();
    let start = Instant::now();
    let read = projections::rebuild(store, &all, None, 10_000, |p| {
        bar.set_position(u64::try_from(p.position).unwrap_or(0))
    })
    .await
    .expect("rebuild");
    let elapsed = start.elapsed();
    bar.finish_and_clear();
    (read as f64 / elapsed.as_secs_f64(), elapsed, read)
}

async fn raw_read_round(store: &EventStore) -> (f64, Duration) {
    let start = Instant::now();
    let mut pages = store.read_all(0, 10_000);
    let mut n = 0u64;
    let mut bytes = 0usize;
    while let Some(batch) = pages.next_batch().await.expect("read") {
        n += batch.len() as u64;
        bytes += batch.iter().map(|e| e.payload.len()).sum::<usize>();
    }
    let elapsed = start.elapsed();
    assert!(bytes > 0);
    (n as f64 / elapsed.as_secs_f64(), elapsed)
}

/// The allocator bcctl runs with, so that the figures are those of `bcctl rebuild` and `serve`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(run());
}

async fn run() {
    let joins_per_round = env_usize("IDENTITY_BENCH_JOINS", 1600);
    let target_events = env_usize("IDENTITY_BENCH_EVENTS", 1_000_000) as i64;
    let db = TestDb::postgres().await.expect("postgres (DATABASE_URL)");
    let pg = db.pg_store(40).await.expect("store");
    let store = EventStore::Postgres(pg);
    reference::create_raw_commit_table(&store)
        .await
        .expect("raw table");

    let clock = SimClock::new();
    let td = TrustDomain::new("bench.example.com").expect("td");
    let keys = Arc::new(
        KeySet::generate(td.clone(), clock.now(), KeySetLifetimes::default()).expect("keys"),
    );
    let svc = Arc::new(
        JoinService::new(
            store.clone(),
            keys.clone(),
            Arc::new(clock.clone()),
            IdentityConfig::new(td),
        )
        .expect("svc"),
    );

    println!("identity benchmark: Postgres, {ROUNDS} rounds, medians");
    let mut der = Vec::new();
    for callers in [1usize, 16] {
        let per_caller = (joins_per_round / callers).max(1);
        let per_caller = if callers == 1 {
            per_caller / 4
        } else {
            per_caller
        };
        let (mut joins, mut renews, mut raws) = (vec![], vec![], vec![]);
        for _ in 0..ROUNDS {
            let (j, nodes) = join_round(&svc, &keys, callers, per_caller).await;
            if der.is_empty() {
                der = nodes.first().map(|n| n.leaf.clone()).unwrap_or_default();
            }
            let r = renew_round(&svc, &clock, nodes, callers).await;
            let raw = raw_commits(&store, callers, callers * per_caller).await;
            joins.push(j);
            renews.push(r);
            raws.push(raw);
        }
        let (j, r, raw) = (median(joins), median(renews), median(raws));
        println!(
            "callers {callers:>2}: joins {j:>8.0}/s  renewals {r:>8.0}/s  raw INSERT+COMMIT {raw:>8.0}/s  \
             (joins {:.2}× raw, renewals {:.2}× raw; {} ops per round)",
            j / raw,
            r / raw,
            callers * per_caller
        );
    }

    let cpu = median(
        (0..ROUNDS)
            .map(|_| cpu_only_joins(&keys, joins_per_round.max(100)))
            .collect(),
    );
    println!(
        "a join's own CPU, no database (open the token, verify the CSR, decide and sign the \
         certificate, sign the response), one thread: {cpu:>8.0}/s ({:.0} µs each)",
        1e6 / cpu
    );

    let real = store.head_position().await.expect("head");
    let gen_start = Instant::now();
    let head = fill_log(&store, target_events, &der, clock.now_us()).await;
    println!(
        "log: {real} events from the command layer + {} synthetic = {head} (generated in {:.1} s; \
         certificate DER {} bytes)",
        head - real,
        gen_start.elapsed().as_secs_f64(),
        der.len()
    );
    let digest_live = projections::digest_tables(&store, &projections::identity::tables())
        .await
        .expect("digest");
    let (mut rebuilds, mut raws) = (vec![], vec![]);
    let mut last = (Duration::ZERO, 0);
    for _ in 0..ROUNDS {
        let (rate, elapsed, read) = rebuild_round(&store).await;
        rebuilds.push(rate);
        last = (elapsed, read);
        let (raw, _) = raw_read_round(&store).await;
        raws.push(raw);
    }
    let digest_rebuilt = projections::digest_tables(&store, &projections::identity::tables())
        .await
        .expect("digest");
    let (rb, raw) = (median(rebuilds), median(raws));
    println!(
        "rebuild of every projection from {} events: {rb:>9.0} events/s (last {:.2} s)  \
         raw read {raw:>9.0} events/s  ({:.2}× raw); tables after = inline tables: {}",
        last.1,
        last.0.as_secs_f64(),
        rb / raw,
        digest_live == digest_rebuilt
    );
}
