//! The operator's registry of cloud accounts (`bcctl cloud account add|list|remove`, spec 000
//! "cloud-iid") on the generic attestor entries ([`crate::attest::entries`]): an entry's key is
//! `<provider>/<account>` and it names the tenant, site, pool and role its instances join as.

use super::wire::CloudProvider;
use crate::attest::entries::EntryList;
use crate::attest::pools::{check_text, AttestAdminRefusal};
use crate::pki::NodeRole;

/// At most this many bytes of account (an OIDC issuer URL is the longest).
pub const MAX_CLOUD_ACCOUNT: usize = 256;

/// The registry of cloud accounts: list `cloud-account`, ids `cloud_…`, streams
/// `cloud-account/<provider>/<account>` (those of the `cloud.account.added` events written
/// before the generic list).
pub const CLOUD_ACCOUNT_LIST: EntryList = EntryList {
    name: "cloud-account",
    id_prefix: "cloud",
    stream_prefix: Some("cloud-account"),
    noun: "cloud account entry",
    removed: "removed",
    key: account_key,
    role: |text| parse_account_role(text).map(Some),
    exists: |key, id| {
        let (provider, account) = key.split_once('/').unwrap_or((key, ""));
        format!("{provider} account {account} is already registered by {id} (remove it first)")
    },
};

/// The list key of (provider, account): `<provider>/<account>`.
pub fn cloud_account_key(provider: CloudProvider, account: &str) -> String {
    format!("{}/{account}", provider.as_str())
}

/// `<provider>/<account>` checked: a known provider, an account of 1 to [`MAX_CLOUD_ACCOUNT`]
/// bytes with no whitespace or control character.
pub fn account_key(text: &str) -> Result<String, AttestAdminRefusal> {
    let (provider, account) = text.split_once('/').unwrap_or((text, ""));
    let provider = parse_provider(provider)?;
    check_account(account)?;
    Ok(cloud_account_key(provider, account))
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
