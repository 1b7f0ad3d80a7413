//! Shared helpers for the command tests: a joined data directory (identity.json with a
//! command-signing root and a trust bundle offering an approver set), worker-signed commands,
//! batches with approvals by approver keys made here, and a hook that leaves a marker file.
#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use bcd::files::identity::StoredIdentity;
use bcd::files::{DataDir, IDENTITY_FILE};
use bcd::signed_commands::{CommandContext, CommandRunner, CommandSettings};
use bcd::trust::approver_set::settle_held_set;
use domain::command::payloads::{DiagPing, NodeReboot};
use domain::command::{kind_spec, sign_command, CommandBody};
use domain::pki::{
    issue_worker_certificate, CommandSigningRoot, KeyRole, PrivateKey, Serial, TrustDomain,
};
use domain::quorum::{
    approver_set_signing_input, ApprovalSignature, ApproverKey, ApproverSet, BatchApproval,
    BatchId, ScopeLeaf, ScopeProof, ScopeTree, SetSignature, Tier,
};
use prost::Message as _;
use ring::rand::SystemRandom;
use ring::signature::{EcdsaKeyPair, KeyPair, ECDSA_P256_SHA256_ASN1_SIGNING};
use time::{Duration, OffsetDateTime};

pub const NODE: &str = "node_a";
pub const TD: &str = "example.org";

/// The SubjectPublicKeyInfo prefix of an uncompressed P-256 key.
const P256_SPKI_PREFIX: &str = "3059301306072a8648ce3d020106082a8648ce3d030107034200";

pub struct Approver {
    pub pair: EcdsaKeyPair,
    pub key: ApproverKey,
}

impl Approver {
    pub fn generate() -> Approver {
        let rng = SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_ASN1_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let mut spki = hex::decode(P256_SPKI_PREFIX).unwrap();
        spki.extend_from_slice(pair.public_key().as_ref());
        let key = ApproverKey::from_spki(&spki).unwrap();
        Approver { pair, key }
    }

    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        self.pair
            .sign(&SystemRandom::new(), message)
            .unwrap()
            .as_ref()
            .to_vec()
    }

    /// Its signature of `set` at `epoch` in trust domain `td`.
    pub fn sign_set(&self, set: &ApproverSet, epoch: u64, td: &str) -> SetSignature {
        let message = approver_set_signing_input(epoch, &set.digest(), &trust_domain(td));
        SetSignature {
            kid: self.key.kid(),
            sig: self.sign(&message),
        }
    }
}

pub fn trust_domain(name: &str) -> TrustDomain {
    TrustDomain::new(name).unwrap()
}

pub fn set_of(approvers: &[&Approver], threshold: u32, unbatched: u32) -> ApproverSet {
    ApproverSet::new(
        approvers.iter().map(|a| a.key.clone()).collect(),
        threshold,
        Vec::<Tier>::new(),
        unbatched,
    )
    .unwrap()
}

pub fn now() -> OffsetDateTime {
    OffsetDateTime::now_utc()
}

pub fn now_ms() -> i64 {
    i64::try_from(now().unix_timestamp_nanos() / 1_000_000).unwrap()
}

pub fn new_root() -> CommandSigningRoot {
    new_root_since(now() - Duration::hours(1))
}

/// A command-signing root valid from `since`, for 30 days.
pub fn new_root_since(since: OffsetDateTime) -> CommandSigningRoot {
    let key = PrivateKey::generate(KeyRole::CommandSigningRoot).unwrap();
    CommandSigningRoot::generate(&trust_domain(TD), key, since, Duration::days(30)).unwrap()
}

/// A worker key and its certificate by `root`.
pub struct Worker {
    pub key: PrivateKey,
    pub der: Vec<u8>,
}

pub fn worker_of(root: &CommandSigningRoot) -> Worker {
    worker_since(root, now() - Duration::minutes(1))
}

/// A worker key whose certificate by `root` is valid from `since`, for a day.
pub fn worker_since(root: &CommandSigningRoot, since: OffsetDateTime) -> Worker {
    let key = PrivateKey::generate(KeyRole::Worker).unwrap();
    let cert = issue_worker_certificate(
        root,
        key.public_key(),
        "test-worker",
        &Serial::generate().unwrap(),
        Duration::hours(24),
        since,
    )
    .unwrap();
    Worker {
        key,
        der: cert.der.clone(),
    }
}

/// A joined node's data directory and what signed for it.
pub struct Machine {
    pub tmp: tempfile::TempDir,
    pub data: DataDir,
    pub root: CommandSigningRoot,
    pub worker: Worker,
    pub marker: PathBuf,
    pub hook: PathBuf,
    pub settings: CommandSettings,
    pub pin: Option<domain::quorum::SetDigest>,
}

/// The content of a trust bundle offering `set` at `epoch` with `signatures`.
pub fn content(
    roots: &[Vec<u8>],
    set: &ApproverSet,
    epoch: u64,
    signatures: &[SetSignature],
) -> Vec<u8> {
    domain::trust_bundle::content_of(roots, set, epoch, signatures).encode_to_vec()
}

impl Machine {
    /// A node whose identity holds the root and a bundle offering `set` at `epoch`, with the
    /// held set settled (a first set) and a `node.reboot` hook that writes the marker.
    pub fn new(set: &ApproverSet, epoch: u64) -> Machine {
        let tmp = tempfile::tempdir().unwrap();
        let data = DataDir::new(tmp.path().join("data"));
        data.ensure_exists().unwrap();
        let root = new_root();
        let worker = worker_of(&root);
        let marker = tmp.path().join("marker");
        let hook = tmp.path().join("hook.sh");
        std::fs::write(
            &hook,
            format!(
                "#!/bin/sh\necho \"$BC_COMMAND_ID\" >> {}\necho \"ran $BC_COMMAND_KIND batch=$BC_BATCH_ID\"\n",
                marker.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut settings = CommandSettings::default();
        settings.hooks.insert("node.reboot".into(), hook.clone());
        let machine = Machine {
            tmp,
            data,
            root,
            worker,
            marker,
            hook,
            settings,
            pin: None,
        };
        let roots = vec![machine.root.cert_der().to_vec()];
        machine.write_identity(Some(content(&roots, set, epoch, &[])), 1);
        machine.settle();
        machine
    }

    pub fn roots(&self) -> Vec<Vec<u8>> {
        vec![self.root.cert_der().to_vec()]
    }

    pub fn write_identity(&self, bundle: Option<Vec<u8>>, version: u64) {
        let stored = StoredIdentity {
            node_id: NODE.into(),
            site_id: "site_1".into(),
            trust_domain: TD.into(),
            role: "node".into(),
            chain: vec![b"not checked here".to_vec()],
            not_after: "2099-01-01T00:00:00Z".into(),
            trust_version: version,
            trust_roots: self.roots(),
            trust_bundle: bundle,
            signed_trust_bundle: None,
            server_time: None,
            allowed_kinds: Vec::new(),
        };
        self.data.write(IDENTITY_FILE, &stored.to_json()).unwrap();
    }

    pub fn stored(&self) -> StoredIdentity {
        bcd::files::identity::read_stored(&self.data)
            .unwrap()
            .unwrap()
    }

    pub fn settle(&self) -> bcd::trust::approver_set::SetOutcome {
        settle_held_set(&self.data, &self.stored(), self.pin.as_ref()).unwrap()
    }

    pub fn context(&self) -> CommandContext {
        CommandContext {
            dir: self.data.clone(),
            settings: self.settings.clone(),
            pin: self.pin,
        }
    }

    pub fn runner(&self) -> CommandRunner {
        CommandRunner::open(self.context()).unwrap()
    }

    /// The command ids the hook ran, in order.
    pub fn ran(&self) -> Vec<String> {
        std::fs::read_to_string(&self.marker)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

pub fn new_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("cmd_{:032x}", NEXT.fetch_add(1, Ordering::SeqCst))
}

/// A body of `kind` for `node` with `payload`, issued now, living an hour.
pub fn body(
    id: &str,
    node: &str,
    kind: &str,
    payload: Vec<u8>,
    batch: Option<&BatchId>,
) -> CommandBody {
    let issued = now_ms();
    CommandBody {
        command_id: id.into(),
        node_id: node.into(),
        tenant_id: "tenant_a".into(),
        kind: kind.into(),
        payload_type_url: kind_spec(kind).map(|k| k.type_url()).unwrap_or_default(),
        payload,
        batch_id: batch.map(|b| b.as_bytes().to_vec()).unwrap_or_default(),
        issued_at_ms: issued,
        not_after_ms: issued + 3_600_000,
    }
}

/// `body` signed by `worker` for `td`, as the wire carries it.
pub fn signed(worker: &Worker, body: &CommandBody, td: &str) -> proto::Command {
    let s = sign_command(&worker.key, &worker.der, body, &trust_domain(td)).unwrap();
    proto::Command {
        command_id: body.command_id.clone(),
        body: s.body,
        signature: s.signature,
        signer_chain: s.worker_chain,
        batch_approval: None,
        batch_proof: None,
    }
}

pub fn ping(echo: &str) -> Vec<u8> {
    DiagPing { echo: echo.into() }.encode_to_vec()
}

pub fn reboot() -> Vec<u8> {
    NodeReboot {
        reason: "test".into(),
        delay_seconds: 0,
    }
    .encode_to_vec()
}

/// A batch of `node.reboot` on `subjects` (any payload).
pub struct Batch {
    pub id: BatchId,
    pub tree: ScopeTree,
    pub leaves: Vec<ScopeLeaf>,
}

pub fn batch(subjects: &[&str], key: &str) -> Batch {
    let id = BatchId::derive("tenant_a", "user:ops", key).unwrap();
    let leaves: Vec<ScopeLeaf> = subjects
        .iter()
        .map(|s| ScopeLeaf::new(*s, "node.reboot", None).unwrap())
        .collect();
    let tree = ScopeTree::build(&id, &leaves).unwrap();
    Batch { id, tree, leaves }
}

impl Batch {
    pub fn approval(
        &self,
        signers: &[&Approver],
        not_after_us: i64,
        td: &str,
    ) -> proto::BatchApproval {
        let approval = BatchApproval {
            batch_id: self.id,
            scope_root: self.tree.root(),
            scope_size: self.tree.size(),
            not_after_us,
            signatures: vec![],
        };
        let message = approval.signing_input(&trust_domain(td));
        let signatures: Vec<ApprovalSignature> = signers
            .iter()
            .map(|a| ApprovalSignature {
                kid: a.key.kid(),
                sig: a.sign(&message),
            })
            .collect();
        proto::BatchApproval {
            batch_id: self.id.as_bytes().to_vec(),
            scope_root: approval.scope_root.as_bytes().to_vec(),
            scope_size: approval.scope_size,
            not_after_us,
            signatures: signatures
                .iter()
                .map(|s| proto::ApprovalSignature {
                    kid: s.kid.as_bytes().to_vec(),
                    sig: s.sig.clone(),
                })
                .collect(),
        }
    }

    pub fn proof_for(&self, subject: &str) -> proto::BatchProof {
        let leaf = self.leaves.iter().find(|l| l.subject() == subject).unwrap();
        let index = self.tree.index_of(&leaf.hash(&self.id)).unwrap();
        let proof: ScopeProof = self.tree.proof(index).unwrap();
        proto::BatchProof {
            index: proof.index,
            siblings: proof
                .siblings
                .iter()
                .map(|s| s.as_bytes().to_vec())
                .collect(),
        }
    }
}

/// In an hour, in µs.
pub fn in_an_hour_us() -> i64 {
    (now_ms() + 3_600_000) * 1000
}
