//! A batch leaf's payload type, checked by the server when the batch is created (spec 003: "The
//! typeUrl must be type.googleapis.com/ plus the kind's own payload type from the registry";
//! issue 45 item 4), through `commands::quorum::create_batch` (what `bcctl batch create` and the
//! admin API call) on both backends: another kind's type and an unknown type under the right
//! prefix are each refused `PayloadTypeMismatch` naming the kind, the expected and the given
//! typeUrl, with nothing written; the kind's own type is accepted and stored.

use commands::quorum::{create_batch, scope_page, settle_trust_bundle, QuorumError, QuorumRefusal};
use commands::SimClock;
use domain::command::payloads::{DiskWipe, NodeReboot};
use domain::quorum::batch::LeafPayload;
use domain::quorum::{BatchRefusal, CreateBatch, PayloadDigest, ScopeLeafRequest};
use events::store::testkit::TestDb;
use events::store::LogStore;
use prost::Message;

use crate::quorum_support::{approvers, config, seed_nodes, set_of};

const REBOOT: &str = "type.googleapis.com/bc.command.v1.NodeReboot";

fn request(key: &str, type_url: &str, value: Vec<u8>) -> CreateBatch {
    CreateBatch {
        tenant: "t1".into(),
        caller: "alice@example.org".into(),
        idempotency_key: key.into(),
        reason: "reboot node-0".into(),
        leaves: vec![ScopeLeafRequest {
            subject: "node-0".into(),
            kind: "node.reboot".into(),
            payload_sha256: None,
            payload: Some(LeafPayload {
                type_url: type_url.into(),
                value,
            }),
        }],
        not_after_seconds: None,
    }
}

#[tokio::test]
async fn batch_creation_checks_the_payload_type_of_the_kind() {
    for db in TestDb::each().await.unwrap() {
        let store = db.store().await.unwrap();
        seed_nodes(&store, "t1", 1).await;
        let clock = SimClock::new();
        let a = approvers(1);
        settle_trust_bundle(
            &store,
            &clock,
            &config(set_of(&[&a[0]], 1, vec![]), 1, vec![]),
        )
        .await
        .unwrap();
        let reboot = NodeReboot {
            reason: "kernel update".into(),
            delay_seconds: 0,
        }
        .encode_to_vec();
        let wipe = DiskWipe {
            device: "/dev/sda".into(),
            method: "zero".into(),
        }
        .encode_to_vec();

        let cases = [
            // Another registered kind's type: bytes labelled as a harmless message.
            (
                "another-kind",
                "type.googleapis.com/bc.command.v1.DiskWipe",
                wipe,
            ),
            // The right prefix, a type the registry does not have.
            (
                "unknown-type",
                "type.googleapis.com/acme.v1.Flash",
                vec![1, 2, 3],
            ),
        ];
        for (key, type_url, value) in cases {
            let head = store.head_position().await.unwrap();
            let refused = match create_batch(&store, &clock, &request(key, type_url, value)).await {
                Err(QuorumError::Refused(r)) => r,
                other => panic!("{key}: expected a refusal, got {other:?}"),
            };
            assert_eq!(refused.code(), "INVALID_INPUT");
            assert_eq!(
                refused.to_string(),
                format!(
                    "scope leaf 0: payload typeUrl \"{type_url}\" is not the payload type of \
                     node.reboot; node.reboot payloads are {REBOOT}"
                )
            );
            match refused {
                QuorumRefusal::Batch(BatchRefusal::PayloadTypeMismatch {
                    index,
                    kind,
                    type_url: given,
                    expected,
                }) => assert_eq!(
                    (index, kind.as_str(), given.as_str(), expected.as_str()),
                    (0, "node.reboot", type_url, REBOOT)
                ),
                other => panic!("{key}: {other:?}"),
            }
            assert_eq!(store.head_position().await.unwrap(), head, "{key}: written");
        }

        // The kind's own type: created, the payload stored as given.
        let created = create_batch(&store, &clock, &request("own", REBOOT, reboot.clone()))
            .await
            .unwrap();
        assert_eq!((created.scope_size, created.required_approvals), (1, 1));
        let page = scope_page(&store, &created.batch_id, 0, 10).await.unwrap();
        assert_eq!(page.len(), 1);
        assert_eq!(page[0].payload_type_url.as_deref(), Some(REBOOT));
        assert_eq!(page[0].payload_value.as_deref(), Some(&reboot[..]));
        assert_eq!(
            page[0].leaf.payload_sha256(),
            Some(&PayloadDigest::of(&reboot))
        );
    }
}
