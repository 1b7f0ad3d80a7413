//! Operator certificates (issue 23) on both backends: `commands::operators` issues, lists and
//! revokes with each refusal's exact text; the events land on `operator/<name>` in the
//! deployment tenant; `revoked_serials` answers the revoked ones; and rebuilding
//! `operator_certs` from the log (every projection, as `bcctl rebuild`, at several batch sizes
//! and at a cut before the revocations) gives byte-identical tables to the ones built inline.
//! Each event records the actor whose store appended it (a local admin issues the first
//! certificate, the admin it names issues and revokes the rest, as over the admin API), and
//! rebuilding leaves the log's actors as they were.

use std::collections::BTreeSet;

use commands::operators::{
    issue_operator, list_operators, revoke_operator, revoked_serials, OperatorError,
};
use commands::{Clock, SimClock};
use domain::operator::check_issue;
use domain::pki::{KeyRole, KeySet, KeySetLifetimes, OperatorIdentity, PrivateKey, TrustDomain};
use events::store::testkit::TestDb;
use events::store::{EventStore, LogStore};
use events::Actor;

fn keys() -> KeySet {
    KeySet::generate(
        TrustDomain::new("replay.example.com").expect("td"),
        time::OffsetDateTime::now_utc(),
        KeySetLifetimes::default(),
    )
    .expect("keys")
}

async fn issue(
    store: &EventStore,
    clock: &SimClock,
    keys: &KeySet,
    name: &str,
    role: &str,
) -> String {
    let key = PrivateKey::generate(KeyRole::Node).expect("key");
    let decision = check_issue(name, role, 30).expect("decision");
    let issued = issue_operator(
        store,
        clock,
        &decision,
        keys.operator_ca.as_ref().expect("operator CA"),
        key.public_key(),
    )
    .await
    .expect("issued");
    let id = OperatorIdentity::from_leaf_der(&issued.certificate.der, &keys.trust_domain)
        .expect("identity");
    assert_eq!(id.spiffe_id, issued.spiffe_id);
    issued.certificate.serial.to_hex()
}

fn refusal<T: std::fmt::Debug>(r: Result<T, OperatorError>) -> String {
    match r {
        Err(e @ OperatorError::Refused(_)) => e.to_string(),
        other => panic!("not a refusal: {other:?}"),
    }
}

async fn digest(store: &EventStore) -> String {
    let tables: Vec<projections::TableSpec> = commands::every_projection()
        .iter()
        .flat_map(|p| p.tables().iter().copied())
        .collect();
    projections::digest_tables(store, &tables)
        .await
        .expect("digest")
}

#[tokio::test]
async fn operator_certificates_issue_revoke_and_rebuild_equal_on_both_backends() {
    let keys = keys();
    for db in TestDb::each().await.expect("databases") {
        let plain = db.store().await.expect("store");
        let local = Actor::new("local:root@ops-1", "admin").expect("actor");
        let alice_id =
            Actor::new("spiffe://replay.example.com/operator/alice", "admin").expect("actor");
        let clock = SimClock::at_us(1_790_000_000_000_000);
        let alice = issue(
            &plain.acting_as(local.clone()),
            &clock,
            &keys,
            "alice",
            "admin",
        )
        .await;
        let store = plain.acting_as(alice_id.clone());
        clock.advance_secs(5);
        let bob = issue(&store, &clock, &keys, "bob", "approver").await;
        clock.advance_secs(5);
        let bob2 = issue(&store, &clock, &keys, "bob", "auditor").await;
        let before_revocations = store.head_position().await.expect("head");

        let list = list_operators(&store).await.expect("list");
        let rows: Vec<(&str, &str, &str, bool)> = list
            .iter()
            .map(|c| {
                (
                    c.serial.as_str(),
                    c.name.as_str(),
                    c.role.as_str(),
                    c.revoked,
                )
            })
            .collect();
        assert_eq!(
            rows,
            vec![
                (alice.as_str(), "alice", "admin", false),
                (bob.as_str(), "bob", "approver", false),
                (bob2.as_str(), "bob", "auditor", false),
            ]
        );
        assert_eq!(
            list[1].spiffe_id,
            "spiffe://replay.example.com/operator/bob"
        );
        assert!(revoked_serials(&store).await.expect("serials").is_empty());

        clock.advance_secs(5);
        // Upper case and openssl's colons name the same serial.
        let spelled = bob.to_uppercase();
        let outcome = revoke_operator(&store, &clock, &spelled, "left the team")
            .await
            .expect("revoked");
        assert!(outcome.recorded);
        assert!(outcome.certificate.revoked);
        assert_eq!(
            outcome.certificate.revoke_reason.as_deref(),
            Some("left the team")
        );
        assert_eq!(outcome.certificate.revoked_at_us, Some(clock.now_us()));
        let again = revoke_operator(&store, &clock, &bob, "again")
            .await
            .expect("idempotent");
        assert!(!again.recorded, "already revoked: nothing appended");
        assert_eq!(
            again.certificate.revoke_reason.as_deref(),
            Some("left the team")
        );

        assert_eq!(
            refusal(revoke_operator(&store, &clock, "abcdef", "x").await),
            "NOT_FOUND: no operator certificate has serial abcdef (`bcctl operator list` shows them)"
        );
        assert_eq!(
            refusal(revoke_operator(&store, &clock, "zz", "x").await),
            "INVALID_INPUT: --serial \"zz\": not a certificate serial (1 to 20 bytes of hex, as `bcctl operator list` prints it)"
        );
        assert_eq!(
            refusal(revoke_operator(&store, &clock, &alice, "").await),
            "INVALID_INPUT: --reason: say why the certificate is revoked (it is recorded in the event)"
        );
        revoke_operator(&store, &clock, &bob2, "rotated")
            .await
            .expect("revoked");

        let expected: BTreeSet<Vec<u8>> = [&bob, &bob2]
            .iter()
            .map(|s| hex::decode(s).expect("hex"))
            .collect();
        assert_eq!(revoked_serials(&store).await.expect("serials"), expected);

        let events = store.read_batch(0, 1000).await.expect("events");
        let shape: Vec<(&str, &str, i64, &str, Option<&Actor>)> = events
            .iter()
            .map(|e| {
                (
                    e.event_type.as_str(),
                    e.stream_id.as_str(),
                    e.stream_version,
                    e.tenant_id.as_str(),
                    e.actor.as_ref(),
                )
            })
            .collect();
        let by_alice = Some(&alice_id);
        assert_eq!(
            shape,
            vec![
                (
                    "operator.cert.issued",
                    "operator/alice",
                    1,
                    "deployment",
                    Some(&local)
                ),
                (
                    "operator.cert.issued",
                    "operator/bob",
                    1,
                    "deployment",
                    by_alice
                ),
                (
                    "operator.cert.issued",
                    "operator/bob",
                    2,
                    "deployment",
                    by_alice
                ),
                (
                    "operator.cert.revoked",
                    "operator/bob",
                    3,
                    "deployment",
                    by_alice
                ),
                (
                    "operator.cert.revoked",
                    "operator/bob",
                    4,
                    "deployment",
                    by_alice
                ),
            ],
            "backend postgres={}",
            db.is_postgres()
        );

        let live = digest(&store).await;
        let all = commands::every_projection();
        for batch in [1, 2, 1000] {
            projections::rebuild(&store, &all, None, batch, |_| {})
                .await
                .expect("rebuild");
            assert_eq!(digest(&store).await, live, "batch {batch}");
        }
        // A rebuild up to before the revocations shows nothing revoked; the whole log again
        // gives the live tables back.
        projections::rebuild(&store, &all, Some(before_revocations), 2, |_| {})
            .await
            .expect("cut");
        assert!(list_operators(&store)
            .await
            .expect("list")
            .iter()
            .all(|c| !c.revoked));
        assert!(revoked_serials(&store).await.expect("serials").is_empty());
        projections::rebuild(&store, &all, None, 3, |_| {})
            .await
            .expect("rebuild");
        assert_eq!(digest(&store).await, live);
        let after: Vec<Option<Actor>> = plain
            .read_batch(0, 1000)
            .await
            .expect("events")
            .into_iter()
            .map(|e| e.actor)
            .collect();
        let before: Vec<Option<Actor>> = events.into_iter().map(|e| e.actor).collect();
        assert_eq!(
            after, before,
            "a rebuild leaves the log's actors as they were"
        );
    }
}
