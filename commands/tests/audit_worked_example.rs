//! The worked example of docs/AUDIT.md: fixed events, their leaf bytes, leaf hashes, the root and
//! a signed checkpoint. The asserted hex values are the ones the document shows; run with
//! `--nocapture` to print them.

use domain::audit::merkle::{leaf_hash, node_hash};
use domain::audit::{AuditLeaf, Checkpoint, Frontier};
use sha2::{Digest, Sha256};

#[test]
fn worked_example() {
    let payloads: [&[u8]; 3] = [b"hello", b"world", b"!"];
    let mut frontier = Frontier::new();
    let mut hashes = Vec::new();
    for (i, payload) in payloads.iter().enumerate() {
        let mut event_id = [0u8; 16];
        event_id[15] = i as u8 + 1;
        let leaf = AuditLeaf {
            tenant_id: "acme",
            index: i as u64,
            position: 10 + i as i64,
            stream_id: "tenant/acme",
            stream_version: i as i64 + 1,
            event_type: "test.happened",
            schema_version: 1,
            occurred_at_us: 1_767_225_600_000_000,
            event_id,
            payload_sha256: Sha256::digest(payload).into(),
            actor: None,
        };
        let bytes = leaf.encode().expect("encode");
        let h = leaf.leaf_hash().expect("hash");
        assert_eq!(h, leaf_hash(&bytes));
        println!("leaf {i} bytes ({}): {}", bytes.len(), hex::encode(&bytes));
        println!("leaf {i} hash: {}", hex::encode(h));
        frontier.push(h, |_, _| {});
        hashes.push(h);
    }
    let root = frontier.root();
    assert_eq!(
        root,
        node_hash(&node_hash(&hashes[0], &hashes[1]), &hashes[2])
    );
    println!("root of 3: {}", hex::encode(root));
    assert_eq!(
        hex::encode(hashes[0]),
        "e62ef0b8c5b1872391145b8d20f7c83334e29aa3bb353295698ded4cd9bb9234"
    );
    assert_eq!(
        hex::encode(root),
        "c932135c782f01a853a5aa86e1b56009ff4bcd6041a3cd117c894de940cb6692"
    );
    let cp = Checkpoint {
        origin: "audit.example.org/audit/acme".into(),
        size: 3,
        root,
    };
    print!("checkpoint body:\n{}", cp.body());
    assert_eq!(
        cp.body(),
        "audit.example.org/audit/acme\n3\nyTITXHgvAahTpaqG4bVgCf9LzWBBo80RfIlN6UDLZpI=\n"
    );
}
