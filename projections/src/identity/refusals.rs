//! `refusal_counters`: refusals per kind, reason and minute window, recorded and suppressed.

use std::collections::BTreeMap;

use events::schema::{JoinRefused, RefusalsSuppressed, RenewRefused};
use events::store::{EventStore, StoreError, StoreTx};
use events::{EventPayload, RecordedEvent};

use super::writes::{bulk, greatest, to_i64};
use crate::{BoxFuture, Projection, ProjectionError, TableSpec};

/// `refusal_counters`: per (kind, refusal, minute window), refusals recorded one by one and
/// refusals suppressed by the rate bound.
pub struct RefusalCounters;

const REFUSAL_COUNTERS_TABLES: &[TableSpec] = &[TableSpec {
    name: "refusal_counters",
    columns: &[
        "kind",
        "refusal",
        "window_start_us",
        "recorded",
        "suppressed",
        "position",
    ],
    order_by: "kind, refusal, window_start_us",
}];

impl Projection for RefusalCounters {
    fn name(&self) -> &'static str {
        "refusal_counters"
    }
    fn tables(&self) -> &'static [TableSpec] {
        REFUSAL_COUNTERS_TABLES
    }
    fn only_writes(&self) -> bool {
        true
    }
    fn handles(&self, event_type: &str) -> bool {
        [
            JoinRefused::EVENT_TYPE,
            RenewRefused::EVENT_TYPE,
            RefusalsSuppressed::EVENT_TYPE,
        ]
        .contains(&event_type)
    }
    fn apply<'a>(
        &'a self,
        tx: &'a mut StoreTx,
        events: &'a [&'a RecordedEvent],
    ) -> BoxFuture<'a, Result<(), ProjectionError>> {
        Box::pin(async move {
            // Counts add up and the position is a maximum, so a run folds into one upsert per
            // (kind, refusal, window) with the same result as applying its events one by one.
            let max = greatest(tx);
            let mut sums: BTreeMap<(String, String, i64), (i64, i64, i64)> = BTreeMap::new();
            for e in events {
                let (kind, refusal, window, recorded, suppressed) = match e.event_type.as_str() {
                    JoinRefused::EVENT_TYPE => {
                        let p: JoinRefused = e.decode()?;
                        ("join".to_owned(), p.refusal, p.window_start_us, 1i64, 0i64)
                    }
                    RenewRefused::EVENT_TYPE => {
                        let p: RenewRefused = e.decode()?;
                        ("renew".to_owned(), p.refusal, p.window_start_us, 1, 0)
                    }
                    RefusalsSuppressed::EVENT_TYPE => {
                        let p: RefusalsSuppressed = e.decode()?;
                        let count = to_i64(p.count, e, "refusal_counters")?;
                        (p.kind, p.refusal, p.window_start_us, 0, count)
                    }
                    _ => continue,
                };
                let sum = sums
                    .entry((kind, refusal, window))
                    .or_insert((0, 0, e.position));
                sum.0 = sum.0.saturating_add(recorded);
                sum.1 = sum.1.saturating_add(suppressed);
                sum.2 = sum.2.max(e.position);
            }
            let rows = sums
                .into_iter()
                .map(
                    |((kind, refusal, window), (recorded, suppressed, position))| {
                        vec![
                            kind.into(),
                            refusal.into(),
                            window.into(),
                            recorded.into(),
                            suppressed.into(),
                            position.into(),
                        ]
                    },
                )
                .collect();
            bulk(
                tx,
                "refusal_counters",
                "INSERT INTO refusal_counters (kind, refusal, window_start_us, recorded, \
                 suppressed, position) VALUES ",
                &format!(
                    " ON CONFLICT (kind, refusal, window_start_us) DO UPDATE SET \
                     recorded = refusal_counters.recorded + excluded.recorded, \
                     suppressed = refusal_counters.suppressed + excluded.suppressed, \
                     position = {max}(refusal_counters.position, excluded.position)"
                ),
                rows,
                None,
            )
            .await?;
            Ok(())
        })
    }
}

/// (kind, refusal, recorded, suppressed) summed over every window, in (kind, refusal) order:
/// how many refusals of each reason there were in all.
pub async fn refusal_totals(
    store: &EventStore,
) -> Result<Vec<(String, String, i64, i64)>, StoreError> {
    store
        .fetch_all(
            "SELECT kind, refusal, CAST(SUM(recorded) AS BIGINT), CAST(SUM(suppressed) AS BIGINT) \
             FROM refusal_counters GROUP BY kind, refusal ORDER BY kind, refusal",
            &[],
        )
        .await
}
