//! Failures in words: TLS errors, handshake IO errors, the TLS alert a gateway sent, gRPC
//! statuses and error chains, as bcd logs and reports them.

use rustls::{CertificateError, OtherError};

/// A rustls error in words: our verifier's refusal by its own message (rustls would show its
/// debug form).
pub fn describe_tls_error(e: &rustls::Error) -> String {
    match e {
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(inner))) => {
            format!("invalid peer certificate: {inner}")
        }
        other => other.to_string(),
    }
}

/// A handshake's IO error in words (see [`describe_tls_error`]).
pub fn describe_io(e: &std::io::Error) -> String {
    match e.get_ref() {
        Some(inner) => match inner.downcast_ref::<rustls::Error>() {
            Some(tls) => describe_tls_error(tls),
            None => inner.to_string(),
        },
        None => e.to_string(),
    }
}

/// The TLS alert the gateway sent, if a failed call's cause is one (in TLS 1.3 a refused client
/// certificate shows as an alert on the first read after the handshake).
pub fn received_alert(e: &(dyn std::error::Error + 'static)) -> Option<rustls::AlertDescription> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        let tls = s.downcast_ref::<rustls::Error>().or_else(|| {
            s.downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        });
        if let Some(rustls::Error::AlertReceived(alert)) = tls {
            return Some(*alert);
        }
        // hyper may carry the rustls error only as text.
        let text = s.to_string();
        if let Some(name) = text
            .split("received fatal alert: ")
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_alphanumeric()).next())
        {
            if let Some(alert) = alert_by_name(name) {
                return Some(alert);
            }
        }
        source = s.source();
    }
    None
}

fn alert_by_name(name: &str) -> Option<rustls::AlertDescription> {
    use rustls::AlertDescription as A;
    [
        A::CertificateRevoked,
        A::BadCertificate,
        A::CertificateExpired,
        A::UnknownCA,
        A::CertificateUnknown,
        A::UnsupportedCertificate,
        A::AccessDenied,
        A::CertificateRequired,
        A::HandshakeFailure,
        A::DecryptError,
    ]
    .into_iter()
    .find(|a| format!("{a:?}") == name)
}

/// Whether the gateway refused this node's certificate as revoked at the handshake.
pub fn is_revoked_alert(e: &(dyn std::error::Error + 'static)) -> bool {
    received_alert(e) == Some(rustls::AlertDescription::CertificateRevoked)
}

/// A failed call in words: a TLS alert by name, else the gRPC code and message.
pub fn describe_status(status: &tonic::Status) -> String {
    match received_alert(status) {
        Some(alert) => format!(
            "the gateway refused this node's certificate at the TLS handshake (alert {alert:?})"
        ),
        None => format!("{:?}: {}", status.code(), error_chain(status)),
    }
}

/// Every message in an error's source chain, joined by `: `.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_revocation_alert_in_text() {
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "received fatal alert: CertificateRevoked".to_owned(),
        );
        assert!(is_revoked_alert(&io));
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::AlertReceived(rustls::AlertDescription::CertificateRevoked),
        );
        assert!(is_revoked_alert(&io));
        let io = std::io::Error::other("received fatal alert: BadCertificate");
        assert!(!is_revoked_alert(&io));
    }
}
