//! `bcctl rebuild` through the real binary, on both backends: every projection rebuilt from the
//! log gives the same tables, byte for byte (the digest of a canonical dump), with any page size;
//! the counts are exact; a bad page size is a usage error.

use crate::support;

use serde_json::Value;
use std::sync::Arc;
use support::{bcctl_at, ok_json};

use commands::identity::{IdentityConfig, JoinService};
use commands::SystemClock;
use domain::pki::{build_csr, open_bundle, seal_token, KeyRole, PrivateKey, TokenSecret};
use events::store::testkit::TestDb;
use events::store::LogStore;

fn rows(report: &Value, table: &str) -> i64 {
    report["tables"]
        .as_array()
        .expect("tables")
        .iter()
        .find(|t| t["name"] == table)
        .and_then(|t| t["rows"].as_i64())
        .unwrap_or(-1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebuild_gives_the_same_tables_on_both_backends() {
    for db in TestDb::each().await.expect("databases") {
        db.store().await.expect("the store, migrated"); // the verbs never create one
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let url = db.url().to_string();
        let init = bcctl_at(
            d,
            &url,
            &[
                "pki",
                "init",
                "--trust-domain",
                "rb.example.com",
                "--plaintext",
            ],
        );
        assert!(init.status.success());
        let mut secrets = Vec::new();
        for _ in 0..2 {
            let created = ok_json(
                d,
                &url,
                &[
                    "token", "create", "--tenant", "t1", "--site", "s1", "--uses", "2", "--json",
                ],
            );
            secrets.push(created["secret"].as_str().expect("secret").to_string());
        }

        // Three nodes join (the second token twice), one join is refused, one node is revoked.
        let bytes = std::fs::read(d.join(".bcctl/pki.json")).expect("bundle");
        let keys = open_bundle(&bytes, None)
            .expect("bundle")
            .keys
            .expect("plaintext keys");
        let td = keys.trust_domain.clone();
        let recipient = keys.join_encryption.public_key().clone();
        let store = db.store().await.expect("store");
        let svc = JoinService::new(
            store.clone(),
            Arc::new(keys),
            Arc::new(SystemClock),
            IdentityConfig::new(td),
        )
        .expect("svc");
        let join = |secret: String| {
            let svc = &svc;
            let recipient = recipient.clone();
            async move {
                let key = PrivateKey::generate(KeyRole::Node).expect("key");
                let csr = build_csr(&key).expect("csr");
                let sealed = seal_token(
                    &recipient,
                    &TokenSecret::parse(&secret).expect("secret"),
                    &domain::identity::sha256(&csr),
                )
                .expect("seal");
                gateway::wire::join(
                    svc.joins(),
                    &proto::JoinRequest {
                        csr,
                        attestor: String::new(),
                        sealed_token: sealed.as_bytes().to_vec(),
                        role: "node".into(),
                        claims: None,
                        attestation: Vec::new(),
                        agent_version: String::new(),
                    },
                )
                .await
            }
        };
        join(secrets[0].clone()).await.expect("join 1");
        join(secrets[1].clone()).await.expect("join 2");
        join(secrets[1].clone()).await.expect("join 3");
        assert!(join(secrets[1].clone()).await.is_err(), "no use left");
        let nodes = ok_json(d, &url, &["node", "list", "--json"]);
        let node_id = nodes[0]["nodeId"].as_str().expect("node").to_string();
        let revoked = bcctl_at(d, &url, &["node", "revoke", &node_id, "--reason", "test"]);
        assert!(
            revoked.status.success(),
            "{}",
            String::from_utf8_lossy(&revoked.stderr)
        );

        let tables: Vec<projections::TableSpec> = commands::every_projection()
            .iter()
            .flat_map(|p| p.tables().iter().copied())
            .collect();
        let live = projections::digest_tables(&store, &tables)
            .await
            .expect("digest");
        let head = store.head_position().await.expect("head");

        for batch in ["10000", "1", "3"] {
            let report = ok_json(
                d,
                &url,
                &["rebuild", "--digest", "--json", "--batch", batch],
            );
            assert_eq!(report["digest"], live.as_str(), "batch {batch}: digest");
            assert_eq!(report["head"], head);
            assert_eq!(report["eventsRead"].as_i64(), Some(head));
            assert_eq!(rows(&report, "nodes"), 3);
            assert_eq!(rows(&report, "node_certs"), 3);
            assert_eq!(rows(&report, "join_tokens"), 2);
            assert_eq!(rows(&report, "join_token_uses"), 3);
            assert_eq!(rows(&report, "refusal_counters"), 1);
        }

        let text = bcctl_at(d, &url, &["rebuild"]);
        assert!(text.status.success());
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(
            text.starts_with(&format!(
                "rebuilt {} tables from {head} events",
                tables.len()
            )),
            "{text}"
        );

        let bad = bcctl_at(d, &url, &["rebuild", "--batch", "0"]);
        assert_eq!(bad.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&bad.stderr).contains("--batch"));
    }
}

/// (Postgres) A command that changes a projection row while a rebuild is running waits for the
/// rebuild to commit, then lands on the rebuilt row: the token revoked during the rebuild is
/// revoked afterwards. Without the rebuild's table locks the revoke would target the row the
/// rebuild deleted and be lost (or find no token).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_during_a_rebuild_waits_and_is_not_lost() {
    use commands::identity::NewToken;
    use domain::identity::{ExpectBinding, TokenRole};
    use domain::pki::{KeySet, KeySetLifetimes, TrustDomain};
    use events::store::LogTx;

    let db = TestDb::postgres().await.expect("database");
    let store = db.store().await.expect("store");
    let keys = KeySet::generate(
        TrustDomain::new("rb.example.com").expect("td"),
        time::OffsetDateTime::now_utc(),
        KeySetLifetimes::default(),
    )
    .expect("keys");
    let td = keys.trust_domain.clone();
    let svc = Arc::new(
        JoinService::new(
            store.clone(),
            Arc::new(keys),
            Arc::new(SystemClock),
            IdentityConfig::new(td),
        )
        .expect("svc"),
    );
    let token = svc
        .create_token(&NewToken {
            tenant_id: "t1".into(),
            site_id: "s1".into(),
            pool_id: "p1".into(),
            role: TokenRole::Node,
            uses: 1,
            ttl_seconds: 3600,
            expect: ExpectBinding::default(),
            allow_reclaim: false,
            reclaim_node_id: None,
            for_node_id: None,
            require_approval: false,
        })
        .await
        .expect("token")
        .token
        .token_id;

    // A rebuild, applied but not committed yet.
    let all = commands::every_projection();
    let mut rebuild = store.begin().await.expect("begin");
    projections::rebuild_in(&store, &mut rebuild, &all, None, 1000, |_| {})
        .await
        .expect("rebuild");

    let revoking = {
        let svc = svc.clone();
        let token = token.clone();
        tokio::spawn(async move { svc.revoke_token(&token, "during rebuild").await })
    };
    tokio::time::sleep(std::time::Duration::from_millis(700)).await;
    assert!(
        !revoking.is_finished(),
        "the revoke must wait for the rebuild"
    );
    rebuild.commit().await.expect("commit rebuild");
    let revoked = tokio::time::timeout(std::time::Duration::from_secs(10), revoking)
        .await
        .expect("the revoke goes on once the rebuild commits")
        .expect("task")
        .expect("revoke");
    assert_eq!(revoked.revoke_reason.as_deref(), Some("during rebuild"));
    let listed = svc.list_tokens(None).await.expect("list");
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].revoke_reason.as_deref(), Some("during rebuild"));
    assert!(listed[0].revoked_at_us.is_some());
}
