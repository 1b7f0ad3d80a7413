//! The generic attestor entries over a log written before them (issue 39), on Postgres and
//! SQLite: the TPM allow-list's and the cloud accounts' old events (`tpm.ek.allowed` /
//! `tpm.ek.allow.revoked`, `cloud.account.added` / `cloud.account.removed`) replay into
//! `attestor_entries` as entries of `tpm-allow` and `cloud-account`; the generic stack revokes
//! and re-adds on the same streams, continuing their versions; a rebuild gives the same table.

use std::sync::Arc;

use commands::attest::{AttestError, CloudAccounts, NewCloudAccount, NewTpmAllow, TpmAllows};
use commands::Clock;
use events::schema::{CloudAccountAdded, CloudAccountRemoved, TpmEkAllowRevoked, TpmEkAllowed};
use events::store::testkit::TestDb;
use events::store::ExpectedVersion;
use events::{new_event_id, EventPayload, NewEvent};

use crate::identity_support::*;

const EK: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

async fn append<P: EventPayload>(f: &Fixture, stream: &str, payload: &P) {
    let mut tx = commands::run::begin(&f.store).await.unwrap();
    let event = NewEvent::from_payload(new_event_id(), "acme", f.clock.now_us(), payload);
    commands::append_and_project(
        &mut tx,
        &projections::identity::all(),
        stream,
        ExpectedVersion::Any,
        &[event],
    )
    .await
    .unwrap();
    commands::run::commit(tx).await.unwrap();
}

/// The log of before issue 39: an EK allowed, revoked, allowed again; an account added and
/// removed.
async fn old_log(f: &Fixture) {
    let ek = hex::decode(EK).unwrap();
    let tpm = format!("tpm-ek/{EK}");
    let allowed = |id: &str| TpmEkAllowed {
        allow_id: id.into(),
        ek_sha256: ek.clone(),
        tenant_id: "acme".into(),
        site_id: "par1".into(),
        pool_id: "edge".into(),
        actor: "alice".into(),
        note: "rack 4".into(),
    };
    append(f, &tpm, &allowed("tpma_old1")).await;
    let revoked = TpmEkAllowRevoked {
        allow_id: "tpma_old1".into(),
        actor: "bob".into(),
        reason: "moved".into(),
        ek_sha256: ek.clone(),
    };
    append(f, &tpm, &revoked).await;
    append(f, &tpm, &allowed("tpma_old2")).await;
    let cloud = "cloud-account/gcp/proj-1";
    let added = CloudAccountAdded {
        entry_id: "cloud_old1".into(),
        provider: "gcp".into(),
        account: "proj-1".into(),
        tenant_id: "acme".into(),
        site_id: "eu1".into(),
        pool_id: "web".into(),
        role: "node".into(),
        actor: "alice".into(),
    };
    append(f, cloud, &added).await;
    let removed = CloudAccountRemoved {
        entry_id: "cloud_old1".into(),
        provider: "gcp".into(),
        account: "proj-1".into(),
        actor: "bob".into(),
        reason: "closed".into(),
    };
    append(f, cloud, &removed).await;
}

fn refused<T: std::fmt::Debug>(r: Result<T, AttestError>) -> String {
    match r {
        Err(AttestError::Refused(e)) => e.to_string(),
        other => panic!("not a refusal: {other:?}"),
    }
}

#[tokio::test]
async fn old_list_events_replay_into_the_generic_entries_and_the_streams_continue() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        old_log(&f).await;
        let clock: Arc<dyn Clock> = Arc::new(f.clock.clone());
        let tpm = TpmAllows::new(f.store.clone(), clock.clone());
        let listed: Vec<(String, String, String, String)> = tpm
            .list()
            .await
            .unwrap()
            .into_iter()
            .map(|e| (e.allow_id, e.ek_sha256, e.status, e.note))
            .collect();
        let row = |id: &str, status: &str| (id.into(), EK.into(), status.into(), "rack 4".into());
        assert_eq!(
            listed,
            vec![row("tpma_old1", "revoked"), row("tpma_old2", "active")]
        );
        // The old active entry still holds the EK; the generic stack revokes it on its stream.
        let again = NewTpmAllow {
            ek_sha256_hex: EK.into(),
            tenant_id: "acme".into(),
            site_id: "par1".into(),
            pool_id: "core".into(),
            actor: "carol".into(),
            note: String::new(),
        };
        assert_eq!(
            refused(tpm.allow(&again).await),
            format!("INVALID_STATE: EK {EK} is already allowed by tpma_old2 (revoke it first)")
        );
        tpm.revoke("tpma_old2", "carol", "swap").await.unwrap();
        let third = tpm.allow(&again).await.unwrap();
        assert_eq!(third.pool_id, "core");

        let cloud = CloudAccounts::new(f.store.clone(), clock);
        let accounts = cloud.list().await.unwrap();
        assert_eq!(accounts.len(), 1);
        assert_eq!(
            (
                accounts[0].provider.as_str(),
                accounts[0].account.as_str(),
                accounts[0].role.as_str(),
                accounts[0].status.as_str()
            ),
            ("gcp", "proj-1", "node", "removed")
        );
        let re_added = cloud
            .add(&NewCloudAccount {
                provider: "gcp".into(),
                account: "proj-1".into(),
                tenant_id: "acme".into(),
                site_id: "eu1".into(),
                pool_id: "web".into(),
                role: "node".into(),
                actor: "alice".into(),
            })
            .await
            .unwrap();
        assert_eq!(re_added.status, "active");

        // Old and new events on one stream per key, versions continuing.
        let streams: Vec<(String, String, i64)> = all_events(&f.store)
            .await
            .into_iter()
            .filter(|e| e.stream_id.starts_with("tpm-ek/") || e.stream_id.starts_with("cloud-"))
            .map(|e| (e.event_type, e.stream_id, e.stream_version))
            .collect();
        let (t, c) = (
            format!("tpm-ek/{EK}"),
            "cloud-account/gcp/proj-1".to_owned(),
        );
        assert_eq!(
            streams,
            vec![
                ("tpm.ek.allowed".into(), t.clone(), 1),
                ("tpm.ek.allow.revoked".into(), t.clone(), 2),
                ("tpm.ek.allowed".into(), t.clone(), 3),
                ("cloud.account.added".into(), c.clone(), 1),
                ("cloud.account.removed".into(), c.clone(), 2),
                ("attestor.entry.removed".into(), t.clone(), 4),
                ("attestor.entry.added".into(), t, 5),
                ("attestor.entry.added".into(), c, 3),
            ]
        );

        // A rebuild gives the same table at every batch size.
        let tables = projections::identity::tables();
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
