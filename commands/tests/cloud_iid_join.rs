//! Cloud accounts and the `cloud-iid` attestor through the real commands, on Postgres and
//! SQLite: `cloud account add / list / remove` with each refusal's exact text and the
//! account's stream; (Postgres, real concurrency) one active entry per account when many adds
//! race; a rebuild giving the same `cloud_accounts`; and a real join through the JoinService
//! with a GCP-style token the test signed: admitted where the account says, the same instance
//! refused `cloud-iid:instance-reused`, an unregistered account `cloud-iid:unknown-instance`.

use std::sync::Arc;
use std::time::Duration;

use commands::attest::{AttestError, CloudAccounts, NewCloudAccount};
use commands::identity::{AttestorRegistry, IdentityError, JoinRequest, JoinService};
use commands::Clock;
use domain::attest::cloud_iid::{CloudIidAttestor, CloudIidConfig, CloudIidEvidence, GcpConfig};
use domain::identity::JoinInput;
use events::store::testkit::TestDb;
use events::store::EventStore;

use crate::cloud_iid_support::{gcp_claims, key};
use crate::identity_support::*;

const AUDIENCE: &str = "https://bc.example.com";

fn accounts(f: &Fixture) -> CloudAccounts {
    CloudAccounts::new(f.store.clone(), Arc::new(f.clock.clone()))
}

fn new_account(provider: &str, account: &str) -> NewCloudAccount {
    NewCloudAccount {
        provider: provider.into(),
        account: account.into(),
        tenant_id: "acme".into(),
        site_id: "eu1".into(),
        pool_id: "web".into(),
        role: "node".into(),
        actor: "alice".into(),
    }
}

fn refused<T: std::fmt::Debug>(r: Result<T, AttestError>) -> String {
    match r {
        Err(AttestError::Refused(e)) => e.to_string(),
        other => panic!("not a refusal: {other:?}"),
    }
}

async fn cloud_events(store: &EventStore) -> Vec<(String, String, i64)> {
    all_events(store)
        .await
        .into_iter()
        .filter(|e| e.event_type.starts_with("attestor.entry."))
        .map(|e| (e.event_type, e.stream_id, e.stream_version))
        .collect()
}

#[tokio::test]
async fn add_list_and_remove_with_each_refusal() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let a = accounts(&f);
        let first = a.add(&new_account("gcp", "proj-1")).await.unwrap();
        assert!(first.entry_id.starts_with("cloud_"), "{}", first.entry_id);
        assert_eq!(
            (
                first.provider.as_str(),
                first.account.as_str(),
                first.tenant_id.as_str(),
                first.site_id.as_str(),
                first.pool_id.as_str(),
                first.role.as_str(),
                first.status.as_str(),
                first.added_by.as_str()
            ),
            ("gcp", "proj-1", "acme", "eu1", "web", "node", "active", "alice")
        );
        assert_eq!(
            refused(a.add(&new_account("gcp", "proj-1")).await),
            format!(
                "INVALID_STATE: gcp account proj-1 is already registered by {} (remove it first)",
                first.entry_id
            )
        );
        assert_eq!(
            refused(a.add(&new_account("ibm", "x")).await),
            "INVALID_INPUT: the provider \"ibm\" must be one of aws, gcp, azure, oidc"
        );
        let mut bad = new_account("aws", "123");
        bad.role = "ramdisk".into();
        assert_eq!(
            refused(a.add(&bad).await),
            "INVALID_INPUT: the role \"ramdisk\" must be node or site"
        );
        let mut bad = new_account("aws", "123");
        bad.pool_id = "a pool".into();
        assert_eq!(
            refused(a.add(&bad).await),
            "INVALID_INPUT: pool id \"a pool\" must be 1 to 128 of A-Z, a-z, 0-9, '.', '-', '_'"
        );
        // The same account id under another provider is another account.
        f.clock.advance_us(1);
        let aws = a.add(&new_account("aws", "proj-1")).await.unwrap();

        f.clock.advance_us(1_000);
        let removed = a.remove(&first.entry_id, "bob", "closed").await.unwrap();
        assert_eq!(
            (
                removed.status.as_str(),
                removed.removed_by.as_deref(),
                removed.remove_reason.as_deref(),
                removed.updated_at_us - removed.created_at_us
            ),
            ("removed", Some("bob"), Some("closed"), 1_001)
        );
        assert_eq!(
            refused(a.remove(&first.entry_id, "bob", "").await),
            format!(
                "INVALID_STATE: cloud account entry {} is already removed",
                first.entry_id
            )
        );
        assert_eq!(
            refused(a.remove("cloud_nope", "bob", "").await),
            "NOT_FOUND: no cloud account entry cloud_nope"
        );
        // Removed, the account may be registered again.
        let again = a.add(&new_account("gcp", "proj-1")).await.unwrap();
        let list: Vec<(String, String)> = a
            .list()
            .await
            .unwrap()
            .into_iter()
            .map(|v| (v.entry_id, v.status))
            .collect();
        assert_eq!(
            list,
            vec![
                (first.entry_id.clone(), "removed".into()),
                (aws.entry_id.clone(), "active".into()),
                (again.entry_id.clone(), "active".into()),
            ]
        );
        let s = "cloud-account/gcp/proj-1".to_owned();
        assert_eq!(
            cloud_events(&f.store).await,
            vec![
                ("attestor.entry.added".into(), s.clone(), 1),
                (
                    "attestor.entry.added".into(),
                    "cloud-account/aws/proj-1".into(),
                    1
                ),
                ("attestor.entry.removed".into(), s.clone(), 2),
                ("attestor.entry.added".into(), s, 3),
            ]
        );
        // A rebuild gives the same table at every batch size.
        let tables = projections::identity::tables();
        assert!(tables.iter().any(|t| t.name == "attestor_entries"));
        let inline = projections::digest_tables(&f.store, &tables).await.unwrap();
        for batch in [1, 2, 500] {
            projections::rebuild(&f.store, &projections::identity::all(), None, batch, |_| {})
                .await
                .unwrap();
            assert_eq!(
                inline,
                projections::digest_tables(&f.store, &tables).await.unwrap(),
                "batch {batch}"
            );
        }
    }
}

/// (Postgres) 20 adds of one account at once: exactly one entry is active, the others are
/// refused as already registered.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_active_entry_per_account_when_adds_race() {
    let db = TestDb::postgres().await.unwrap();
    let store = EventStore::Postgres(db.pg_store(30).await.unwrap());
    let f = Arc::new(fixture_on(db, store).await);
    let barrier = Arc::new(tokio::sync::Barrier::new(20));
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..20 {
        let a = accounts(&f);
        let barrier = barrier.clone();
        tasks.spawn(async move {
            barrier.wait().await;
            a.add(&new_account("aws", "123456789012")).await
        });
    }
    let (mut added, mut exists) = (0, 0);
    while let Some(r) = tasks.join_next().await {
        match r.unwrap() {
            Ok(_) => added += 1,
            Err(AttestError::Refused(e)) if e.to_string().contains("already registered") => {
                exists += 1
            }
            Err(e) => panic!("unexpected: {e}"),
        }
    }
    assert_eq!((added, exists), (1, 19));
    let active = accounts(&f)
        .list()
        .await
        .unwrap()
        .into_iter()
        .filter(|v| v.status == "active")
        .count();
    assert_eq!(active, 1);
    assert_eq!(cloud_events(&f.store).await.len(), 1);
}

fn service(f: &Fixture) -> JoinService {
    let config = CloudIidConfig {
        max_age: Duration::from_secs(600),
        gcp: Some(GcpConfig {
            jwks: key().jwks(),
            audience: AUDIENCE.into(),
        }),
        ..CloudIidConfig::default()
    };
    let mut registry = AttestorRegistry::builtin();
    registry.register_in_process(Arc::new(CloudIidAttestor::new(config).unwrap()));
    f.svc.clone().with_attestors(registry)
}

fn gcp_join(f: &Fixture, project: &str, instance: &str) -> JoinRequest {
    let iat = f.clock.now().unix_timestamp();
    let evidence = CloudIidEvidence {
        provider: "gcp".into(),
        document: key().jwt(&gcp_claims(AUDIENCE, project, instance, iat)),
        signature: None,
    };
    JoinRequest {
        attestor: "cloud-iid".into(),
        input: JoinInput {
            csr_der: Agent::new().csr.clone(),
            role: "node".into(),
            attestation: evidence.to_bytes(),
            ..JoinInput::default()
        },
    }
}

async fn last_reason(store: &EventStore) -> String {
    refusals(store).await.last().expect("a refusal").1.clone()
}

#[tokio::test]
async fn a_registered_instance_joins_once_and_an_unknown_account_is_refused() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let svc = service(&f);
        assert_join_denied(svc.join(&gcp_join(&f, "proj-1", "4711")).await);
        assert_eq!(last_reason(&f.store).await, "cloud-iid:unknown-instance");

        accounts(&f)
            .add(&new_account("gcp", "proj-1"))
            .await
            .unwrap();
        let answer = svc.join(&gcp_join(&f, "proj-1", "4711")).await.unwrap();
        let node = svc.show_node(&answer.node_id).await.unwrap().node;
        assert_eq!(
            (
                node.tenant_id.as_str(),
                node.site_id.as_str(),
                node.pool_id.as_str(),
                node.attestor.as_str()
            ),
            ("acme", "eu1", "web", "cloud-iid")
        );
        // The same instance again, with a fresh document and a new key.
        let again = svc.join(&gcp_join(&f, "proj-1", "4711")).await;
        assert!(
            matches!(again, Err(IdentityError::AccessDenied(_))),
            "{again:?}"
        );
        assert_eq!(last_reason(&f.store).await, "cloud-iid:instance-reused");
        // Another instance of the account joins.
        svc.join(&gcp_join(&f, "proj-1", "4712")).await.unwrap();
        assert_eq!(svc.list_nodes(None).await.unwrap().len(), 2);
        // A removed account's instances no longer join.
        let entry = accounts(&f).list().await.unwrap().remove(0);
        accounts(&f)
            .remove(&entry.entry_id, "bob", "")
            .await
            .unwrap();
        assert_join_denied(svc.join(&gcp_join(&f, "proj-1", "4713")).await);
        assert_eq!(last_reason(&f.store).await, "cloud-iid:unknown-instance");
    }
}
