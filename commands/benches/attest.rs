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
//!    (`--for-node`), a new key and its product UUID;
//! 4. **discovery** (issue 20): `joins` fresh ramdisks join, each with its own discovery token
//!    (minted by the site agent's BootToken for its own boot entry) and the site agent's signed
//!    assertion for its MAC, the site agent holding the boot lease;
//! 5. **cloud-iid** (issue 20): `joins` fresh instances of a registered GCP project join, each with
//!    an RS256 identity token for its own instance id, verified against the configured JWKS.
//!
//! A first round warms the database up and is not counted. Only the joins are timed: keys, CSRs,
//! sealing, evidence, boot entries, discovery tokens, assertions and identity tokens are made
//! before the clock starts. Each join is checked to admit the expected node. Every figure is the
//! median of the rounds; the ratios are the median of each round's own ratio (paired).
//!
//! Run: `DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench -p commands --bench attest`
//! (`ATTEST_BENCH_JOINS` joins of each kind per round, default 400; `ATTEST_BENCH_CALLERS`, 16;
//! `ATTEST_BENCH_ROUNDS`, 3; `ATTEST_BENCH_BACKENDS`, `postgres,sqlite`; `ATTEST_BENCH_KINDS`, the
//! joins after the token joins, `x509pop,provisioned,discovery,cloud-iid`).

use std::sync::Arc;
use std::time::Instant;

use commands::attest::{CloudAccounts, NewCloudAccount};
use commands::identity::{
    AttestorRegistry, IdentityConfig, JoinAnswer, JoinRequest, JoinService, NewToken,
};
use commands::site::{
    BootEntries, LeaseAction, NewBootEntry, NewSite, SiteAgent, SiteSettings, Sites,
};
use commands::{Clock, SimClock};
use domain::attest::cloud_iid::{CloudIidAttestor, CloudIidConfig, CloudIidEvidence, GcpConfig};
use domain::attest::discovery::{DiscoveryAssertion, SignedDiscoveryAssertion};
use domain::attest::x509pop::build_evidence;
use domain::identity::{ExpectBinding, HardwareClaims, JoinInput, TokenRole};
use domain::pki::{
    build_csr, seal_token, KeyRole, KeySet, KeySetLifetimes, NodeId, PrivateKey, TokenSecret,
    TrustDomain,
};
use domain::site::{SiteCall, SiteCallProof, SiteCallStatement};
use events::store::testkit::TestDb;
use events::store::EventStore;

// The cloud of the cloud-iid tests (an RSA key, its JWKS, RS256 tokens), shared with the tests.
#[path = "../../domain/tests/cloud_iid_support.rs"]
mod cloud_iid_support;

/// The audience the bench's GCP identity tokens name.
const AUDIENCE: &str = "https://bench.example.com";

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
                report: Default::default(),
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

/// The site, its agent (joined with a site token, holding the boot lease) and its calls: what
/// a discovery round needs before the clock starts.
struct SiteFixture {
    agent: Agent,
    node_id: String,
    leaf: Vec<u8>,
    calls: SiteAgent,
    boots: BootEntries,
    epoch: u64,
}

async fn site_fixture(
    svc: &Arc<JoinService>,
    store: &EventStore,
    keys: &KeySet,
    clock: &SimClock,
) -> SiteFixture {
    let clock_arc: Arc<SimClock> = Arc::new(clock.clone());
    Sites::new(store.clone(), clock_arc.clone())
        .create(&NewSite {
            site_id: "site-1".into(),
            tenant_id: "bench".into(),
            description: String::new(),
            default_pool_id: Some("pool-1".into()),
            actor: "bench".into(),
        })
        .await
        .expect("site");
    let created = svc
        .create_token(&new_token(TokenRole::Site, 1, None))
        .await
        .expect("site token");
    let secret = TokenSecret::parse(&created.secret).expect("secret");
    let agent = Agent::new(uuid::Uuid::new_v4().to_string());
    let mut req = agent.request("", agent.seal(keys, &secret), Vec::new());
    req.input.role = "site".into();
    let joined = svc.join(&req).await.expect("the site agent joins");
    let leaf = joined.certificate_chain[0].clone();
    let calls = SiteAgent::new(
        store.clone(),
        clock_arc.clone(),
        TrustDomain::new("bench.example.com").expect("td"),
        SiteSettings {
            boot_lease_ttl: std::time::Duration::from_secs(3600),
        },
    );
    let (client_time_ms, signature) = site_call_proof(
        &agent.key,
        &joined.node_id,
        SiteCall::LeaseAcquire,
        clock_arc.now_us() / 1000,
    );
    let proof = SiteCallProof {
        client_time_ms,
        signature: &signature,
    };
    let lease = calls
        .lease(&leaf, LeaseAction::Acquire, 0, proof)
        .await
        .expect("the lease");
    SiteFixture {
        agent,
        node_id: joined.node_id,
        leaf,
        calls,
        boots: BootEntries::new(store.clone(), clock_arc),
        epoch: lease.epoch,
    }
}

/// The site agent's proof of `call` at `at_ms` (issue 40: SiteLease and BootToken carry one).
fn site_call_proof(key: &PrivateKey, node_id: &str, call: SiteCall, at_ms: i64) -> (i64, Vec<u8>) {
    let statement = SiteCallStatement {
        node_id: NodeId::new(node_id).expect("node id"),
        call,
        client_time_ms: u64::try_from(at_ms).expect("time"),
    };
    let signature = domain::pki::statement::sign(key, &statement).expect("sign");
    (at_ms, signature.as_bytes().to_vec())
}

/// Step 4: fresh ramdisks join by discovery, one boot entry, token and assertion each.
async fn discovery_round(
    svc: &Arc<JoinService>,
    keys: &KeySet,
    clock: &SimClock,
    site: &SiteFixture,
    joins: usize,
    callers: usize,
) -> f64 {
    let mut work: Vec<Vec<(Agent, JoinRequest)>> = (0..callers).map(|_| Vec::new()).collect();
    for i in 0..joins {
        let id = uuid::Uuid::new_v4();
        let b = id.as_bytes();
        let mac = format!(
            "02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4]
        );
        let entry = site
            .boots
            .add(&NewBootEntry {
                site_id: "site-1".into(),
                mac: mac.clone(),
                product_uuid: None,
                kernel_url: "http://boot.example/vmlinuz".into(),
                initrd_url: "http://boot.example/initrd".into(),
                kernel_args: String::new(),
                pool_id: None,
                expires_in_us: None,
                replace: false,
                actor: "bench".into(),
            })
            .await
            .expect("boot entry");
        let (client_time_ms, signature) = site_call_proof(
            &site.agent.key,
            &site.node_id,
            SiteCall::boot_token(&mac, site.epoch),
            clock.now_us() / 1000,
        );
        let proof = SiteCallProof {
            client_time_ms,
            signature: &signature,
        };
        let boot = site
            .calls
            .boot_token(&site.leaf, &mac, site.epoch, proof)
            .await
            .expect("boot token");
        let now_ms = clock.now_us() / 1000;
        let assertion = DiscoveryAssertion {
            site_id: "site-1".into(),
            signer_node_id: site.node_id.clone(),
            lease_epoch: site.epoch,
            mac: mac.clone(),
            workflow_id: entry.entry_id,
            issued_at_ms: now_ms,
            not_after_ms: now_ms + 10 * 60 * 1000,
            ..DiscoveryAssertion::default()
        };
        let signed = SignedDiscoveryAssertion::sign(&assertion, site.leaf.clone(), &site.agent.key)
            .expect("assertion");
        let secret = TokenSecret::parse(&boot.token).expect("secret");
        let ramdisk = Agent::new(id.to_string());
        let mut req = ramdisk.request("discovery", ramdisk.seal(keys, &secret), signed.to_bytes());
        req.input.role = "ramdisk".into();
        req.input.claims.macs = vec![mac];
        work[i % callers].push((ramdisk, req));
    }
    let (rate, done) = timed(svc, work).await;
    assert!(done.iter().all(|(_, a)| a.role == "ramdisk"));
    rate
}

/// Registers the bench's GCP project and returns the JoinService running cloud-iid.
async fn cloud_service(
    svc: &Arc<JoinService>,
    store: &EventStore,
    clock: &SimClock,
) -> Arc<JoinService> {
    CloudAccounts::new(store.clone(), Arc::new(clock.clone()))
        .add(&NewCloudAccount {
            provider: "gcp".into(),
            account: "bench-project".into(),
            tenant_id: "bench".into(),
            site_id: "site-1".into(),
            pool_id: "pool-1".into(),
            role: "node".into(),
            actor: "bench".into(),
        })
        .await
        .expect("cloud account");
    let config = CloudIidConfig {
        max_age: std::time::Duration::from_secs(600),
        gcp: Some(GcpConfig {
            jwks: cloud_iid_support::key().jwks(),
            audience: AUDIENCE.into(),
        }),
        ..CloudIidConfig::default()
    };
    let mut registry = AttestorRegistry::builtin();
    registry.register_in_process(Arc::new(CloudIidAttestor::new(config).expect("cloud-iid")));
    Arc::new(svc.as_ref().clone().with_attestors(registry))
}

/// Step 5: fresh instances of the registered project join by cloud-iid, one token each.
async fn cloud_round(
    svc: &Arc<JoinService>,
    clock: &SimClock,
    joins: usize,
    callers: usize,
) -> f64 {
    let mut work: Vec<Vec<(Agent, JoinRequest)>> = (0..callers).map(|_| Vec::new()).collect();
    let iat = clock.now().unix_timestamp();
    for i in 0..joins {
        let instance = uuid::Uuid::new_v4().as_u128().to_string();
        let claims = cloud_iid_support::gcp_claims(AUDIENCE, "bench-project", &instance, iat);
        let evidence = CloudIidEvidence {
            provider: "gcp".into(),
            document: cloud_iid_support::key().jwt(&claims),
            signature: None,
        };
        let agent = Agent::new(instance);
        let req = agent.request(
            "cloud-iid",
            Vec::new(),
            serde_json::to_vec(&evidence).expect("evidence"),
        );
        work[i % callers].push((agent, req));
    }
    let (rate, _) = timed(svc, work).await;
    rate
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
    discovery: bool,
    cloud_iid: bool,
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
            store.clone(),
            keys.clone(),
            Arc::new(clock.clone()),
            IdentityConfig::new(td),
        )
        .expect("svc"),
    );
    let per_caller = (joins / callers).max(1);
    let site = if kinds.discovery {
        Some(site_fixture(&svc, &store, &keys, &clock).await)
    } else {
        None
    };
    let cloud = if kinds.cloud_iid {
        Some(cloud_service(&svc, &store, &clock).await)
    } else {
        None
    };
    let (mut token, mut x509, mut prov) = (vec![], vec![], vec![]);
    let (mut x509_ratio, mut prov_ratio) = (vec![], vec![]);
    let (mut disc, mut disc_ratio, mut iid, mut iid_ratio) = (vec![], vec![], vec![], vec![]);
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
        if let Some(site) = &site {
            let d = discovery_round(&svc, &keys, &clock, site, callers * per_caller, callers).await;
            disc.push(d);
            disc_ratio.push(d / t);
        }
        if let Some(cloud) = &cloud {
            let c = cloud_round(cloud, &clock, callers * per_caller, callers).await;
            iid.push(c);
            iid_ratio.push(c / t);
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
        "{name:<8} callers {callers:>2}: token joins {:>7.0}/s{}{}{}{}  [{} joins of each kind per round, {rounds} rounds]",
        median(token),
        rate(&x509, &x509_ratio, "x509pop re-joins"),
        rate(&prov, &prov_ratio, "provisioned joins"),
        rate(&disc, &disc_ratio, "discovery joins"),
        rate(&iid, &iid_ratio, "cloud-iid joins"),
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
    let listed = std::env::var("ATTEST_BENCH_KINDS")
        .unwrap_or_else(|_| "x509pop,provisioned,discovery,cloud-iid".into());
    let has = |kind: &str| listed.split(',').any(|k| k.trim() == kind);
    let kinds = Kinds {
        x509pop: has("x509pop"),
        provisioned: has("provisioned"),
        discovery: has("discovery"),
        cloud_iid: has("cloud-iid"),
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
