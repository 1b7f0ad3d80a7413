//! `bc.wire.v1.NodeService` over the JoinService: Join, Renew and the node Session.
//!
//! Identity comes from the connection, never from a message: Renew and Session read the
//! [`VerifiedNode`] the TLS handshake proved (through [`PeerInfo`] in the request extensions) and
//! answer UNAUTHENTICATED without one. Every Join refusal is PERMISSION_DENIED "Join refused"
//! (gRPC's name for ACCESS_DENIED), every Renew refusal PERMISSION_DENIED "Renew refused".
//!
//! A Session checks the identity's validity (notBefore, notAfter) against the clock before
//! anything else: an expired or not yet valid certificate (one that expired on a connection
//! opened while it was valid, or a resumed one) gets UNAUTHENTICATED, no Welcome and no trust
//! report. Once open, the session's loop is biased: its end (revocation, shutdown) first, then
//! the certificate's expiry, then the node's messages, and each message is checked against the
//! expiry again, so nothing is answered or recorded past notAfter. Trust reports go through
//! [`SessionReports`] (changes only, bounded per session).
//!
//! Commands (issue 21, [`crate::dispatch`]): after the Welcome the session sends the node's
//! pending commands, again whenever the command poller wakes it (a wake comes after the session's
//! end and expiry in the loop's order, before the node's messages), and records each
//! `CommandResult` under the connection's node id.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use time::OffsetDateTime;

use commands::identity::RENEW_REFUSED;
use commands::quorum::TrustReport;
use commands::Clock;
use domain::pki::{NodeIdentity, TrustDomain};
use events::store::EventStore;
use proto::node_service_server::NodeService;
use proto::{
    gateway_message, node_message, GatewayMessage, JoinRequest, NodeMessage, RenewRequest,
    RevocationNotice, SignedJoinResponse, SignedRenewResponse, Welcome,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use crate::backend::Backend;
use crate::conn::PeerInfo;
use crate::dispatch::{SessionCommands, SessionItem};
use crate::feed::FeedHealth;
use crate::metrics::Metrics;
use crate::revoked::RevokedSerials;
use crate::sessions::{SessionEnd, Sessions};
use crate::tls::VerifiedNode;
use crate::trust::WelcomeTrust;
use crate::trust_reports::{Held, Queued, Seen, SessionReports, Skipped};

pub use crate::trust_reports::TrustReporter;

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
    /// The command queue the sessions dispatch from and record answers to.
    pub(crate) queue: Arc<dyn crate::dispatch::Queue>,
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

/// The metering outcome of a signed JoinResponse: `admitted`, or the deferral it carries.
fn answer_outcome(answer: &SignedJoinResponse) -> &'static str {
    use prost::Message as _;
    use proto::join_response::Deferral;
    match proto::JoinResponse::decode(answer.response.as_slice()).map(|r| r.deferral) {
        Ok(Some(Deferral::Pending(_))) => "deferred-approval",
        Ok(Some(Deferral::Challenge(_))) => "deferred-challenge",
        _ => "admitted",
    }
}

/// A session's response stream: the session task's channel, unboxed.
pub type SessionStream =
    std::pin::Pin<Box<dyn tokio_stream::Stream<Item = Result<GatewayMessage, Status>> + Send>>;

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
        let request = request.into_inner();
        let attestor = request.attestor.clone();
        let started = std::time::Instant::now();
        match self.backend.join_from(peer, request).await {
            Ok(answer) => {
                let outcome = answer_outcome(&answer);
                self.metrics
                    .verifications
                    .record(&attestor, outcome, started.elapsed());
                let label = if outcome == "admitted" {
                    "joined"
                } else {
                    "deferred"
                };
                self.metrics.join_requests.inc(label);
                Ok(Response::new(answer))
            }
            Err(s) if s.code() == tonic::Code::ResourceExhausted => {
                self.metrics.join_requests.inc("limited");
                Err(s)
            }
            Err(s) if s.code() == tonic::Code::PermissionDenied => {
                self.metrics
                    .verifications
                    .record(&attestor, "refused", started.elapsed());
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
    ) -> Result<Response<SignedRenewResponse>, Status> {
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

    type SessionStream = SessionStream;

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
        // Before anything else: an identity outside its validity gets nothing.
        let identity = node.identity().clone();
        if let Err(refusal) = check_validity(&identity, self.clock.now()) {
            self.metrics.sessions_refused.inc(refusal.label());
            tracing::info!(node = %identity.spiffe_id, serial = %identity.serial.to_hex(), refusal = %refusal, "session refused");
            return Err(Status::unauthenticated(refusal.to_string()));
        }
        if self.feed.is_stale() {
            self.metrics.sessions_refused.inc("feed-stale");
            return Err(Status::unavailable(self.feed.session_refusal()));
        }
        let node_id = identity.spiffe_id.node.as_str().to_string();
        let serial_hex = identity.serial.to_hex();
        // Register before the last revocation check: a revocation the feed applies after this
        // check finds the session registered; one applied before it is in the set.
        let registered = self.sessions.register(&node_id, &serial_hex);
        let (guard, mut end, wake) = (registered.guard, registered.end, registered.wake);
        if self.revoked.contains(identity.serial.as_bytes()) {
            self.metrics.sessions_refused.inc("revoked");
            return Err(Status::unauthenticated("this certificate is revoked"));
        }
        self.metrics.sessions_opened.fetch_add(1, Ordering::Relaxed);
        let tenant = self.tenant_of(&node_id).await;
        // Room for a Welcome and one fetch of commands.
        let (tx, rx) = mpsc::channel::<SessionItem>(8 + crate::dispatch::FETCH_LIMIT as usize);
        let mut inbound = request.into_inner();
        let this = self.clone();
        let not_after = identity.not_after;
        let expires_in = left_until(not_after, self.clock.now());
        // The task lives as long as the session, idle nearly all of it: the awaits that read
        // the store (dispatch, answer, the trust bundle) are boxed, so their state is allocated
        // while they run instead of sizing every session's task (2.7 KiB -> 1.7 KiB, C17).
        tokio::spawn(async move {
            let _guard = guard;
            let expiry = tokio::time::sleep(expires_in);
            tokio::pin!(expiry);
            let mut reports = SessionReports::default();
            // The trust version of the last Welcome sent on this session.
            let mut welcomed_version = 0u64;
            let mut commands = SessionCommands::new(
                this.queue.clone(),
                node_id.clone(),
                this.metrics.commands.clone(),
            );
            let expired = || {
                Err(Status::unauthenticated(
                    "the session's certificate expired; reconnect with the renewed one",
                ))
            };
            loop {
                let retry_at = commands.retry_at();
                tokio::select! {
                    // Order matters: a revocation or shutdown first, then the expiry, then
                    // commands to send, and only then the node's messages, however many are
                    // waiting.
                    biased;
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
                            if tx.send(Ok(Box::new(notice))).await.is_ok() {
                                this.metrics.revocation_notices.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        break;
                    }
                    _ = &mut expiry => {
                        let _ = tx.send(expired()).await;
                        break;
                    }
                    _ = wake.notified(), if commands.is_welcomed() => {
                        if this.clock.now() >= not_after {
                            let _ = tx.send(expired()).await;
                            break;
                        }
                        if Box::pin(commands.dispatch(&tx)).await.is_err() {
                            break;
                        }
                    }
                    _ = sleep_until_or_never(retry_at), if retry_at.is_some() && commands.is_welcomed() => {
                        if this.clock.now() >= not_after {
                            let _ = tx.send(expired()).await;
                            break;
                        }
                        if Box::pin(commands.dispatch(&tx)).await.is_err() {
                            break;
                        }
                    }
                    msg = inbound.message() => {
                        // The timer may not have fired yet at the very edge of notAfter.
                        if this.clock.now() >= not_after {
                            let _ = tx.send(expired()).await;
                            break;
                        }
                        match msg {
                            Ok(Some(NodeMessage { body: Some(node_message::Body::Hello(hello)) })) => {
                                let trust = match Box::pin(this.backend.trust()).await {
                                    Ok(t) => t,
                                    Err(e) => {
                                        tracing::warn!(error = %e, "Welcome without a trust bundle");
                                        WelcomeTrust::default()
                                    }
                                };
                                welcomed_version = trust.version;
                                let welcome = this.welcome(trust);
                                this.record(&mut reports, tenant.as_deref(), &node_id, Seen::Hello(Held::from(&hello)));
                                tracing::debug!(node = %node_id, trust_version = hello.trust_version, approver_set_epoch = hello.approver_set_epoch, agent = %hello.agent_version, "session hello");
                                if tx.send(Ok(Box::new(welcome))).await.is_err() {
                                    break;
                                }
                                commands.welcomed();
                                if Box::pin(commands.dispatch(&tx)).await.is_err() {
                                    break;
                                }
                            }
                            Ok(Some(NodeMessage { body: Some(node_message::Body::Status(status)) })) => {
                                this.record(&mut reports, tenant.as_deref(), &node_id, Seen::Status(Held::from(&status)));
                                // A bundle published since this session's Welcome reaches the
                                // node at its next status report (a root rotation's stages wait
                                // on connected nodes holding it), once per published version.
                                if commands.is_welcomed() {
                                    if let Ok(trust) = Box::pin(this.backend.trust()).await {
                                        if trust.version > welcomed_version
                                            && trust.version > status.trust_version
                                        {
                                            welcomed_version = trust.version;
                                            if tx.send(Ok(Box::new(this.welcome(trust)))).await.is_err() {
                                                break;
                                            }
                                        }
                                    }
                                }
                            }
                            Ok(Some(NodeMessage { body: Some(node_message::Body::Result(result)) })) => {
                                if Box::pin(commands.answer(&result)).await && Box::pin(commands.dispatch(&tx)).await.is_err() {
                                    break;
                                }
                            }
                            Ok(Some(_)) => {}
                            Ok(None) | Err(_) => break,
                        }
                    }
                }
            }
            this.record(&mut reports, tenant.as_deref(), &node_id, Seen::End);
        });
        Ok(Response::new(Box::pin(
            ReceiverStream::new(rx).map(|item| item.map(|message| *message)),
        )))
    }

    async fn site_lease(
        &self,
        request: Request<proto::SiteLeaseRequest>,
    ) -> Result<Response<proto::SiteLeaseResponse>, Status> {
        let leaf = site_agent_leaf(&request)?;
        self.backend
            .site_lease(request.into_inner(), leaf)
            .await
            .map(Response::new)
    }

    async fn boot_token(
        &self,
        request: Request<proto::BootTokenRequest>,
    ) -> Result<Response<proto::BootTokenResponse>, Status> {
        let leaf = site_agent_leaf(&request)?;
        self.backend
            .boot_token(request.into_inner(), leaf)
            .await
            .map(Response::new)
    }
}

/// The leaf a site agent's connection proved: a certificate of role site, or PERMISSION_DENIED
/// "site agents only" (the control plane then checks it byte for byte against `node_certs`).
fn site_agent_leaf<T>(request: &Request<T>) -> Result<Vec<u8>, Status> {
    let node = verified(request)?;
    if node.identity().role != domain::pki::NodeRole::Site {
        tracing::info!(node = %node.identity().spiffe_id, "site agent call refused: not a site certificate");
        return Err(Status::permission_denied(
            crate::site_agent::SITE_AGENTS_ONLY,
        ));
    }
    Ok(node.leaf_der().to_vec())
}

impl NodeServer {
    /// Records what a session saw, if it changes the node's (connected, trust version) and the
    /// session is within its bound; counts what it skips or drops.
    /// A Welcome carrying `trust`, stamped with server time.
    fn welcome(&self, trust: WelcomeTrust) -> GatewayMessage {
        GatewayMessage {
            body: Some(gateway_message::Body::Welcome(Welcome {
                server_time_ms: self.clock.now_us() / 1000,
                trust_version: trust.version,
                signed_trust_bundle: trust.bundle,
                trust_bundle_signature: trust.signature,
            })),
        }
    }

    fn record(
        &self,
        reports: &mut SessionReports,
        tenant: Option<&str>,
        node_id: &str,
        seen: Seen,
    ) {
        let Some(tenant) = tenant else {
            return;
        };
        let counters = &self.metrics.trust_reports;
        let (session_start, connected, held) = match reports.admit(seen) {
            Ok(r) => r,
            Err(Skipped::Unchanged) => {
                counters.unchanged.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Err(Skipped::OverBound) => {
                if counters.over_bound.fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::info!(node = node_id, bound = crate::trust_reports::MAX_REPORTS_PER_SESSION, "a session reached its bound of trust reports; further changes are dropped until the node reconnects");
                }
                return;
            }
        };
        let outcome = self.reporter.report(TrustReport {
            tenant_id: tenant.to_string(),
            node_id: node_id.to_string(),
            trust_version: held.trust_version,
            session_start,
            connected,
            approver_set_epoch: held.approver_set_epoch,
            approver_set_sha256: held.approver_set_sha256,
        });
        match outcome {
            Queued::Queued => {
                counters.queued.fetch_add(1, Ordering::Relaxed);
            }
            Queued::Dropped { warned } => {
                counters.dropped.fetch_add(1, Ordering::Relaxed);
                if warned {
                    counters.warn_lines.fetch_add(1, Ordering::Relaxed);
                }
            }
            Queued::Disabled => {}
        }
    }
}

/// Why a session is refused for its certificate's validity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidityRefusal {
    #[error("this certificate expired at {0}; renew it (bcd renews before expiry) or join again")]
    Expired(OffsetDateTime),
    #[error("this certificate is not valid before {0}; check this machine's clock")]
    NotYetValid(OffsetDateTime),
}

impl ValidityRefusal {
    /// The `/metrics` label of the refused session.
    pub fn label(&self) -> &'static str {
        match self {
            ValidityRefusal::Expired(_) => "expired",
            ValidityRefusal::NotYetValid(_) => "not-yet-valid",
        }
    }
}

/// Whether `identity` is valid at `now` (notBefore <= now < notAfter).
pub fn check_validity(identity: &NodeIdentity, now: OffsetDateTime) -> Result<(), ValidityRefusal> {
    if now < identity.not_before {
        return Err(ValidityRefusal::NotYetValid(identity.not_before));
    }
    if now >= identity.not_after {
        return Err(ValidityRefusal::Expired(identity.not_after));
    }
    Ok(())
}

/// Sleeps until `at`, or forever without one.
async fn sleep_until_or_never(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn left_until(at: OffsetDateTime, now: OffsetDateTime) -> Duration {
    Duration::try_from(at - now).unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::pki::{
        build_csr, issue_node_certificate, KeyRole, KeySet, KeySetLifetimes,
        NodeCertificateDecision, NodeRole, PrivateKey, Serial, SpiffeId, VerifiedCsr,
    };

    #[test]
    fn a_session_is_refused_before_not_before_and_from_not_after_on() {
        let td = TrustDomain::new("fleet.test").unwrap();
        let t0 = OffsetDateTime::now_utc() - time::Duration::days(1);
        let keys = KeySet::generate(td.clone(), t0, KeySetLifetimes::default()).unwrap();
        let key = PrivateKey::generate(KeyRole::Node).unwrap();
        let csr = VerifiedCsr::verify(&build_csr(&key).unwrap()).unwrap();
        let issued_at = t0 + time::Duration::hours(1);
        let cert = issue_node_certificate(
            &keys.node_ca,
            &csr,
            &NodeCertificateDecision {
                spiffe_id: SpiffeId::parse("spiffe://fleet.test/site/s1/node/n1").unwrap(),
                role: NodeRole::Node,
                serial: Serial::generate().unwrap(),
                requested_lifetime: Some(time::Duration::hours(1)),
                statements: vec![],
            },
            issued_at,
        )
        .unwrap();
        let id = NodeIdentity::from_leaf_der(&cert.der, &td).unwrap();
        let second = time::Duration::seconds(1);
        assert_eq!(
            check_validity(&id, id.not_before - second),
            Err(ValidityRefusal::NotYetValid(id.not_before))
        );
        assert_eq!(check_validity(&id, id.not_before), Ok(()));
        assert_eq!(check_validity(&id, id.not_after - second), Ok(()));
        assert_eq!(
            check_validity(&id, id.not_after),
            Err(ValidityRefusal::Expired(id.not_after))
        );
        assert_eq!(
            ValidityRefusal::NotYetValid(id.not_before).to_string(),
            format!(
                "this certificate is not valid before {}; check this machine's clock",
                id.not_before
            )
        );
        assert_eq!(
            ValidityRefusal::NotYetValid(id.not_before).label(),
            "not-yet-valid"
        );
        assert_eq!(ValidityRefusal::Expired(id.not_after).label(), "expired");
    }
}
