//! The deciders of break-glass SSH access (issue 42): issuing a user certificate for one
//! principal `<account>@<node id>` ([`decide_issue`]) and revoking one ([`decide_revoke`]).
//!
//! An issuance is refused, each with its own reason ([`SshRefusal`]): an account or node id
//! that is not a plain name (a comma would make a principal list, `*` or `?` a pattern), a
//! lifetime over [`MAX_USER_CERT_TTL`] or not positive, a certificate that would outlive the
//! asking operator's own certificate, a public key that is not Ed25519, ECDSA or RSA ≥ 3072, a
//! node the log does not hold, one that is retired or deleted, one whose identity is revoked,
//! and a bundle without an SSH CA. Accepted, it is one `ssh.user_cert.issued` event and the
//! signed certificate: valid from `now` less [`crate::pki::BACKDATE`] to `now + ttl`, the
//! serial and nonce the caller drew, the key id naming the operator, the standard permit
//! extensions only. Pure: time, entropy and the node's state are arguments.

use events::schema::{SshUserCertIssued, SshUserCertRevoked};
use time::{Duration, OffsetDateTime};

use super::cert::{sign_certificate, CertKind, CertRequest, SshCertificate};
use super::key::{KeyRefusal, SubjectKey};
use crate::decision::Decision;
use crate::pki::backdate::BACKDATE;
use crate::pki::ssh_ca::SshCa;

/// The longest a break-glass user certificate lives.
pub const MAX_USER_CERT_TTL: Duration = Duration::hours(1);

/// Why an SSH certificate command is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SshRefusal {
    /// An account or node id with a character a principal must not hold.
    #[error(
        "INVALID_INPUT: {what} {value:?} {why}: a principal names exactly one account on one node"
    )]
    BadPrincipal {
        what: &'static str,
        value: String,
        why: &'static str,
    },
    /// `--ttl` over an hour.
    #[error("INVALID_INPUT: --ttl {0}s: a break-glass certificate lives at most 1h (3600s)")]
    TtlTooLong(i64),
    /// `--ttl` zero or negative.
    #[error("INVALID_INPUT: --ttl {0}s: the lifetime must be positive")]
    TtlNotPositive(i64),
    /// The certificate would outlive the operator's own credential.
    #[error("INVALID_INPUT: --ttl: the certificate would be valid until {valid_before} but your operator certificate expires at {credential_not_after}; ask for a shorter --ttl or renew your operator certificate")]
    PastCredential {
        valid_before: String,
        credential_not_after: String,
    },
    /// The public key cannot be certified.
    #[error("INVALID_INPUT: --public-key: {0}")]
    Key(#[from] KeyRefusal),
    /// No node has the id.
    #[error("NOT_FOUND: no node {0} (`bcctl node list` shows them)")]
    NodeNotFound(String),
    /// The node is retired or deleted.
    #[error("INVALID_STATE: node {node} is {status}, not active: it gets no SSH certificate")]
    NodeNotActive { node: String, status: String },
    /// The node has certificates and every one is revoked.
    #[error("INVALID_STATE: node {0}'s identity is revoked: it gets no SSH certificate")]
    NodeRevoked(String),
    /// The bundle has no SSH CA.
    #[error("INVALID_STATE: the PKI bundle has no SSH CA (`bcctl pki add-ssh-ca` adds one)")]
    NoSshCa,
    /// `ssh revoke` of a serial no certificate has.
    #[error("NOT_FOUND: no SSH certificate has serial {0} (`bcctl ssh list` shows them)")]
    UnknownSerial(String),
    /// `--reason` empty.
    #[error(
        "INVALID_INPUT: --reason: say why the certificate is revoked (it is recorded in the event)"
    )]
    EmptyReason,
}

impl SshRefusal {
    /// Whether the refusal is a bad value (exit 2) rather than a state (exit 1).
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            SshRefusal::BadPrincipal { .. }
                | SshRefusal::TtlTooLong(_)
                | SshRefusal::TtlNotPositive(_)
                | SshRefusal::PastCredential { .. }
                | SshRefusal::Key(_)
                | SshRefusal::EmptyReason
        )
    }
}

/// A break-glass issuance as asked.
#[derive(Debug, Clone)]
pub struct IssueRequest<'a> {
    pub node_id: &'a str,
    pub account: &'a str,
    /// The subject's OpenSSH public key line.
    pub public_key: &'a str,
    pub ttl: Duration,
    /// Who asks (the actor's id): the key id names it.
    pub operator: &'a str,
    /// The asking operator's certificate's notAfter (`None`: a direct run, no certificate).
    pub credential_not_after: Option<OffsetDateTime>,
}

/// What the log holds of the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSshState {
    /// `active`, `retired` or `deleted`.
    pub status: String,
    /// Whether its identity is revoked: it has certificates and every one is revoked.
    pub identity_revoked: bool,
}

/// What the caller draws for one issuance.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entropy {
    /// 1 to 2^63 - 1 (the log's integer columns are signed).
    pub serial: u64,
    pub nonce: [u8; 32],
}

/// An accepted issuance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedSsh {
    pub certificate: SshCertificate,
    pub serial: u64,
    pub principal: String,
    pub key_id: String,
    pub valid_after: OffsetDateTime,
    pub valid_before: OffsetDateTime,
    pub key_fingerprint: String,
}

/// Why `value` (named `what`) cannot be part of a principal; `None` when it can.
pub fn principal_part_problem(what: &'static str, value: &str) -> Option<SshRefusal> {
    let why = if value.is_empty() {
        "is empty"
    } else if value.contains(',') {
        "holds a comma (a principal list)"
    } else if value.contains(['*', '?']) {
        "holds a wildcard (* or ?)"
    } else if value.len() > 64 {
        "is longer than 64 characters"
    } else if value.starts_with('-')
        || !value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
    {
        "must be letters, digits, '.', '_' and '-' (not starting with '-')"
    } else {
        return None;
    };
    Some(SshRefusal::BadPrincipal {
        what,
        value: value.to_string(),
        why,
    })
}

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| t.unix_timestamp().to_string())
}

/// Decides a break-glass issuance (see the module docs). `node` is `None` when the log holds no
/// such node; `ca` when the bundle has an SSH CA.
pub fn decide_issue(
    request: &IssueRequest<'_>,
    node: Option<&NodeSshState>,
    ca: Option<&SshCa>,
    now: OffsetDateTime,
    entropy: Entropy,
) -> Result<Decision<SshUserCertIssued, IssuedSsh>, SshRefusal> {
    for (what, value) in [("--account", request.account), ("--node", request.node_id)] {
        if let Some(refusal) = principal_part_problem(what, value) {
            return Err(refusal);
        }
    }
    let ttl_s = request.ttl.whole_seconds();
    if ttl_s <= 0 {
        return Err(SshRefusal::TtlNotPositive(ttl_s));
    }
    if request.ttl > MAX_USER_CERT_TTL {
        return Err(SshRefusal::TtlTooLong(ttl_s));
    }
    let now = now.replace_nanosecond(0).unwrap_or(now);
    let valid_before = now + request.ttl;
    if let Some(limit) = request.credential_not_after {
        if valid_before > limit {
            return Err(SshRefusal::PastCredential {
                valid_before: rfc3339(valid_before),
                credential_not_after: rfc3339(limit),
            });
        }
    }
    let key = SubjectKey::from_openssh_line(request.public_key)?;
    let node = node.ok_or_else(|| SshRefusal::NodeNotFound(request.node_id.to_string()))?;
    if node.status != "active" {
        return Err(SshRefusal::NodeNotActive {
            node: request.node_id.to_string(),
            status: node.status.clone(),
        });
    }
    if node.identity_revoked {
        return Err(SshRefusal::NodeRevoked(request.node_id.to_string()));
    }
    let ca = ca.ok_or(SshRefusal::NoSshCa)?;
    let principal = format!("{}@{}", request.account, request.node_id);
    let key_id = format!("{} break-glass {principal}", request.operator);
    let valid_after = now - BACKDATE;
    let principals = [principal.clone()];
    let to_secs = |t: OffsetDateTime| u64::try_from(t.unix_timestamp()).unwrap_or(0);
    let certificate = sign_certificate(
        ca,
        &CertRequest {
            kind: CertKind::User,
            key: &key,
            serial: entropy.serial,
            key_id: &key_id,
            principals: &principals,
            valid_after: to_secs(valid_after),
            valid_before: to_secs(valid_before),
        },
        &entropy.nonce,
    )
    .map_err(|_| SshRefusal::NoSshCa)?;
    let event = SshUserCertIssued {
        serial: entropy.serial,
        node_id: request.node_id.to_string(),
        account: request.account.to_string(),
        principal: principal.clone(),
        key_id: key_id.clone(),
        key_type: key.kind().type_name().to_string(),
        key_fingerprint: key.fingerprint(),
        valid_after: valid_after.unix_timestamp(),
        valid_before: valid_before.unix_timestamp(),
        certificate_sha256: certificate.sha256().to_vec(),
    };
    Ok(Decision {
        events: vec![event],
        outcome: IssuedSsh {
            certificate,
            serial: entropy.serial,
            principal,
            key_id,
            valid_after,
            valid_before,
            key_fingerprint: key.fingerprint(),
        },
    })
}

/// What the log holds of one SSH certificate, for [`decide_revoke`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshCertState {
    pub node_id: String,
    pub revoked: bool,
}

/// What `ssh revoke` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SshRevokeDecision {
    /// Append `ssh.user_cert.revoked`.
    Revoke,
    /// Revoked already: nothing appended.
    AlreadyRevoked,
}

/// Parses `ssh revoke`'s serial (decimal, as `ssh-keygen -L` and `ssh list` print it).
pub fn parse_serial(text: &str) -> Result<u64, SshRefusal> {
    text.trim()
        .parse::<u64>()
        .ok()
        .filter(|s| *s != 0)
        .ok_or_else(|| SshRefusal::UnknownSerial(text.to_string()))
}

/// Decides a revocation of certificate `serial` whose state the log holds (`None`: none has it).
pub fn decide_revoke(
    serial: u64,
    state: Option<&SshCertState>,
    reason: &str,
) -> Result<Decision<SshUserCertRevoked, SshRevokeDecision>, SshRefusal> {
    if reason.trim().is_empty() {
        return Err(SshRefusal::EmptyReason);
    }
    let state = state.ok_or_else(|| SshRefusal::UnknownSerial(serial.to_string()))?;
    if state.revoked {
        return Ok(Decision::unchanged(SshRevokeDecision::AlreadyRevoked));
    }
    Ok(Decision {
        events: vec![SshUserCertRevoked {
            serial,
            node_id: state.node_id.clone(),
            reason: reason.to_string(),
        }],
        outcome: SshRevokeDecision::Revoke,
    })
}
