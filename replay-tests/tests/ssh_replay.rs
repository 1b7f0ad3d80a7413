//! Break-glass SSH certificates (issue 42) on both backends: `commands::ssh` issues for seeded
//! nodes and revokes (a repeat appends nothing), the KRL's serials are the revoked ones, and
//! rebuilding `ssh_certificates` from the log (every projection, as `bcctl rebuild`, at several
//! batch sizes) gives byte-identical tables to the ones built inline, with the actors kept.

use commands::ssh::{issue_ssh_cert, krl_serials, list_ssh_certs, revoke_ssh_cert};
use commands::{Clock, SimClock};
use domain::pki::SshCa;
use domain::ssh::issue::IssueRequest;
use events::store::testkit::TestDb;
use events::store::{EventStore, ExpectedVersion, LogStore, LogTx};
use events::Actor;

const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGYkHP8amoYVXBZOa2Vs7taXbM/nbyOATnjN0tvxaASr replay";

async fn seed_node(store: &EventStore, node_id: &str) {
    let mut tx = store.begin().await.expect("begin");
    let joined = events::schema::NodeJoined {
        node_id: node_id.into(),
        tenant_id: "t1".into(),
        site_id: "s1".into(),
        pool_id: "p1".into(),
        role: "node".into(),
        attestor: "join-token".into(),
        node_key: "unattested".into(),
        token_id: "tok_seed".into(),
        identity_generation: 1,
        ..Default::default()
    };
    commands::append_and_project(
        &mut tx,
        &projections::identity::all(),
        &format!("node/{node_id}"),
        ExpectedVersion::NoStream,
        &[events::NewEvent::from_payload(
            events::new_event_id(),
            "t1",
            1_790_000_000_000_000,
            &joined,
        )],
    )
    .await
    .expect("seed");
    tx.commit().await.expect("commit");
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
async fn ssh_certificates_issue_revoke_and_rebuild_equal_on_both_backends() {
    let ca = SshCa::generate().expect("ca");
    for db in TestDb::each().await.expect("databases") {
        let plain = db.store().await.expect("store");
        seed_node(&plain, "node-0").await;
        let actor = Actor::new("spiffe://replay.example.com/operator/ops", "operator").expect("a");
        let store = plain.acting_as(actor.clone());
        let clock = SimClock::at_us(1_790_000_100_000_000);
        let mut serials = Vec::new();
        for account in ["root", "deploy", "ops"] {
            let request = IssueRequest {
                node_id: "node-0",
                account,
                public_key: KEY,
                ttl: time::Duration::minutes(30),
                operator: actor.id(),
                credential_not_after: None,
            };
            let issued = issue_ssh_cert(&store, &clock, &request, Some(&ca))
                .await
                .expect("issued");
            serials.push(issued.serial);
            clock.advance_secs(5);
        }
        let first = revoke_ssh_cert(&store, &clock, serials[0], "done")
            .await
            .expect("revoke");
        assert!(first.recorded);
        let again = revoke_ssh_cert(&store, &clock, serials[0], "done")
            .await
            .expect("again");
        assert!(!again.recorded);
        let (krl, version) = krl_serials(&store, clock.now().unix_timestamp())
            .await
            .expect("krl");
        assert_eq!(krl, vec![serials[0]]);
        assert!(version > 0);
        let rows = list_ssh_certs(&store, Some("node-0")).await.expect("list");
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0].revoked_by.as_deref(), Some(actor.id()));

        let live = digest(&store).await;
        let all = commands::every_projection();
        for batch in [1, 2, 1000] {
            projections::rebuild(&store, &all, None, batch, |_| {})
                .await
                .expect("rebuild");
            assert_eq!(digest(&store).await, live, "batch {batch}");
        }
        let rows_after = list_ssh_certs(&store, None).await.expect("list");
        assert_eq!(rows_after, rows);
    }
}
