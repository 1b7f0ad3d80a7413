//! `bc.wire.v1.NodeService` over the JoinService: Join, Renew and the node Session.
//!
//! Identity comes from the connection, never from a message: Renew and Session read the
//! [`VerifiedNode`] the TLS handshake proved (through [`PeerInfo`] in the request extensions) and
//! answer UNAUTHENTICATED without one. Every Join refusal is PERMISSION_DENIED "Join refused"
//! (gRPC's name for ACCESS_DENIED), every Renew refusal PERMISSION_DENIED "Renew refused".
//!
//! The Session's own logic is in `crate::session::session_loop`, shared with the session wire. A Session
//! checks the identity's validity (notBefore, notAfter; [`crate::session::validity`]) against
//! the clock before anything else: an expired or not yet valid certificate (one that expired on
//! a connection opened while it was valid, or a resumed one) gets UNAUTHENTICATED, no Welcome
//! and no trust report. Once open, the session's loop is biased: its end (revocation, shutdown)
//! first, then the certificate's expiry, then the node's messages, and each message is checked
//! against the expiry again, so nothing is answered or recorded past notAfter. Trust reports go
//! through `SessionReports` (changes only, bounded per session).
//!
//! Commands (issue 21, [`crate::node_commands::dispatch`]): after the Welcome the session sends
//! the node's pending commands, again whenever the command poller wakes it (a wake comes after
//! the session's end and expiry in the loop's order, before the node's messages), and records
//! each `CommandResult` under the connection's node id.

use std::sync::Arc;

use commands::identity::RENEW_REFUSED;
use commands::Clock;
use domain::pki::{NodeIdentity, TrustDomain};
use events::store::EventStore;
use proto::node_service_server::NodeService;
use proto::{
    GatewayMessage, JoinRequest, NodeMessage, RenewRequest, SignedJoinResponse, SignedRenewResponse,
};
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::{Request, Response, Status, Streaming};

use crate::edge::conn::PeerInfo;
use crate::edge::tls::VerifiedNode;
use crate::metrics::Metrics;
use crate::node_service::backend::Backend;
use crate::node_service::outcomes::{count_join, count_renew};
use crate::revocation::feed::FeedHealth;
use crate::revocation::revoked::RevokedSerials;
use crate::session::registry::Sessions;

pub use crate::trust::reports::TrustReporter;

/// The refusal of a session (or a Renew) on a connection without a client certificate.
pub const NO_CERTIFICATE: &str = "this call needs the node's client certificate (mTLS); join first";

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
    /// Records the bcd version and boot id each session's Hello reports, when they change.
    pub(crate) runtime: crate::session::runtime_report::RuntimeReporter,
    pub(crate) clock: Arc<dyn Clock>,
    /// The command queue the sessions dispatch from and record answers to.
    pub(crate) queue: Arc<dyn crate::node_commands::dispatch::Queue>,
    /// The node CA's current revocation list, pushed to every welcomed session.
    pub(crate) crl: crate::publish::crl::CrlWatch,
}

fn verified<T>(request: &Request<T>) -> Result<VerifiedNode, Status> {
    request
        .extensions()
        .get::<PeerInfo>()
        .and_then(|p| p.node.clone())
        .ok_or_else(|| Status::unauthenticated(NO_CERTIFICATE))
}

impl NodeServer {
    pub(crate) async fn tenant_of(&self, node_id: &str) -> Option<String> {
        match commands::identity::edge_reads::tenant_of(&self.store, node_id).await {
            Ok(tenant) => tenant,
            Err(e) => {
                tracing::warn!(node = node_id, error = %e, "reading the node's tenant failed");
                None
            }
        }
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
        let answer = self.backend.join_from(peer, request).await;
        count_join(&self.metrics, &attestor, started, &answer);
        answer.map(Response::new)
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
        let answer = self.backend.renew(request.into_inner(), leaf).await;
        count_renew(&self.metrics, &answer);
        answer.map(Response::new)
    }

    type SessionStream = SessionStream;

    async fn session(
        &self,
        request: Request<Streaming<NodeMessage>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let node = request
            .extensions()
            .get::<PeerInfo>()
            .and_then(|p| p.node.clone());
        let rx = self.open_session(node, request.into_inner()).await?;
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
            crate::node_service::site_agent::SITE_AGENTS_ONLY,
        ));
    }
    Ok(node.leaf_der().to_vec())
}
