//! The TPM allow-list on Postgres and SQLite (issue 19): `tpm allow / list / revoke` with each
//! refusal's exact text, the `tpm-ek/<hex>` stream's events, a rebuild giving the same tables at
//! every batch size, and the join's fact loading: `FactKey::Entry` (list `tpm-allow`) answers the active entry
//! only, and a loaded binding brings the node it names.

use std::sync::{Arc, Mutex};

use commands::attest::{AttestError, NewTpmAllow, TpmAllows};
use commands::identity::{AttestorRegistry, JoinRequest, JoinService};
use commands::Clock;
use domain::attest::{
    AttestRequest, AttestationResult, Attestor, AttestorRefusal, BindingState, EntryState, FactKey,
    Facts, NodeKeyStatement, Planned, Verdict,
};
use domain::identity::{sha256, JoinInput};
use domain::pki::NodeRole;
use events::store::testkit::TestDb;

use crate::identity_support::*;

const EK1: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
const EK2: &str = "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

fn allows(f: &Fixture) -> TpmAllows {
    TpmAllows::new(f.store.clone(), Arc::new(f.clock.clone()))
}

fn new_allow(ek: &str) -> NewTpmAllow {
    NewTpmAllow {
        ek_sha256_hex: ek.into(),
        tenant_id: "acme".into(),
        site_id: "par1".into(),
        pool_id: "edge".into(),
        actor: "alice".into(),
        note: "rack 4".into(),
    }
}

fn refused<T: std::fmt::Debug>(r: Result<T, AttestError>) -> String {
    match r {
        Err(AttestError::Refused(e)) => e.to_string(),
        other => panic!("not a refusal: {other:?}"),
    }
}

async fn tpm_events(f: &Fixture) -> Vec<(String, String, i64)> {
    all_events(&f.store)
        .await
        .into_iter()
        .filter(|e| e.event_type.starts_with("attestor.entry."))
        .map(|e| (e.event_type, e.stream_id, e.stream_version))
        .collect()
}

#[tokio::test]
async fn allow_list_and_revoke_with_each_refusal() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let a = allows(&f);
        let first = a.allow(&new_allow(&EK1.to_uppercase())).await.unwrap();
        assert!(first.allow_id.starts_with("tpma_"), "{}", first.allow_id);
        assert_eq!(first.allow_id.len(), 5 + 32);
        assert_eq!(first.ek_sha256, EK1);
        assert_eq!(
            (
                first.tenant_id.as_str(),
                first.site_id.as_str(),
                first.pool_id.as_str(),
                first.status.as_str(),
                first.allowed_by.as_str(),
                first.note.as_str()
            ),
            ("acme", "par1", "edge", "active", "alice", "rack 4")
        );
        assert_eq!(first.created_at_us, f.clock.now_us());

        assert_eq!(
            refused(a.allow(&new_allow(EK1)).await),
            format!(
                "INVALID_STATE: EK {EK1} is already allowed by {} (revoke it first)",
                first.allow_id
            )
        );
        assert_eq!(
            refused(a.allow(&new_allow("abc")).await),
            "INVALID_INPUT: the EK SHA-256 \"abc\" must be 64 hex digits (the SHA-256 of the \
             EK's TPMT_PUBLIC)"
        );
        let mut bad = new_allow(EK2);
        bad.tenant_id = String::new();
        assert_eq!(
            refused(a.allow(&bad).await),
            "INVALID_INPUT: tenant id \"\" must be 1 to 128 of A-Z, a-z, 0-9, '.', '-', '_'"
        );
        let mut bad = new_allow(EK2);
        bad.pool_id = "a pool".into();
        assert_eq!(
            refused(a.allow(&bad).await),
            "INVALID_INPUT: pool id \"a pool\" must be 1 to 128 of A-Z, a-z, 0-9, '.', '-', '_'"
        );
        let mut bad = new_allow(EK2);
        bad.site_id = String::new();
        assert!(refused(a.allow(&bad).await).starts_with("INVALID_INPUT: "));
        let mut bad = new_allow(EK2);
        bad.actor = String::new();
        assert_eq!(
            refused(a.allow(&bad).await),
            "INVALID_INPUT: the actor is empty"
        );
        let mut bad = new_allow(EK2);
        bad.note = "x".repeat(513);
        assert_eq!(
            refused(a.allow(&bad).await),
            "INVALID_INPUT: the note is 513 bytes, at most 512"
        );

        f.clock.advance_us(1_000);
        let revoked = a.revoke(&first.allow_id, "bob", "sold").await.unwrap();
        assert_eq!(
            (
                revoked.status.as_str(),
                revoked.revoked_by.as_deref(),
                revoked.revoke_reason.as_deref(),
                revoked.updated_at_us - revoked.created_at_us
            ),
            ("revoked", Some("bob"), Some("sold"), 1_000)
        );
        assert_eq!(
            refused(a.revoke(&first.allow_id, "bob", "").await),
            format!(
                "INVALID_STATE: tpm allow-list entry {} is already revoked",
                first.allow_id
            )
        );
        assert_eq!(
            refused(a.revoke("tpma_nope", "bob", "").await),
            "NOT_FOUND: no tpm allow-list entry tpma_nope"
        );
        assert_eq!(
            refused(a.revoke(&first.allow_id, "", "").await),
            "INVALID_INPUT: the actor is empty"
        );

        // Revoked, the EK may be allowed again, elsewhere.
        let mut again = new_allow(EK1);
        again.pool_id = "core".into();
        again.tenant_id = "globex".into();
        let second = a.allow(&again).await.unwrap();
        assert_ne!(second.allow_id, first.allow_id);
        assert_eq!(second.tenant_id, "globex");
        let tenants: Vec<String> = all_events(&f.store)
            .await
            .into_iter()
            .filter(|e| e.event_type.starts_with("attestor.entry."))
            .map(|e| e.tenant_id)
            .collect();
        assert_eq!(tenants, ["acme", "acme", "globex"]);
        // The list is oldest first (ties by id): a later entry comes later.
        f.clock.advance_us(1);
        let third = a.allow(&new_allow(EK2)).await.unwrap();

        let list = a.list().await.unwrap();
        let summary: Vec<(String, String, String)> = list
            .iter()
            .map(|v| (v.allow_id.clone(), v.pool_id.clone(), v.status.clone()))
            .collect();
        assert_eq!(
            summary,
            vec![
                (first.allow_id.clone(), "edge".into(), "revoked".into()),
                (second.allow_id.clone(), "core".into(), "active".into()),
                (third.allow_id.clone(), "edge".into(), "active".into()),
            ]
        );
        let s1 = format!("tpm-ek/{EK1}");
        let s2 = format!("tpm-ek/{EK2}");
        assert_eq!(
            tpm_events(&f).await,
            vec![
                ("attestor.entry.added".into(), s1.clone(), 1),
                ("attestor.entry.removed".into(), s1.clone(), 2),
                ("attestor.entry.added".into(), s1, 3),
                ("attestor.entry.added".into(), s2, 1),
            ]
        );
    }
}

#[tokio::test]
async fn a_rebuild_gives_the_same_tpm_ek_allows_at_every_batch_size() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let a = allows(&f);
        let one = a.allow(&new_allow(EK1)).await.unwrap();
        a.revoke(&one.allow_id, "bob", "moved").await.unwrap();
        let two = a.allow(&new_allow(EK1)).await.unwrap();
        let three = a.allow(&new_allow(EK2)).await.unwrap();
        a.revoke(&three.allow_id, "bob", "").await.unwrap();
        a.revoke(&two.allow_id, "carol", "gone").await.unwrap();
        a.allow(&new_allow(EK2)).await.unwrap();
        let before = a.list().await.unwrap();
        assert_eq!(before.len(), 4);
        let tables = projections::identity::tables();
        assert!(tables.iter().any(|t| t.name == "attestor_entries"));
        let inline = projections::digest_tables(&f.store, &tables).await.unwrap();
        for batch in [1, 2, 3, 500] {
            projections::rebuild(&f.store, &projections::identity::all(), None, batch, |_| {})
                .await
                .unwrap();
            assert_eq!(
                inline,
                projections::digest_tables(&f.store, &tables).await.unwrap(),
                "batch {batch}"
            );
        }
        assert_eq!(a.list().await.unwrap(), before);
    }
}

/// Plans a binding of SHA-256 of the evidence and the allow-list entry of [`EK1`], keeps the
/// facts it was given, and refuses.
struct Probe {
    seen: Arc<Mutex<Vec<Facts>>>,
}

/// Admits into t9, binding SHA-256 of the evidence.
struct Binder;

const NODE_ONLY: &[NodeRole] = &[NodeRole::Node];

impl Attestor for Probe {
    type Plan = ();
    fn id(&self) -> &str {
        "test-probe"
    }
    fn roles(&self) -> &[NodeRole] {
        NODE_ONLY
    }
    fn plan(&self, request: &AttestRequest<'_>) -> Result<Planned<()>, AttestorRefusal> {
        Ok(Planned::new(
            vec![
                FactKey::Entry {
                    list: "tpm-allow".into(),
                    key: EK1.to_lowercase(),
                },
                FactKey::Binding(sha256(request.evidence)),
            ],
            (),
        ))
    }
    fn verify(&self, _request: &AttestRequest<'_>, _plan: &(), facts: &Facts) -> Verdict {
        if let Ok(mut seen) = self.seen.lock() {
            seen.push(facts.clone());
        }
        Verdict::Refuse(AttestorRefusal::new("test-probe", "seen"))
    }
}

impl Attestor for Binder {
    type Plan = ();
    fn id(&self) -> &str {
        "test-binder"
    }
    fn roles(&self) -> &[NodeRole] {
        NODE_ONLY
    }
    fn plan(&self, request: &AttestRequest<'_>) -> Result<Planned<()>, AttestorRefusal> {
        Ok(Planned::new(
            vec![FactKey::Binding(sha256(request.evidence))],
            (),
        ))
    }
    fn verify(&self, request: &AttestRequest<'_>, _plan: &(), _facts: &Facts) -> Verdict {
        Verdict::Admit(Box::new(AttestationResult {
            tenant_id: "t9".into(),
            role: request.role,
            site_id: "site-1".into(),
            pool_id: "pool-9".into(),
            reclaim_node_id: None,
            token: None,
            bind: vec![sha256(request.evidence)],
            single_use: Vec::new(),
            node_key: NodeKeyStatement::Unattested,
            allowed_kinds: Vec::new(),
            approval: None,
        }))
    }
}

fn request(attestor: &str, evidence: &[u8]) -> JoinRequest {
    JoinRequest {
        attestor: attestor.into(),
        input: JoinInput {
            csr_der: Agent::new().csr.clone(),
            role: "node".into(),
            attestation: evidence.to_vec(),
            ..JoinInput::default()
        },
    }
}

#[tokio::test]
async fn the_join_loads_the_active_allow_entry_and_the_node_a_binding_names() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut registry = AttestorRegistry::builtin();
        registry
            .register_in_process(Arc::new(Probe { seen: seen.clone() }))
            .register_in_process(Arc::new(Binder));
        let svc: JoinService = f.svc.clone().with_attestors(registry);
        let take = || seen.lock().unwrap().pop().expect("the probe verified");

        // Nothing stored: no entry, no binding, no node.
        assert_join_denied(svc.join(&request("test-probe", b"ek-a")).await);
        let facts = take();
        assert!(facts.entries.is_empty() && facts.bindings.is_empty());
        assert!(facts.nodes.is_empty());

        let node = svc.join(&request("test-binder", b"ek-a")).await.unwrap();
        let entry = allows(&f).allow(&new_allow(EK1)).await.unwrap();
        assert_join_denied(svc.join(&request("test-probe", b"ek-a")).await);
        let facts = take();
        let allowed: Vec<((String, String), EntryState)> = facts.entries.into_iter().collect();
        assert_eq!(
            allowed,
            vec![(
                ("tpm-allow".into(), EK1.to_lowercase()),
                EntryState {
                    entry_id: entry.allow_id.clone(),
                    tenant_id: "acme".into(),
                    site_id: "par1".into(),
                    pool_id: "edge".into(),
                    role: None,
                }
            )]
        );
        assert_eq!(
            facts.bindings.get(&sha256(b"ek-a")),
            Some(&BindingState {
                attestor: "test-binder".into(),
                node_id: node.node_id.clone(),
            })
        );
        let loaded: Vec<String> = facts.nodes.keys().cloned().collect();
        assert_eq!(loaded, vec![node.node_id.clone()]);
        assert_eq!(facts.nodes[&node.node_id].tenant_id, "t9");

        // Revoked: the entry is no longer a fact; another subject binds nothing.
        allows(&f).revoke(&entry.allow_id, "bob", "").await.unwrap();
        assert_join_denied(svc.join(&request("test-probe", b"ek-b")).await);
        let facts = take();
        assert!(facts.entries.is_empty());
        assert!(facts.bindings.is_empty() && facts.nodes.is_empty());
        assert_last_refusal(&f.store, "root", "test-probe:seen").await;
    }
}

#[tokio::test]
async fn every_replica_of_a_deployment_derives_the_same_tpm_challenge_key() {
    use commands::identity::attestors::tpm_challenge_key;
    use domain::pki::{open_bundle, plaintext_bundle};
    let db = TestDb::sqlite().unwrap();
    let f = fixture(db).await;
    let bundle = plaintext_bundle(&f.keys).unwrap();
    let replica_a = open_bundle(&bundle, None).unwrap().keys.expect("keys");
    let replica_b = open_bundle(&bundle, None).unwrap().keys.expect("keys");
    let key = tpm_challenge_key(&f.keys);
    assert_eq!(tpm_challenge_key(&replica_a), key);
    assert_eq!(tpm_challenge_key(&replica_b), key);
    let other = fixture(TestDb::sqlite().unwrap()).await;
    assert_ne!(tpm_challenge_key(&other.keys), key);
    assert_ne!(key, [0u8; 32]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_allows_of_one_ek_admit_exactly_one() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let mut tasks = Vec::new();
        for i in 0..8 {
            let a = allows(&f);
            tasks.push(tokio::spawn(async move {
                let mut new = new_allow(EK2);
                new.note = format!("racer {i}");
                a.allow(&new).await
            }));
        }
        let mut admitted = Vec::new();
        let mut refusals = Vec::new();
        for t in tasks {
            match t.await.unwrap() {
                Ok(v) => admitted.push(v.allow_id),
                Err(AttestError::Refused(e)) => refusals.push(e.to_string()),
                Err(e) => panic!("not a refusal: {e:?}"),
            }
        }
        assert_eq!(admitted.len(), 1, "{:?}", tpm_events(&f).await);
        let expected = format!(
            "INVALID_STATE: EK {EK2} is already allowed by {} (revoke it first)",
            admitted[0]
        );
        assert_eq!(refusals, vec![expected; 7]);
        let list = allows(&f).list().await.unwrap();
        assert_eq!(list.len(), 1);
        assert_eq!(tpm_events(&f).await.len(), 1);

        // Eight concurrent revokes of it: one revokes, seven are told it is revoked.
        let id = admitted[0].clone();
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let (a, id) = (allows(&f), id.clone());
            tasks.push(tokio::spawn(async move { a.revoke(&id, "bob", "").await }));
        }
        let mut revoked = 0;
        let mut refusals = Vec::new();
        for t in tasks {
            match t.await.unwrap() {
                Ok(_) => revoked += 1,
                Err(AttestError::Refused(e)) => refusals.push(e.to_string()),
                Err(e) => panic!("not a refusal: {e:?}"),
            }
        }
        assert_eq!(revoked, 1, "{refusals:?}");
        let expected = format!("INVALID_STATE: tpm allow-list entry {id} is already revoked");
        assert_eq!(refusals, vec![expected; 7]);
        assert_eq!(tpm_events(&f).await.len(), 2);
    }
}
