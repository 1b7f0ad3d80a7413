//! Golden vectors: the code reproduces, byte for byte, the vectors `data/quorum/vectors.py`
//! computed independently from the spec with hashlib (and RFC 6962's recursive tree algorithm).

use crate::quorum_support;

use domain::quorum::{
    approver_set_signing_input, batch_approval_signing_input, ApproverKey, ApproverSet, BatchId,
    PayloadDigest, ScopeHash, ScopeLeaf, ScopeProof, ScopeTree, Tier,
};
use serde_json::Value;

fn load(name: &str) -> Value {
    let text = match name {
        "approver-set.json" => include_str!("data/quorum/approver-set.json"),
        _ => include_str!("data/quorum/batch-scope.json"),
    };
    serde_json::from_str(text).expect("golden JSON")
}

fn s<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or_else(|| panic!("{key} missing"))
}

fn u(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} missing"))
}

#[test]
fn quorum_golden_approver_set() {
    let g = load("approver-set.json");
    let keys: Vec<ApproverKey> = g["keys"]
        .as_array()
        .expect("keys")
        .iter()
        .map(|k| {
            let spki = hex::decode(s(k, "spki")).expect("hex");
            let kid = hex::decode(s(k, "kid")).expect("hex");
            ApproverKey::from_wire(&kid, &spki).expect("kid is SHA-256 of the SPKI")
        })
        .collect();
    let tiers = g["tiers"]
        .as_array()
        .expect("tiers")
        .iter()
        .map(|t| Tier {
            max_scope_size: u(t, "max_scope_size") as u32,
            threshold: u(t, "threshold") as u32,
        })
        .collect();
    // Reverse the order given: the encoding puts keys in kid order whatever the input order.
    let mut reversed = keys.clone();
    reversed.reverse();
    let set = ApproverSet::new(
        reversed,
        u(&g, "threshold") as u32,
        tiers,
        u(&g, "unbatched_per_hour") as u32,
    )
    .expect("valid set");
    assert_eq!(hex::encode(set.encode()), s(&g, "approver_set_input"));
    assert_eq!(set.digest().to_hex(), s(&g, "set_digest"));
    let td = quorum_support::td(s(&g, "trust_domain"));
    let signing = approver_set_signing_input(u(&g, "epoch"), &set.digest(), &td);
    assert_eq!(hex::encode(signing), s(&g, "signing_input"));
    assert_eq!(
        hex::encode(ApproverSet::none().encode()),
        s(&g, "empty_set_input")
    );
}

#[test]
fn quorum_golden_batch_scope() {
    let g = load("batch-scope.json");
    for batch in g["batches"].as_array().expect("batches") {
        let batch_id = BatchId::derive(
            s(batch, "tenant"),
            s(batch, "caller"),
            s(batch, "idempotency_key"),
        )
        .expect("batch id");
        assert_eq!(batch_id.to_hex(), s(batch, "batch_id"));
        let leaves: Vec<ScopeLeaf> = batch["leaves"]
            .as_array()
            .expect("leaves")
            .iter()
            .map(|l| {
                let payload = l["payload_sha256"]
                    .as_str()
                    .map(|h| PayloadDigest::from_hex(h).expect("digest"));
                let leaf = ScopeLeaf::new(s(l, "subject"), s(l, "kind"), payload).expect("leaf");
                assert_eq!(leaf.hash(&batch_id).to_hex(), s(l, "hash"));
                leaf
            })
            .collect();
        let tree = ScopeTree::build(&batch_id, &leaves).expect("tree");
        let expected_leaves: Vec<&str> = batch["leaf_hashes"]
            .as_array()
            .expect("leaf hashes")
            .iter()
            .map(|h| h.as_str().expect("hex"))
            .collect();
        let got_leaves: Vec<String> = tree.leaves().iter().map(ScopeHash::to_hex).collect();
        assert_eq!(got_leaves, expected_leaves);
        assert_eq!(u64::from(tree.size()), u(batch, "size"));
        assert_eq!(tree.root().to_hex(), s(batch, "root"));
        let expected_proofs: Vec<ScopeProof> =
            serde_json::from_value(batch["proofs"].clone()).expect("proofs decode as ScopeProof");
        let got_proofs: Vec<ScopeProof> = tree.proofs().collect();
        assert_eq!(got_proofs, expected_proofs);
        let approval = &batch["approval"];
        let td = quorum_support::td(s(approval, "trust_domain"));
        let signing = batch_approval_signing_input(
            &batch_id,
            &tree.root(),
            tree.size(),
            approval["not_after_us"].as_i64().expect("not_after_us"),
            &td,
        );
        assert_eq!(hex::encode(signing), s(approval, "signing_input"));
    }
}

/// Re-runs the independent generator in check mode, so the committed vectors are the spec's
/// computation and not edited by hand. Skipped where python3 is not installed.
#[test]
fn quorum_golden_vectors_match_independent_generator() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/quorum/vectors.py");
    match std::process::Command::new("python3")
        .arg(script)
        .arg("--check")
        .output()
    {
        Ok(out) => assert!(
            out.status.success(),
            "vectors.py --check failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(err) => eprintln!("python3 not available ({err}); independent check skipped"),
    }
}
