//! Event types of `proto/bc/events/v1/operators.proto`.

use super::*;

event_payload! {
    OperatorCertIssued => "operator.cert.issued", version 1;
    OperatorCertRevoked => "operator.cert.revoked", version 1;
}

/// The stream of one operator's certificates: `operator/<name>`.
pub fn operator_stream(name: &str) -> String {
    format!("operator/{name}")
}
