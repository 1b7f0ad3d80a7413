//! How a Join or a Renew answer is counted on `/metrics`, the same way wherever it is answered:
//! the NodeService of a gateway ([`crate::node_service::server`]) and the api process's internal
//! endpoint ([`crate::split::api`]). Counted by outcome and attestor only, never by reason.

use std::time::Instant;

use proto::{SignedJoinResponse, SignedRenewResponse};
use tonic::Status;

use crate::metrics::Metrics;

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

/// Counts a Join of `attestor` started at `started`: `bc_join_requests_total` by outcome
/// (joined, deferred, limited, refused, unsupported, error) and the verification by attestor.
pub fn count_join(
    metrics: &Metrics,
    attestor: &str,
    started: Instant,
    answer: &Result<SignedJoinResponse, Status>,
) {
    let label = match answer {
        Ok(answer) => {
            let outcome = answer_outcome(answer);
            metrics
                .verifications
                .record(attestor, outcome, started.elapsed());
            if outcome == "admitted" {
                "joined"
            } else {
                "deferred"
            }
        }
        Err(s) => match s.code() {
            tonic::Code::ResourceExhausted => "limited",
            tonic::Code::PermissionDenied => {
                metrics
                    .verifications
                    .record(attestor, "refused", started.elapsed());
                "refused"
            }
            tonic::Code::Unimplemented => "unsupported",
            _ => "error",
        },
    };
    metrics.join_requests.inc(label);
}

/// Counts a Renew past the connection's checks: `bc_renewals_total` by outcome (renewed,
/// refused, error).
pub fn count_renew(metrics: &Metrics, answer: &Result<SignedRenewResponse, Status>) {
    metrics.renewals.inc(match answer {
        Ok(_) => "renewed",
        Err(s) if s.code() == tonic::Code::PermissionDenied => "refused",
        Err(_) => "error",
    });
}
