//! A captured JoinRequest replayed over the wire (issue 17 item 6), through the real gateway
//! over TLS: the same request bytes four times on a 3-use token make one node. The three copies
//! get the identity the first was issued (a join whose answer was lost is answered again, issue
//! 40), each answer signed again by the JoinService key for this CSR, and spend no use; the same
//! key in another CSR gets PERMISSION_DENIED `Join refused`, like every refusal.

use crate::common::*;

use events::store::testkit::TestDb;
use prost::Message as _;
use sha2::{Digest as _, Sha256};
use tonic::Code;

async fn replayed_four_times(db: TestDb) {
    let env = start(db.store().await.unwrap(), |_| {}).await;
    let token = env.token(3).await;
    let (req, key) = env.join_request(&token);
    let csr_sha256: [u8; 32] = Sha256::digest(&req.csr).into();
    let mut anon = env.client(None).await.unwrap();
    let answered = |signed: proto::SignedJoinResponse| {
        let sig = domain::pki::Signature::from_bytes(&signed.signature).expect("a signature");
        domain::pki::statement::verify(
            env.keys.join_signing.public_key(),
            &domain::pki::statement::JoinResponseStatement {
                csr_sha256,
                response: &signed.response,
            },
            &sig,
        )
        .expect("signed by the JoinService key over this CSR");
        let body = proto::JoinResponse::decode(signed.response.as_slice()).unwrap();
        (body.node_id, body.certificate_chain)
    };
    let first = answered(
        anon.join(req.clone())
            .await
            .expect("the first join")
            .into_inner(),
    );
    for copy in 0..3 {
        let again = anon.join(req.clone()).await;
        let again = again.unwrap_or_else(|s| panic!("copy {copy}: {s:?}"));
        assert_eq!(answered(again.into_inner()), first, "copy {copy}");
    }
    assert_eq!(env.join.list_nodes(None).await.unwrap().len(), 1);
    assert_eq!(env.join.list_tokens(None).await.unwrap()[0].uses_left, 2);
    // The same key in another CSR is refused like every refusal.
    let mut other = req.clone();
    other.csr = domain::pki::build_csr(&key).unwrap();
    let other_sha: [u8; 32] = Sha256::digest(&other.csr).into();
    let secret = domain::pki::TokenSecret::parse(&token).unwrap();
    let sealed =
        domain::pki::seal_token(env.keys.join_encryption.public_key(), &secret, &other_sha);
    other.sealed_token = sealed.unwrap().as_bytes().to_vec();
    let s = anon.join(other).await.unwrap_err();
    assert_eq!(
        (s.code(), s.message()),
        (Code::PermissionDenied, "Join refused")
    );
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
