//! The test-database sweep (Postgres): databases left by killed test runs are dropped once they
//! are older than the cut-off; younger ones, ones still in use and ones named otherwise stay.

use std::time::Duration;

use events::store::testkit::{replace_database, server_url, sweep_stale_databases, unix_now};
use sqlx::Connection;

async fn create(admin: &mut sqlx::PgConnection, name: &str) {
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut *admin)
        .await
        .expect("create");
}

async fn exists(admin: &mut sqlx::PgConnection, name: &str) -> bool {
    sqlx::query_scalar::<_, i64>("SELECT count(*) FROM pg_database WHERE datname = $1")
        .bind(name)
        .fetch_one(&mut *admin)
        .await
        .expect("count")
        == 1
}

#[tokio::test]
async fn stale_test_databases_are_swept_and_others_stay() {
    let url = server_url();
    let mut admin = sqlx::PgConnection::connect(&url).await.expect("connect");
    let tag = uuid::Uuid::new_v4().simple().to_string();
    // Created "in 2001" (stale), "in 2001" but still in use, now (young), and an old-style name.
    let stale = format!("bc_test_1000000000_{tag}");
    let in_use = format!("bc_test_1000000001_{tag}");
    let young = format!("bc_test_{}_{tag}", unix_now());
    let unnamed = format!("bc_test_{tag}");
    for name in [&stale, &in_use, &young, &unnamed] {
        create(&mut admin, name).await;
    }
    let holder = sqlx::PgConnection::connect(&replace_database(&url, &in_use))
        .await
        .expect("connect to the database in use");

    let dropped = sweep_stale_databases(&url, Duration::from_secs(3600))
        .await
        .expect("sweep");
    assert!(dropped.contains(&stale), "{dropped:?}");
    for name in [&in_use, &young, &unnamed] {
        assert!(!dropped.contains(name), "{name} was dropped");
    }
    assert!(!exists(&mut admin, &stale).await);
    assert!(exists(&mut admin, &in_use).await);
    assert!(exists(&mut admin, &young).await);
    assert!(exists(&mut admin, &unnamed).await);

    holder.close().await.expect("close");
    for name in [&in_use, &young, &unnamed] {
        sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&mut admin)
            .await
            .expect("clean up");
    }
}
