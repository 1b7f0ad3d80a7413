//! `batch approve` against a control plane answering through [`ApiCall`] (a scripted server):
//! an honest one gets a signature over the root recomputed here; one that lies about its root,
//! lists a leaf out of place, or checks approvals in another trust domain gets nothing signed
//! or submitted.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;

use commands::quorum::{BatchView, ScopeEntry};
use domain::quorum::{
    batch_approval_signing_input, ApproveOutcome, ApproverKey, BatchApprovalState, BatchId,
    BatchStatus, PayloadDigest, ScopeHash, ScopeLeaf, ScopeProof, ScopeTree, TrustDomain,
};
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};
use serde_json::json;

use super::approve::approve_with;
use super::args::{ApproveArgs, StoreArg};
use super::error::BatchCmdError;
use super::keys::pem;
use super::source::{ApiCall, ApiReply, RemoteSource};
use super::wire::{decode_sig, entry_json, outcome_json, view_json};

const TD: &str = "remote.example.com";

/// A scripted server: what it answers to show and scope, and the argv of every submit.
struct Scripted {
    show: serde_json::Value,
    scope: serde_json::Value,
    submitted: Mutex<Vec<Vec<String>>>,
}

impl ApiCall for Scripted {
    async fn run(&self, argv: Vec<String>) -> Result<ApiReply, BatchCmdError> {
        let out = match argv.get(1).map(String::as_str) {
            Some("show") => self.show.clone(),
            Some("scope") => self.scope.clone(),
            Some("submit-approval") => {
                self.submitted
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(argv.clone());
                let id =
                    BatchId::from_hex(&argv[3]).map_err(|e| BatchCmdError::Input(e.to_string()))?;
                let kid = domain::quorum::Kid::from_hex(&argv[5])
                    .map_err(|e| BatchCmdError::Input(e.to_string()))?;
                outcome_json(
                    &id,
                    &kid,
                    &ApproveOutcome {
                        recorded: true,
                        held: 1,
                        required: 1,
                        status: BatchStatus::Approved,
                    },
                )
            }
            _ => {
                return Ok(ApiReply {
                    stderr: b"bcctl: no such verb\n".to_vec(),
                    exit_code: 2,
                    ..Default::default()
                })
            }
        };
        Ok(ApiReply {
            stdout: out.to_string().into_bytes(),
            ..Default::default()
        })
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    key: PathBuf,
    public: ApproverKey,
    id: BatchId,
    view: BatchView,
    entries: Vec<ScopeEntry>,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let rng = SystemRandom::new();
    let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).expect("key");
    let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
        .expect("pair");
    let mut spki = vec![
        0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08,
        0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
    ];
    spki.extend_from_slice(pair.public_key().as_ref());
    let public = ApproverKey::from_spki(&spki).expect("spki");
    let key = dir.path().join("approver.pem");
    super::keys::write_new(&key, &pem("PRIVATE KEY", pkcs8.as_ref()), 0o600).expect("key file");

    let id = BatchId::derive("t1", "spiffe://remote.example.com/operator/ops", "k1").expect("id");
    let leaves: Vec<ScopeLeaf> = (0..3)
        .map(|i| {
            ScopeLeaf::new(
                format!("node-{i}"),
                "node.reimage",
                Some(PayloadDigest::of(format!("image-{i}").as_bytes())),
            )
            .expect("leaf")
        })
        .collect();
    let tree = ScopeTree::build(&id, &leaves).expect("tree");
    let mut entries: Vec<ScopeEntry> = leaves
        .iter()
        .map(|leaf| ScopeEntry {
            leaf: leaf.clone(),
            leaf_hash: leaf.hash(&id),
            payload_type_url: None,
            payload_value: None,
            proof: ScopeProof {
                index: 0,
                siblings: vec![],
            },
        })
        .collect();
    entries.sort_by_key(|e| e.leaf_hash);
    for (i, e) in entries.iter_mut().enumerate() {
        e.proof.index = i as u32;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_micros() as i64;
    let view = BatchView {
        tenant_id: "t1".into(),
        caller: "spiffe://remote.example.com/operator/ops".into(),
        reason: "reimage".into(),
        created_at_us: now,
        approver_set_epoch: 1,
        approvals_held: 0,
        state: BatchApprovalState {
            batch_id: id,
            scope_root: tree.root(),
            scope_size: 3,
            not_after_us: now + 3_600_000_000,
            required: 1,
            status: BatchStatus::Pending,
            approvals: BTreeMap::new(),
        },
    };
    Fixture {
        _dir: dir,
        key,
        public,
        id,
        view,
        entries,
    }
}

fn args(f: &Fixture) -> ApproveArgs {
    ApproveArgs {
        store: StoreArg {
            deployment: Default::default(),
        },
        batch: f.id.to_hex(),
        key: f.key.clone(),
        trust_domain: None,
        root: None,
        expect: None,
        allow_unbound: false,
        allow_opaque: false,
        operations_out: None,
        max_hours: 72,
        yes: true,
        json: true,
    }
}

fn server(view: &BatchView, td: &str, entries: &[ScopeEntry]) -> RemoteSource<Scripted> {
    RemoteSource {
        call: Scripted {
            show: view_json(view, Some(td)),
            scope: json!({ "entries": entries.iter().map(entry_json).collect::<Vec<_>>() }),
            submitted: Mutex::new(vec![]),
        },
    }
}

fn td() -> TrustDomain {
    TrustDomain::new(TD).expect("td")
}

#[tokio::test]
async fn an_honest_server_gets_a_signature_over_the_root_recomputed_here() {
    let f = fixture();
    let source = server(&f.view, TD, &f.entries);
    approve_with(&args(&f), &source, &td())
        .await
        .expect("approved");
    let submitted = source.call.submitted.into_inner().expect("lock");
    assert_eq!(submitted.len(), 1);
    let argv = &submitted[0];
    assert_eq!(
        &argv[..6],
        &[
            "batch",
            "submit-approval",
            "--batch",
            &f.id.to_hex(),
            "--kid",
            &f.public.kid().to_hex()
        ]
    );
    let sig = decode_sig(&argv[7]).expect("base64url");
    let message = batch_approval_signing_input(
        &f.id,
        &f.view.state.scope_root,
        3,
        f.view.state.not_after_us,
        &td(),
    );
    ring::signature::UnparsedPublicKey::new(
        &ring::signature::ECDSA_P256_SHA256_ASN1,
        &f.public.spki_der()[26..],
    )
    .verify(&message, &sig)
    .expect("the signature verifies for the approver's trust domain");
}

#[tokio::test]
async fn a_server_lying_about_its_root_gets_nothing() {
    let f = fixture();
    let mut lying = f.view.clone();
    lying.state.scope_root = ScopeHash::from([7u8; 32]);
    let source = server(&lying, TD, &f.entries);
    let err = approve_with(&args(&f), &source, &td())
        .await
        .expect_err("refused");
    assert_eq!(err.exit_code(), 3, "{err}");
    assert!(err.to_string().starts_with("SCOPE_MISMATCH: the control plane answered two different batches: the 3 listed leaves give root "), "{err}");
    assert!(source.call.submitted.into_inner().expect("lock").is_empty());
}

#[tokio::test]
async fn a_leaf_listed_out_of_place_or_another_trust_domain_gets_nothing() {
    let f = fixture();
    let mut shuffled = f.entries.clone();
    shuffled.swap(0, 1);
    let source = server(&f.view, TD, &shuffled);
    let err = approve_with(&args(&f), &source, &td())
        .await
        .expect_err("refused");
    assert_eq!(err.to_string(), "SCOPE_MISMATCH: the control plane answered two different batches: leaf 1 listed where 0 was expected");
    assert!(source.call.submitted.into_inner().expect("lock").is_empty());

    let source = server(&f.view, "staging.example.com", &f.entries);
    let err = approve_with(&args(&f), &source, &td())
        .await
        .expect_err("refused");
    assert_eq!(err.to_string(), format!("INVALID_STATE: the control plane checks approvals in trust domain staging.example.com, this approver signs for {TD}: an approval for {TD} would never admit a command there; check the server and profile you approve against"));
    assert!(source.call.submitted.into_inner().expect("lock").is_empty());
}

/// A server whose answers do not read as the batch verbs' JSON gets nothing signed: each is
/// INVALID_RESPONSE (exit 3), naming what was wrong.
#[tokio::test]
async fn a_malformed_answer_is_an_invalid_response() {
    let f = fixture();
    let mut source = server(&f.view, TD, &f.entries);
    source.call.scope = json!({ "leaves": [] });
    let err = approve_with(&args(&f), &source, &td())
        .await
        .expect_err("refused");
    assert_eq!(err.exit_code(), 3, "{err}");
    assert_eq!(
        err.to_string(),
        "INVALID_RESPONSE: the server's scope lists no entries"
    );
    assert!(source.call.submitted.into_inner().expect("lock").is_empty());

    let mut source = server(&f.view, TD, &f.entries);
    source.call.scope = json!({ "entries": [{ "subject": "node-0" }] });
    let err = approve_with(&args(&f), &source, &td())
        .await
        .expect_err("refused");
    assert_eq!(err.exit_code(), 3, "{err}");
    assert!(
        err.to_string()
            .starts_with("INVALID_RESPONSE: the server's answer has no valid "),
        "{err}"
    );
    assert!(source.call.submitted.into_inner().expect("lock").is_empty());
}
