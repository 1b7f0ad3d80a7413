//! Operator identities: the people and automation that run the control plane, and their roles.
//!
//! An operator certificate (from the deployment's operator CA, `domain::pki`) names
//! `spiffe://<trust domain>/operator/<name>` and carries `OU=bc-role:<role>`. The role decides
//! which verbs of the admin API the holder may run (the table lives in one place, the admin
//! server's `roles` module, and is written down in docs/ADMIN-API.md). Pure: no IO.

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

#[cfg(test)]
mod tests {
    use super::*;

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
