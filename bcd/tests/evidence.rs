//! The agent halves of the attestors: the x509pop evidence exactly as COMMON/spec 000 fixes it,
//! the `--evidence-command` protocol, and the x509pop re-join's crash-safe store order.

use crate::common;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use bcd::attest::command::CommandProducer;
use bcd::attest::x509pop::{build_evidence, X509PopProducer};
use bcd::attest::{EvidenceError, EvidenceProducer};
use bcd::files::identity::{load, store_rejoined};
use bcd::files::{key_to_pem, DataDir};
use common::*;
use domain::pki::statement::{verify, X509Pop};
use domain::pki::{NodeId, NodeRole, PublicKey, Signature};

#[test]
fn x509pop_evidence_is_the_fixed_format_and_verifies() {
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let (dir, key, identity) = joined(tmp.path(), &ks, "node_a1");
    let loaded = load(&dir).unwrap();
    let producer = X509PopProducer::new(
        &loaded,
        Box::new(|| time::macros::datetime!(2026-12-01 10:00 UTC)),
    )
    .unwrap();
    assert_eq!(producer.id(), "x509pop");
    let csr = [7u8; 32];
    let bytes = producer.produce(1, &csr, None).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
    assert_eq!(keys.len(), 5, "{v}");
    assert_eq!(v["v"], 1);
    assert_eq!(v["nodeId"], "node_a1");
    let client_time = v["clientTime"].as_u64().unwrap();
    assert_eq!(client_time, 1_796_119_200_000);
    let chain: Vec<Vec<u8>> = v["chain"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let text = c.as_str().unwrap();
            assert!(!text.contains('=') && !text.contains('+') && !text.contains('/'));
            URL_SAFE_NO_PAD.decode(text).unwrap()
        })
        .collect();
    assert_eq!(chain, identity.chain);
    let sig = v["sig"].as_str().unwrap();
    let sig = Signature::from_bytes(&URL_SAFE_NO_PAD.decode(sig).unwrap()).unwrap();
    let statement = X509Pop {
        csr_sha256: csr,
        node_id: NodeId::new("node_a1").unwrap(),
        client_time_ms: client_time,
    };
    // The signed input, byte for byte: lp("x509pop") || lp(csr) || lp(node) || lp(u64_be(t)).
    let mut input = Vec::new();
    for field in [
        &b"x509pop"[..],
        &csr[..],
        b"node_a1",
        &client_time.to_be_bytes()[..],
    ] {
        input.extend_from_slice(&(field.len() as u32).to_be_bytes());
        input.extend_from_slice(field);
    }
    assert_eq!(domain::pki::Statement::signed_input(&statement), input);
    let leaf_key: &PublicKey = key.public_key();
    verify(leaf_key, &statement, &sig).unwrap();
    // Another CSR's proof does not verify.
    let other = X509Pop {
        csr_sha256: [8; 32],
        ..statement
    };
    assert!(verify(leaf_key, &other, &sig).is_err());
    // No challenge is answered.
    assert_eq!(
        producer.produce(2, &csr, Some(b"x")).unwrap_err(),
        EvidenceError::NoChallenges("x509pop".into())
    );
    // The pure builder gives the same layout.
    let built = build_evidence(
        &identity.chain,
        &common::as_node_key(&key),
        &csr,
        &NodeId::new("node_a1").unwrap(),
        client_time,
    )
    .unwrap();
    let b: serde_json::Value = serde_json::from_slice(&built).unwrap();
    assert_eq!(
        (b["nodeId"].clone(), b["chain"].clone()),
        (v["nodeId"].clone(), v["chain"].clone())
    );
    // And the control plane's parser reads the producer's evidence as what was meant.
    let parsed = domain::attest::x509pop::X509PopEvidence::parse(&bytes).unwrap();
    assert_eq!(parsed.node_id.as_str(), "node_a1");
    assert_eq!(parsed.chain, identity.chain);
    assert_eq!(parsed.client_time_ms, client_time);
    assert_eq!(
        domain::pki::Statement::signed_input(&parsed.statement(&csr)),
        input
    );
    assert_eq!(parsed.sig, sig.as_bytes().to_vec());
}

fn script(tmp: &std::path::Path, body: &str) -> String {
    let path = tmp.join("producer.sh");
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    format!("sh {}", path.display())
}

#[test]
fn the_evidence_command_protocol() {
    let tmp = tempfile::tempdir().unwrap();
    let seen = tmp.path().join("stdin.json");
    // Reads the ask, keeps it, prints base64url of "evidence-<round>".
    let cmd = script(
        tmp.path(),
        &format!(
            "cat > {seen}.tmp; mv {seen}.tmp {seen}\nround=$(sed 's/.*\"round\":\\([0-9]*\\).*/\\1/' {seen})\nprintf 'evidence-%s' \"$round\" | base64 | tr '+/' '-_' | tr -d '='",
            seen = seen.display()
        ),
    );
    let producer = CommandProducer::new("acme-asset", &cmd);
    assert_eq!(producer.id(), "acme-asset");
    let csr = [0xfbu8; 32];
    let out = producer.produce(1, &csr, None).unwrap();
    assert_eq!(out, b"evidence-1");
    let ask: serde_json::Value = serde_json::from_slice(&std::fs::read(&seen).unwrap()).unwrap();
    assert_eq!(
        ask,
        serde_json::json!({
            "attestor": "acme-asset",
            "round": 1,
            "csrSha256": URL_SAFE_NO_PAD.encode(csr),
            "challenge": null,
        })
    );
    let out = producer.produce(2, &csr, Some(&[0xff, 0xfe])).unwrap();
    assert_eq!(out, b"evidence-2");
    let ask: serde_json::Value = serde_json::from_slice(&std::fs::read(&seen).unwrap()).unwrap();
    assert_eq!(ask["challenge"], "__4");
    assert_eq!(ask["round"], 2);

    // A non-zero exit is a clear error naming the command and the status.
    let failing = CommandProducer::new("acme-asset", &script(tmp.path(), "echo nope >&2; exit 3"));
    let err = failing.produce(1, &csr, None).unwrap_err().to_string();
    assert!(err.contains("exited with status 3 (round 1)"), "{err}");
    assert!(
        err.starts_with("acme-asset evidence: the evidence command `sh "),
        "{err}"
    );
    // Output that is not base64url, or none.
    let bad = CommandProducer::new("acme-asset", "echo 'not base64!'");
    let err = bad.produce(1, &csr, None).unwrap_err().to_string();
    assert!(err.contains("not base64url"), "{err}");
    let empty = CommandProducer::new("acme-asset", "cat > /dev/null");
    let err = empty.produce(1, &csr, None).unwrap_err().to_string();
    assert!(err.contains("printed no evidence"), "{err}");
    let missing = CommandProducer::new("acme-asset", "/nonexistent/producer");
    assert!(missing.produce(1, &csr, None).is_err());
}

#[test]
fn a_rejoin_stores_in_the_crash_safe_order() {
    let tmp = tempfile::tempdir().unwrap();
    let ks = keyset();
    let (dir, old_key, old) = joined(tmp.path(), &ks, "node_r1");
    let new_key = node_key();
    let new = identity_for(&ks, issue(&ks, &new_key, "node_r1", NodeRole::Node));

    // Killed after node.key.next, before identity.json: the old identity loads; the key the
    // old leaf does not certify is kept as a pending one (issue 40: it might be a renewal's
    // whose answer was lost), and goes when the server refuses a renewal for it.
    let data = DataDir::new(tmp.path());
    data.write("node.key.next", key_to_pem(&new_key).as_bytes())
        .unwrap();
    let loaded = load(&data).unwrap();
    assert_eq!(loaded.stored, old);
    assert_eq!(
        loaded.pending_next.as_ref().map(|k| k.public_key()),
        Some(new_key.public_key())
    );
    assert_eq!(loaded.key.public_key(), old_key.public_key());

    // Killed after identity.json, before the rename: the next key is promoted.
    data.write("node.key.next", key_to_pem(&new_key).as_bytes())
        .unwrap();
    data.write("identity.json", &new.to_json()).unwrap();
    let loaded = load(&data).unwrap();
    assert_eq!(loaded.stored.chain, new.chain);
    assert_eq!(loaded.key.public_key(), new_key.public_key());

    // The whole store.
    let (dir2, _, old2) = joined(&tmp.path().join("b"), &ks, "node_r2");
    let key3 = node_key();
    let new3 = identity_for(&ks, issue(&ks, &key3, "node_r2", NodeRole::Node));
    let key3_pub = key3.public_key().clone();
    store_rejoined(&dir2, key3.into(), &new3, &old2).unwrap();
    let loaded = load(&dir2).unwrap();
    assert_eq!(loaded.key.public_key(), &key3_pub);
    assert_eq!(loaded.stored.chain, new3.chain);
    assert!(!dir2.exists("node.key.next"));
    let _ = dir;
}
