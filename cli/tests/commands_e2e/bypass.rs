//! A compromised control plane, played by the test: it signs with a genuine worker key of the
//! deployment's command-signing root and writes `command.enqueued` straight into the log,
//! skipping every check `bcctl command run` makes (no batch for a destructive kind, a batch the
//! node is not in). The gateway then sends it like any other command; only the machine's own
//! admission check stands in the way.

use commands::command_queue::WorkerSigner;
use commands::{append_and_project, every_projection, RunError, SystemClock};
use domain::command::{kind_spec, CommandBody};
use domain::pki::{open_bundle, DeploymentSecret, TrustDomain};
use events::schema::{command_stream, CommandEnqueued};
use events::store::{EventStore, ExpectedVersion};
use events::NewEvent;

use super::fleet::Server;

/// Enqueues `kind` for `node_id` (tenant `default`) with `batch_id` in its signed body, checks
/// skipped; returns the command id.
pub fn enqueue_bypassing_checks(
    server: &Server,
    node_id: &str,
    kind: &str,
    batch_id: Option<[u8; 32]>,
) -> String {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let bytes = std::fs::read(server.s("pkiBundle")).expect("read the PKI bundle");
        let secret = DeploymentSecret::new(&server.secret).expect("the development secret");
        let keys = open_bundle(&bytes, Some(&secret))
            .expect("open the bundle")
            .keys
            .expect("a sealed bundle opened with its secret has keys");
        let trust_domain = TrustDomain::new("bc.local").expect("trust domain");
        let signer = WorkerSigner::new(
            keys.command_signing_root,
            trust_domain,
            "compromised-worker",
            time::Duration::hours(1),
        );
        let store = EventStore::connect(&server.db_url).await.expect("store");
        let now_ms = time::OffsetDateTime::now_utc().unix_timestamp() * 1000;
        let command_id = format!("cmd_{}", hex::encode(events::envelope::new_event_id()));
        let spec = kind_spec(kind).expect("a built-in kind");
        let body = CommandBody {
            command_id: command_id.clone(),
            node_id: node_id.to_owned(),
            tenant_id: "default".into(),
            kind: kind.to_owned(),
            payload_type_url: spec.type_url(),
            payload: Vec::new(),
            batch_id: batch_id.map(|b| b.to_vec()).unwrap_or_default(),
            issued_at_ms: now_ms,
            not_after_ms: now_ms + 3_600_000,
        };
        let signed = signer
            .sign(&store, &SystemClock, &body)
            .await
            .expect("sign with the worker key");
        let event = NewEvent::from_payload(
            events::envelope::new_event_id(),
            "default",
            now_ms * 1000,
            &CommandEnqueued {
                command_id: command_id.clone(),
                node_id: node_id.to_owned(),
                tenant_id: "default".into(),
                kind: kind.to_owned(),
                payload_type_url: spec.type_url(),
                payload: Vec::new(),
                batch_id: body.batch_id.clone(),
                body: signed.body.clone(),
                signature: signed.signature.clone(),
                worker_certificate: signed.worker_chain[0].clone(),
                caller: "compromised".into(),
                held: false,
                leaf_hash: Vec::new(),
                not_after_us: body.not_after_ms * 1000,
                destructive: spec.destructive,
            },
        );
        let stream = command_stream(&command_id);
        let appended: Result<(), RunError> = commands::transaction!(&store, RunError, |tx| {
            append_and_project(
                tx,
                &every_projection(),
                &stream,
                ExpectedVersion::NoStream,
                std::slice::from_ref(&event),
            )
            .await?;
            Ok(())
        });
        appended.expect("append the command");
        command_id
    })
}

/// The SPKI DER of a `.pub` file (`bcctl batch keygen`'s SPKI PEM).
pub fn spki_of(pem: &std::path::Path) -> Vec<u8> {
    use base64::Engine as _;
    let text = std::fs::read_to_string(pem).expect("read a public key");
    let body: String = text.lines().filter(|l| !l.starts_with("-----")).collect();
    base64::engine::general_purpose::STANDARD
        .decode(body.trim())
        .expect("PEM base64")
}

/// Publishes a trust bundle with the current roots and the approver set `keys` at `threshold`
/// and `epoch`, with no approver-set signatures, the way a compromised control plane holding the
/// JoinService key could (the gateway signs whatever is published); returns its version.
pub fn publish_unsigned_set(
    server: &Server,
    keys: &[std::path::PathBuf],
    threshold: u32,
    epoch: u64,
) -> u64 {
    use domain::quorum::{ApproverKey, ApproverSet};
    use domain::trust_bundle::{bundle_digest, content_of, set_sha256};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let store = EventStore::connect(&server.db_url).await.expect("store");
        let published = commands::quorum::published_bundle(&store)
            .await
            .expect("read the published bundle")
            .expect("a published bundle");
        let set = ApproverSet::new(
            keys.iter()
                .map(|k| ApproverKey::from_spki(&spki_of(k)).expect("an approver key"))
                .collect(),
            threshold,
            Vec::new(),
            0,
        )
        .expect("an approver set");
        let roots = published.command_signing_roots.clone();
        let version = published.version + 1;
        let event = NewEvent::from_payload(
            events::envelope::new_event_id(),
            commands::quorum::DEPLOYMENT_TENANT,
            time::OffsetDateTime::now_utc().unix_timestamp() * 1_000_000,
            &events::schema::TrustBundlePublished {
                version,
                digest: bundle_digest(&roots, &set, epoch).to_vec(),
                content: Some(content_of(&roots, &set, epoch, &[])),
                previous_version: published.version,
                floor: 0,
                cause: "settled".into(),
                active_root_sha256: published.active_root_sha256.clone(),
                approver_set_sha256: set_sha256(&set),
            },
        );
        let appended: Result<(), RunError> = commands::transaction!(&store, RunError, |tx| {
            append_and_project(
                tx,
                &every_projection(),
                commands::quorum::TRUST_BUNDLE_STREAM,
                ExpectedVersion::Any,
                std::slice::from_ref(&event),
            )
            .await?;
            Ok(())
        });
        appended.expect("publish the bundle");
        version
    })
}

/// Records that a gateway saw `node_id` connected holding trust version `version` (or, with
/// `connected` false, that its session ended), as a node behind a rotation would be reported.
pub fn report_node(server: &Server, node_id: &str, version: u64, connected: bool) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let store = EventStore::connect(&server.db_url).await.expect("store");
        commands::quorum::report_node_trust(
            &store,
            &SystemClock,
            &commands::quorum::TrustReport {
                tenant_id: "default".into(),
                node_id: node_id.into(),
                trust_version: version,
                session_start: true,
                connected,
                approver_set_epoch: 0,
                approver_set_sha256: Vec::new(),
            },
        )
        .await
        .expect("record the report");
    })
}
