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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_round_trip_and_unknown_ones_are_refused() {
        for r in ALL_ROLES {
            assert_eq!(OperatorRole::parse(r.as_str()), Ok(r));
        }
        assert_eq!(OperatorRole::parse("root"), Err(UnknownRole("root".into())));
        assert!(OperatorRole::parse("Admin").is_err());
    }
}
