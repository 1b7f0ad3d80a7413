//! A ramdisk certificate's allowed kinds at dispatch, on both backends (issue 40 item 16): a
//! command enqueued while the node's certificate allowed its kind is not dispatched once the
//! node's newest live certificate no longer does (here: the ramdisk re-joined, reclaiming its
//! node, with narrower allowed kinds). It is cancelled at dispatch with `command.cancelled`
//! naming why, is never pending again, and the commands the certificate still allows go out.

use std::sync::{Arc, Mutex};

use commands::command_queue::{
    command_show, enqueue_command, pending_for_node, record_dispatched, DispatchCause,
};
use commands::identity::{AttestorRegistry, IdentityConfig, JoinRequest, JoinService};
use domain::attest::{
    AttestRequest, AttestationResult, Attestor, AttestorRefusal, Facts, NodeKeyStatement, Planned,
    Verdict,
};
use domain::identity::JoinInput;
use domain::pki::{NodeRole, TrustDomain};
use events::schema::CommandCancelled;

use crate::command_queue::{events_of, fixtures, request, signer};
use crate::identity_support::*;

/// Admits a ramdisk into t9/site-1/pool-r with the kinds and the node to reclaim it is set to.
struct Ramdisk {
    kinds: Mutex<Vec<String>>,
    reclaim: Mutex<Option<String>>,
}

const RAMDISK_ONLY: &[NodeRole] = &[NodeRole::Ramdisk];

impl Attestor for Ramdisk {
    type Plan = ();
    fn id(&self) -> &str {
        "test-ramdisk-kinds"
    }
    fn roles(&self) -> &[NodeRole] {
        RAMDISK_ONLY
    }
    fn plan(&self, _request: &AttestRequest<'_>) -> Result<Planned<()>, AttestorRefusal> {
        Ok(Planned::new(Vec::new(), ()))
    }
    fn verify(&self, request: &AttestRequest<'_>, _plan: &(), _facts: &Facts) -> Verdict {
        Verdict::Admit(Box::new(AttestationResult {
            tenant_id: "t9".into(),
            role: request.role,
            site_id: "site-1".into(),
            pool_id: "pool-r".into(),
            reclaim_node_id: self.reclaim.lock().unwrap().clone(),
            token: None,
            bind: Vec::new(),
            single_use: Vec::new(),
            node_key: NodeKeyStatement::Unattested,
            allowed_kinds: self.kinds.lock().unwrap().clone(),
            approval: None,
        }))
    }
}

fn service(f: &Fixture, attestor: Arc<Ramdisk>) -> JoinService {
    let svc = JoinService::new(
        f.store.clone(),
        f.keys.clone(),
        Arc::new(f.clock.clone()),
        IdentityConfig::new(TrustDomain::new(TD).unwrap()),
    )
    .expect("service");
    let mut registry = AttestorRegistry::builtin();
    registry.register_in_process(attestor);
    svc.with_attestors(registry)
}

fn join(agent: &Agent) -> JoinRequest {
    JoinRequest {
        attestor: "test-ramdisk-kinds".into(),
        input: JoinInput {
            csr_der: agent.csr.clone(),
            role: "ramdisk".into(),
            ..JoinInput::default()
        },
    }
}

#[tokio::test]
async fn a_command_its_nodes_new_certificate_no_longer_allows_is_cancelled_at_dispatch() {
    for f in fixtures().await {
        let attestor = Arc::new(Ramdisk {
            kinds: Mutex::new(vec!["disk.wipe".into(), "diag.*".into()]),
            reclaim: Mutex::new(None),
        });
        let svc = service(&f, attestor.clone());
        let joined = svc.join(&join(&Agent::new())).await.expect("joins");
        let node = joined.node_id.clone();
        let (signer, _) = signer(&f);
        let enqueue = |kind: &'static str| {
            let (store, clock, signer, node) = (&f.store, &f.clock, &signer, node.clone());
            async move {
                enqueue_command(store, clock, signer, &request(&node, kind, vec![], None))
                    .await
                    .expect("enqueued under the first certificate")
                    .command_id
            }
        };
        let wipe = enqueue("disk.wipe").await;
        let ping = enqueue("diag.ping").await;

        // The ramdisk re-joins as the same node; its new certificate allows only diag.*.
        *attestor.kinds.lock().unwrap() = vec!["diag.*".into()];
        *attestor.reclaim.lock().unwrap() = Some(node.clone());
        f.clock.advance_secs(60);
        let again = svc.join(&join(&Agent::new())).await.expect("re-joins");
        assert_eq!(again.node_id, node);

        let ids = vec![wipe.clone(), ping.clone()];
        let sent = record_dispatched(&f.store, &f.clock, &node, &ids, DispatchCause::Ready)
            .await
            .unwrap();
        // Only what may be sent is answered: the gateway sends nothing else.
        assert_eq!(sent, [ping.as_str()]);
        assert_eq!(
            command_show(&f.store, &ping).await.unwrap().status,
            "dispatched"
        );
        let shown = command_show(&f.store, &wipe).await.unwrap();
        assert_eq!(shown.status, "cancelled");
        assert_eq!(shown.dispatch_count, 0);
        let reason = format!(
            "kind-not-allowed: node {node}'s certificate allows only diag.*, not disk.wipe; \
             cancelled at dispatch: the node's certificate changed after the command was \
             enqueued"
        );
        assert_eq!(shown.cancel_reason.as_deref(), Some(reason.as_str()));
        let cancelled: Vec<CommandCancelled> = events_of(&f.store, "command.cancelled")
            .await
            .iter()
            .map(|e| e.decode().unwrap())
            .collect();
        assert_eq!(cancelled.len(), 1);
        assert_eq!(cancelled[0].command_id, wipe);
        assert_eq!(cancelled[0].reason, reason);
        assert_eq!(events_of(&f.store, "command.dispatched").await.len(), 1);
        // Dispatched again (a reconnect): the cancelled one is skipped, nothing more cancelled.
        let sent = record_dispatched(&f.store, &f.clock, &node, &ids, DispatchCause::Hello)
            .await
            .unwrap();
        assert_eq!(sent, [ping.as_str()]);
        assert_eq!(events_of(&f.store, "command.cancelled").await.len(), 1);
        // Never pending again; the allowed one stays pending until answered.
        let pending = pending_for_node(&f.store, &node, 10).await.unwrap();
        let pending: Vec<&str> = pending.iter().map(|p| p.command_id.as_str()).collect();
        assert_eq!(pending, [ping.as_str()]);
    }
}
