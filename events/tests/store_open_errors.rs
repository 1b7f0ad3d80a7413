//! Opening a store that cannot be opened: each reason told apart, with the way out (issue 44,
//! item 7). A Postgres server that refuses a connection for want of a free one is not a wrong
//! URL; a port nobody listens on is.

use events::store::testkit::{server_url, TestDb};
use events::store::{EventStore, StoreError};
use sqlx::Connection;

/// `url` with its user replaced by `user` (no password: the test server trusts local users).
fn as_user(url: &str, user: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("a URL with a scheme");
    let host_and_db = rest.rsplit_once('@').map_or(rest, |(_, after)| after);
    format!("{scheme}://{user}@{host_and_db}")
}

/// A role that may log in but has no connection slot (`CONNECTION LIMIT 0`): the server answers
/// SQLSTATE 53300, as it does when `max_connections` is used up.
#[tokio::test]
async fn a_server_with_no_free_connection_is_told_apart_from_a_wrong_url() {
    let db = TestDb::postgres().await.expect("postgres test db");
    let role = format!("bc_nofree_{}", uuid::Uuid::new_v4().simple());
    let mut admin = sqlx::PgConnection::connect(&server_url())
        .await
        .expect("admin connection");
    sqlx::query(&format!("CREATE ROLE {role} LOGIN CONNECTION LIMIT 0"))
        .execute(&mut admin)
        .await
        .expect("create role");
    let url = as_user(db.url(), &role);
    let opened = EventStore::open(&url).await;
    sqlx::query(&format!("DROP ROLE {role}"))
        .execute(&mut admin)
        .await
        .expect("drop role");
    let err = opened.expect_err("refused");
    assert!(
        matches!(err, StoreError::NoFreeConnections { .. }),
        "{err:?}"
    );
    let (host, port) = {
        let opts: sqlx::postgres::PgConnectOptions = db.url().parse().expect("url");
        (opts.get_host().to_owned(), opts.get_port())
    };
    let db_name = db.url().rsplit('/').next().unwrap_or_default().to_owned();
    assert_eq!(
        err.to_string(),
        format!(
            "the Postgres server at {host}:{port}, database {db_name} has no free connections \
             (too many connections for role \"{role}\"): each process of the control plane opens \
             up to its pool size (32 by default, docs/INSTALL.md \"Postgres\"); raise \
             max_connections on the server (or the role's or database's CONNECTION LIMIT), or \
             run fewer processes, then retry"
        )
    );
}

/// A port nobody listens on: unreachable, naming where, and the URL is what to check.
#[tokio::test]
async fn a_port_nobody_listens_on_is_unreachable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    let err = EventStore::open(&format!("postgres://postgres@127.0.0.1:{port}/bc"))
        .await
        .expect_err("refused");
    let StoreError::Unreachable { target, why } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(target, &format!("127.0.0.1:{port}, database bc"));
    assert!(why.contains("Connection refused"), "{why}");
    assert!(
        err.to_string().ends_with(
            "check that the server is running and reachable there and that the URL's host, \
             port, user, password and database are right"
        ),
        "{err}"
    );
}
