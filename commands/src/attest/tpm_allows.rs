//! The operator commands on the TPM allow-list (`bcctl tpm allow | list | revoke`). Each is one
//! transaction: read the EK's entries, let [`domain::attest::tpm_allows`] decide, append to the
//! EK's stream (`tpm-ek/<hex>`) at the version read (so two concurrent allows of one EK cannot
//! both succeed), apply the projections, read the row back.

use std::sync::Arc;

use domain::attest::{
    decide_allow_ek, decide_revoke_tpm_allow, parse_ek_sha256, AllowEk, AttestAdminRefusal,
};
use events::store::{EventStore, StoreTx};
use projections::attest::read;

use super::error::AttestError;
use super::rows;
use super::views::TpmAllowView;
use crate::identity::{append_decided, fresh_id, IdentityError};
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

/// The operator commands on the TPM allow-list.
#[derive(Clone)]
pub struct TpmAllows {
    store: EventStore,
    clock: Arc<dyn Clock>,
}

impl TpmAllows {
    /// The allow-list over `store`, on `clock`.
    pub fn new(store: EventStore, clock: Arc<dyn Clock>) -> Self {
        TpmAllows { store, clock }
    }

    /// `tpm allow`: refused when an entry not revoked already allows the EK.
    pub async fn allow(&self, new: &NewTpmAllow) -> Result<TpmAllowView, AttestError> {
        let now_us = self.clock.now_us();
        let cmd = AllowEk {
            allow_id: fresh_id("tpma"),
            ek_sha256_hex: new.ek_sha256_hex.clone(),
            tenant_id: new.tenant_id.clone(),
            site_id: new.site_id.clone(),
            pool_id: new.pool_id.clone(),
            actor: new.actor.clone(),
            note: new.note.clone(),
        };
        let ek = parse_ek_sha256(&cmd.ek_sha256_hex)?;
        let row = crate::transaction!(&self.store, AttestError, |tx| {
            let entries = read::tpm_ek_entries(tx, &ek).await?;
            let state = entries
                .iter()
                .rev()
                .find(|r| !r.revoked)
                .map(rows::tpm_allow_state);
            let events = decide_allow_ek(&cmd, state.as_ref())?.events;
            let version = entries.iter().map(|r| r.version).max();
            let versions = vec![(format!("tpm-ek/{}", hex::encode(ek)), version)];
            append_decided(tx, events, &cmd.tenant_id, now_us, &versions).await?;
            allow_back(tx, &cmd.allow_id).await
        })?;
        Ok(TpmAllowView::from(&row))
    }

    /// `tpm list`: every entry, revoked ones too, oldest first.
    pub async fn list(&self) -> Result<Vec<TpmAllowView>, AttestError> {
        let rows = read::tpm_allows_in_store(&self.store).await?;
        Ok(rows.iter().map(TpmAllowView::from).collect())
    }

    /// `tpm revoke`: the EK no longer joins through the entry.
    pub async fn revoke(
        &self,
        allow_id: &str,
        actor: &str,
        reason: &str,
    ) -> Result<TpmAllowView, AttestError> {
        let now_us = self.clock.now_us();
        let row = crate::transaction!(&self.store, AttestError, |tx| {
            // The EK of an entry never changes; its state and the stream's version are then read
            // in one statement (see read::tpm_ek_entries).
            let ek = match read::tpm_allow(tx, allow_id).await? {
                Some(row) => Some(rows::tpm_allow_ek(&row)?),
                None => None,
            };
            let entries = match &ek {
                Some(ek) => read::tpm_ek_entries(tx, ek).await?,
                None => Vec::new(),
            };
            let row = entries.iter().find(|r| r.allow_id == allow_id);
            let entry = row.map(rows::tpm_allow_entry).transpose()?;
            let events = decide_revoke_tpm_allow(allow_id, entry.as_ref(), actor, reason)?.events;
            let (Some(row), Some(entry)) = (row, entry) else {
                return Err(AttestAdminRefusal::UnknownTpmAllow(allow_id.into()).into());
            };
            let version = entries.iter().map(|r| r.version).max();
            let versions = vec![(format!("tpm-ek/{}", hex::encode(entry.ek_sha256)), version)];
            append_decided(tx, events, &row.tenant_id, now_us, &versions).await?;
            allow_back(tx, allow_id).await
        })?;
        Ok(TpmAllowView::from(&row))
    }
}

async fn allow_back(tx: &mut StoreTx, allow_id: &str) -> Result<read::TpmAllowRow, AttestError> {
    read::tpm_allow(tx, allow_id).await?.ok_or_else(|| {
        IdentityError::Corrupt(format!("tpm allow-list entry {allow_id} has no row")).into()
    })
}
