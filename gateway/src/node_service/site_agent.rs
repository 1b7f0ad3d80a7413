//! The site agent's calls at the edge (issue 20): SiteLease and BootToken, answered by the
//! [`commands::site::SiteAgent`] in this process (`crate::node_service::backend::local_site_lease`)
//! or relayed to the api; here their wire forms. The caller is the certificate its mTLS connection
//! proved; a certificate of another role is PERMISSION_DENIED "site agents only" before anything is
//! read. Answers: PERMISSION_DENIED "site agents only" (the reason in the log only),
//! FAILED_PRECONDITION when the caller does not hold the lease at the epoch it named, NOT_FOUND
//! when the site has no active boot entry for the MAC (or the site was never created),
//! INVALID_ARGUMENT for a malformed request. The discovery token is never logged.

use commands::site::{BootTokenAnswer, LeaseAction, LeaseAnswer};
use proto::site_lease_request::Action;
use proto::{BootTokenResponse, SiteLeaseRequest, SiteLeaseResponse};
use tonic::Status;

/// What a caller that is not a site agent is told.
pub const SITE_AGENTS_ONLY: &str = "site agents only";

/// The request's action (UNSPECIFIED or unknown: INVALID_ARGUMENT).
pub fn action_of(request: &SiteLeaseRequest) -> Result<LeaseAction, Status> {
    match Action::try_from(request.action) {
        Ok(Action::Acquire) => Ok(LeaseAction::Acquire),
        Ok(Action::Renew) => Ok(LeaseAction::Renew),
        Ok(Action::Release) => Ok(LeaseAction::Release),
        _ => Err(Status::invalid_argument(
            "action must be ACQUIRE, RENEW or RELEASE",
        )),
    }
}

/// The wire form of a lease answer.
pub fn lease_response(a: LeaseAnswer) -> SiteLeaseResponse {
    SiteLeaseResponse {
        held: a.held,
        epoch: a.epoch,
        expires_at_ms: a.expires_at_us / 1000,
        holder_node_id: a.holder_node_id.unwrap_or_default(),
        server_time_ms: a.server_time_us / 1000,
        renew_every_ms: a.renew_every_ms,
    }
}

/// The wire form of a boot token answer (it carries the token: never log it).
pub fn boot_response(a: BootTokenAnswer) -> BootTokenResponse {
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
