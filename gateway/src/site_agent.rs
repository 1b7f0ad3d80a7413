//! The site agent's calls at the edge (issue 20): SiteLease and BootToken, answered by the
//! [`commands::site::SiteAgent`] in this process or relayed to the api. The caller is the
//! certificate its mTLS connection proved; a certificate of another role is PERMISSION_DENIED
//! "site agents only" before anything is read. Answers: PERMISSION_DENIED "site agents only"
//! (the reason in the log only), FAILED_PRECONDITION when the caller does not hold the lease at
//! the epoch it named, NOT_FOUND when the site has no active boot entry for the MAC (or the site
//! was never created), INVALID_ARGUMENT for a malformed request. The discovery token is never
//! logged.

use commands::site::{BootTokenAnswer, LeaseAction, LeaseAnswer, SiteAgent, SiteError};
use domain::site::SiteRefusal;
use proto::site_lease_request::Action;
use proto::{BootTokenRequest, BootTokenResponse, SiteLeaseRequest, SiteLeaseResponse};
use tonic::Status;

use crate::backend::identity_failure;

/// What a caller that is not a site agent is told.
pub const SITE_AGENTS_ONLY: &str = "site agents only";

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
        e @ SiteError::NotLeaseHolder { .. } => Status::failed_precondition(e.to_string()),
        e @ SiteError::NoBootEntry { .. } => Status::not_found(e.to_string()),
        SiteError::Refused(r @ SiteRefusal::Invalid(_)) => Status::invalid_argument(r.to_string()),
        SiteError::Refused(r @ SiteRefusal::UnknownSite(_)) => Status::not_found(r.to_string()),
        SiteError::Refused(r) => Status::failed_precondition(r.to_string()),
        SiteError::Identity(e) => identity_failure(what, &e),
    }
}

fn action_of(request: &SiteLeaseRequest) -> Result<LeaseAction, Status> {
    match Action::try_from(request.action) {
        Ok(Action::Acquire) => Ok(LeaseAction::Acquire),
        Ok(Action::Renew) => Ok(LeaseAction::Renew),
        Ok(Action::Release) => Ok(LeaseAction::Release),
        _ => Err(Status::invalid_argument(
            "action must be ACQUIRE, RENEW or RELEASE",
        )),
    }
}

fn lease_response(a: LeaseAnswer) -> SiteLeaseResponse {
    SiteLeaseResponse {
        held: a.held,
        epoch: a.epoch,
        expires_at_ms: a.expires_at_us / 1000,
        holder_node_id: a.holder_node_id.unwrap_or_default(),
        server_time_ms: a.server_time_us / 1000,
        renew_every_ms: a.renew_every_ms,
    }
}

fn boot_response(a: BootTokenAnswer) -> BootTokenResponse {
    BootTokenResponse {
        entry_id: a.entry_id,
        mac: a.mac,
        product_uuid: a.product_uuid.unwrap_or_default(),
        kernel_url: a.kernel_url,
        initrd_url: a.initrd_url,
        kernel_args: a.kernel_args,
        entry_not_after_ms: a.entry_not_after_us / 1000,
        token: a.token,
        token_expires_at_ms: a.token_expires_at_us / 1000,
        server_time_ms: a.server_time_us / 1000,
    }
}

/// SiteLease through the SiteAgent here; `leaf` is the certificate the connection proved.
pub async fn local_site_lease(
    agent: &SiteAgent,
    request: &SiteLeaseRequest,
    leaf: &[u8],
) -> Result<SiteLeaseResponse, Status> {
    let action = action_of(request)?;
    match agent.lease(leaf, action, request.epoch).await {
        Ok(a) => Ok(lease_response(a)),
        Err(e) => Err(site_status("site lease", e)),
    }
}

/// BootToken through the SiteAgent here; `leaf` is the certificate the connection proved.
pub async fn local_boot_token(
    agent: &SiteAgent,
    request: &BootTokenRequest,
    leaf: &[u8],
) -> Result<BootTokenResponse, Status> {
    match agent
        .boot_token(leaf, &request.mac, request.lease_epoch)
        .await
    {
        Ok(a) => {
            tracing::info!(entry = %a.entry_id, token = %a.token_id, "boot token minted");
            Ok(boot_response(a))
        }
        Err(e) => Err(site_status("boot token", e)),
    }
}
