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
