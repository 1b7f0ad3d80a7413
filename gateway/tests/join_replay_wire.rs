//! A captured JoinRequest replayed over the wire (issue 17 item 6), through the real gateway
//! over TLS: the same request bytes four times on a 3-use token make one node; the three copies
//! get PERMISSION_DENIED `Join refused`, like every refusal, and spend no use.

use crate::common::*;

use events::store::testkit::TestDb;
use tonic::Code;

async fn replayed_four_times(db: TestDb) {
    let env = start(db.store().await.unwrap(), |_| {}).await;
    let token = env.token(3).await;
    let (req, _key) = env.join_request(&token);
    let mut anon = env.client(None).await.unwrap();
    let first = anon.join(req.clone()).await;
    assert!(first.is_ok(), "the first join: {first:?}");
    for copy in 0..3 {
        let s = anon.join(req.clone()).await.unwrap_err();
        assert_eq!(
            (s.code(), s.message()),
            (Code::PermissionDenied, "Join refused"),
            "copy {copy}"
        );
    }
    assert_eq!(env.join.list_nodes(None).await.unwrap().len(), 1);
    assert_eq!(env.join.list_tokens(None).await.unwrap()[0].uses_left, 2);
    // The token still admits two other machines.
    for _ in 0..2 {
        env.join_node(&token).await;
    }
    assert_eq!(env.join.list_nodes(None).await.unwrap().len(), 3);
    env.gateway.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_join_request_makes_one_node_on_sqlite() {
    replayed_four_times(TestDb::sqlite().unwrap()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replayed_join_request_makes_one_node_on_postgres() {
    replayed_four_times(TestDb::postgres().await.unwrap()).await;
}
