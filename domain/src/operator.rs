//! Operator identities: the people and automation that run the control plane, and their roles.
//!
//! An operator certificate (from the deployment's operator CA, `domain::pki`) names
//! `spiffe://<trust domain>/operator/<name>` and carries `OU=bc-role:<role>`. The role decides
//! which verbs of the admin API the holder may run (the table lives in one place, the admin
//! server's `roles` module, and is written down in docs/ADMIN-API.md).
//!
//! Also here: operator names ([`OperatorName`]) and the pure deciders of the operator-certificate
//! commands ([`check_issue`], a check of the command line; [`decide_issued`] and [`decide_revoke`],
//! deciders; `commands::operators` runs them). Pure: no IO.

use std::convert::Infallible;

use events::schema::{OperatorCertIssued, OperatorCertRevoked};

use crate::decision::Decision;
use crate::pki::IssuedCertificate;

/// What an operator certificate lets its holder do.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OperatorRole {
    /// Everything, including the trust bundle, rotation stages and operator certificates.
    Admin,
    /// Tokens, nodes, pools, join requests, attestor allow-lists, commands, batch creation.
    Operator,
    /// Reads batches and their scopes; submits approvals (signed on the approver's machine).
    Approver,
    /// Reads the trail and its proofs only.
    Auditor,
}

/// Every role, in the order the docs list them.
pub const ALL_ROLES: [OperatorRole; 4] = [
    OperatorRole::Admin,
    OperatorRole::Operator,
    OperatorRole::Approver,
    OperatorRole::Auditor,
];

/// A role name that is not one of the four.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown operator role {0:?}: one of admin, operator, approver, auditor")]
pub struct UnknownRole(pub String);

impl OperatorRole {
    /// The name in `OU=bc-role:<name>` and in the log.
    pub fn as_str(self) -> &'static str {
        match self {
            OperatorRole::Admin => "admin",
            OperatorRole::Operator => "operator",
            OperatorRole::Approver => "approver",
            OperatorRole::Auditor => "auditor",
        }
    }

    /// Parses a role name (exactly as [`OperatorRole::as_str`] writes it).
    pub fn parse(name: &str) -> Result<OperatorRole, UnknownRole> {
        ALL_ROLES
            .into_iter()
            .find(|r| r.as_str() == name)
            .ok_or_else(|| UnknownRole(name.to_string()))
    }
}

impl std::fmt::Display for OperatorRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Longest operator name.
pub const MAX_OPERATOR_NAME_LEN: usize = 63;

/// An operator's name, the last segment of `spiffe://<td>/operator/<name>` and the certificate's
/// `CN`: `[a-z0-9][a-z0-9._-]{0,62}`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OperatorName(String);

/// A name that does not fit `[a-z0-9][a-z0-9._-]{0,62}`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("operator name {0:?} must be 1 to 63 characters of a-z, 0-9, '.', '_' and '-', starting with a letter or digit")]
pub struct BadOperatorName(pub String);

impl OperatorName {
    /// Validates a name.
    pub fn new(name: &str) -> Result<OperatorName, BadOperatorName> {
        let lead = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
        let ok = match name.as_bytes() {
            [first, rest @ ..] => {
                lead(*first)
                    && rest.len() < MAX_OPERATOR_NAME_LEN
                    && rest
                        .iter()
                        .all(|b| lead(*b) || matches!(b, b'.' | b'_' | b'-'))
            }
            [] => false,
        };
        if ok {
            Ok(OperatorName(name.to_string()))
        } else {
            Err(BadOperatorName(name.to_string()))
        }
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The operator's SPIFFE ID in `trust_domain`: `spiffe://<td>/operator/<name>`.
    pub fn spiffe_id(&self, trust_domain: &str) -> String {
        format!("spiffe://{trust_domain}/operator/{}", self.0)
    }
}

impl std::fmt::Display for OperatorName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// The longest an operator certificate lives, in days (`pki issue-operator --days`).
pub const MAX_OPERATOR_CERT_DAYS: i64 = 90;

/// Why an operator-certificate command is refused. Every one but [`OperatorRefusal::NotFound`]
/// is a bad value (exit 2).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum OperatorRefusal {
    /// `--name` outside the alphabet.
    #[error("INVALID_INPUT: --name: {0}")]
    BadName(BadOperatorName),
    /// `--role` not one of the four.
    #[error("INVALID_INPUT: --role: {0}")]
    UnknownRole(UnknownRole),
    /// `--days` outside 1 to 90.
    #[error("INVALID_INPUT: --days {0}: an operator certificate lives 1 to 90 days")]
    Days(i64),
    /// `--serial` is not a certificate serial.
    #[error("INVALID_INPUT: --serial {0:?}: not a certificate serial (1 to 20 bytes of hex, as `bcctl operator list` prints it)")]
    BadSerial(String),
    /// `--reason` empty.
    #[error(
        "INVALID_INPUT: --reason: say why the certificate is revoked (it is recorded in the event)"
    )]
    EmptyReason,
    /// No certificate has the serial.
    #[error(
        "NOT_FOUND: no operator certificate has serial {0} (`bcctl operator list` shows them)"
    )]
    NotFound(String),
}

impl OperatorRefusal {
    /// Whether the refusal is a bad value (exit 2) rather than a state (exit 1).
    pub fn is_usage(&self) -> bool {
        !matches!(self, OperatorRefusal::NotFound(_))
    }
}

/// What `pki issue-operator` decided to certify.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IssueDecision {
    /// The name.
    pub name: OperatorName,
    /// The role.
    pub role: OperatorRole,
    /// The lifetime in days, 1 to [`MAX_OPERATOR_CERT_DAYS`].
    pub days: i64,
}

/// Checks an issuance as given on the command line (the name, the role and the lifetime): a
/// calculation, not a decider; [`decide_issued`] records the certificate once signed.
pub fn check_issue(name: &str, role: &str, days: i64) -> Result<IssueDecision, OperatorRefusal> {
    let name = OperatorName::new(name).map_err(OperatorRefusal::BadName)?;
    let role = OperatorRole::parse(role).map_err(OperatorRefusal::UnknownRole)?;
    if !(1..=MAX_OPERATOR_CERT_DAYS).contains(&days) {
        return Err(OperatorRefusal::Days(days));
    }
    Ok(IssueDecision { name, role, days })
}

/// A serial as `--serial` gives it, normalized to the log's spelling: lower-case hex of the
/// minimal big-endian bytes (leading zero bytes dropped; `:` separators, as openssl prints
/// them, allowed).
pub fn normalize_serial(text: &str) -> Result<String, OperatorRefusal> {
    let bad = || OperatorRefusal::BadSerial(text.to_string());
    let digits: String = text.chars().filter(|c| *c != ':').collect();
    let padded = if digits.len() % 2 == 1 {
        format!("0{digits}")
    } else {
        digits
    };
    let bytes = hex::decode(&padded).map_err(|_| bad())?;
    let start = bytes.iter().position(|b| *b != 0).ok_or_else(bad)?;
    let minimal = &bytes[start..];
    if minimal.len() > 20 {
        return Err(bad());
    }
    Ok(hex::encode(minimal))
}

/// What the log holds of one operator certificate, for [`decide_revoke`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertState {
    /// The operator's name (its stream).
    pub name: String,
    /// Whether it is revoked already.
    pub revoked: bool,
}

/// What `operator revoke` does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RevokeDecision {
    /// Append `operator.cert.revoked` for this serial (normalized) of operator `name`.
    Revoke {
        /// The serial, lower-case hex.
        serial: String,
        /// The operator's name.
        name: String,
    },
    /// Already revoked: nothing to append (exit 0, "already revoked").
    AlreadyRevoked {
        /// The serial, lower-case hex.
        serial: String,
        /// The operator's name.
        name: String,
    },
}

/// Decides a revocation of the certificate `serial` (normalized) whose state the log holds
/// (`None`: no such certificate): `operator.cert.revoked`, or nothing for a certificate revoked
/// already. The outcome says which.
pub fn decide_revoke(
    serial: &str,
    state: Option<&CertState>,
    reason: &str,
) -> Result<Decision<OperatorCertRevoked, RevokeDecision>, OperatorRefusal> {
    if reason.trim().is_empty() {
        return Err(OperatorRefusal::EmptyReason);
    }
    let state = state.ok_or_else(|| OperatorRefusal::NotFound(serial.to_string()))?;
    let (serial, name) = (serial.to_string(), state.name.clone());
    if state.revoked {
        return Ok(Decision::unchanged(RevokeDecision::AlreadyRevoked {
            serial,
            name,
        }));
    }
    Ok(Decision {
        events: vec![OperatorCertRevoked {
            serial: serial.clone(),
            reason: reason.to_string(),
            name: name.clone(),
        }],
        outcome: RevokeDecision::Revoke { serial, name },
    })
}

/// Records an issuance [`check_issue`] allowed, once the operator CA signed `certificate`
/// (signing comes after the decision): `operator.cert.issued`. The outcome is the
/// certificate's SPIFFE ID in `trust_domain`.
pub fn decide_issued(
    decision: &IssueDecision,
    certificate: &IssuedCertificate,
    trust_domain: &str,
) -> Result<Decision<OperatorCertIssued, String>, Infallible> {
    let micros = |t: time::OffsetDateTime| {
        i64::try_from(t.unix_timestamp_nanos() / 1_000).unwrap_or(i64::MAX)
    };
    let spiffe_id = decision.name.spiffe_id(trust_domain);
    Ok(Decision {
        events: vec![OperatorCertIssued {
            serial: certificate.serial.to_hex(),
            name: decision.name.to_string(),
            role: decision.role.as_str().to_string(),
            spiffe_id: spiffe_id.clone(),
            not_before_us: micros(certificate.not_before),
            not_after_us: micros(certificate.not_after),
            certificate_sha256: certificate.sha256.to_vec(),
            certificate_der: certificate.der.clone(),
        }],
        outcome: spiffe_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issuance_checks_the_name_the_role_and_the_days() {
        let ok = check_issue("alice", "approver", 90).expect("ok");
        assert_eq!(ok.role, OperatorRole::Approver);
        assert_eq!(ok.days, 90);
        assert_eq!(
            check_issue("alice", "approver", 91)
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Err("INVALID_INPUT: --days 91: an operator certificate lives 1 to 90 days".into())
        );
        assert_eq!(
            check_issue("alice", "approver", 0),
            Err(OperatorRefusal::Days(0))
        );
        assert_eq!(
            check_issue("alice", "root", 1).map_err(|e| e.to_string()),
            Err("INVALID_INPUT: --role: unknown operator role \"root\": one of admin, operator, approver, auditor".into())
        );
        assert!(matches!(
            check_issue("Alice", "admin", 1),
            Err(OperatorRefusal::BadName(_))
        ));
        assert!(check_issue("Alice", "admin", 1)
            .map_err(|e| e.is_usage())
            .unwrap_err());
    }

    #[test]
    fn revocation_refuses_an_unknown_serial_and_repeats_idempotently() {
        assert_eq!(normalize_serial("00AB:cd"), Ok("abcd".to_string()));
        assert_eq!(normalize_serial("abc"), Ok("0abc".to_string()));
        for bad in ["", "00", "xyz", &"ab".repeat(21)] {
            assert_eq!(
                normalize_serial(bad),
                Err(OperatorRefusal::BadSerial(bad.to_string()))
            );
        }
        let live = CertState {
            name: "bob".into(),
            revoked: false,
        };
        let gone = CertState {
            name: "bob".into(),
            revoked: true,
        };
        assert_eq!(
            decide_revoke("ab", Some(&live), "left").map(|d| d.outcome),
            Ok(RevokeDecision::Revoke {
                serial: "ab".into(),
                name: "bob".into()
            })
        );
        assert_eq!(
            decide_revoke("ab", Some(&gone), "left").map(|d| d.outcome),
            Ok(RevokeDecision::AlreadyRevoked {
                serial: "ab".into(),
                name: "bob".into()
            })
        );
        let missing = decide_revoke("ab", None, "left").expect_err("refused");
        assert!(!missing.is_usage());
        assert_eq!(
            missing.to_string(),
            "NOT_FOUND: no operator certificate has serial ab (`bcctl operator list` shows them)"
        );
        assert_eq!(
            decide_revoke("ab", Some(&live), " ").map(|d| d.outcome),
            Err(OperatorRefusal::EmptyReason)
        );
    }

    #[test]
    fn operator_names_follow_the_alphabet() {
        for good in ["alice", "0", "ci.deploy-bot_2", &"a".repeat(63)] {
            assert_eq!(
                OperatorName::new(good).map(|n| n.to_string()),
                Ok(good.to_string())
            );
        }
        for bad in ["", "-x", ".x", "_x", "Alice", "a b", "a/b", &"a".repeat(64)] {
            assert_eq!(
                OperatorName::new(bad),
                Err(BadOperatorName(bad.to_string())),
                "{bad}"
            );
        }
        assert_eq!(
            OperatorName::new("alice").map(|n| n.spiffe_id("ex.org")),
            Ok("spiffe://ex.org/operator/alice".to_string())
        );
    }

    #[test]
    fn roles_round_trip_and_unknown_ones_are_refused() {
        for r in ALL_ROLES {
            assert_eq!(OperatorRole::parse(r.as_str()), Ok(r));
        }
        assert_eq!(OperatorRole::parse("root"), Err(UnknownRole("root".into())));
        assert!(OperatorRole::parse("Admin").is_err());
    }
}
