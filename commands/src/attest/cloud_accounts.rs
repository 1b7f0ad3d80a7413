//! The operator commands on the registry of cloud accounts (`bcctl cloud account add | list |
//! remove`). Each is one transaction: read the account's entries, let
//! [`domain::attest::cloud_accounts`] decide, append to the account's stream
//! (`cloud-account/<provider>/<account>`) at the version read (so two concurrent adds of one
//! account cannot both succeed), apply the projections, read the row back.

use std::sync::Arc;

use domain::attest::cloud_accounts::{check_account, parse_provider};
use domain::attest::{
    decide_add_cloud_account, decide_remove_cloud_account, AddCloudAccount, AttestAdminRefusal,
};
use domain::identity::cloud_account_stream;
use events::store::{EventStore, StoreTx};
use projections::attest::read;

use super::error::AttestError;
use super::rows;
use super::views::CloudAccountView;
use crate::identity::{append_decided, fresh_id, IdentityError};
use crate::Clock;

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

/// The operator commands on the registry of cloud accounts.
#[derive(Clone)]
pub struct CloudAccounts {
    store: EventStore,
    clock: Arc<dyn Clock>,
}

impl CloudAccounts {
    /// The registry over `store`, on `clock`.
    pub fn new(store: EventStore, clock: Arc<dyn Clock>) -> Self {
        CloudAccounts { store, clock }
    }

    /// `cloud account add`: refused when an entry not removed already registers the account.
    pub async fn add(&self, new: &NewCloudAccount) -> Result<CloudAccountView, AttestError> {
        let now_us = self.clock.now_us();
        let cmd = AddCloudAccount {
            entry_id: fresh_id("cloud"),
            provider: new.provider.clone(),
            account: new.account.clone(),
            tenant_id: new.tenant_id.clone(),
            site_id: new.site_id.clone(),
            pool_id: new.pool_id.clone(),
            role: new.role.clone(),
            actor: new.actor.clone(),
        };
        let provider = parse_provider(&cmd.provider)?;
        check_account(&cmd.account)?;
        let row = crate::transaction!(&self.store, AttestError, |tx| {
            let entries = read::cloud_account_entries(tx, provider.as_str(), &cmd.account).await?;
            let state = entries
                .iter()
                .rev()
                .find(|r| !r.removed)
                .map(rows::cloud_account_state)
                .transpose()?;
            let events = decide_add_cloud_account(&cmd, state.as_ref())?.events;
            let version = entries.iter().map(|r| r.version).max();
            let versions = vec![(
                cloud_account_stream(provider.as_str(), &cmd.account),
                version,
            )];
            append_decided(tx, events, &cmd.tenant_id, now_us, &versions).await?;
            entry_back(tx, &cmd.entry_id).await
        })?;
        Ok(CloudAccountView::from(&row))
    }

    /// `cloud account list`: every entry, removed ones too, oldest first.
    pub async fn list(&self) -> Result<Vec<CloudAccountView>, AttestError> {
        let rows = read::cloud_accounts_in_store(&self.store).await?;
        Ok(rows.iter().map(CloudAccountView::from).collect())
    }

    /// `cloud account remove`: the account's instances no longer join through the entry.
    pub async fn remove(
        &self,
        entry_id: &str,
        actor: &str,
        reason: &str,
    ) -> Result<CloudAccountView, AttestError> {
        let now_us = self.clock.now_us();
        let row = crate::transaction!(&self.store, AttestError, |tx| {
            // An entry's (provider, account) never changes; its state and the stream's version
            // are then read in one statement (see read::cloud_account_entries).
            let entries = match read::cloud_account(tx, entry_id).await? {
                Some(row) => read::cloud_account_entries(tx, &row.provider, &row.account).await?,
                None => Vec::new(),
            };
            let row = entries.iter().find(|r| r.entry_id == entry_id);
            let entry = row.map(rows::cloud_account_entry);
            let events =
                decide_remove_cloud_account(entry_id, entry.as_ref(), actor, reason)?.events;
            let Some(row) = row else {
                return Err(AttestAdminRefusal::UnknownCloudAccount(entry_id.into()).into());
            };
            let version = entries.iter().map(|r| r.version).max();
            let versions = vec![(cloud_account_stream(&row.provider, &row.account), version)];
            append_decided(tx, events, &row.tenant_id, now_us, &versions).await?;
            entry_back(tx, entry_id).await
        })?;
        Ok(CloudAccountView::from(&row))
    }
}

async fn entry_back(
    tx: &mut StoreTx,
    entry_id: &str,
) -> Result<read::CloudAccountRow, AttestError> {
    read::cloud_account(tx, entry_id).await?.ok_or_else(|| {
        IdentityError::Corrupt(format!("cloud account entry {entry_id} has no row")).into()
    })
}
