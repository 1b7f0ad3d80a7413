//! The tenant deciders: every refusal by its exact text, and what a deletion decides.

use super::*;
use crate::pki::NodeRole;
use crate::quorum::BatchStatus;

fn node(id: &str, status: NodeStatus) -> NodeState {
    NodeState {
        node_id: id.into(),
        tenant_id: "acme".into(),
        site_id: "site-1".into(),
        pool_id: "default".into(),
        role: NodeRole::Node,
        status,
        identity_generation: 1,
        hardware_key_sha256: None,
        product_uuid_sha256: None,
    }
}

fn batch(key: &str, status: BatchStatus) -> BatchStanding {
    BatchStanding {
        batch_id: BatchId::derive("acme", "ops", key).unwrap(),
        status,
        not_after_us: 10,
    }
}

fn named() -> TenantStanding {
    TenantStanding {
        named: true,
        ..Default::default()
    }
}

fn delete(tenant: &str, retire_nodes: bool) -> DeleteTenant {
    DeleteTenant {
        tenant_id: tenant.into(),
        reason: "customer left".into(),
        retire_nodes,
    }
}

fn create(tenant: &str) -> CreateTenant {
    CreateTenant {
        tenant_id: tenant.into(),
        description: "the acme fleet".into(),
    }
}

fn refused<T: std::fmt::Debug>(r: Result<T, TenantRefusal>) -> String {
    r.unwrap_err().to_string()
}

#[test]
fn a_new_tenant_is_created() {
    let d = decide_create_tenant(&create("acme"), &TenantStanding::default()).unwrap();
    assert_eq!(
        d.events,
        vec![TenantEvent::Created(TenantCreated {
            tenant_id: "acme".into(),
            description: "the acme fleet".into(),
        })]
    );
}

#[test]
fn create_refusals() {
    let created = TenantStanding {
        created: true,
        ..Default::default()
    };
    assert_eq!(
        refused(decide_create_tenant(&create("acme"), &created)),
        "ALREADY_EXISTS: tenant acme exists"
    );
    // A tenant a token, node or batch names exists as well.
    assert_eq!(
        refused(decide_create_tenant(&create("acme"), &named())),
        "ALREADY_EXISTS: tenant acme exists"
    );
    let deleted = TenantStanding {
        deleted: true,
        named: true,
        ..Default::default()
    };
    assert_eq!(
        refused(decide_create_tenant(&create("acme"), &deleted)),
        "INVALID_STATE: tenant acme was deleted; a deleted tenant's name is not reused"
    );
    assert_eq!(
        refused(decide_create_tenant(
            &create("ac me"),
            &TenantStanding::default()
        )),
        "INVALID_INPUT: tenant id \"ac me\" must be 1 to 128 of A-Z, a-z, 0-9, '.', '-', '_'"
    );
    let mut long = create("acme");
    long.description = "x".repeat(501);
    assert_eq!(
        refused(decide_create_tenant(&long, &TenantStanding::default())),
        "INVALID_INPUT: the description has 501 characters, at most 500"
    );
}

#[test]
fn delete_refusals() {
    let none = TenantHoldings::default();
    assert_eq!(
        refused(decide_delete_tenant(&delete("default", true), &named(), &none)),
        "INVALID_INPUT: the default tenant cannot be deleted (bcctl up and token create fall back to it)"
    );
    for reserved in [
        refused(decide_delete_tenant(
            &delete("deployment", true),
            &named(),
            &none,
        )),
        refused(decide_create_tenant(
            &create("deployment"),
            &TenantStanding::default(),
        )),
    ] {
        assert_eq!(
            reserved,
            "INVALID_INPUT: tenant deployment holds the deployment's own events (trust bundle, \
             operators): it is never created or deleted"
        );
    }
    assert_eq!(
        refused(decide_delete_tenant(
            &delete("acme", false),
            &TenantStanding::default(),
            &none
        )),
        "NOT_FOUND: no tenant acme"
    );
    let deleted = TenantStanding {
        deleted: true,
        ..named()
    };
    assert_eq!(
        refused(decide_delete_tenant(&delete("acme", true), &deleted, &none)),
        "INVALID_STATE: tenant acme was deleted; a deleted tenant's name is not reused"
    );
    let holdings = TenantHoldings {
        nodes: (0..7)
            .map(|i| node(&format!("n{i}"), NodeStatus::Active))
            .chain([node("old", NodeStatus::Retired)])
            .collect(),
        ..Default::default()
    };
    assert_eq!(
        refused(decide_delete_tenant(
            &delete("acme", false),
            &named(),
            &holdings
        )),
        "INVALID_STATE: tenant acme has 7 active node(s) (n0, n1, n2, n3, n4, ...): retire them \
         first, or delete with --retire-nodes"
    );
}

#[test]
fn a_deletion_retires_revokes_and_cancels_in_one_decision() {
    let holdings = TenantHoldings {
        nodes: vec![
            node("n1", NodeStatus::Active),
            node("n2", NodeStatus::Retired),
            node("n3", NodeStatus::Deleted),
            node("n4", NodeStatus::Active),
        ],
        live_tokens: vec!["tok_a".into(), "tok_b".into()],
        open_batches: vec![
            batch("k1", BatchStatus::Pending),
            batch("k2", BatchStatus::Approved),
        ],
    };
    let d = decide_delete_tenant(&delete("acme", true), &named(), &holdings).unwrap();
    assert_eq!(d.outcome.retired_nodes, vec!["n1", "n4"]);
    assert_eq!(d.outcome.revoked_tokens, vec!["tok_a", "tok_b"]);
    assert_eq!(d.outcome.cancelled_batches.len(), 2);
    let kinds: Vec<&str> = d
        .events
        .iter()
        .map(|e| match e {
            TenantEvent::Created(_) => "created",
            TenantEvent::Deleted(_) => "deleted",
            TenantEvent::Identity(IdentityEvent::NodeRetired(_)) => "retired",
            TenantEvent::Identity(IdentityEvent::TokenRevoked(_)) => "revoked",
            TenantEvent::Identity(_) => "other",
            TenantEvent::Batch(_, BatchEvent::Cancelled(_)) => "cancelled",
            TenantEvent::Batch(..) => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "deleted",
            "retired",
            "retired",
            "revoked",
            "revoked",
            "cancelled",
            "cancelled"
        ]
    );
    let TenantEvent::Deleted(deleted) = &d.events[0] else {
        panic!("first event {:?}", d.events[0]);
    };
    assert_eq!(deleted.retired_node_ids, vec!["n1", "n4"]);
    assert_eq!(deleted.cancelled_batch_ids.len(), 2);
    let TenantEvent::Identity(IdentityEvent::TokenRevoked(revoked)) = &d.events[3] else {
        panic!("fourth event {:?}", d.events[3]);
    };
    assert_eq!(revoked.reason, "tenant acme deleted: customer left");
}

#[test]
fn a_tenant_with_only_retired_nodes_is_deleted_without_retire_nodes() {
    let holdings = TenantHoldings {
        nodes: vec![node("n2", NodeStatus::Retired)],
        ..Default::default()
    };
    let d = decide_delete_tenant(&delete("acme", false), &named(), &holdings).unwrap();
    assert_eq!(d.outcome, TenantDeletion::default());
    assert_eq!(d.events.len(), 1);
}
