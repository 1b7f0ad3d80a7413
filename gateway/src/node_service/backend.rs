//! What answers Join, Renew, the site agent's calls and the Welcome trust bundle behind the NodeService: the JoinService
//! in this process (`--role all`), or the api process over internal mTLS (`--role gateway`,
//! which holds no signing key and relays).
//!
//! Both give the caller the same answers: PERMISSION_DENIED "Join refused" / "Renew refused"
//! for every refusal, UNIMPLEMENTED (the spec's UNSUPPORTED) for a Join naming an attestor this
//! control plane does not run, UNAVAILABLE when the store (or the api) cannot be reached,
//! INTERNAL for bugs with the detail only in a log.

use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use commands::identity::{IdentityError, JoinService, JOIN_REFUSED, RENEW_REFUSED};
use commands::site::{SiteAgent, SiteError};
use commands::RunError;
use domain::identity::JOIN_TOKEN_ATTESTOR;
use domain::site::{SiteCallProof, SiteRefusal};
use proto::{
    BootTokenRequest, BootTokenResponse, JoinRequest, RenewRequest, SignedJoinResponse,
    SignedRenewResponse, SiteLeaseRequest, SiteLeaseResponse,
};
use tonic::Status;

use crate::join::refusal_limits::JoinRefusalLimiter;
use crate::node_service::site_agent::SITE_AGENTS_ONLY;
use crate::renew::wire::renewals_exhausted;
use crate::split::relay::ApiClient;
pub use crate::split::relay::UNSUPPORTED_PREFIX;
use crate::trust::bundle::{TrustSigner, WelcomeTrust};

/// How long a Welcome trust bundle is served before it is read (or asked for) again.
pub const TRUST_CACHE: Duration = Duration::from_secs(2);

/// The status for a failed identity command (refusals excluded).
pub fn identity_failure(what: &str, e: &IdentityError) -> Status {
    match e {
        IdentityError::Run(RunError::Store(_)) => {
            tracing::error!(error = %e, "{what}: the store failed");
            Status::unavailable("the control plane's store is unavailable; retry later")
        }
        IdentityError::AttestorUnavailable(err) => {
            tracing::warn!(error = %err, "{what}: the attestor gave no verdict");
            Status::unavailable("the attestor is unavailable; retry later")
        }
        _ => {
            tracing::error!(error = %e, "{what} failed");
            Status::internal("internal error (see the server log)")
        }
    }
}

/// How much of an unknown attestor name a status or log line repeats (the name comes from the
/// network).
const ATTESTOR_SHOWN_CHARS: usize = 64;

/// `attestor` as a status or log shows it: quoted and escaped, at most
/// [`ATTESTOR_SHOWN_CHARS`] characters of it.
fn shown_attestor(attestor: &str) -> String {
    if attestor.chars().count() <= ATTESTOR_SHOWN_CHARS {
        format!("{attestor:?}")
    } else {
        let head: String = attestor.chars().take(ATTESTOR_SHOWN_CHARS).collect();
        format!("{head:?}...")
    }
}

/// The status for a Join naming an attestor this control plane does not run: the spec's
/// UNSUPPORTED, which gRPC calls UNIMPLEMENTED. Unlike a refusal it is not secret: it names the
/// attestor asked for and the ones that exist, so the operator can fix the agent's
/// configuration (retrying cannot help).
pub fn unsupported_attestor(attestor: &str, registered: &[String]) -> Status {
    let attestor = shown_attestor(attestor);
    let supported = registered
        .iter()
        .map(|a| format!("{a:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    Status::unimplemented(format!(
        "{UNSUPPORTED_PREFIX}attestor {attestor} is not supported by this control plane; supported: {supported} (an empty attestor means {JOIN_TOKEN_ATTESTOR:?})"
    ))
}

/// Join through the JoinService: every refusal the same PERMISSION_DENIED, an attestor this
/// control plane does not run UNIMPLEMENTED ([`unsupported_attestor`]). An admission carries
/// `trust`, the bundle a Welcome would carry.
pub async fn local_join(
    join: &JoinService,
    request: &JoinRequest,
    trust: &WelcomeTrust,
) -> Result<SignedJoinResponse, Status> {
    match crate::join::wire::join_carrying(join.joins(), request, trust).await {
        Ok(answer) => Ok(answer),
        Err(IdentityError::AccessDenied(_)) => Err(Status::permission_denied(JOIN_REFUSED)),
        Err(IdentityError::UnsupportedAttestor(attestor)) => {
            tracing::info!(attestor = %shown_attestor(&attestor), "join: unsupported attestor");
            Err(unsupported_attestor(
                &attestor,
                &join.joins().attestors().ids(),
            ))
        }
        Err(e) => Err(identity_failure("join", &e)),
    }
}

/// Renew through the JoinService. `presented_leaf` is the leaf the node's TLS handshake
/// presented; the request's chain must start with exactly those bytes (the JoinService then
/// checks them byte for byte against `node_certs` and the proof of possession). The answer is
/// signed; a node over its renewal bound gets [`renewals_exhausted`].
pub async fn local_renew(
    join: &JoinService,
    request: &RenewRequest,
    presented_leaf: &[u8],
) -> Result<SignedRenewResponse, Status> {
    if request.chain.first().map(Vec::as_slice) != Some(presented_leaf) {
        tracing::warn!("renew refused: the request's leaf is not the certificate the node presented at the handshake");
        return Err(Status::permission_denied(RENEW_REFUSED));
    }
    match crate::renew::wire::renew(join.renewals(), request).await {
        Ok(answer) => Ok(answer),
        Err(IdentityError::AccessDenied(_)) => Err(Status::permission_denied(RENEW_REFUSED)),
        Err(IdentityError::RenewalsExhausted {
            node_id,
            per_hour,
            retry_after_ms,
        }) => {
            tracing::info!(node = %node_id, retry_after_ms, "renew: over the per-node bound");
            Err(renewals_exhausted(per_hour, retry_after_ms))
        }
        Err(e) => Err(identity_failure("renew", &e)),
    }
}

/// The status for a failed site agent call.
pub fn site_status(what: &str, e: SiteError) -> Status {
    match e {
        SiteError::NotSiteAgent(why) => {
            tracing::info!(refusal = %why, "{what}: not a site agent");
            Status::permission_denied(SITE_AGENTS_ONLY)
        }
        SiteError::NoIdentity => {
            tracing::info!("{what}: the certificate carries no node identity");
            Status::permission_denied(SITE_AGENTS_ONLY)
        }
        SiteError::CallProof(why) => {
            tracing::info!(refusal = %why, "{what}: the call's proof was refused");
            Status::permission_denied(why.to_string())
        }
        e @ SiteError::NotLeaseHolder { .. } => Status::failed_precondition(e.to_string()),
        e @ SiteError::NoBootEntry { .. } => Status::not_found(e.to_string()),
        SiteError::Refused(r @ SiteRefusal::Invalid(_)) => Status::invalid_argument(r.to_string()),
        SiteError::Refused(r @ SiteRefusal::UnknownSite(_)) => Status::not_found(r.to_string()),
        SiteError::Refused(r) => Status::failed_precondition(r.to_string()),
        SiteError::Identity(e) => identity_failure(what, &e),
    }
}

/// SiteLease through the SiteAgent here; `leaf` is the certificate the connection proved.
pub async fn local_site_lease(
    agent: &SiteAgent,
    request: &SiteLeaseRequest,
    leaf: &[u8],
) -> Result<SiteLeaseResponse, Status> {
    let action = crate::node_service::site_agent::action_of(request)?;
    let proof = SiteCallProof {
        client_time_ms: request.client_time_ms,
        signature: &request.signature,
    };
    match agent.lease(leaf, action, request.epoch, proof).await {
        Ok(a) => Ok(crate::node_service::site_agent::lease_response(a)),
        Err(e) => Err(site_status("site lease", e)),
    }
}

/// BootToken through the SiteAgent here; `leaf` is the certificate the connection proved.
pub async fn local_boot_token(
    agent: &SiteAgent,
    request: &BootTokenRequest,
    leaf: &[u8],
) -> Result<BootTokenResponse, Status> {
    let proof = SiteCallProof {
        client_time_ms: request.client_time_ms,
        signature: &request.signature,
    };
    match agent
        .boot_token(leaf, &request.mac, request.lease_epoch, proof)
        .await
    {
        Ok(a) => {
            tracing::info!(entry = %a.entry_id, token = %a.token_id, "boot token minted");
            Ok(crate::node_service::site_agent::boot_response(a))
        }
        Err(e) => Err(site_status("boot token", e)),
    }
}

enum Kind {
    Local {
        join: Arc<JoinService>,
        trust: TrustSigner,
    },
    Relay(ApiClient),
}

/// The JoinService here, or the api behind internal mTLS.
pub struct Backend {
    kind: Kind,
    cache: Mutex<Option<(Instant, WelcomeTrust)>>,
    join_limiter: Option<Arc<JoinRefusalLimiter>>,
}

impl Backend {
    /// The JoinService in this process (it holds the signing keys).
    pub fn local(join: Arc<JoinService>, trust: TrustSigner) -> Self {
        Backend {
            kind: Kind::Local { join, trust },
            cache: Mutex::new(None),
            join_limiter: None,
        }
    }

    /// The api process: this gateway holds no signing key.
    pub fn relay(api: ApiClient) -> Self {
        Backend {
            kind: Kind::Relay(api),
            cache: Mutex::new(None),
            join_limiter: None,
        }
    }

    /// Whether this backend relays to an api process.
    pub fn is_relay(&self) -> bool {
        matches!(self.kind, Kind::Relay(_))
    }

    /// Limits refused joins per peer address before they reach the JoinService (the
    /// agent-facing endpoint; the api's internal endpoint, whose peers are gateways, has none).
    pub fn with_join_limiter(mut self, limiter: Arc<JoinRefusalLimiter>) -> Self {
        self.join_limiter = Some(limiter);
        self
    }

    /// [`Backend::join`] from `peer`: answered RESOURCE_EXHAUSTED without reaching the
    /// JoinService while the peer is over its refusal bound; a refusal counts against it.
    pub async fn join_from(
        &self,
        peer: Option<IpAddr>,
        request: JoinRequest,
    ) -> Result<SignedJoinResponse, Status> {
        let limiter = match (&self.join_limiter, peer) {
            (Some(l), Some(ip)) => Some((l, ip)),
            _ => None,
        };
        if let Some((l, ip)) = limiter {
            l.check(ip)?;
        }
        let answer = self.join(request).await;
        if let (Err(s), Some((l, ip))) = (&answer, limiter) {
            if s.code() == tonic::Code::PermissionDenied {
                l.refused(ip);
            }
        }
        answer
    }

    /// A Join: here through the JoinService, the admission carrying the Welcome's trust bundle
    /// (cached like the Welcome's; a bundle that cannot be read now is left out and logged, the
    /// node then takes it from its first Welcome); or relayed to the api, which does the same.
    pub async fn join(&self, request: JoinRequest) -> Result<SignedJoinResponse, Status> {
        match &self.kind {
            Kind::Local { join, .. } => {
                let trust = match self.trust().await {
                    Ok(t) => t,
                    Err(e) => {
                        tracing::warn!(error = %e, "JoinResponse without a trust bundle");
                        WelcomeTrust::default()
                    }
                };
                local_join(join, &request, &trust).await
            }
            Kind::Relay(api) => api.join(request).await,
        }
    }

    pub async fn renew(
        &self,
        request: RenewRequest,
        presented_leaf: Vec<u8>,
    ) -> Result<SignedRenewResponse, Status> {
        match &self.kind {
            Kind::Local { join, .. } => local_renew(join, &request, &presented_leaf).await,
            Kind::Relay(api) => api.renew(request, presented_leaf).await,
        }
    }

    /// A site agent's SiteLease; `presented_leaf` is the certificate its connection proved.
    pub async fn site_lease(
        &self,
        request: proto::SiteLeaseRequest,
        presented_leaf: Vec<u8>,
    ) -> Result<proto::SiteLeaseResponse, Status> {
        match &self.kind {
            Kind::Local { join, .. } => {
                local_site_lease(join.site_agent(), &request, &presented_leaf).await
            }
            Kind::Relay(api) => api.site_lease(request, presented_leaf).await,
        }
    }

    /// A site agent's BootToken; `presented_leaf` is the certificate its connection proved.
    pub async fn boot_token(
        &self,
        request: proto::BootTokenRequest,
        presented_leaf: Vec<u8>,
    ) -> Result<proto::BootTokenResponse, Status> {
        match &self.kind {
            Kind::Local { join, .. } => {
                local_boot_token(join.site_agent(), &request, &presented_leaf).await
            }
            Kind::Relay(api) => api.boot_token(request, presented_leaf).await,
        }
    }

    /// The Welcome trust bundle, cached for [`TRUST_CACHE`].
    pub async fn trust(&self) -> Result<WelcomeTrust, String> {
        if let Ok(c) = self.cache.lock() {
            if let Some((at, t)) = c.as_ref() {
                if at.elapsed() < TRUST_CACHE {
                    return Ok(t.clone());
                }
            }
        }
        let trust = match &self.kind {
            Kind::Local { trust, .. } => trust.current().await?,
            Kind::Relay(api) => api.trust().await.map_err(|s| {
                format!(
                    "asking the api for the trust bundle: {} ({:?})",
                    s.message(),
                    s.code()
                )
            })?,
        };
        if let Ok(mut c) = self.cache.lock() {
            *c = Some((Instant::now(), trust.clone()));
        }
        Ok(trust)
    }
}
