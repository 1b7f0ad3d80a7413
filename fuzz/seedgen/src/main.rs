//! Writes the fuzz test keys (`fuzz/keys/`) and seeds (`fuzz/corpus/TARGET/`), each made by the
//! project's own code: a key set from `KeySet::generate`, bundles from `seal_bundle` and
//! `plaintext_bundle`, a CSR from `build_csr`, a token from `seal_token`, a node certificate from
//! `issue_node_certificate`, an `identity.json` from `StoredIdentity`, a signed trust bundle, event
//! payloads, audit leaves and a signed checkpoint. Also writes `pki.json` (plaintext) into the
//! directory given second, for make.sh's real `bcctl audit export`.
//!
//! Usage: bc-fuzz-seedgen FUZZ_DIR WORK_DIR

use std::path::{Path, PathBuf};

use bcd::files::key_to_pem;
use bcd::identity_store::{StoredIdentity, TrustState};
use domain::audit::{AuditLeaf, AuditSigner, Checkpoint};
use domain::pki::statement::{sign, TrustBundleStatement};
use domain::pki::token::TokenSecret;
use domain::pki::{
    build_csr, issue_node_certificate, plaintext_bundle, seal_bundle, seal_token, DeploymentSecret,
    KeyRole, KeySet, KeySetLifetimes, NodeCertificateDecision, NodeId, NodeIdentity, NodeRole,
    PrivateKey, Serial, SiteId, SpiffeId, TrustDomain, VerifiedCsr,
};
use events::schema::*;
use events::{EventPayload, RecordedEvent};
use prost::Message;
use sha2::{Digest, Sha256};

const TRUST_DOMAIN: &str = "fuzz.example.com";
const TENANT: &str = "t-fuzz";
const SECRET: &str = "fuzz-deployment-secret-0123456789abcdef";

struct Out(PathBuf);

impl Out {
    fn put(&self, target: &str, name: &str, bytes: &[u8]) {
        let dir = self.0.join("corpus").join(target);
        std::fs::create_dir_all(&dir).expect("corpus dir");
        std::fs::write(dir.join(name), bytes).expect("write seed");
    }

    fn key(&self, name: &str, key: &PrivateKey) {
        let dir = self.0.join("keys");
        std::fs::create_dir_all(&dir).expect("keys dir");
        std::fs::write(dir.join(name), key.pkcs8_der()).expect("write key");
    }
}

fn recorded(event_type: &str, schema_version: u32, payload: Vec<u8>) -> RecordedEvent {
    RecordedEvent {
        position: 42,
        stream_id: "node/node-1".into(),
        stream_version: 2,
        event_id: [7; 16],
        event_type: event_type.into(),
        schema_version,
        tenant_id: TENANT.into(),
        occurred_at_us: 1_767_225_600_000_000,
        payload_sha256: Sha256::digest(&payload).into(),
        payload,
        tx_id: None,
        actor: None,
    }
}

/// An event_decode seed: the target's type selector, the schema version, the payload.
fn event_seed<P: EventPayload>(out: &Out, kind: u8, schema: u8, payload: &P) {
    let mut seed = vec![kind, schema];
    seed.extend(payload.encode_to_vec());
    out.put(
        "event_decode",
        &format!("{kind:02}-{}-v{schema}", P::EVENT_TYPE),
        &seed,
    );
    let e = recorded(P::EVENT_TYPE, u32::from(schema), payload.encode_to_vec());
    let leaf = AuditLeaf::from_event(&e, u64::from(kind))
        .encode()
        .expect("leaf");
    out.put("audit_leaf", &format!("{}", P::EVENT_TYPE), &leaf);
}

fn main() {
    let mut args = std::env::args().skip(1);
    let out = Out(PathBuf::from(args.next().expect("FUZZ_DIR")));
    let work = PathBuf::from(args.next().expect("WORK_DIR"));
    let now = time::OffsetDateTime::now_utc();
    let td = TrustDomain::new(TRUST_DOMAIN).expect("td");
    let keys = KeySet::generate(td.clone(), now, KeySetLifetimes::default()).expect("keys");
    out.key("join_encryption.pk8", keys.join_encryption.private_key());
    out.key("join_signing.pk8", &keys.join_signing);
    out.key("audit_signing.pk8", &keys.audit_signing);

    // pki_bundle
    let plain = plaintext_bundle(&keys).expect("plaintext bundle");
    out.put("pki_bundle", "plaintext.json", &plain);
    let secret = DeploymentSecret::new(SECRET).expect("secret");
    out.put(
        "pki_bundle",
        "sealed.json",
        &seal_bundle(&keys, &secret).expect("sealed"),
    );
    std::fs::write(work.join("pki.json"), &plain).expect("work pki.json");

    // csr, token_seal
    let node_key = PrivateKey::generate(KeyRole::Node).expect("node key");
    let csr = build_csr(&node_key).expect("csr");
    out.put("csr", "node.der", &csr);
    let verified = VerifiedCsr::verify(&csr).expect("own CSR verifies");
    let bound: [u8; 32] = Sha256::digest(b"fuzz-csr").into();
    let token = TokenSecret::generate().expect("token");
    let sealed = seal_token(keys.join_encryption.public_key(), &token, &bound).expect("seal");
    out.put("token_seal", "sealed.bin", sealed.as_bytes());
    out.put("token_seal", "sealed.txt", sealed.to_base64url().as_bytes());

    // node_identity
    let spiffe = SpiffeId::new(
        td.clone(),
        SiteId::new("site-1").expect("site"),
        NodeId::new("node-1").expect("node"),
    );
    let decision = NodeCertificateDecision {
        spiffe_id: spiffe.clone(),
        role: NodeRole::Node,
        serial: Serial::generate().expect("serial"),
        requested_lifetime: None,
        statements: vec![],
    };
    let issued = issue_node_certificate(&keys.node_ca, &verified, &decision, now).expect("issue");
    out.put("node_identity", "leaf.der", &issued.der);
    out.put("node_identity", "node_ca.der", keys.node_ca.cert_der());
    out.put("node_identity", "spiffe.txt", spiffe.to_string().as_bytes());
    out.put(
        "node_identity",
        "pin.txt",
        node_key.public_key().pin().to_string().as_bytes(),
    );

    // trust_bundle
    let roots = vec![keys.command_signing_root.cert_der().to_vec()];
    let content =
        domain::trust_bundle::content_of(&roots, &domain::quorum::ApproverSet::none(), 0, &[]);
    let bundle = proto::TrustBundle {
        version: 2,
        trust_domain: TRUST_DOMAIN.into(),
        content: content.encode_to_vec(),
    }
    .encode_to_vec();
    let signature = sign(
        &keys.join_signing,
        &TrustBundleStatement {
            trust_domain: TRUST_DOMAIN,
            bundle: &bundle,
        },
    )
    .expect("sign bundle");
    let welcome = proto::Welcome {
        server_time_ms: 1_767_225_600_000,
        trust_version: 2,
        signed_trust_bundle: bundle.clone(),
        trust_bundle_signature: signature.as_bytes().to_vec(),
    };
    let mut seed = vec![0];
    seed.extend(welcome.encode_to_vec());
    out.put("trust_bundle", "welcome.bin", &seed);
    let mut seed = vec![1];
    seed.extend(&bundle);
    out.put("trust_bundle", "bundle-to-sign.bin", &seed);

    // identity_json
    let leaf = NodeIdentity::from_leaf_der(&issued.der, &td).expect("leaf");
    let signed = proto::SignedTrustBundle {
        bundle,
        signature: signature.as_bytes().to_vec(),
    };
    let stored = StoredIdentity::new(
        &leaf,
        vec![issued.der.clone(), keys.node_ca.cert_der().to_vec()],
        TrustState {
            trust_version: 2,
            trust_roots: roots.clone(),
            trust_bundle: Some(content.encode_to_vec()),
            signed_trust_bundle: Some(signed.encode_to_vec()),
            server_time: Some(now),
        },
    );
    out.put("identity_json", "identity.json", &stored.to_json());
    out.put(
        "identity_json",
        "node.key",
        key_to_pem(&node_key).as_bytes(),
    );

    // event_decode, audit_leaf: one payload per event type, as the decisions fill them.
    let node = |s: &str| s.to_string();
    event_seed(
        &out,
        0,
        1,
        &JoinTokenCreated {
            token_id: node("tok_1"),
            tenant_id: node(TENANT),
            site_id: node("site-1"),
            pool_id: node("default"),
            role: node("node"),
            uses: 3,
            expires_at_us: 1_767_229_200_000_000,
            secret_sha256: token.hash().as_bytes().to_vec(),
            allow_reclaim: true,
            ..Default::default()
        },
    );
    event_seed(
        &out,
        1,
        1,
        &JoinTokenRevoked {
            token_id: node("tok_1"),
            reason: node("operator"),
        },
    );
    event_seed(
        &out,
        2,
        1,
        &JoinTokenUsed {
            token_id: node("tok_1"),
            use_number: 1,
            node_id: node("node-1"),
            uses_left: 2,
        },
    );
    event_seed(
        &out,
        3,
        1,
        &NodeJoined {
            node_id: node("node-1"),
            tenant_id: node(TENANT),
            site_id: node("site-1"),
            pool_id: node("default"),
            role: node("node"),
            attestor: node("join-token"),
            token_id: node("tok_1"),
            identity_generation: 1,
            hardware_key_sha256: vec![3; 32],
            csr_sha256: verified.sha256().to_vec(),
            ..Default::default()
        },
    );
    event_seed(
        &out,
        4,
        1,
        &NodeCertificateIssued {
            node_id: node("node-1"),
            serial: issued.serial.to_hex(),
            der: issued.der.clone(),
            not_before_us: 1,
            not_after_us: 2,
            identity_generation: 1,
            cause: node("join"),
            ..Default::default()
        },
    );
    event_seed(
        &out,
        5,
        1,
        &RenewProofUsed {
            node_id: node("node-1"),
            subject: vec![5; 32],
            expires_at_us: 9,
        },
    );
    let revoked = NodeIdentityRevoked {
        node_id: node("node-1"),
        reason: node("compromised"),
        new_identity_generation: 2,
        revoked_serials: vec![issued.serial.to_hex()],
    };
    event_seed(&out, 6, 1, &revoked);
    event_seed(&out, 6, 2, &revoked);
    event_seed(
        &out,
        7,
        1,
        &NodeDeleted {
            node_id: node("node-1"),
            reason: node("gone"),
        },
    );
    event_seed(
        &out,
        8,
        1,
        &NodeRetired {
            node_id: node("node-1"),
            reason: node("old"),
        },
    );
    event_seed(
        &out,
        9,
        1,
        &JoinRefused {
            refusal: node("token_unknown"),
            attestor: node("join-token"),
            csr_sha256: vec![1; 32],
            ..Default::default()
        },
    );
    event_seed(
        &out,
        10,
        1,
        &RenewRefused {
            refusal: node("proof_replayed"),
            node_id: node("node-1"),
            ..Default::default()
        },
    );
    event_seed(
        &out,
        11,
        1,
        &RefusalsSuppressed {
            kind: node("join"),
            refusal: node("token_unknown"),
            window_start_us: 5,
            count: 17,
        },
    );
    event_seed(
        &out,
        12,
        1,
        &AttestationUsesPruned {
            expired_before_us: 4,
            keys: vec![AttestationUseKey {
                attestor: node("renew-pop"),
                subject: vec![2; 32],
            }],
        },
    );
    event_seed(
        &out,
        13,
        1,
        &TrustBundlePublished {
            version: 2,
            digest: vec![1; 32],
            content: Some(content.clone()),
            previous_version: 1,
            cause: node("settled"),
            ..Default::default()
        },
    );
    event_seed(&out, 18, 1, &NodeTrustReported::default());
    event_seed(&out, 19, 1, &BatchCreated::default());

    // signed_note
    let signer =
        AuditSigner::from_pkcs8(keys.audit_signing.pkcs8_der(), &ring_rng()).expect("audit signer");
    let origin = domain::audit::audit_origin(TRUST_DOMAIN, TENANT).expect("origin");
    let cp = Checkpoint {
        origin,
        size: 3,
        root: [9; 32],
    };
    out.put("signed_note", "body.txt", cp.body().as_bytes());
    let note = cp.sign(&signer, &ring_rng()).expect("sign checkpoint");
    out.put("signed_note", "note.txt", note.as_bytes());
    out.put(
        "signed_note",
        "verifier_key.txt",
        signer.public_key().to_verifier_key().as_bytes(),
    );
    out.put(
        "signed_note",
        "pin.txt",
        signer.public_key().pin().to_string().as_bytes(),
    );
    let _ = Path::new(".");
}

fn ring_rng() -> ring::rand::SystemRandom {
    ring::rand::SystemRandom::new()
}
