//! The TPM allow-list and the registry of cloud accounts for callers in Rust: two lists of
//! [`AttestorEntries`], under the names and views of the verbs `bcctl tpm allow | list | revoke`
//! and `bcctl cloud account add | list | remove` (which run `AttestorEntries` themselves, through
//! the CLI's one implementation of a list's verbs, with these same views).

use std::sync::Arc;

use domain::attest::cloud_iid::CLOUD_ACCOUNT_LIST;
use domain::attest::tpm::TPM_ALLOW_LIST;
use events::store::EventStore;

use super::entries::{AttestorEntries, NewEntry};
use super::error::AttestError;
use super::views::{CloudAccountView, TpmAllowView};
use crate::Clock;

/// `tpm allow`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTpmAllow {
    /// SHA-256 of the EK's TPMT_PUBLIC, 64 hex digits.
    pub ek_sha256_hex: String,
    /// Where the machine joins.
    pub tenant_id: String,
    /// Its site.
    pub site_id: String,
    /// Its pool.
    pub pool_id: String,
    /// Who allows it.
    pub actor: String,
    /// Free text.
    pub note: String,
}

/// The TPM allow-list: the `tpm-allow` list.
#[derive(Clone)]
pub struct TpmAllows(AttestorEntries);

impl TpmAllows {
    /// The allow-list over `store`, on `clock`.
    pub fn new(store: EventStore, clock: Arc<dyn Clock>) -> Self {
        TpmAllows(AttestorEntries::new(store, clock))
    }

    /// `tpm allow`: refused when an entry not revoked already allows the EK.
    pub async fn allow(&self, new: &NewTpmAllow) -> Result<TpmAllowView, AttestError> {
        let entry = NewEntry {
            key: new.ek_sha256_hex.clone(),
            tenant_id: new.tenant_id.clone(),
            site_id: new.site_id.clone(),
            pool_id: new.pool_id.clone(),
            role: String::new(),
            actor: new.actor.clone(),
            note: new.note.clone(),
        };
        Ok(self.0.add(&TPM_ALLOW_LIST, &entry).await?.into())
    }

    /// `tpm list`: every entry, revoked ones too, oldest first.
    pub async fn list(&self) -> Result<Vec<TpmAllowView>, AttestError> {
        let list = self.0.list(&TPM_ALLOW_LIST).await?;
        Ok(list.into_iter().map(TpmAllowView::from).collect())
    }

    /// `tpm revoke`: the EK no longer joins through the entry.
    pub async fn revoke(
        &self,
        allow_id: &str,
        actor: &str,
        reason: &str,
    ) -> Result<TpmAllowView, AttestError> {
        let entry = self.0.remove(&TPM_ALLOW_LIST, allow_id, actor, reason);
        Ok(entry.await?.into())
    }
}

/// `cloud account add`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewCloudAccount {
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

/// The registry of cloud accounts: the `cloud-account` list, keyed `<provider>/<account>`.
#[derive(Clone)]
pub struct CloudAccounts(AttestorEntries);

impl CloudAccounts {
    /// The registry over `store`, on `clock`.
    pub fn new(store: EventStore, clock: Arc<dyn Clock>) -> Self {
        CloudAccounts(AttestorEntries::new(store, clock))
    }

    /// `cloud account add`: refused when an entry not removed already registers the account.
    pub async fn add(&self, new: &NewCloudAccount) -> Result<CloudAccountView, AttestError> {
        let entry = NewEntry {
            key: format!("{}/{}", new.provider, new.account),
            tenant_id: new.tenant_id.clone(),
            site_id: new.site_id.clone(),
            pool_id: new.pool_id.clone(),
            role: new.role.clone(),
            actor: new.actor.clone(),
            note: String::new(),
        };
        Ok(self.0.add(&CLOUD_ACCOUNT_LIST, &entry).await?.into())
    }

    /// `cloud account list`: every entry, removed ones too, oldest first.
    pub async fn list(&self) -> Result<Vec<CloudAccountView>, AttestError> {
        let list = self.0.list(&CLOUD_ACCOUNT_LIST).await?;
        Ok(list.into_iter().map(CloudAccountView::from).collect())
    }

    /// `cloud account remove`: the account's instances no longer join through the entry.
    pub async fn remove(
        &self,
        entry_id: &str,
        actor: &str,
        reason: &str,
    ) -> Result<CloudAccountView, AttestError> {
        let entry = self.0.remove(&CLOUD_ACCOUNT_LIST, entry_id, actor, reason);
        Ok(entry.await?.into())
    }
}
