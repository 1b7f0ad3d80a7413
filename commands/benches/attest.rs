//! Joins per second by attestor (issue 18), through the real `JoinService::join` on Postgres and
//! SQLite, in one run: token joins (`join-token`), x509pop re-joins and provisioned joins, each
//! next to the token joins of the same round (the ratio is the figure to compare: the host's
//! load moves the absolute rates).
//!
//! A round, on each backend, with `callers` concurrent callers:
//!
//! 1. **token**: `joins` fresh agents join with tokens (one token per caller, a use per join),
//!    each claiming its own product UUID;
//! 2. **x509pop**: every node of step 1 re-joins as itself with a new key and CSR, its evidence
//!    built from its certificate and key (`domain::attest::x509pop::build_evidence`);
//! 3. **provisioned**: every node re-joins with a single-use `provisioned` token minted for it
//!    (`--for-node`), a new key and its product UUID.
//!
//! A first round warms the database up and is not counted. Only the joins are timed: keys, CSRs, sealing, evidence and the provisioned tokens are made
//! before the clock starts. Each join is checked to admit the expected node. Every figure is the
//! median of the rounds; the ratios are the median of each round's own ratio (paired).
//!
//! Run: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench -p commands --bench attest`
//! (`ATTEST_BENCH_JOINS` joins of each kind per round, default 400; `ATTEST_BENCH_CALLERS`, 16;
//! `ATTEST_BENCH_ROUNDS`, 3; `ATTEST_BENCH_BACKENDS`, `postgres,sqlite`; `ATTEST_BENCH_KINDS`, the
//! re-joins after the token joins, `x509pop,provisioned`).

use std::sync::Arc;
use std::time::Instant;

use commands::identity::{IdentityConfig, JoinAnswer, JoinRequest, JoinService, NewToken};
use commands::{Clock, SimClock};
use domain::attest::x509pop::build_evidence;
use domain::identity::{ExpectBinding, HardwareClaims, JoinInput, TokenRole};
use domain::pki::{
    build_csr, seal_token, KeyRole, KeySet, KeySetLifetimes, NodeId, PrivateKey, TokenSecret,
    TrustDomain,
};
use events::store::testkit::TestDb;
use events::store::EventStore;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// A machine: its current key and CSR, and its product UUID.
struct Agent {
    key: PrivateKey,
    csr: Vec<u8>,
    product_uuid: String,
}

impl Agent {
    fn new(product_uuid: String) -> Agent {
        let key = PrivateKey::generate(KeyRole::Node).expect("key");
        let csr = build_csr(&key).expect("csr");
        Agent {
            key,
            csr,
            product_uuid,
        }
    }
    fn csr_sha256(&self) -> [u8; 32] {
        domain::identity::sha256(&self.csr)
    }
    fn claims(&self) -> HardwareClaims {
        HardwareClaims {
            product_uuid: Some(self.product_uuid.clone()),
            ..HardwareClaims::default()
        }
    }
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
    fn request(&self, attestor: &str, sealed_token: Vec<u8>, attestation: Vec<u8>) -> JoinRequest {
        JoinRequest {
            attestor: attestor.into(),
            input: JoinInput {
                csr_der: self.csr.clone(),
                sealed_token,
                role: "node".into(),
                claims: self.claims(),
                attestation,
            },
        }
    }
}

/// A joined node: the agent that holds it and its certificate.
struct Node {
    agent: Agent,
    node_id: String,
    leaf: Vec<u8>,
}

/// A token of `role` for `uses` joins, minted for `for_node` when given.
fn new_token(role: TokenRole, uses: u32, for_node: Option<&str>) -> NewToken {
    NewToken {
        tenant_id: "bench".into(),
        site_id: "site-1".into(),
        pool_id: "pool-1".into(),
        role,
        uses,
        ttl_seconds: 86_400,
        expect: ExpectBinding::default(),
        allow_reclaim: false,
        reclaim_node_id: None,
        for_node_id: for_node.map(str::to_owned),
        require_approval: false,
    }
}

/// Runs the prepared joins, `work[i]` on caller `i`, all at once. Returns joins per second and
/// each join's agent and answer, in order.
async fn timed(
    svc: &Arc<JoinService>,
    work: Vec<Vec<(Agent, JoinRequest)>>,
) -> (f64, Vec<(Agent, JoinAnswer)>) {
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for reqs in work {
        let svc = svc.clone();
        tasks.spawn(async move {
            let mut out = Vec::new();
            for (agent, req) in reqs {
                let answer = svc.join(&req).await.expect("join admitted");
                out.push((agent, answer));
            }
            out
        });
    }
    let mut done = Vec::new();
    while let Some(r) = tasks.join_next().await {
        done.extend(r.expect("task"));
    }
    (done.len() as f64 / start.elapsed().as_secs_f64(), done)
}

/// Step 1: fresh agents join with tokens.
async fn token_round(
    svc: &Arc<JoinService>,
    keys: &KeySet,
    callers: usize,
    per_caller: usize,
) -> (f64, Vec<Node>) {
    let mut work = Vec::new();
    for _ in 0..callers {
        let uses = u32::try_from(per_caller).expect("uses");
        let created = svc
            .create_token(&new_token(TokenRole::Node, uses, None))
            .await
            .expect("token");
        let secret = TokenSecret::parse(&created.secret).expect("secret");
        let reqs = (0..per_caller)
            .map(|_| {
                let agent = Agent::new(uuid::Uuid::new_v4().to_string());
                let req = agent.request("", agent.seal(keys, &secret), Vec::new());
                (agent, req)
            })
            .collect();
        work.push(reqs);
    }
    let (rate, done) = timed(svc, work).await;
    let nodes = done
        .into_iter()
        .map(|(agent, a)| Node {
            agent,
            node_id: a.node_id,
            leaf: a.certificate_chain.first().cloned().expect("leaf"),
        })
        .collect();
    (rate, nodes)
}

/// Step 2: every node re-joins by x509pop with a new key.
async fn x509pop_round(
    svc: &Arc<JoinService>,
    keys: &KeySet,
    clock: &SimClock,
    nodes: Vec<Node>,
    callers: usize,
) -> (f64, Vec<Node>) {
    let now_ms = u64::try_from(clock.now_us() / 1000).expect("time");
    let ca = keys.node_ca.cert_der().to_vec();
    let mut work: Vec<Vec<(Agent, JoinRequest)>> = (0..callers).map(|_| Vec::new()).collect();
    let mut expect = Vec::new();
    for (i, node) in nodes.into_iter().enumerate() {
        let next = Agent::new(node.agent.product_uuid.clone());
        let id = NodeId::new(&node.node_id).expect("node id");
        let chain = [node.leaf, ca.clone()];
        let evidence = build_evidence(&chain, &node.agent.key, &next.csr_sha256(), &id, now_ms)
            .expect("evidence");
        let req = next.request("x509pop", Vec::new(), evidence);
        expect.push(node.node_id);
        work[i % callers].push((next, req));
    }
    finish(svc, work, expect).await
}

/// Step 3: every node re-joins with a provisioned token minted for it.
async fn provisioned_round(
    svc: &Arc<JoinService>,
    keys: &KeySet,
    nodes: Vec<Node>,
    callers: usize,
) -> (f64, Vec<Node>) {
    let mut work: Vec<Vec<(Agent, JoinRequest)>> = (0..callers).map(|_| Vec::new()).collect();
    let mut expect = Vec::new();
    for (i, node) in nodes.into_iter().enumerate() {
        let token = new_token(TokenRole::Provisioned, 1, Some(&node.node_id));
        let created = svc.create_token(&token).await.expect("provisioned token");
        let secret = TokenSecret::parse(&created.secret).expect("secret");
        let next = Agent::new(node.agent.product_uuid.clone());
        let req = next.request("provisioned", next.seal(keys, &secret), Vec::new());
        expect.push(node.node_id);
        work[i % callers].push((next, req));
    }
    finish(svc, work, expect).await
}

/// Times the re-joins and checks that each kept its node id.
async fn finish(
    svc: &Arc<JoinService>,
    work: Vec<Vec<(Agent, JoinRequest)>>,
    expect: Vec<String>,
) -> (f64, Vec<Node>) {
    let (rate, done) = timed(svc, work).await;
    let mut expect = expect;
    expect.sort();
    let mut got: Vec<String> = done.iter().map(|(_, a)| a.node_id.clone()).collect();
    got.sort();
    assert_eq!(got, expect, "every re-join keeps its node id");
    let nodes = done
        .into_iter()
        .map(|(agent, a)| Node {
            agent,
            node_id: a.node_id,
            leaf: a.certificate_chain.first().cloned().expect("leaf"),
        })
        .collect();
    (rate, nodes)
}

/// Which re-joins a round runs after its token joins.
#[derive(Clone, Copy)]
struct Kinds {
    x509pop: bool,
    provisioned: bool,
}

/// The rounds on one backend; prints one line.
async fn bench(
    name: &str,
    store: EventStore,
    joins: usize,
    callers: usize,
    rounds: usize,
    kinds: Kinds,
) {
    let clock = SimClock::new();
    let td = TrustDomain::new("bench.example.com").expect("td");
    let keys = Arc::new(
        KeySet::generate(td.clone(), clock.now(), KeySetLifetimes::default()).expect("keys"),
    );
    let svc = Arc::new(
        JoinService::new(
            store,
            keys.clone(),
            Arc::new(clock.clone()),
            IdentityConfig::new(td),
        )
        .expect("svc"),
    );
    let per_caller = (joins / callers).max(1);
    let (mut token, mut x509, mut prov) = (vec![], vec![], vec![]);
    let (mut x509_ratio, mut prov_ratio) = (vec![], vec![]);
    // A warm-up round, not counted: the first joins on a fresh database (its caches, the WAL,
    // the connection pool) would otherwise weigh on the first token round only.
    let (_, nodes) = token_round(&svc, &keys, callers, per_caller).await;
    if kinds.x509pop {
        x509pop_round(&svc, &keys, &clock, nodes, callers).await;
    }
    for _ in 0..rounds {
        let (t, mut nodes) = token_round(&svc, &keys, callers, per_caller).await;
        token.push(t);
        if kinds.x509pop {
            let (x, rejoined) = x509pop_round(&svc, &keys, &clock, nodes, callers).await;
            nodes = rejoined;
            x509.push(x);
            x509_ratio.push(x / t);
        }
        if kinds.provisioned {
            let (p, _) = provisioned_round(&svc, &keys, nodes, callers).await;
            prov.push(p);
            prov_ratio.push(p / t);
        }
        clock.advance_secs(1);
    }
    let rate = |v: &[f64], ratios: &[f64], what: &str| {
        if v.is_empty() {
            String::new()
        } else {
            format!(
                "  {what} {:>7.0}/s ({:.2}× token)",
                median(v.to_vec()),
                median(ratios.to_vec())
            )
        }
    };
    println!(
        "{name:<8} callers {callers:>2}: token joins {:>7.0}/s{}{}  [{} joins of each kind per round, {rounds} rounds]",
        median(token),
        rate(&x509, &x509_ratio, "x509pop re-joins"),
        rate(&prov, &prov_ratio, "provisioned joins"),
        callers * per_caller,
    );
}

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
    let joins = env_usize("ATTEST_BENCH_JOINS", 400);
    let callers = env_usize("ATTEST_BENCH_CALLERS", 16).max(1);
    let rounds = env_usize("ATTEST_BENCH_ROUNDS", 3).max(1);
    let backends =
        std::env::var("ATTEST_BENCH_BACKENDS").unwrap_or_else(|_| "postgres,sqlite".into());
    let listed =
        std::env::var("ATTEST_BENCH_KINDS").unwrap_or_else(|_| "x509pop,provisioned".into());
    let kinds = Kinds {
        x509pop: listed.split(',').any(|k| k.trim() == "x509pop"),
        provisioned: listed.split(',').any(|k| k.trim() == "provisioned"),
    };
    println!("attest benchmark: joins per second by attestor, medians of {rounds} rounds");
    for backend in backends.split(',').map(str::trim) {
        match backend {
            "postgres" => {
                let db = TestDb::postgres().await.expect("postgres (DATABASE_URL)");
                let pg = db.pg_store(40).await.expect("store");
                bench(
                    "postgres",
                    EventStore::Postgres(pg),
                    joins,
                    callers,
                    rounds,
                    kinds,
                )
                .await;
            }
            "sqlite" => {
                let db = TestDb::sqlite().expect("sqlite");
                let store = db.store().await.expect("store");
                bench("sqlite", store, joins, callers, rounds, kinds).await;
            }
            other => panic!("unknown backend {other:?} (postgres, sqlite)"),
        }
    }
}
