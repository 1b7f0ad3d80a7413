//! `bcctl pool …` and `bcctl join-request …` through the real binary, on both backends: the
//! `--json` output field by field, text tables, and refusals with exit code 1 naming what was
//! wrong.

use crate::support;

use std::path::Path;

use serde_json::{json, Value};
use support::{bcctl_at, ok_json};

use domain::identity::IdentityEvent;
use events::new_event_id;
use events::schema::JoinRequestCreated;
use events::store::testkit::TestDb;
use events::store::{EventStore, ExpectedVersion, LogStore, LogTx};

fn fails(dir: &Path, url: &str, args: &[&str], needle: &str) {
    fails_with(dir, url, args, needle, 1);
}

/// `bcctl args` exits `code` (1: refused; 2: a usage error clap reports) naming `needle`.
fn fails_with(dir: &Path, url: &str, args: &[&str], needle: &str, code: i32) {
    let out = bcctl_at(dir, url, args);
    assert_eq!(
        out.status.code(),
        Some(code),
        "bcctl {args:?} must exit {code}"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(needle),
        "bcctl {args:?}: {err:?} lacks {needle:?}"
    );
}

/// The system-clock fields of a view (checked to be numbers), to put into the expected JSON.
fn int(v: &Value, field: &str) -> i64 {
    v[field]
        .as_i64()
        .unwrap_or_else(|| panic!("{field} is not an integer in {v}"))
}

fn now_us() -> i64 {
    let now = time::OffsetDateTime::now_utc().unix_timestamp_nanos() / 1000;
    i64::try_from(now).unwrap_or(i64::MAX)
}

/// A pending join request `id`, as the join's admission step would record it, created now and
/// expiring in an hour. Returns its creation time.
async fn pending_request(store: &EventStore, id: &str, subject: u8) -> i64 {
    let at = now_us();
    let e = IdentityEvent::JoinRequestCreated(JoinRequestCreated {
        request_id: id.into(),
        tenant_id: "acme".into(),
        attestor: "join-token".into(),
        subject: vec![subject; 32],
        csr_sha256: vec![subject; 32],
        role: "node".into(),
        site_id: "s1".into(),
        pool_id: "edge".into(),
        token_id: "tok_1".into(),
        summary: "join-token tok_1".into(),
        expires_at_us: at + 3_600_000_000,
        ..Default::default()
    });
    let new = e.to_new_event(new_event_id(), "acme", at);
    let mut tx = store.begin().await.expect("tx");
    commands::append_and_project(
        &mut tx,
        &projections::identity::all(),
        &e.stream(),
        ExpectedVersion::NoStream,
        &[new],
    )
    .await
    .expect("append");
    tx.commit().await.expect("commit");
    at
}

fn request_json(id: &str, subject: u8, created: i64, rest: Value) -> Value {
    let mut v = json!({
        "requestId": id,
        "tenantId": "acme",
        "attestor": "join-token",
        "subjectSha256": hex::encode([subject; 32]),
        "csrSha256": hex::encode([subject; 32]),
        "role": "node",
        "siteId": "s1",
        "poolId": "edge",
        "nodeId": null,
        "tokenId": "tok_1",
        "productUuidSha256": null,
        "macsSha256": null,
        "summary": "join-token tok_1",
        "status": "pending",
        "decidedBy": null,
        "decisionReason": null,
        "joinedNodeId": null,
        "createdAtUs": created,
        "expiresAtUs": created + 3_600_000_000,
        "updatedAtUs": created,
    });
    if let (Some(obj), Some(more)) = (v.as_object_mut(), rest.as_object()) {
        for (k, val) in more {
            obj.insert(k.clone(), val.clone());
        }
    }
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_and_join_request_commands_on_both_backends() {
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
                "cli.example.com",
                "--plaintext",
            ],
        );
        assert!(init.status.success());

        // pool create: the policy in the order given; an external attestor named with
        // --external-attestor.
        let edge = ok_json(
            d,
            &url,
            &[
                "pool",
                "create",
                "edge",
                "--tenant",
                "acme",
                "--description",
                "edge boxes",
                "--join-attestors",
                "x509pop,tpm-remote",
                "--external-attestor",
                "tpm-remote",
                "--json",
            ],
        );
        let created = int(&edge, "createdAtUs");
        let edge_position = int(&edge, "position");
        assert_eq!(
            edge,
            json!({
                "poolId": "edge",
                "tenantId": "acme",
                "description": "edge boxes",
                "joinAttestors": ["x509pop", "tpm-remote"],
                "createdAtUs": created,
                "updatedAtUs": created,
                "version": 1,
                "position": edge_position,
            })
        );
        let any = ok_json(
            d,
            &url,
            &["pool", "create", "any", "--tenant", "acme", "--json"],
        );
        assert_eq!(any["joinAttestors"], Value::Null);
        assert_eq!(any["description"], "");

        // Refusals: exit 1, the bad id and the allowed ones named.
        fails(
            d,
            &url,
            &[
                "pool",
                "create",
                "p2",
                "--tenant",
                "acme",
                "--join-attestors",
                "tpm-remote",
            ],
            "INVALID_INPUT: join attestor \"tpm-remote\" is not one the control plane runs \
             (it runs: join-token, x509pop, provisioned, tpm, discovery, cloud-iid)",
        );
        fails(
            d,
            &url,
            &[
                "pool",
                "create",
                "p2",
                "--tenant",
                "acme",
                "--join-attestors",
                "",
            ],
            "INVALID_INPUT: join attestors must be 1 to 16 ids, got 0",
        );
        fails(
            d,
            &url,
            &["pool", "create", "edge", "--tenant", "acme"],
            "INVALID_STATE: pool edge already exists",
        );
        fails(
            d,
            &url,
            &["pool", "update", "edge"],
            "INVALID_INPUT: an update names a new description or new join attestors",
        );
        fails(
            d,
            &url,
            &["pool", "show", "nope"],
            "NOT_FOUND: no pool nope",
        );
        fails_with(
            d,
            &url,
            &[
                "pool",
                "update",
                "edge",
                "--join-attestors",
                "x509pop",
                "--any-attestor",
            ],
            "--any-attestor",
            2,
        );

        // pool update replaces what it names.
        let updated = ok_json(
            d,
            &url,
            &[
                "pool",
                "update",
                "edge",
                "--join-attestors",
                "provisioned, join-token",
                "--json",
            ],
        );
        let updated_at = int(&updated, "updatedAtUs");
        let updated_position = int(&updated, "position");
        assert!(updated_at >= created && updated_position > edge_position);
        let expected = json!({
            "poolId": "edge",
            "tenantId": "acme",
            "description": "edge boxes",
            "joinAttestors": ["provisioned", "join-token"],
            "createdAtUs": created,
            "updatedAtUs": updated_at,
            "version": 2,
            "position": updated_position,
        });
        assert_eq!(updated, expected);
        assert_eq!(
            ok_json(d, &url, &["pool", "show", "edge", "--json"]),
            expected
        );
        let listed = ok_json(d, &url, &["pool", "list", "--tenant", "acme", "--json"]);
        assert_eq!(listed, json!([any, expected]));
        assert_eq!(
            ok_json(d, &url, &["pool", "list", "--tenant", "other", "--json"]),
            json!([])
        );
        let cleared = ok_json(
            d,
            &url,
            &["pool", "update", "edge", "--any-attestor", "--json"],
        );
        assert_eq!(cleared["joinAttestors"], Value::Null);
        let text = bcctl_at(d, &url, &["pool", "list"]);
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(text.starts_with("POOL"), "{text}");
        assert!(text.contains("(any)"), "{text}");

        // join-request: requests recorded as the join would record them.
        let store = db.store().await.expect("store");
        let a_at = pending_request(&store, "jr_a", 1).await;
        let b_at = pending_request(&store, "jr_b", 2).await;
        let shown = ok_json(d, &url, &["join-request", "show", "jr_a", "--json"]);
        let a_position = int(&shown, "position");
        assert_eq!(
            shown,
            request_json("jr_a", 1, a_at, json!({ "position": a_position }))
        );
        let approved = ok_json(
            d,
            &url,
            &[
                "join-request",
                "approve",
                "jr_a",
                "--reason",
                "known box",
                "--json",
            ],
        );
        let approved_at = int(&approved, "updatedAtUs");
        let approved_position = int(&approved, "position");
        assert!(approved_position > a_position);
        assert_eq!(
            approved,
            request_json(
                "jr_a",
                1,
                a_at,
                json!({
                    "status": "approved",
                    "decidedBy": support::local_actor(),
                    "decisionReason": "known box",
                    "updatedAtUs": approved_at,
                    "position": approved_position,
                })
            )
        );
        let rejected = ok_json(d, &url, &["join-request", "reject", "jr_b", "--json"]);
        let rejected_at = int(&rejected, "updatedAtUs");
        let rejected_position = int(&rejected, "position");
        let rejected_expected = request_json(
            "jr_b",
            2,
            b_at,
            json!({
                "status": "rejected",
                "decidedBy": support::local_actor(),
                "updatedAtUs": rejected_at,
                "position": rejected_position,
            }),
        );
        assert_eq!(rejected, rejected_expected);
        fails(
            d,
            &url,
            &["join-request", "approve", "jr_a"],
            "INVALID_STATE: join request jr_a is approved",
        );
        fails(
            d,
            &url,
            &["join-request", "reject", "jr_b"],
            "INVALID_STATE: join request jr_b is rejected",
        );
        fails(
            d,
            &url,
            &["join-request", "show", "jr_x"],
            "NOT_FOUND: no join request jr_x",
        );
        fails(
            d,
            &url,
            &["join-request", "list", "--status", "open"],
            "INVALID_INPUT: status \"open\"",
        );
        assert_eq!(
            ok_json(
                d,
                &url,
                &["join-request", "list", "--status", "rejected", "--json"]
            ),
            json!([rejected_expected])
        );
        let all = ok_json(
            d,
            &url,
            &["join-request", "list", "--tenant", "acme", "--json"],
        );
        assert_eq!(all.as_array().map(Vec::len), Some(2));
        let text = bcctl_at(d, &url, &["join-request", "list"]);
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(text.starts_with("REQUEST"), "{text}");
        assert!(text.contains("jr_a") && text.contains("approved"), "{text}");
        let text = bcctl_at(d, &url, &["join-request", "show", "jr_b"]);
        let text = String::from_utf8_lossy(&text.stdout);
        assert!(
            text.contains(&format!("decided by      {}", support::local_actor())),
            "{text}"
        );
    }
}
