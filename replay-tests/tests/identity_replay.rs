//! Identity replay: random sequences of valid and invalid identity commands (proptest) on both
//! backends, then
//!
//! - at random cut points, the tables the command layer built inline equal (blake3 digest of the
//!   canonical dumps) the tables rebuilt from the log up to that point, and equal what the real
//!   `bcctl replay --at <cut> --json` prints (digest, nodes, certificates, tokens), by position
//!   and by RFC 3339 time;
//! - `bcctl replay` leaves the live tables untouched;
//! - rebuilding every identity projection from the whole log gives byte-identical tables.
//! - pool and TPM allow-list changes are made by an operator's store (`acting_as`), so the log
//!   mixes events with and without actors; each records the actor that made it.
//!
//! The history includes the attestation plane's pools (created, updated, refused) and join
//! requests (recorded as the join's admission step records them, approved, rejected, consumed,
//! expired by maintenance), so `pools` and `join_requests` are held to the same, and the TPM
//! allow-list (EKs allowed, a second active entry refused, revoked, allowed again), so
//! `tpm_ek_allows` is too; and sites (created, a second create refused), boot entries (added,
//! replaced, refused, removed), the boot lease (acquired, renewed, released, lapsed, fenced, by
//! site and node agents) and boot tokens, so `sites`, `boot_entries` and `site_leases` are too.
//! The registry of cloud accounts (added, a second active entry refused, removed, added again)
//! is replayed too, so `cloud_accounts` is held to the same; and ramdisks join by discovery on
//! a site agent's signed assertion (admitted, refused, a second use refused `assertion-reused`),
//! so the assertions' `attestation_uses` and the ramdisk certificates' allowed kinds are too.
//!
//! The binary is found beside the test executable (`target/<profile>/bcctl`) or at `$BCCTL`:
//! build it first with `cargo build -p cli --bin bcctl` (same target dir).

use std::path::PathBuf;
use std::sync::Arc;

use commands::attest::{
    AttestError, CloudAccounts, JoinRequests, NewCloudAccount, NewPool, NewTpmAllow, Pools,
    TpmAllows, BUILTIN_ATTESTORS,
};
use commands::identity::{IdentityConfig, IdentityError, JoinRequest, JoinService, NewToken};
use commands::site::{
    BootEntries, LeaseAction, NewBootEntry, NewSite, SiteAgent, SiteError, SiteSettings, Sites,
};
use commands::{Clock, SimClock};
use domain::attest::discovery::{DiscoveryAssertion, SignedDiscoveryAssertion};
use domain::attest::{AttestorPolicy, UpdatePool};
use domain::identity::IdentityEvent;
use domain::identity::{ExpectBinding, HardwareClaims, JoinInput, RenewInput, TokenRole};
use domain::pki::statement::{sign, RenewPop};
use domain::pki::{
    build_csr, seal_token, KeyRole, KeySet, KeySetLifetimes, NodeId, PrivateKey, TokenSecret,
    TrustDomain,
};
use domain::site::{SiteCall, SiteCallProof, SiteCallStatement};
use events::schema::{JoinRequestConsumed, JoinRequestCreated};
use events::store::testkit::TestDb;
use events::store::LogStore;
use proptest::prelude::*;
use serde_json::Value;

const TD: &str = "replay.example.com";

#[derive(Debug, Clone)]
enum Op {
    CreateToken {
        uses: u32,
        ttl_s: i64,
        site_role: bool,
        reclaim: bool,
    },
    Join {
        token: usize,
        hw: Option<u8>,
    },
    JoinWrongRole {
        token: usize,
    },
    JoinUnknownToken,
    JoinBadCsr {
        token: usize,
    },
    Renew {
        node: usize,
    },
    RenewReplayed {
        node: usize,
    },
    RenewStale {
        node: usize,
    },
    RenewForeignCert {
        node: usize,
    },
    RevokeToken {
        token: usize,
    },
    RevokeIdentity {
        node: usize,
    },
    Delete {
        node: usize,
    },
    Retire {
        node: usize,
    },
    /// `node names set|add|remove` with names of a small pool, so holders collide.
    Names {
        node: usize,
        change: u8,
        name: u8,
        shared: bool,
    },
    RevokeUnknownNode,
    Prune,
    FlushRefusals,
    Advance {
        secs: i64,
    },
    CreatePool {
        policy: u8,
        duplicate: bool,
    },
    UpdatePool {
        pool: usize,
        policy: u8,
        text: bool,
    },
    RequestJoin {
        ttl_s: i64,
    },
    ApproveRequest {
        request: usize,
    },
    RejectRequest {
        request: usize,
    },
    ConsumeRequest {
        request: usize,
    },
    ExpireRequests,
    /// `tpm allow` of one of three EKs (a second active entry for one is refused).
    AllowEk {
        ek: u8,
    },
    /// `tpm revoke` of an entry made (revoked twice: refused).
    RevokeAllow {
        allow: usize,
    },
    /// `site create` of site-1 or site-2 (a second create refused).
    CreateSite {
        second: bool,
    },
    /// `site boot add` at site-1 for one of three MACs (a second active entry refused unless
    /// replaced).
    AddBoot {
        mac: u8,
        replace: bool,
    },
    /// `site boot remove` of an entry made (removed twice: refused).
    RemoveBoot {
        entry: usize,
    },
    /// A node's SiteLease: 0 acquire, 1 renew, 2 release (a node agent's: refused).
    Lease {
        node: usize,
        action: u8,
    },
    /// `site lease fence` of site-1 (a free lease: refused).
    Fence,
    /// A node's BootToken for one of three MACs at the epoch it last saw.
    BootToken {
        node: usize,
        mac: u8,
    },
    /// A commissioning: site-1, a boot entry for one of three MACs and the lease for a node (each
    /// refused when it is there already, or when the node is no site agent), the node's boot
    /// token and signed assertion, then a ramdisk joins by discovery with them (3 of 16 admitted
    /// in a run checked by hand) and, `twice`, a second ramdisk with the same assertion (refused
    /// `assertion-reused`).
    DiscoveryJoin {
        node: usize,
        mac: u8,
        twice: bool,
    },
    /// `cloud account add` of one of three accounts (a second active entry is refused).
    AddCloudAccount {
        account: u8,
    },
    /// `cloud account remove` of an entry made (removed twice: refused).
    RemoveCloudAccount {
        entry: usize,
    },
}

/// The attestor policy `n` picks: any, one built-in, two, or an id nobody runs (refused).
fn pool_policy(n: u8) -> AttestorPolicy {
    let ids: &[&str] = match n % 4 {
        0 => return AttestorPolicy::Any,
        1 => &["x509pop"],
        2 => &["join-token", "provisioned"],
        _ => &["no-such-attestor"],
    };
    AttestorPolicy::Only(ids.iter().map(|s| s.to_string()).collect())
}

fn op() -> impl Strategy<Value = Op> {
    let idx = 0usize..8;
    prop_oneof![
        3 => (1u32..4, 30i64..600, any::<bool>(), any::<bool>()).prop_map(
            |(uses, ttl_s, site_role, reclaim)| Op::CreateToken { uses, ttl_s, site_role, reclaim }
        ),
        6 => (idx.clone(), proptest::option::of(0u8..3)).prop_map(|(token, hw)| Op::Join { token, hw }),
        1 => idx.clone().prop_map(|token| Op::JoinWrongRole { token }),
        1 => Just(Op::JoinUnknownToken),
        1 => idx.clone().prop_map(|token| Op::JoinBadCsr { token }),
        4 => idx.clone().prop_map(|node| Op::Renew { node }),
        1 => idx.clone().prop_map(|node| Op::RenewReplayed { node }),
        1 => idx.clone().prop_map(|node| Op::RenewStale { node }),
        1 => idx.clone().prop_map(|node| Op::RenewForeignCert { node }),
        1 => idx.clone().prop_map(|token| Op::RevokeToken { token }),
        1 => idx.clone().prop_map(|node| Op::RevokeIdentity { node }),
        1 => idx.clone().prop_map(|node| Op::Delete { node }),
        1 => idx.clone().prop_map(|node| Op::Retire { node }),
        2 => (idx.clone(), 0u8..3, 0u8..4, any::<bool>())
            .prop_map(|(node, change, name, shared)| Op::Names { node, change, name, shared }),
        1 => Just(Op::RevokeUnknownNode),
        1 => Just(Op::Prune),
        1 => Just(Op::FlushRefusals),
        2 => (30i64..200).prop_map(|secs| Op::Advance { secs }),
        1 => (any::<u8>(), any::<bool>())
            .prop_map(|(policy, duplicate)| Op::CreatePool { policy, duplicate }),
        1 => (idx.clone(), any::<u8>(), any::<bool>())
            .prop_map(|(pool, policy, text)| Op::UpdatePool { pool, policy, text }),
        3 => (30i64..400).prop_map(|ttl_s| Op::RequestJoin { ttl_s }),
        2 => idx.clone().prop_map(|request| Op::ApproveRequest { request }),
        1 => idx.clone().prop_map(|request| Op::RejectRequest { request }),
        1 => idx.clone().prop_map(|request| Op::ConsumeRequest { request }),
        1 => Just(Op::ExpireRequests),
        2 => (0u8..3).prop_map(|ek| Op::AllowEk { ek }),
        1 => idx.clone().prop_map(|allow| Op::RevokeAllow { allow }),
        2 => (idx.clone(), 0u8..3, any::<bool>())
            .prop_map(|(node, mac, twice)| Op::DiscoveryJoin { node, mac, twice }),
        2 => (0u8..3).prop_map(|account| Op::AddCloudAccount { account }),
        1 => idx.clone().prop_map(|entry| Op::RemoveCloudAccount { entry }),
        1 => any::<bool>().prop_map(|second| Op::CreateSite { second }),
        2 => (0u8..3, any::<bool>()).prop_map(|(mac, replace)| Op::AddBoot { mac, replace }),
        1 => idx.clone().prop_map(|entry| Op::RemoveBoot { entry }),
        4 => (idx.clone(), 0u8..3).prop_map(|(node, action)| Op::Lease { node, action }),
        1 => Just(Op::Fence),
        2 => (idx.clone(), 0u8..3).prop_map(|(node, mac)| Op::BootToken { node, mac }),
    ]
}

struct Agent {
    key: PrivateKey,
    csr: Vec<u8>,
}

impl Agent {
    fn new() -> Agent {
        let key = PrivateKey::generate(KeyRole::Node).expect("node key");
        let csr = build_csr(&key).expect("csr");
        Agent { key, csr }
    }
    fn csr_sha256(&self) -> [u8; 32] {
        domain::identity::sha256(&self.csr)
    }
}

struct Token {
    id: String,
    secret: String,
    role: &'static str,
}

struct Node {
    id: String,
    agent: Agent,
    leaf: Vec<u8>,
    last_renew: Option<RenewInput>,
}

/// `node`'s proof of a site agent's `call` at the world's clock (issue 40 item 10).
fn site_proof(node: &Node, call: SiteCall, clock: &SimClock) -> (i64, Vec<u8>) {
    let at_ms = clock.now_us() / 1000;
    let statement = SiteCallStatement {
        node_id: NodeId::new(&node.id).expect("node id"),
        call,
        client_time_ms: u64::try_from(at_ms).expect("time"),
    };
    let signature = sign(&node.agent.key, &statement).expect("sign");
    (at_ms, signature.as_bytes().to_vec())
}

struct World {
    svc: JoinService,
    keys: Arc<KeySet>,
    clock: SimClock,
    tokens: Vec<Token>,
    nodes: Vec<Node>,
    store: events::store::EventStore,
    cloud: CloudAccounts,
    cloud_ids: Vec<String>,
    pools: Pools,
    requests: JoinRequests,
    pool_ids: Vec<String>,
    request_ids: Vec<String>,
    tpm: TpmAllows,
    allow_ids: Vec<String>,
    sites: Sites,
    boots: BootEntries,
    agent: SiteAgent,
    entry_ids: Vec<String>,
    /// The lease epoch the agents last saw.
    epoch: u64,
}

fn join_request(w: &World, agent: &Agent, secret: &str, role: &str, hw: Option<u8>) -> JoinRequest {
    let secret = TokenSecret::parse(secret).expect("secret");
    let sealed = seal_token(
        w.keys.join_encryption.public_key(),
        &secret,
        &agent.csr_sha256(),
    )
    .expect("seal");
    JoinRequest {
        attestor: String::new(),
        input: JoinInput {
            csr_der: agent.csr.clone(),
            sealed_token: sealed.as_bytes().to_vec(),
            role: role.into(),
            claims: HardwareClaims {
                product_uuid: None,
                macs: vec![],
                hardware_key: hw.map(|b| vec![b; 65]),
            },
            attestation: Vec::new(),
            report: Default::default(),
        },
    }
}

fn renew_request(
    current: &Agent,
    leaf: &[u8],
    node_id: &str,
    next: &Agent,
    client_time_ms: i64,
) -> RenewInput {
    let pop = RenewPop {
        csr_sha256: next.csr_sha256(),
        node_id: NodeId::new(node_id).expect("node id"),
        client_time_ms: client_time_ms as u64,
    };
    let sig = sign(&current.key, &pop).expect("sign");
    RenewInput {
        csr_der: next.csr.clone(),
        chain: vec![leaf.to_vec()],
        client_time_ms: u64::try_from(client_time_ms).unwrap_or(0),
        signature: sig.as_bytes().to_vec(),
        key_attestation: None,
    }
}

/// Only refusals (ACCESS_DENIED) and operator refusals are expected failures; anything else
/// (store, query, corruption) fails the test.
fn expected<T>(r: Result<T, IdentityError>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(IdentityError::AccessDenied(_))
        | Err(IdentityError::Admin(_))
        | Err(IdentityError::RenewalsExhausted { .. }) => None,
        Err(e) => panic!("unexpected error: {e}"),
    }
}

/// Operator refusals of the pool and join-request commands are expected; anything else fails.
fn site_expected<T>(r: Result<T, SiteError>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(SiteError::Identity(e)) => panic!("unexpected error: {e}"),
        Err(_) => None,
    }
}

fn attest_expected<T>(r: Result<T, AttestError>) -> Option<T> {
    match r {
        Ok(v) => Some(v),
        Err(AttestError::Refused(_)) => None,
        Err(e) => panic!("unexpected error: {e}"),
    }
}

/// Appends `event` as the join's admission step would, at the clock's now.
async fn append_identity(w: &World, event: IdentityEvent, tenant: &str) {
    let new = event.to_new_event(events::new_event_id(), tenant, w.clock.now_us());
    let mut tx = w.store.begin().await.expect("begin");
    commands::append_and_project(
        &mut tx,
        &projections::identity::all(),
        &event.stream(),
        events::store::ExpectedVersion::Any,
        &[new],
    )
    .await
    .expect("append");
    events::store::LogTx::commit(tx).await.expect("commit");
}

async fn step(w: &mut World, op: &Op) {
    w.clock.advance_secs(1);
    let now_ms = w.clock.now_us() / 1000;
    match op {
        Op::CreateToken {
            uses,
            ttl_s,
            site_role,
            reclaim,
        } => {
            let role = if *site_role {
                TokenRole::Site
            } else {
                TokenRole::Node
            };
            // A reclaim token names the node it re-keys (a claimed hardware key has no power
            // any more, issue 18): single use, refused when that node is no longer active.
            let reclaim_node_id = if *reclaim && !*site_role {
                w.nodes.last().map(|n| n.id.clone())
            } else {
                None
            };
            let created = expected(
                w.svc
                    .create_token(&NewToken {
                        tenant_id: format!("t{}", w.tokens.len() % 2),
                        site_id: "site-1".into(),
                        pool_id: "pool-1".into(),
                        role,
                        uses: if reclaim_node_id.is_some() { 1 } else { *uses },
                        ttl_seconds: *ttl_s,
                        expect: ExpectBinding::default(),
                        allow_reclaim: false,
                        reclaim_node_id: reclaim_node_id.clone(),
                        for_node_id: None,
                        require_approval: false,
                    })
                    .await,
            );
            let Some(created) = created else {
                assert!(reclaim_node_id.is_some(), "a valid token is created");
                return;
            };
            w.tokens.push(Token {
                id: created.token.token_id,
                secret: created.secret,
                role: role.as_str(),
            });
        }
        Op::Join { token, hw } => {
            if w.tokens.is_empty() {
                return;
            }
            let t = &w.tokens[token % w.tokens.len()];
            let agent = Agent::new();
            let req = join_request(w, &agent, &t.secret, t.role, *hw);
            if let Some(body) = expected(w.svc.join(&req).await) {
                let leaf = body.certificate_chain.first().cloned().expect("leaf");
                // A reclaim keeps the node id: replace its agent.
                w.nodes.retain(|n| n.id != body.node_id);
                w.nodes.push(Node {
                    id: body.node_id,
                    agent,
                    leaf,
                    last_renew: None,
                });
            }
        }
        Op::JoinWrongRole { token } => {
            if w.tokens.is_empty() {
                return;
            }
            let t = &w.tokens[token % w.tokens.len()];
            let wrong = if t.role == "node" { "site" } else { "node" };
            let req = join_request(w, &Agent::new(), &t.secret, wrong, None);
            assert!(expected(w.svc.join(&req).await).is_none());
        }
        Op::JoinUnknownToken => {
            let stranger = TokenSecret::generate().expect("secret");
            let req = join_request(w, &Agent::new(), stranger.expose(), "node", None);
            assert!(expected(w.svc.join(&req).await).is_none());
        }
        Op::JoinBadCsr { token } => {
            if w.tokens.is_empty() {
                return;
            }
            let t = &w.tokens[token % w.tokens.len()];
            let mut req = join_request(w, &Agent::new(), &t.secret, t.role, None);
            req.input.csr_der[20] ^= 0xff;
            assert!(expected(w.svc.join(&req).await).is_none());
        }
        Op::Renew { node } => {
            if w.nodes.is_empty() {
                return;
            }
            let i = node % w.nodes.len();
            let next = Agent::new();
            let n = &w.nodes[i];
            let req = renew_request(&n.agent, &n.leaf, &n.id, &next, now_ms);
            if let Some(resp) = expected(w.svc.renew(&req).await) {
                let n = &mut w.nodes[i];
                n.leaf = resp.certificate_chain.first().cloned().expect("leaf");
                n.agent = next;
                n.last_renew = Some(req);
            }
        }
        Op::RenewReplayed { node } => {
            if w.nodes.is_empty() {
                return;
            }
            if let Some(req) = w.nodes[node % w.nodes.len()].last_renew.clone() {
                let _ = expected(w.svc.renew(&req).await);
            }
        }
        Op::RenewStale { node } => {
            if w.nodes.is_empty() {
                return;
            }
            let n = &w.nodes[node % w.nodes.len()];
            let req = renew_request(&n.agent, &n.leaf, &n.id, &Agent::new(), now_ms - 61_000);
            assert!(expected(w.svc.renew(&req).await).is_none());
        }
        Op::RenewForeignCert { node } => {
            if w.nodes.len() < 2 {
                return;
            }
            let a = &w.nodes[node % w.nodes.len()];
            let b = &w.nodes[(node + 1) % w.nodes.len()];
            // Node a's key and id with node b's certificate.
            let req = renew_request(&a.agent, &b.leaf, &a.id, &Agent::new(), now_ms);
            assert!(expected(w.svc.renew(&req).await).is_none());
        }
        Op::RevokeToken { token } => {
            if w.tokens.is_empty() {
                return;
            }
            let id = w.tokens[token % w.tokens.len()].id.clone();
            let _ = expected(w.svc.revoke_token(&id, "replay test").await);
        }
        Op::RevokeIdentity { node } | Op::Delete { node } | Op::Retire { node } => {
            if w.nodes.is_empty() {
                return;
            }
            let id = w.nodes[node % w.nodes.len()].id.clone();
            let r = match op {
                Op::RevokeIdentity { .. } => w.svc.revoke_identity(&id, "compromised").await,
                Op::Delete { .. } => w.svc.delete_node(&id, "decommissioned").await,
                _ => w.svc.retire_node(&id, "end of life").await,
            };
            let _ = expected(r);
        }
        Op::Names {
            node,
            change,
            name,
            shared,
        } => {
            if w.nodes.is_empty() {
                return;
            }
            let id = w.nodes[node % w.nodes.len()].id.clone();
            let (change, name, shared) = (*change, *name, *shared);
            let change = match change {
                0 => domain::identity::NamesChange::Set,
                1 => domain::identity::NamesChange::Add,
                _ => domain::identity::NamesChange::Remove,
            };
            let cmd = domain::identity::ChangeNames {
                node_id: id,
                change,
                dns: vec![format!("n{}.example.com", name % 2)],
                ips: if name >= 2 {
                    vec![format!("10.0.0.{name}")]
                } else {
                    vec![]
                },
                allow_shared: shared,
            };
            match w.svc.admin().change_names(&cmd).await {
                Ok(_) | Err(IdentityError::Names(_)) => {}
                Err(e) => panic!("unexpected error: {e}"),
            }
        }
        Op::RevokeUnknownNode => {
            assert!(expected(w.svc.revoke_identity("node_unknown", "x").await).is_none());
        }
        Op::Prune => {
            w.svc.prune_attestation_uses(3).await.expect("prune");
        }
        Op::FlushRefusals => {
            w.svc.flush_suppressed_refusals().await.expect("flush");
        }
        Op::Advance { secs } => w.clock.advance_secs(*secs),
        Op::CreatePool { policy, duplicate } => {
            let pool_id = match (duplicate, w.pool_ids.first()) {
                (true, Some(first)) => first.clone(),
                _ => format!("pool-{}", w.pool_ids.len()),
            };
            let created = attest_expected(
                w.pools
                    .create(&NewPool {
                        pool_id,
                        tenant_id: format!("t{}", w.pool_ids.len() % 2),
                        description: format!("pool made at op {}", w.clock.now_us()),
                        join_attestors: pool_policy(*policy),
                    })
                    .await,
            );
            if let Some(p) = created {
                w.pool_ids.push(p.pool_id);
            }
        }
        Op::UpdatePool { pool, policy, text } => {
            if w.pool_ids.is_empty() {
                return;
            }
            let pool_id = w.pool_ids[pool % w.pool_ids.len()].clone();
            let _ = attest_expected(
                w.pools
                    .update(&UpdatePool {
                        pool_id,
                        description: text.then(|| format!("updated {now_ms}")),
                        join_attestors: Some(pool_policy(*policy)),
                    })
                    .await,
            );
        }
        Op::RequestJoin { ttl_s } => {
            let n = w.request_ids.len();
            let request_id = format!("jr_{n}");
            let now_us = w.clock.now_us();
            let tenant = format!("t{}", n % 2);
            let subject = domain::identity::sha256(request_id.as_bytes()).to_vec();
            let event = IdentityEvent::JoinRequestCreated(JoinRequestCreated {
                request_id: request_id.clone(),
                tenant_id: tenant.clone(),
                attestor: "join-token".into(),
                subject: subject.clone(),
                csr_sha256: subject,
                role: "node".into(),
                site_id: "site-1".into(),
                pool_id: w
                    .pool_ids
                    .first()
                    .cloned()
                    .unwrap_or_else(|| "pool-1".into()),
                node_id: if n.is_multiple_of(3) {
                    "node_x".into()
                } else {
                    String::new()
                },
                token_id: w.tokens.first().map(|t| t.id.clone()).unwrap_or_default(),
                product_uuid_sha256: if n.is_multiple_of(2) {
                    vec![u8::try_from(n).unwrap_or(0); 32]
                } else {
                    Vec::new()
                },
                macs_sha256: Vec::new(),
                summary: format!("request {n}"),
                expires_at_us: now_us + ttl_s * 1_000_000,
            });
            append_identity(w, event, &tenant).await;
            w.request_ids.push(request_id);
        }
        Op::ApproveRequest { request } | Op::RejectRequest { request } => {
            if w.request_ids.is_empty() {
                return;
            }
            let id = w.request_ids[request % w.request_ids.len()].clone();
            let r = match op {
                Op::ApproveRequest { .. } => w.requests.approve(&id, "alice", "known").await,
                _ => w.requests.reject(&id, "bob", "").await,
            };
            let _ = attest_expected(r);
        }
        Op::ConsumeRequest { request } => {
            if w.request_ids.is_empty() {
                return;
            }
            let id = w.request_ids[request % w.request_ids.len()].clone();
            let shown = w.requests.show(&id).await.expect("request");
            if shown.status != "approved" {
                return;
            }
            let event = IdentityEvent::JoinRequestConsumed(JoinRequestConsumed {
                request_id: id,
                node_id: format!("node_{request}"),
            });
            append_identity(w, event, &shown.tenant_id).await;
        }
        Op::ExpireRequests => {
            w.requests.expire_due(2).await.expect("expire");
        }
        Op::AllowEk { ek } => {
            let allowed = attest_expected(
                w.tpm
                    .allow(&NewTpmAllow {
                        ek_sha256_hex: format!("{ek:02x}").repeat(32),
                        tenant_id: format!("t{}", ek % 2),
                        site_id: "site-1".into(),
                        pool_id: format!("pool-{ek}"),
                        actor: "op".into(),
                        note: format!("allowed at {}", w.clock.now_us()),
                    })
                    .await,
            );
            if let Some(a) = allowed {
                w.allow_ids.push(a.allow_id);
            }
        }
        Op::RevokeAllow { allow } => {
            if w.allow_ids.is_empty() {
                return;
            }
            let id = w.allow_ids[allow % w.allow_ids.len()].clone();
            let _ = attest_expected(w.tpm.revoke(&id, "op", "replay").await);
        }
        Op::CreateSite { second } => {
            let site = if *second { "site-2" } else { "site-1" };
            let _ = site_expected(
                w.sites
                    .create(&NewSite {
                        site_id: site.into(),
                        tenant_id: "t0".into(),
                        description: format!("created at {}", w.clock.now_us()),
                        default_pool_id: Some("pool-1".into()),
                        actor: "op".into(),
                    })
                    .await,
            );
        }
        Op::AddBoot { mac, replace } => {
            let added = site_expected(
                w.boots
                    .add(&NewBootEntry {
                        site_id: "site-1".into(),
                        mac: format!("aa:bb:cc:dd:ee:{mac:02x}"),
                        product_uuid: None,
                        kernel_url: "http://boot.example/k".into(),
                        initrd_url: "http://boot.example/i".into(),
                        kernel_args: String::new(),
                        pool_id: None,
                        expires_in_us: Some(600_000_000),
                        replace: *replace,
                        actor: "op".into(),
                    })
                    .await,
            );
            if let Some(e) = added {
                w.entry_ids.push(e.entry_id);
            }
        }
        Op::RemoveBoot { entry } => {
            if w.entry_ids.is_empty() {
                return;
            }
            let id = w.entry_ids[entry % w.entry_ids.len()].clone();
            let _ = site_expected(w.boots.remove(&id, "op", "replay").await);
        }
        Op::Lease { node, action } => {
            if w.nodes.is_empty() {
                return;
            }
            let caller = &w.nodes[node % w.nodes.len()];
            let (action, call) = match action {
                0 => (LeaseAction::Acquire, SiteCall::LeaseAcquire),
                1 => (LeaseAction::Renew, SiteCall::LeaseRenew { epoch: w.epoch }),
                _ => (
                    LeaseAction::Release,
                    SiteCall::LeaseRelease { epoch: w.epoch },
                ),
            };
            let (t, sig) = site_proof(caller, call, &w.clock);
            let proof = SiteCallProof {
                client_time_ms: t,
                signature: &sig,
            };
            let answer = w.agent.lease(&caller.leaf, action, w.epoch, proof).await;
            if let Some(answer) = site_expected(answer) {
                w.epoch = answer.epoch;
            }
        }
        Op::Fence => {
            let _ = site_expected(w.sites.fence("site-1", "op").await);
        }
        Op::BootToken { node, mac } => {
            if w.nodes.is_empty() {
                return;
            }
            let caller = &w.nodes[node % w.nodes.len()];
            let mac = format!("aa:bb:cc:dd:ee:{mac:02x}");
            let (t, sig) = site_proof(caller, SiteCall::boot_token(&mac, w.epoch), &w.clock);
            let proof = SiteCallProof {
                client_time_ms: t,
                signature: &sig,
            };
            let _ = site_expected(w.agent.boot_token(&caller.leaf, &mac, w.epoch, proof).await);
        }
        Op::DiscoveryJoin { node, mac, twice } => {
            if w.nodes.is_empty() {
                return;
            }
            let signer = &w.nodes[node % w.nodes.len()];
            let mac = format!("aa:bb:cc:dd:ee:{mac:02x}");
            // What a commissioning needs, each refused when it is there already: the site, its
            // boot entry for the MAC, the signer holding the lease (refused unless it is a site
            // agent of site-1 and the lease is free or its own).
            let _ = site_expected(
                w.sites
                    .create(&NewSite {
                        site_id: "site-1".into(),
                        tenant_id: "t0".into(),
                        description: String::new(),
                        default_pool_id: Some("pool-1".into()),
                        actor: "op".into(),
                    })
                    .await,
            );
            if let Some(e) = site_expected(
                w.boots
                    .add(&NewBootEntry {
                        site_id: "site-1".into(),
                        mac: mac.clone(),
                        product_uuid: None,
                        kernel_url: "http://boot.example/k".into(),
                        initrd_url: "http://boot.example/i".into(),
                        kernel_args: String::new(),
                        pool_id: None,
                        expires_in_us: Some(600_000_000),
                        replace: false,
                        actor: "op".into(),
                    })
                    .await,
            ) {
                w.entry_ids.push(e.entry_id);
            }
            let (t, sig) = site_proof(signer, SiteCall::LeaseAcquire, &w.clock);
            let proof = SiteCallProof {
                client_time_ms: t,
                signature: &sig,
            };
            let answer = w
                .agent
                .lease(&signer.leaf, LeaseAction::Acquire, w.epoch, proof)
                .await;
            if let Some(answer) = site_expected(answer) {
                w.epoch = answer.epoch;
            }
            let (t, sig) = site_proof(signer, SiteCall::boot_token(&mac, w.epoch), &w.clock);
            let proof = SiteCallProof {
                client_time_ms: t,
                signature: &sig,
            };
            let answer = w.agent.boot_token(&signer.leaf, &mac, w.epoch, proof).await;
            let Some(boot) = site_expected(answer) else {
                return;
            };
            let now_ms = w.clock.now_us() / 1000;
            let assertion = DiscoveryAssertion {
                site_id: "site-1".into(),
                signer_node_id: signer.id.clone(),
                lease_epoch: w.epoch,
                mac: mac.clone(),
                workflow_id: boot.entry_id.clone(),
                issued_at_ms: now_ms,
                not_after_ms: now_ms + 600_000,
                ..DiscoveryAssertion::default()
            };
            let signer = &w.nodes[node % w.nodes.len()];
            let signed =
                SignedDiscoveryAssertion::sign(&assertion, signer.leaf.clone(), &signer.agent.key)
                    .expect("sign the assertion");
            for _ in 0..=usize::from(*twice) {
                let ramdisk = Agent::new();
                let mut req = join_request(w, &ramdisk, &boot.token, "ramdisk", None);
                req.attestor = "discovery".into();
                req.input.claims.macs = vec![mac.clone()];
                req.input.attestation = signed.to_bytes();
                if let Some(body) = expected(w.svc.join(&req).await) {
                    let leaf = body.certificate_chain.first().cloned().expect("leaf");
                    w.nodes.push(Node {
                        id: body.node_id,
                        agent: ramdisk,
                        leaf,
                        last_renew: None,
                    });
                }
            }
        }
        Op::AddCloudAccount { account } => {
            let provider = ["aws", "gcp", "oidc"][usize::from(*account % 3)];
            let added = attest_expected(
                w.cloud
                    .add(&NewCloudAccount {
                        provider: provider.into(),
                        account: format!("acct-{account}"),
                        tenant_id: format!("t{}", account % 2),
                        site_id: "site-1".into(),
                        pool_id: format!("pool-{account}"),
                        role: "node".into(),
                        actor: "op".into(),
                    })
                    .await,
            );
            if let Some(a) = added {
                w.cloud_ids.push(a.entry_id);
            }
        }
        Op::RemoveCloudAccount { entry } => {
            if w.cloud_ids.is_empty() {
                return;
            }
            let id = w.cloud_ids[entry % w.cloud_ids.len()].clone();
            let _ = attest_expected(w.cloud.remove(&id, "op", "replay").await);
        }
    }
}

/// The state as the command layer shows it, in `bcctl replay --json`'s shape.
async fn views(svc: &JoinService) -> (Value, Value, Value) {
    let nodes = svc.list_nodes(None).await.expect("nodes");
    let mut certs = Vec::new();
    for n in &nodes {
        certs.extend(svc.show_node(&n.node_id).await.expect("show").certificates);
    }
    let tokens = svc.list_tokens(None).await.expect("tokens");
    (
        serde_json::to_value(&nodes).expect("json"),
        serde_json::to_value(&certs).expect("json"),
        serde_json::to_value(&tokens).expect("json"),
    )
}

/// [`views`] judged at `at_us` on the sim clock (a token's and a node's status depend on the
/// moment), the clock put back after: `bcctl replay` judges a replayed state at its position's
/// time, so a cut taken after the clock moved on is compared at that time.
async fn views_at(w: &World, at_us: i64) -> (Value, Value, Value) {
    let now = w.clock.now_us();
    w.clock.set_us(at_us);
    let shown = views(&w.svc).await;
    w.clock.set_us(now);
    shown
}

/// When the event at `position` occurred.
async fn occurred_at(store: &events::store::EventStore, position: i64) -> i64 {
    let mut tx = store.begin().await.expect("begin");
    projections::replay_read::occurred_at(&mut tx, position)
        .await
        .expect("occurred_at")
        .expect("an event at the head")
}

struct Cut {
    position: i64,
    /// When the event at `position` occurred: what the views are judged at.
    at_us: i64,
    time: String,
    digest: String,
    views: (Value, Value, Value),
    node: Option<String>,
}

fn bcctl() -> PathBuf {
    if let Ok(p) = std::env::var("BCCTL") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    let bin = dir.join("bcctl");
    assert!(
        bin.exists(),
        "{} not found: build it first with `cargo build -p cli --bin bcctl` (same target dir), or set BCCTL",
        bin.display()
    );
    bin
}

fn replay_cli(url: &str, at: &str, node: Option<&str>) -> Value {
    let mut cmd = std::process::Command::new(bcctl());
    cmd.args(["replay", "--at", at, "--json", "--database-url", url]);
    if let Some(n) = node {
        cmd.args(["--node", n]);
    }
    let out = cmd.output().expect("run bcctl");
    assert!(
        out.status.success(),
        "bcctl replay --at {at} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("bcctl replay prints JSON")
}

fn rfc3339(us: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(us) * 1000)
        .expect("time")
        .format(&time::format_description::well_known::Rfc3339)
        .expect("format")
}

async fn run_case(db: TestDb, ops: Vec<Op>, cut_picks: Vec<usize>) {
    let store = db.store().await.expect("store");
    let clock = SimClock::new();
    let td = TrustDomain::new(TD).expect("td");
    let keys = Arc::new(
        KeySet::generate(td.clone(), clock.now(), KeySetLifetimes::default()).expect("keys"),
    );
    let mut config = IdentityConfig::new(td);
    // A low bound so suppressed refusals and their flush events appear in short sequences.
    config.refusals_per_minute = 2;
    let svc = JoinService::new(store.clone(), keys.clone(), Arc::new(clock.clone()), config)
        .expect("svc");
    let known = BUILTIN_ATTESTORS.iter().map(|s| s.to_string()).collect();
    // Pools and the TPM allow-list are changed by an operator, as over the admin API: their
    // events record that actor; joins, renewals and tokens here go through the plain store.
    let operator = operator_actor();
    let acting = store.acting_as(operator.clone());
    let mut w = World {
        svc,
        keys,
        pools: Pools::new(acting.clone(), Arc::new(clock.clone()), known),
        requests: JoinRequests::new(store.clone(), Arc::new(clock.clone())),
        tpm: TpmAllows::new(acting.clone(), Arc::new(clock.clone())),
        allow_ids: vec![],
        cloud: CloudAccounts::new(store.clone(), Arc::new(clock.clone())),
        cloud_ids: vec![],
        sites: Sites::new(store.clone(), Arc::new(clock.clone())),
        boots: BootEntries::new(store.clone(), Arc::new(clock.clone())),
        agent: SiteAgent::new(
            store.clone(),
            Arc::new(clock.clone()),
            TrustDomain::new(TD).expect("td"),
            SiteSettings {
                boot_lease_ttl: std::time::Duration::from_secs(3),
            },
        ),
        entry_ids: vec![],
        epoch: 0,
        store: store.clone(),
        clock,
        tokens: vec![],
        nodes: vec![],
        pool_ids: vec![],
        request_ids: vec![],
    };
    let tables = projections::identity::tables();

    // Every sequence starts with a usable node token, so joins and renewals happen early.
    let ops: Vec<Op> = std::iter::once(Op::CreateToken {
        uses: 4,
        ttl_s: 3600,
        site_role: false,
        reclaim: true,
    })
    .chain(ops)
    .collect();
    let cut_at: Vec<usize> = cut_picks.iter().map(|c| c % ops.len()).collect();
    let mut cuts = Vec::new();
    for (i, op) in ops.iter().enumerate() {
        step(&mut w, op).await;
        if cut_at.contains(&i) {
            let position = store.head_position().await.expect("head");
            let at_us = occurred_at(&store, position).await;
            cuts.push(Cut {
                position,
                at_us,
                time: rfc3339(w.clock.now_us()),
                digest: projections::digest_tables(&store, &tables)
                    .await
                    .expect("digest"),
                views: views_at(&w, at_us).await,
                node: w.nodes.first().map(|n| n.id.clone()),
            });
        }
    }
    let live_end = projections::digest_tables(&store, &tables)
        .await
        .expect("digest");
    let mut kinds = std::collections::BTreeMap::<String, usize>::new();
    let mut pages = store.read_all(0, 10_000);
    while let Some(batch) = pages.next_batch().await.expect("read") {
        for e in batch {
            *kinds.entry(e.event_type).or_default() += 1;
        }
    }
    eprintln!("{} ops, {} cuts, events {kinds:?}", ops.len(), cuts.len());
    let url = db.url().to_string();

    // The real binary, by position and by time, never touching the live tables.
    for (k, cut) in cuts.iter().enumerate() {
        let at = if k % 2 == 0 {
            cut.position.to_string()
        } else {
            cut.time.clone()
        };
        let printed = replay_cli(&url, &at, None);
        assert_eq!(printed["position"], Value::from(cut.position), "--at {at}");
        assert_eq!(
            printed["digest"],
            Value::from(cut.digest.clone()),
            "--at {at}: digest"
        );
        assert_eq!(printed["nodes"], cut.views.0, "--at {at}: nodes");
        assert_eq!(
            printed["certificates"], cut.views.1,
            "--at {at}: certificates"
        );
        assert_eq!(printed["tokens"], cut.views.2, "--at {at}: tokens");
        if let Some(node) = &cut.node {
            let one = replay_cli(&url, &cut.position.to_string(), Some(node));
            let nodes = one["nodes"].as_array().expect("nodes");
            assert_eq!(nodes.len(), 1, "--node {node}");
            assert_eq!(nodes[0]["nodeId"], Value::from(node.clone()));
            let stream = store
                .read_stream(&format!("node/{node}"))
                .await
                .expect("stream");
            let expected: Vec<(String, i64)> = stream
                .iter()
                .filter(|e| e.position <= cut.position)
                .map(|e| (e.event_type.clone(), e.position))
                .collect();
            let shown: Vec<(String, i64)> = one["events"]
                .as_array()
                .expect("events")
                .iter()
                .map(|e| {
                    (
                        e["type"].as_str().unwrap_or_default().to_string(),
                        e["position"].as_i64().unwrap_or(-1),
                    )
                })
                .collect();
            assert_eq!(shown, expected, "--node {node} history");
        }
    }
    assert_eq!(
        projections::digest_tables(&store, &tables)
            .await
            .expect("digest"),
        live_end,
        "bcctl replay changed the live tables"
    );

    // Rebuilt (committed) to each cut: byte-identical to what was live then.
    let all = projections::identity::all();
    for cut in &cuts {
        projections::rebuild(&store, &all, Some(cut.position), 7, |_| {})
            .await
            .expect("rebuild");
        assert_eq!(
            projections::digest_tables(&store, &tables)
                .await
                .expect("digest"),
            cut.digest,
            "rebuilt to position {}",
            cut.position
        );
        assert_eq!(
            views_at(&w, cut.at_us).await,
            cut.views,
            "views rebuilt to {}",
            cut.position
        );
    }
    assert_actors(&store, &operator).await;
    // And to the end, in batches of several sizes.
    for batch in [1u32, 13, 10_000] {
        projections::rebuild(&store, &all, None, batch, |_| {})
            .await
            .expect("rebuild");
        assert_eq!(
            projections::digest_tables(&store, &tables)
                .await
                .expect("digest"),
            live_end,
            "rebuilt from the whole log (batch {batch})"
        );
    }
}

fn operator_actor() -> events::Actor {
    events::Actor::new(format!("spiffe://{TD}/operator/olivia"), "operator").expect("actor")
}

/// Every pool and TPM allow-list event records the operator who made it, and no node or token
/// event records anyone (replayed state is the same with or without actors: the rebuilds above
/// compare the tables of a log that holds both).
async fn assert_actors(store: &events::store::EventStore, operator: &events::Actor) {
    let events = store.read_batch(0, 100_000).await.expect("events");
    for e in &events {
        let by_operator = e.stream_id.starts_with("pool/") || e.stream_id.starts_with("tpm-ek/");
        let unattributed = e.stream_id.starts_with("node/") || e.stream_id.starts_with("token/");
        if by_operator {
            assert_eq!(
                e.actor.as_ref(),
                Some(operator),
                "{} at {}",
                e.event_type,
                e.position
            );
        } else if unattributed {
            assert_eq!(e.actor, None, "{} at {}", e.event_type, e.position);
        }
    }
}

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: std::env::var("REPLAY_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(16),
        max_shrink_iters: 32,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn identity_replay_postgres(
        ops in proptest::collection::vec(op(), 1..40),
        cuts in proptest::collection::vec(any::<usize>(), 3),
    ) {
        let rt = runtime();
        rt.block_on(async {
            let db = TestDb::postgres().await.expect("postgres (DATABASE_URL)");
            run_case(db, ops, cuts).await;
        });
    }

    #[test]
    fn identity_replay_sqlite(
        ops in proptest::collection::vec(op(), 1..40),
        cuts in proptest::collection::vec(any::<usize>(), 3),
    ) {
        let rt = runtime();
        rt.block_on(async {
            let db = TestDb::sqlite().expect("sqlite");
            run_case(db, ops, cuts).await;
        });
    }
}

/// `replay --at <time>` stops before the first event that occurred after the time, even when an
/// event decided earlier was committed after it (two replicas with clocks apart): the state shown
/// never holds anything decided after `--at`.
#[test]
fn replay_at_a_time_stops_before_the_first_later_event() {
    let rt = runtime();
    rt.block_on(async {
        for db in TestDb::each().await.expect("databases") {
            let store = db.store().await.expect("store");
            let td = TrustDomain::new(TD).expect("td");
            let early = SimClock::new();
            let late = SimClock::at_us(early.now_us() + 10_000_000);
            let keys = Arc::new(
                KeySet::generate(td.clone(), early.now(), KeySetLifetimes::default())
                    .expect("keys"),
            );
            let service = |clock: &SimClock| {
                JoinService::new(
                    store.clone(),
                    keys.clone(),
                    Arc::new(clock.clone()),
                    IdentityConfig::new(td.clone()),
                )
                .expect("service")
            };
            let token = |tenant: &str| NewToken {
                tenant_id: tenant.into(),
                site_id: "site-1".into(),
                pool_id: "pool-1".into(),
                role: TokenRole::Node,
                uses: 1,
                ttl_seconds: 3600,
                expect: ExpectBinding::default(),
                allow_reclaim: false,
                reclaim_node_id: None,
                for_node_id: None,
                require_approval: false,
            };
            // The replica whose clock is 10 s ahead commits first.
            let ahead = service(&late)
                .create_token(&token("ahead"))
                .await
                .expect("token");
            let behind = service(&early)
                .create_token(&token("behind"))
                .await
                .expect("token");
            let url = db.url().to_string();
            let ids = |v: &Value| -> Vec<String> {
                v["tokens"]
                    .as_array()
                    .expect("tokens")
                    .iter()
                    .map(|t| t["tokenId"].as_str().expect("tokenId").to_owned())
                    .collect()
            };
            // At the early time: the log's first event occurred later, so nothing.
            let at_early = replay_cli(&url, &rfc3339(early.now_us()), None);
            assert_eq!(at_early["position"], 0, "{at_early}");
            assert!(ids(&at_early).is_empty(), "{at_early}");
            // At the late time: both.
            let at_late = replay_cli(&url, &rfc3339(late.now_us()), None);
            let mut both = ids(&at_late);
            both.sort();
            let mut want = vec![ahead.token.token_id.clone(), behind.token.token_id.clone()];
            want.sort();
            assert_eq!(both, want);
        }
    });
}

/// The `node_certs` rows of `node_id`, oldest first, as (serial, revoked at, reason, revoked
/// position, issued position).
type CertLine = (String, Option<i64>, Option<String>, Option<i64>, i64);

async fn cert_lines(store: &events::store::EventStore, node_id: &str) -> Vec<CertLine> {
    let mut tx = store.begin().await.expect("begin");
    let rows = projections::identity::read::certs_of_node(&mut tx, node_id)
        .await
        .expect("certs");
    events::store::LogTx::rollback(tx).await.expect("rollback");
    rows.into_iter()
        .map(|r| {
            (
                r.serial,
                r.revoked_at_us,
                r.revoke_reason,
                r.revoked_position,
                r.issued_position,
            )
        })
        .collect()
}

/// `node.identity.revoked` events written before they named their serials (schema 1, no field
/// 4; the bytes built by hand) replay to exactly the tables they built then: every certificate
/// of the node still open at the event revoked, inline and rebuilt, on both backends. A
/// schema 2 event revokes exactly the serials it names.
#[test]
fn identity_revoked_written_before_it_named_serials_replays_as_before() {
    use events::schema::{NodeCertificateIssued, NodeIdentityRevoked, NodeJoined};
    use events::{new_event_id, EventPayload, NewEvent};

    fn lp(field: u8, bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![field, u8::try_from(bytes.len()).expect("short")];
        out.extend_from_slice(bytes);
        out
    }
    let t0 = 1_767_225_600_000_000i64;
    let issued = |serial: &str, at: i64| {
        NewEvent::from_payload(
            new_event_id(),
            "t1",
            at,
            &NodeCertificateIssued {
                node_id: "node_u".into(),
                serial: serial.into(),
                der: vec![0x30, serial.len() as u8],
                not_before_us: at,
                not_after_us: at + 86_400_000_000,
                identity_generation: 1,
                cause: "join".into(),
                renewed_serial: String::new(),
                allowed_kinds: Vec::new(),
            },
        )
    };
    // The old shape: node_id = 1, reason = 2, new_identity_generation = 3 (varint), nothing else.
    let mut old_bytes = lp(0x0a, b"node_u");
    old_bytes.extend(lp(0x12, b"compromised"));
    old_bytes.extend([0x18, 0x02]);
    let old_revoked = NewEvent::from_bytes(
        new_event_id(),
        NodeIdentityRevoked::EVENT_TYPE,
        1,
        "t1",
        t0 + 30,
        old_bytes.clone(),
    );
    // The same message today, with no serials, encodes to those very bytes.
    let same = NewEvent::from_payload(
        new_event_id(),
        "t1",
        t0,
        &NodeIdentityRevoked {
            node_id: "node_u".into(),
            reason: "compromised".into(),
            new_identity_generation: 2,
            revoked_serials: Vec::new(),
        },
    );
    assert_eq!(same.payload(), old_bytes.as_slice());
    assert_eq!(same.schema_version, 2);
    let named = NewEvent::from_payload(
        new_event_id(),
        "t1",
        t0 + 60,
        &NodeIdentityRevoked {
            node_id: "node_u".into(),
            reason: "named".into(),
            new_identity_generation: 3,
            revoked_serials: vec!["dd".into()],
        },
    );
    let log = vec![
        NewEvent::from_payload(
            new_event_id(),
            "t1",
            t0,
            &NodeJoined {
                node_id: "node_u".into(),
                tenant_id: "t1".into(),
                site_id: "site-1".into(),
                pool_id: "pool-1".into(),
                role: "node".into(),
                attestor: "join-token".into(),
                node_key: "unattested".into(),
                token_id: "tok_u".into(),
                identity_generation: 1,
                ..Default::default()
            },
        ),
        issued("aa", t0 + 10),
        issued("bb", t0 + 20),
        old_revoked,
        issued("cc", t0 + 40),
        issued("dd", t0 + 50),
        named,
    ];

    runtime().block_on(async {
        for db in TestDb::each().await.expect("databases") {
            let store = db.store().await.expect("store");
            let all = projections::identity::all();
            let mut tx = store.begin().await.expect("begin");
            let recorded = commands::append_and_project(
                &mut tx,
                &all,
                "node/node_u",
                events::store::ExpectedVersion::NoStream,
                &log,
            )
            .await
            .expect("append");
            events::store::LogTx::commit(tx).await.expect("commit");
            let pos: Vec<i64> = recorded.iter().map(|e| e.position).collect();
            let old = Some("identity revoked: compromised".to_owned());
            let want: Vec<CertLine> = vec![
                (
                    "aa".into(),
                    Some(t0 + 30),
                    old.clone(),
                    Some(pos[3]),
                    pos[1],
                ),
                ("bb".into(), Some(t0 + 30), old, Some(pos[3]), pos[2]),
                ("cc".into(), None, None, None, pos[4]),
                (
                    "dd".into(),
                    Some(t0 + 60),
                    Some("identity revoked: named".into()),
                    Some(pos[6]),
                    pos[5],
                ),
            ];
            assert_eq!(cert_lines(&store, "node_u").await, want, "inline");
            let tables = projections::identity::tables();
            let live = projections::digest_tables(&store, &tables)
                .await
                .expect("digest");
            // A schema 2 event naming a serial that is no open certificate of the node does not
            // apply: the trail and the table would disagree.
            let mut tx = store.begin().await.expect("begin");
            let stray = NewEvent::from_payload(
                new_event_id(),
                "t1",
                t0 + 70,
                &NodeIdentityRevoked {
                    node_id: "node_u".into(),
                    reason: "stray".into(),
                    new_identity_generation: 4,
                    revoked_serials: vec!["aa".into()],
                },
            );
            let refused: Option<String> = match commands::append_and_project(
                &mut tx,
                &all,
                "node/node_u",
                events::store::ExpectedVersion::Any,
                &[stray],
            )
            .await
            {
                Err(e) => {
                    events::store::LogTx::rollback(tx).await.expect("rollback");
                    Some(e.to_string())
                }
                // On Postgres the deferred update goes out at commit.
                Ok(_) => events::store::LogTx::commit(tx)
                    .await
                    .err()
                    .map(|e| e.to_string()),
            };
            assert!(
                refused
                    .as_deref()
                    .is_some_and(|e| e.contains("names a serial")),
                "{refused:?}"
            );
            assert_eq!(
                cert_lines(&store, "node_u").await,
                want,
                "after the refusal"
            );
            for batch in [1u32, 3, 1000] {
                projections::rebuild(&store, &all, None, batch, |_| {})
                    .await
                    .expect("rebuild");
                assert_eq!(
                    cert_lines(&store, "node_u").await,
                    want,
                    "rebuilt ({batch})"
                );
                assert_eq!(
                    projections::digest_tables(&store, &tables)
                        .await
                        .expect("digest"),
                    live,
                    "rebuilt ({batch})"
                );
            }
        }
    });
}
