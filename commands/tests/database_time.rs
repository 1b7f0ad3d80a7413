//! Issue 40 item 5: one clock for decisions across api replicas, the database's. Two replicas
//! over one Postgres database whose process clocks are two hours apart (each a simulated clock
//! the test sets) decide token expiry and the renewal's ±60 s window alike, by the database's
//! `now()`; a replica's own clock no longer moves either decision.

use crate::identity_support::*;

use std::sync::Arc;

use commands::identity::{IdentityConfig, JoinService};
use commands::{Clock, DatabaseClock, SimClock};
use domain::pki::{KeySet, KeySetLifetimes, TrustDomain};
use events::store::testkit::TestDb;
use time::OffsetDateTime;

const HOUR_US: i64 = 3_600_000_000;

/// A replica's clock: decisions at the database's time, over its own (skewed) process clock.
fn replica_clock(process: SimClock) -> Arc<dyn Clock> {
    Arc::new(DatabaseClock::over(Arc::new(process)))
}

fn real_now_us() -> i64 {
    i64::try_from(OffsetDateTime::now_utc().unix_timestamp_nanos() / 1000).unwrap()
}

/// A replica over `store` with the shared `keys`, its process clock `skew_us` off the real time.
fn replica(store: &events::store::EventStore, keys: &Arc<KeySet>, skew_us: i64) -> JoinService {
    let td = TrustDomain::new(TD).unwrap();
    let clock = replica_clock(SimClock::at_us(real_now_us() + skew_us));
    JoinService::new(store.clone(), keys.clone(), clock, IdentityConfig::new(td)).unwrap()
}

/// A fixture whose JoinService is `svc` (the helpers take a fixture for its keys).
async fn fixture_with(db: TestDb, keys: Arc<KeySet>, svc: JoinService) -> Fixture {
    let store = svc.store().clone();
    Fixture {
        db,
        store,
        clock: SimClock::at_us(real_now_us()),
        keys,
        svc,
    }
}

#[tokio::test]
async fn replicas_with_skewed_clocks_judge_token_expiry_and_the_renew_window_by_the_database() {
    let db = TestDb::postgres().await.unwrap();
    let store = db.store().await.unwrap();
    let td = TrustDomain::new(TD).unwrap();
    let keys = Arc::new(
        KeySet::generate(
            td,
            OffsetDateTime::now_utc() - time::Duration::days(1),
            KeySetLifetimes::default(),
        )
        .unwrap(),
    );
    // Two hours fast, two hours slow.
    let fast = replica(&store, &keys, 2 * HOUR_US);
    let slow = replica(&store, &keys, -2 * HOUR_US);
    let f = fixture_with(db, keys.clone(), slow).await;

    // A token of one hour, made on the slow replica: it ends an hour after the database's now.
    let live = f.svc.create_token(&token_spec("t1")).await.unwrap();
    // The fast replica's clock is past its end; the database's is not: admitted.
    let agent = Agent::new();
    let request = join_request(&f, &agent, &live.secret, "node", Default::default());
    let joined = fast
        .join(&request)
        .await
        .expect("the token is live in database time");

    // A token that ended an hour ago in database time (made by a process that judged on its
    // own clock, three hours slow): the slow replica's clock is before its end, the database's
    // after it: refused as expired.
    let old_process = JoinService::new(
        store.clone(),
        keys.clone(),
        Arc::new(SimClock::at_us(real_now_us() - 2 * HOUR_US)),
        IdentityConfig::new(TrustDomain::new(TD).unwrap()),
    )
    .unwrap();
    let stale = old_process.create_token(&token_spec("t1")).await.unwrap();
    let late = Agent::new();
    let request = join_request(&f, &late, &stale.secret, "node", Default::default());
    assert_join_denied(f.svc.join(&request).await);
    assert_last_refusal(&store, "t1", "join-token:expired").await;

    // The renewal's ±60 s window: a proof made at the real time renews on the fast replica
    // (its own clock two hours ahead); one 61 s old is refused by a replica whose own clock is
    // 61 s slow (on its clock the proof is fresh; on the database's it is not).
    let leaf = joined.certificate_chain[0].clone();
    let next = Agent::new();
    let renew = renew_request(&agent, &leaf, &joined.node_id, &next, real_now_us() / 1000);
    let renewed = fast
        .renew(&renew)
        .await
        .expect("the proof is fresh in database time");
    let new_leaf = renewed.certificate_chain[0].clone();
    let n2 = Agent::new();
    let stale_proof = renew_request(
        &next,
        &new_leaf,
        &joined.node_id,
        &n2,
        real_now_us() / 1000 - 61_000,
    );
    let lagging = replica(&store, &keys, -61_000_000);
    assert_renew_denied(lagging.renew(&stale_proof).await);
    assert_last_refusal(&store, "t1", "renew:clock-window").await;
    // What both answered was stamped with the database's time, not a replica's.
    let stamped = renewed.server_time_us;
    assert!(
        (stamped - real_now_us()).abs() < 60_000_000,
        "the renewal's server time {stamped} is the database's, not the fast replica's"
    );
}
