//! The operator's registry of cloud accounts (`bcctl cloud account add|list|remove`, spec 000
//! "cloud-iid"): an entry names one (provider, account) and the tenant, site, pool and role its
//! instances join as through `cloud-iid`. The decisions here are pure: input checks, one active
//! entry per (provider, account) (the shell appends to the stream
//! `cloud-account/<provider>/<account>` at the version it read, so two concurrent adds cannot
//! both succeed), and removal of an active entry only.

use events::schema::{CloudAccountAdded, CloudAccountRemoved};

use super::cloud_iid::CloudProvider;
use super::contract::CloudAccountState;
use super::pools::{check_id, check_text, AttestAdminRefusal};
use crate::identity::{Decision, IdentityEvent};
use crate::pki::{NodeRole, SiteId};

/// The prefix of an entry's id.
pub const CLOUD_ACCOUNT_ID_PREFIX: &str = "cloud_";
/// At most this many bytes of account (an OIDC issuer URL is the longest).
pub const MAX_CLOUD_ACCOUNT: usize = 256;
/// At most this many bytes of removal reason.
pub const MAX_CLOUD_ACCOUNT_TEXT: usize = 512;

/// `cloud account add`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddCloudAccount {
    /// The new entry's id (`cloud_…`, minted by the shell).
    pub entry_id: String,
    /// `aws`, `gcp`, `azure` or `oidc`.
    pub provider: String,
    /// The AWS account id, GCP project id, Azure subscription id or OIDC issuer.
    pub account: String,
    /// Where its instances join.
    pub tenant_id: String,
    /// Their site.
    pub site_id: String,
    /// Their pool.
    pub pool_id: String,
    /// Their role (`node`).
    pub role: String,
    /// Who registers it.
    pub actor: String,
}

/// An entry as the remove decision reads it (active or removed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudAccountEntry {
    /// Its id.
    pub entry_id: String,
    /// The provider.
    pub provider: String,
    /// The account.
    pub account: String,
    /// Whether it was removed.
    pub removed: bool,
}

/// The provider named `text`, or an input refusal naming the four.
pub fn parse_provider(text: &str) -> Result<CloudProvider, AttestAdminRefusal> {
    CloudProvider::parse(text).ok_or_else(|| {
        AttestAdminRefusal::Invalid(format!(
            "the provider {text:?} must be one of aws, gcp, azure, oidc"
        ))
    })
}

/// Checks an account: 1 to [`MAX_CLOUD_ACCOUNT`] bytes, no whitespace or control character.
pub fn check_account(account: &str) -> Result<(), AttestAdminRefusal> {
    if account.is_empty() || account.chars().any(char::is_whitespace) {
        return Err(AttestAdminRefusal::Invalid(format!(
            "the account {account:?} must be non-empty with no whitespace (an AWS account id, \
             GCP project id, Azure subscription id or OIDC issuer)"
        )));
    }
    check_text("account", account, MAX_CLOUD_ACCOUNT)
}

/// The role named `text` an account's instances may join as.
pub fn parse_account_role(text: &str) -> Result<NodeRole, AttestAdminRefusal> {
    match text {
        "node" => Ok(NodeRole::Node),
        "site" => Ok(NodeRole::Site),
        _ => Err(AttestAdminRefusal::Invalid(format!(
            "the role {text:?} must be node or site"
        ))),
    }
}

fn check_actor(actor: &str) -> Result<(), AttestAdminRefusal> {
    if actor.is_empty() {
        return Err(AttestAdminRefusal::Invalid("the actor is empty".into()));
    }
    check_text("actor", actor, 256)
}

/// Registers an account; `active` is the entry not removed that already names it, if any.
pub fn decide_add_cloud_account(
    cmd: &AddCloudAccount,
    active: Option<&CloudAccountState>,
) -> Result<Decision<()>, AttestAdminRefusal> {
    check_id("entry id", &cmd.entry_id)?;
    if !cmd.entry_id.starts_with(CLOUD_ACCOUNT_ID_PREFIX) {
        return Err(AttestAdminRefusal::Invalid(format!(
            "entry id {:?} must start with {CLOUD_ACCOUNT_ID_PREFIX}",
            cmd.entry_id
        )));
    }
    let provider = parse_provider(&cmd.provider)?;
    check_account(&cmd.account)?;
    check_id("tenant id", &cmd.tenant_id)?;
    SiteId::new(&cmd.site_id).map_err(|e| AttestAdminRefusal::Invalid(e.to_string()))?;
    check_id("pool id", &cmd.pool_id)?;
    let role = parse_account_role(&cmd.role)?;
    check_actor(&cmd.actor)?;
    if let Some(existing) = active {
        return Err(AttestAdminRefusal::CloudAccountExists {
            provider: provider.as_str().into(),
            account: cmd.account.clone(),
            entry_id: existing.entry_id.clone(),
        });
    }
    Ok(Decision::events_only(vec![
        IdentityEvent::CloudAccountAdded(CloudAccountAdded {
            entry_id: cmd.entry_id.clone(),
            provider: provider.as_str().into(),
            account: cmd.account.clone(),
            tenant_id: cmd.tenant_id.clone(),
            site_id: cmd.site_id.clone(),
            pool_id: cmd.pool_id.clone(),
            role: role.as_str().into(),
            actor: cmd.actor.clone(),
        }),
    ]))
}

/// Removes an active entry: its instances no longer join (nodes that joined stay).
pub fn decide_remove_cloud_account(
    entry_id: &str,
    entry: Option<&CloudAccountEntry>,
    actor: &str,
    reason: &str,
) -> Result<Decision<()>, AttestAdminRefusal> {
    check_actor(actor)?;
    check_text("reason", reason, MAX_CLOUD_ACCOUNT_TEXT)?;
    let entry = entry.ok_or_else(|| AttestAdminRefusal::UnknownCloudAccount(entry_id.into()))?;
    if entry.removed {
        return Err(AttestAdminRefusal::CloudAccountRemoved(
            entry.entry_id.clone(),
        ));
    }
    Ok(Decision::events_only(vec![
        IdentityEvent::CloudAccountRemoved(CloudAccountRemoved {
            entry_id: entry.entry_id.clone(),
            provider: entry.provider.clone(),
            account: entry.account.clone(),
            actor: actor.into(),
            reason: reason.into(),
        }),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn add() -> AddCloudAccount {
        AddCloudAccount {
            entry_id: "cloud_1".into(),
            provider: "gcp".into(),
            account: "proj-1".into(),
            tenant_id: "acme".into(),
            site_id: "eu1".into(),
            pool_id: "web".into(),
            role: "node".into(),
            actor: "alice".into(),
        }
    }

    fn refusal(r: Result<Decision<()>, AttestAdminRefusal>) -> String {
        match r {
            Err(e) => e.to_string(),
            Ok(d) => panic!("admitted: {:?}", d.events),
        }
    }

    #[test]
    fn add_writes_one_event_on_the_accounts_stream() {
        let d = decide_add_cloud_account(&add(), None).expect("added");
        match d.events.as_slice() {
            [e @ IdentityEvent::CloudAccountAdded(p)] => {
                assert_eq!((p.provider.as_str(), p.role.as_str()), ("gcp", "node"));
                assert_eq!(e.stream(), "cloud-account/gcp/proj-1");
            }
            other => panic!("events {other:?}"),
        }
    }

    #[test]
    fn add_refuses_each_bad_input_and_a_second_active_entry() {
        let with = |f: fn(&mut AddCloudAccount)| {
            let mut c = add();
            f(&mut c);
            refusal(decide_add_cloud_account(&c, None))
        };
        assert_eq!(
            with(|c| c.provider = "ibm".into()),
            "INVALID_INPUT: the provider \"ibm\" must be one of aws, gcp, azure, oidc"
        );
        assert!(with(|c| c.account = String::new()).contains("must be non-empty"));
        assert!(with(|c| c.account = "a b".into()).contains("no whitespace"));
        assert!(with(|c| c.account = "a".repeat(300)).contains("at most 256"));
        assert!(with(|c| c.role = "ramdisk".into()).contains("must be node or site"));
        assert!(with(|c| c.tenant_id = String::new()).starts_with("INVALID_INPUT: tenant id"));
        assert!(with(|c| c.entry_id = "x_1".into()).contains("must start with cloud_"));
        assert_eq!(
            with(|c| c.actor = String::new()),
            "INVALID_INPUT: the actor is empty"
        );
        let active = CloudAccountState {
            entry_id: "cloud_0".into(),
            tenant_id: "acme".into(),
            site_id: "eu1".into(),
            pool_id: "web".into(),
            role: NodeRole::Node,
        };
        assert_eq!(
            refusal(decide_add_cloud_account(&add(), Some(&active))),
            "INVALID_STATE: gcp account proj-1 is already registered by cloud_0 (remove it first)"
        );
    }

    #[test]
    fn remove_refuses_unknown_and_removed_entries() {
        assert_eq!(
            refusal(decide_remove_cloud_account("cloud_9", None, "alice", "")),
            "NOT_FOUND: no cloud account entry cloud_9"
        );
        let mut entry = CloudAccountEntry {
            entry_id: "cloud_1".into(),
            provider: "aws".into(),
            account: "123".into(),
            removed: false,
        };
        let d = decide_remove_cloud_account("cloud_1", Some(&entry), "alice", "closed")
            .expect("removed");
        assert!(matches!(
            d.events.as_slice(),
            [e @ IdentityEvent::CloudAccountRemoved(p)]
                if p.reason == "closed" && e.stream() == "cloud-account/aws/123"
        ));
        entry.removed = true;
        assert_eq!(
            refusal(decide_remove_cloud_account(
                "cloud_1",
                Some(&entry),
                "alice",
                ""
            )),
            "INVALID_STATE: cloud account entry cloud_1 is already removed"
        );
    }
}
