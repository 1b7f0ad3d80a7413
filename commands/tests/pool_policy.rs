//! A pool's attestor policy end to end through the operator command and the real JoinService,
//! on both backends (spec 000 "Requiring an attestor"): a pool that lists only `x509pop` refuses
//! a token join with `join:pool-attestor`, recorded in the pool owner's tenant with the token,
//! and admits the x509pop re-join of a node already in it.

use std::sync::Arc;

use commands::attest::{NewPool, Pools, BUILTIN_ATTESTORS};
use domain::attest::AttestorPolicy;
use events::store::testkit::TestDb;

use crate::identity_support::*;
use crate::x509pop_support::*;

#[tokio::test]
async fn a_pool_that_lists_only_x509pop_refuses_token_joins_and_admits_re_joins() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        // A node of tenant t1 joins pool-1 before the pool has a policy.
        let node = joined(&f, "t1").await;
        let pools = Pools::new(
            f.store.clone(),
            Arc::new(f.clock.clone()),
            BUILTIN_ATTESTORS.iter().map(|s| s.to_string()).collect(),
        );
        pools
            .create(&NewPool {
                pool_id: "pool-1".into(),
                tenant_id: "owner".into(),
                description: "TPM-only racks".into(),
                join_attestors: AttestorPolicy::Only(vec!["x509pop".into()]),
            })
            .await
            .unwrap();

        // A token join into the pool: refused, in the pool owner's tenant, naming the token.
        let token = f.svc.create_token(&token_spec("t1")).await.unwrap();
        let agent = Agent::new();
        let request = join_request(&f, &agent, &token.secret, "node", Default::default());
        assert_join_denied(f.svc.join(&request).await);
        let (tenant, refused) = last_join_refusal(&f.store).await;
        assert_eq!(tenant, "owner");
        assert_eq!(refused.refusal, "join:pool-attestor");
        assert_eq!(refused.attestor, "join-token");
        assert_eq!(refused.token_id, token.token.token_id);
        // Nothing was spent and no node was made.
        assert_eq!(f.svc.list_nodes(None).await.unwrap().len(), 1);

        // The node already in the pool re-joins by x509pop once its certificate expired.
        expire(&f, &node);
        let next = Agent::new();
        let answer = f
            .svc
            .join(&x509pop_request(&next, evidence(&f, &node, &next), "node"))
            .await
            .expect("x509pop is the pool's attestor");
        assert_eq!(answer.node_id, node.node_id());
        assert_eq!(answer.identity_generation, 2);
    }
}
