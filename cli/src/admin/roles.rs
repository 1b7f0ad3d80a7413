//! The role-to-verb table of the admin API: the only place a role is checked.
//!
//! A verb is the subcommand path of bcctl's grammar ("token create", "site boot add"). Each verb
//! is either remotable, with the set of operator roles that may run it, or not remotable at all
//! (it needs the machine it runs on: `up`, `serve`, the PKI's key ceremonies, offline
//! verification, approvers' local signing). A verb the table does not name is not remotable:
//! a new verb is denied until someone puts it here (and a test walking the whole command tree
//! fails until then). docs/ADMIN-API.md holds the same table, and a test parses it and compares.
//!
//! The hierarchy: admin may run every remotable verb; operator runs the fleet (tokens, nodes,
//! pools, join requests, allow-lists, sites, commands, batch creation and reads) and the
//! auditor's reads; approver reads batches and their scopes and submits approvals, and reads
//! the bundle; auditor reads the log, the trail and its proofs, the bundle, the tenants and the
//! store's status. Creating and deleting a tenant is admin's alone: a deletion retires nodes,
//! revokes every token and cancels batches approvers may have signed, across the fleet's roles.

use domain::operator::OperatorRole;
use OperatorRole::{Admin, Approver, Auditor, Operator};

/// Who may run a verb.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Runs only against the store directly (on the machine holding the deployment).
    Local,
    /// Remotable, by these roles.
    Roles(&'static [OperatorRole]),
}

/// Every role.
const EVERYONE: &[OperatorRole] = &[Auditor, Approver, Operator, Admin];
/// The auditor's reads (operator and admin read them too).
const READ: &[OperatorRole] = &[Auditor, Operator, Admin];
/// Batch reads: approvers, operators, admins.
const BATCH_READ: &[OperatorRole] = &[Approver, Operator, Admin];
/// An approval: approvers (and admins).
const APPROVE: &[OperatorRole] = &[Approver, Admin];
/// The fleet's day-to-day writes.
const OPERATE: &[OperatorRole] = &[Operator, Admin];
/// The deployment's trust and its operators.
const ADMIN: &[OperatorRole] = &[Admin];

use Access::{Local, Roles};

/// THE table. Verbs of bcctl's grammar, in the order of `bcctl --help`.
pub const TABLE: &[(&str, Access)] = &[
    ("up", Local),
    ("serve", Local),
    ("migrate", Local),
    ("status", Roles(READ)),
    ("pki init", Local),
    ("pki show", Local),
    ("pki issue-internal", Local),
    ("pki issue-gateway", Local),
    ("pki issue-operator", Local),
    ("pki add-operator-ca", Local),
    ("pki add-ssh-ca", Local),
    ("pki trust-version", Roles(ADMIN)),
    ("pki rotate-command-root", Roles(ADMIN)),
    ("pki renew-ca", Local),
    ("pki reseal", Local),
    ("pki crl", Local),
    ("batch keygen", Local),
    ("batch sign-approvers", Local),
    ("batch approve", Local),
    ("batch create", Roles(OPERATE)),
    ("batch cancel", Roles(OPERATE)),
    ("batch show", Roles(BATCH_READ)),
    ("batch scope", Roles(BATCH_READ)),
    ("batch list", Roles(BATCH_READ)),
    ("batch submit-approval", Roles(APPROVE)),
    ("audit export", Roles(READ)),
    ("audit prove", Roles(READ)),
    ("audit seal", Roles(ADMIN)),
    ("audit verify", Local),
    ("audit verify-proof", Local),
    ("command run", Roles(OPERATE)),
    ("command list", Roles(OPERATE)),
    ("command show", Roles(OPERATE)),
    ("token create", Roles(OPERATE)),
    ("token list", Roles(OPERATE)),
    ("token revoke", Roles(OPERATE)),
    ("node list", Roles(OPERATE)),
    ("node show", Roles(OPERATE)),
    ("node revoke", Roles(OPERATE)),
    ("node delete", Roles(OPERATE)),
    ("node retire", Roles(OPERATE)),
    ("node names set", Roles(OPERATE)),
    ("node names add", Roles(OPERATE)),
    ("node names remove", Roles(OPERATE)),
    ("node names show", Roles(OPERATE)),
    ("node config", Roles(OPERATE)),
    ("node install-script", Roles(OPERATE)),
    ("pool create", Roles(OPERATE)),
    ("pool show", Roles(OPERATE)),
    ("pool list", Roles(OPERATE)),
    ("pool update", Roles(OPERATE)),
    ("join-request list", Roles(OPERATE)),
    ("join-request show", Roles(OPERATE)),
    ("join-request approve", Roles(OPERATE)),
    ("join-request reject", Roles(OPERATE)),
    ("attestor entry add", Roles(OPERATE)),
    ("attestor entry list", Roles(OPERATE)),
    ("attestor entry remove", Roles(OPERATE)),
    ("tpm allow", Roles(OPERATE)),
    ("tpm list", Roles(OPERATE)),
    ("tpm revoke", Roles(OPERATE)),
    ("site create", Roles(OPERATE)),
    ("site list", Roles(OPERATE)),
    ("site show", Roles(OPERATE)),
    ("site boot add", Roles(OPERATE)),
    ("site boot list", Roles(OPERATE)),
    ("site boot remove", Roles(OPERATE)),
    ("site lease fence", Roles(OPERATE)),
    ("cloud account add", Roles(OPERATE)),
    ("cloud account list", Roles(OPERATE)),
    ("cloud account remove", Roles(OPERATE)),
    ("operator list", Roles(ADMIN)),
    ("operator revoke", Roles(ADMIN)),
    ("ssh ca", Roles(READ)),
    ("ssh issue", Roles(OPERATE)),
    ("ssh list", Roles(READ)),
    ("ssh revoke", Roles(OPERATE)),
    ("ssh krl", Roles(READ)),
    ("replay", Local),
    ("rebuild", Local),
    ("doctor", Local),
    ("healthcheck", Local),
    ("bundle show", Roles(EVERYONE)),
    ("events list", Roles(READ)),
    ("events show", Roles(READ)),
    ("tenant create", Roles(ADMIN)),
    ("tenant list", Roles(READ)),
    ("tenant show", Roles(READ)),
    ("tenant delete", Roles(ADMIN)),
    ("oidc keys list", Roles(READ)),
    ("oidc keys add", Roles(OPERATE)),
    ("oidc keys promote", Roles(OPERATE)),
    ("oidc keys retire", Roles(OPERATE)),
    ("oidc discovery", Roles(EVERYONE)),
    ("config template serve", Local),
];

/// Who may run `verb`; `Local` for a verb the table does not name.
pub fn access(verb: &str) -> Access {
    TABLE
        .iter()
        .find(|(v, _)| *v == verb)
        .map_or(Local, |(_, a)| *a)
}

/// The least role that may run `verb` (what a refusal names); `None`: not remotable at all.
pub fn required_role(verb: &str) -> Option<OperatorRole> {
    match access(verb) {
        Local => None,
        Roles(roles) => roles.first().copied(),
    }
}

/// Whether `role` may run `verb` over the admin API.
pub fn allows(role: OperatorRole, verb: &str) -> bool {
    match access(verb) {
        Local => false,
        Roles(roles) => roles.contains(&role),
    }
}

/// The verbs `role` may run, in the table's order (WhoAmI's answer).
pub fn verbs_for(role: OperatorRole) -> Vec<&'static str> {
    TABLE
        .iter()
        .filter(|(_, a)| matches!(a, Roles(r) if r.contains(&role)))
        .map(|(v, _)| *v)
        .collect()
}

#[cfg(test)]
#[path = "roles_tests.rs"]
mod tests;
