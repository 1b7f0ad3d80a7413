//! `projections::apply_all` and deferred writes: a projection that may read through the
//! connection runs only after the writes queued before it were sent. Both backends.

use events::schema::JoinTokenCreated;
use events::store::testkit::TestDb;
use events::store::{ExpectedVersion, LogStore, LogTx, StoreTx};
use events::{NewEvent, RecordedEvent};
use projections::{apply_all, BoxFuture, Projection, ProjectionError, TableSpec};
use std::sync::Mutex;

/// Counts `join_tokens` rows through the connection, first thing, whenever it applies.
struct TokenCounter {
    seen: Mutex<Vec<i64>>,
}

impl Projection for TokenCounter {
    fn name(&self) -> &'static str {
        "token_counter"
    }
    fn tables(&self) -> &'static [TableSpec] {
        &[]
    }
    fn handles(&self, event_type: &str) -> bool {
        event_type == "token.created"
    }
    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        _events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            let count = projections::inspect::row_count(tx, "join_tokens").await?;
            self.seen.lock().expect("lock").push(count);
            Ok(())
        })
    }
}

#[tokio::test]
async fn a_projection_that_reads_sees_the_writes_deferred_before_it() {
    for db in TestDb::each().await.unwrap() {
        let store = db.store().await.unwrap();
        let counter = TokenCounter {
            seen: Mutex::new(Vec::new()),
        };
        let token = JoinTokenCreated {
            token_id: "tok_1".into(),
            tenant_id: "t1".into(),
            site_id: "s1".into(),
            pool_id: "p1".into(),
            role: "node".into(),
            uses: 1,
            expires_at_us: 1_900_000_000_000_000,
            secret_sha256: vec![7; 32],
            ..Default::default()
        };
        let new =
            NewEvent::from_payload(events::new_event_id(), "t1", 1_800_000_000_000_000, &token);
        let mut tx = store.begin().await.unwrap();
        let appended = tx
            .append(
                "token/tok_1",
                ExpectedVersion::NoStream,
                std::slice::from_ref(&new),
            )
            .await
            .unwrap();
        let recorded = appended.recorded("token/tok_1", std::slice::from_ref(&new));
        // The token projection defers its insert; the counter reads next.
        apply_all(
            &[&projections::identity::JoinTokens, &counter],
            &mut tx,
            &recorded,
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(
            *counter.seen.lock().unwrap(),
            vec![1],
            "backend postgres={}",
            db.is_postgres()
        );
    }
}
