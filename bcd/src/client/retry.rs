//! How a failed call is treated: refused, retried (with the gateway's pushback, if it sent
//! one) or fatal.

use crate::join::request::CallError;
use crate::renewal::schedule::Pushback;

/// The metadata key of a gateway's retry hint.
pub const PUSHBACK_HEADER: &str = "grpc-retry-pushback-ms";

/// The gateway's `grpc-retry-pushback-ms` on a failed call, if any.
pub fn pushback_of(status: &tonic::Status) -> Option<Pushback> {
    status
        .metadata()
        .get(PUSHBACK_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(Pushback::from_header)
}

/// How a failed call is treated: ACCESS_DENIED is a refusal, transient codes are retried.
pub fn classify(status: &tonic::Status) -> CallError {
    use tonic::Code;
    match status.code() {
        Code::PermissionDenied | Code::Unauthenticated => CallError::Refused,
        Code::Unavailable
        | Code::ResourceExhausted
        | Code::DeadlineExceeded
        | Code::Aborted
        | Code::Cancelled
        | Code::Unknown => CallError::Retryable {
            message: format!("{:?}: {}", status.code(), status.message()),
            pushback: pushback_of(status),
        },
        code => CallError::Fatal(format!("{code:?}: {}", status.message())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_statuses() {
        let denied = tonic::Status::permission_denied("Join refused");
        assert_eq!(classify(&denied), CallError::Refused);
        let mut busy = tonic::Status::unavailable("busy");
        busy.metadata_mut()
            .insert(PUSHBACK_HEADER, "2500".parse().expect("ascii"));
        match classify(&busy) {
            CallError::Retryable { pushback, .. } => assert_eq!(
                pushback,
                Some(Pushback::After(time::Duration::milliseconds(2500)))
            ),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            classify(&tonic::Status::invalid_argument("x")),
            CallError::Fatal(_)
        ));
    }
}
