//! `bc.wire.v1.NodeService` over the JoinService: Join, Renew and the node Session.
//!
//! Identity comes from the connection, never from a message: Renew and Session read the
//! [`VerifiedNode`] the TLS handshake proved (through [`PeerInfo`] in the request extensions) and
//! answer UNAUTHENTICATED without one. Every Join refusal is PERMISSION_DENIED "Join refused"
//! (gRPC's name for ACCESS_DENIED), every Renew refusal PERMISSION_DENIED "Renew refused".

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use commands::identity::RENEW_REFUSED;
use commands::quorum::TrustReport;
use commands::Clock;
use domain::pki::{NodeIdentity, TrustDomain};
use events::store::EventStore;
use proto::node_service_server::NodeService;
use proto::{
    gateway_message, node_message, GatewayMessage, JoinRequest, NodeMessage, RenewRequest,
    RenewResponse, RevocationNotice, SignedJoinResponse, Welcome,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use crate::backend::Backend;
use crate::conn::PeerInfo;
use crate::feed::FeedHealth;
use crate::metrics::Metrics;
use crate::revoked::RevokedSerials;
use crate::sessions::{SessionEnd, Sessions};
use crate::tls::VerifiedNode;
use crate::trust::WelcomeTrust;

/// Records the trust versions nodes report, through `commands::quorum::report_node_trust`
/// (the `node.trust.reported` event), off the request path: reports queue here and one worker
/// task appends them in order. A full queue drops a report with a warning (the next one carries the
/// same information).
#[derive(Clone)]
pub struct TrustReporter {
    tx: Option<mpsc::Sender<TrustReport>>,
}

impl TrustReporter {
    /// A reporter that records nothing (benchmarks, or when disabled by configuration).
    pub fn disabled() -> Self {
        TrustReporter { tx: None }
    }

    /// Starts the worker task on the current runtime.
    pub fn start(store: EventStore, clock: Arc<dyn Clock>) -> Self {
        let (tx, mut rx) = mpsc::channel::<TrustReport>(4096);
        tokio::spawn(async move {
            while let Some(report) = rx.recv().await {
                if let Err(e) =
                    commands::quorum::report_node_trust(&store, clock.as_ref(), &report).await
                {
                    tracing::warn!(node = %report.node_id, error = %e, "recording a node's trust version failed");
                }
            }
        });
        TrustReporter { tx: Some(tx) }
    }

    fn report(&self, report: TrustReport) {
        if let Some(tx) = &self.tx {
            if let Err(e) = tx.try_send(report) {
                tracing::warn!(error = %e, "trust report queue full; report dropped");
            }
        }
    }
}

/// The NodeService.
#[derive(Clone)]
pub struct NodeServer {
    pub(crate) backend: Arc<Backend>,
    pub(crate) store: EventStore,
    pub(crate) trust_domain: TrustDomain,
    pub(crate) sessions: Arc<Sessions>,
    pub(crate) revoked: Arc<RevokedSerials>,
    pub(crate) feed: Arc<FeedHealth>,
    pub(crate) metrics: Arc<Metrics>,
    pub(crate) reporter: TrustReporter,
    pub(crate) clock: Arc<dyn Clock>,
}

fn verified<T>(request: &Request<T>) -> Result<VerifiedNode, Status> {
    request
        .extensions()
        .get::<PeerInfo>()
        .and_then(|p| p.node.clone())
        .ok_or_else(|| {
            Status::unauthenticated(
                "this call needs the node's client certificate (mTLS); join first",
            )
        })
}

impl NodeServer {
    async fn tenant_of(&self, node_id: &str) -> Option<String> {
        match commands::identity::edge_reads::tenant_of(&self.store, node_id).await {
            Ok(tenant) => tenant,
            Err(e) => {
                tracing::warn!(node = node_id, error = %e, "reading the node's tenant failed");
                None
            }
        }
    }
}

#[tonic::async_trait]
impl NodeService for NodeServer {
    async fn join(
        &self,
        request: Request<JoinRequest>,
    ) -> Result<Response<SignedJoinResponse>, Status> {
        let peer = request
            .extensions()
            .get::<PeerInfo>()
            .map(|p| p.remote.ip());
        match self.backend.join_from(peer, request.into_inner()).await {
            Ok(answer) => {
                self.metrics.join_requests.inc("joined");
                Ok(Response::new(answer))
            }
            Err(s) if s.code() == tonic::Code::ResourceExhausted => {
                self.metrics.join_requests.inc("limited");
                Err(s)
            }
            Err(s) if s.code() == tonic::Code::PermissionDenied => {
                self.metrics.join_requests.inc("refused");
                Err(s)
            }
            Err(s) if s.code() == tonic::Code::Unimplemented => {
                self.metrics.join_requests.inc("unsupported");
                Err(s)
            }
            Err(s) => {
                self.metrics.join_requests.inc("error");
                Err(s)
            }
        }
    }

    async fn renew(
        &self,
        request: Request<RenewRequest>,
    ) -> Result<Response<RenewResponse>, Status> {
        let node = match verified(&request) {
            Ok(n) => n,
            Err(s) => {
                self.metrics.renewals.inc("unauthenticated");
                return Err(s);
            }
        };
        // The chain in the message must be the one this connection proved: a node renews only
        // its own certificate.
        let same = request
            .get_ref()
            .chain
            .first()
            .and_then(|leaf| NodeIdentity::from_leaf_der(leaf, &self.trust_domain).ok())
            .is_some_and(|id| {
                id.serial == node.identity().serial && id.spiffe_id == node.identity().spiffe_id
            });
        if !same {
            self.metrics.renewals.inc("refused");
            tracing::info!(node = %node.identity().spiffe_id, "renew refused: the chain is not the connection's certificate");
            return Err(Status::permission_denied(RENEW_REFUSED));
        }
        let leaf = node.leaf_der().to_vec();
        match self.backend.renew(request.into_inner(), leaf).await {
            Ok(answer) => {
                self.metrics.renewals.inc("renewed");
                Ok(Response::new(answer))
            }
            Err(s) if s.code() == tonic::Code::PermissionDenied => {
                self.metrics.renewals.inc("refused");
                Err(s)
            }
            Err(s) => {
                self.metrics.renewals.inc("error");
                Err(s)
            }
        }
    }

    type SessionStream = ReceiverStream<Result<GatewayMessage, Status>>;

    async fn session(
        &self,
        request: Request<Streaming<NodeMessage>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let node = match verified(&request) {
            Ok(n) => n,
            Err(s) => {
                self.metrics.sessions_refused.inc("no-certificate");
                return Err(s);
            }
        };
        if self.feed.is_stale() {
            self.metrics.sessions_refused.inc("feed-stale");
            return Err(Status::unavailable(
                "the gateway's revocation feed is behind; new sessions are refused until it catches up: retry",
            ));
        }
        let identity = node.identity().clone();
        let node_id = identity.spiffe_id.node.as_str().to_string();
        let serial_hex = identity.serial.to_hex();
        // Register before the last revocation check: a revocation the feed applies after this
        // check finds the session registered; one applied before it is in the set.
        let (guard, mut end) = self.sessions.register(&node_id, &serial_hex);
        if self.revoked.contains(identity.serial.as_bytes()) {
            self.metrics.sessions_refused.inc("revoked");
            return Err(Status::unauthenticated("this certificate is revoked"));
        }
        self.metrics.sessions_opened.fetch_add(1, Ordering::Relaxed);
        let tenant = self.tenant_of(&node_id).await;
        let (tx, rx) = mpsc::channel::<Result<GatewayMessage, Status>>(8);
        let mut inbound = request.into_inner();
        let this = self.clone();
        let expires_in = {
            let left = identity.not_after - time::OffsetDateTime::now_utc();
            Duration::from_millis(u64::try_from(left.whole_milliseconds()).unwrap_or(0))
        };
        tokio::spawn(async move {
            let _guard = guard;
            let expiry = tokio::time::sleep(expires_in);
            tokio::pin!(expiry);
            let mut reported = false;
            loop {
                tokio::select! {
                    ended = &mut end => {
                        if let Ok(SessionEnd::Shutdown) = ended {
                            let _ = tx.send(Err(Status::unavailable("the gateway is shutting down; reconnect"))).await;
                        } else if let Ok(SessionEnd::Revoked { serial, reason }) = ended {
                            let notice = GatewayMessage {
                                body: Some(gateway_message::Body::Revocation(RevocationNotice {
                                    serial,
                                    reason,
                                    revoked_at_ms: this.clock.now_us() / 1000,
                                })),
                            };
                            if tx.send(Ok(notice)).await.is_ok() {
                                this.metrics.revocation_notices.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        break;
                    }
                    _ = &mut expiry => {
                        let _ = tx.send(Err(Status::unauthenticated("the session's certificate expired; reconnect with the renewed one"))).await;
                        break;
                    }
                    msg = inbound.message() => match msg {
                        Ok(Some(NodeMessage { body: Some(node_message::Body::Hello(hello)) })) => {
                            let trust = match this.backend.trust().await {
                                Ok(t) => t,
                                Err(e) => {
                                    tracing::warn!(error = %e, "Welcome without a trust bundle");
                                    WelcomeTrust::default()
                                }
                            };
                            let welcome = GatewayMessage {
                                body: Some(gateway_message::Body::Welcome(Welcome {
                                    server_time_ms: this.clock.now_us() / 1000,
                                    trust_version: trust.version,
                                    signed_trust_bundle: trust.bundle,
                                    trust_bundle_signature: trust.signature,
                                })),
                            };
                            if let Some(t) = &tenant {
                                reported = true;
                                this.reporter.report(TrustReport {
                                    tenant_id: t.clone(),
                                    node_id: node_id.clone(),
                                    trust_version: hello.trust_version,
                                    session_start: true,
                                    connected: true,
                                });
                            }
                            tracing::debug!(node = %node_id, trust_version = hello.trust_version, agent = %hello.agent_version, "session hello");
                            if tx.send(Ok(welcome)).await.is_err() {
                                break;
                            }
                        }
                        Ok(Some(NodeMessage { body: Some(node_message::Body::Status(status)) })) => {
                            if let Some(t) = &tenant {
                                reported = true;
                                this.reporter.report(TrustReport {
                                    tenant_id: t.clone(),
                                    node_id: node_id.clone(),
                                    trust_version: status.trust_version,
                                    session_start: false,
                                    connected: true,
                                });
                            }
                        }
                        Ok(Some(_)) => {}
                        Ok(None) | Err(_) => break,
                    }
                }
            }
            if reported {
                if let Some(t) = &tenant {
                    this.reporter.report(TrustReport {
                        tenant_id: t.clone(),
                        node_id: node_id.clone(),
                        trust_version: 0,
                        session_start: false,
                        connected: false,
                    });
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}
