//! The operator commands on sites (`bcctl site create | list | show`, `bcctl site lease fence`)
//! and boot entries (`bcctl site boot add | list | remove`). A boot entry is appended to its
//! site's stream at the version read, so two concurrent adds for one MAC cannot both succeed.

use std::sync::Arc;

use domain::attest::discovery::wire::normalize_mac;
use domain::identity::lease_stream;
use domain::site::{
    decide_add_boot_entry, decide_create_site, decide_lease, decide_remove_boot_entry,
    AddBootEntry, CreateSite, LeaseCommand, SiteRefusal, DEFAULT_BOOT_LEASE_TTL_US,
};
use events::store::{EventStore, StoreTx};

use super::error::SiteError;
use super::views::{BootEntryView, LeaseView, SiteDetail, SiteView};
use super::{read, rows};
use crate::identity::{append_decided, fresh_id, IdentityError};
use crate::Clock;

/// `site create`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSite {
    /// The site id.
    pub site_id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// Free text.
    pub description: String,
    /// The pool its discovered machines join when their entry names none.
    pub default_pool_id: Option<String>,
    /// Who creates it.
    pub actor: String,
}

/// `site boot add`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewBootEntry {
    /// The site.
    pub site_id: String,
    /// The MAC (any case, ':' or '-').
    pub mac: String,
    /// The machine's product UUID, if known.
    pub product_uuid: Option<String>,
    /// Kernel URL (http or https).
    pub kernel_url: String,
    /// Initrd URL (http or https).
    pub initrd_url: String,
    /// Extra kernel arguments.
    pub kernel_args: String,
    /// The pool (`None`: the site's default).
    pub pool_id: Option<String>,
    /// How long it serves scripts, µs (`None`: 24 hours).
    pub expires_in_us: Option<i64>,
    /// Replace the MAC's active entry.
    pub replace: bool,
    /// Who adds it.
    pub actor: String,
}

/// The operator commands on sites.
#[derive(Clone)]
pub struct Sites {
    store: EventStore,
    clock: Arc<dyn Clock>,
}

impl Sites {
    /// Sites over `store`, on `clock`.
    pub fn new(store: EventStore, clock: Arc<dyn Clock>) -> Self {
        Sites { store, clock }
    }

    /// `site create`.
    pub async fn create(&self, new: &NewSite) -> Result<SiteView, SiteError> {
        let now_us = self.clock.now_us();
        let cmd = CreateSite {
            site_id: new.site_id.clone(),
            tenant_id: new.tenant_id.clone(),
            description: new.description.clone(),
            default_pool_id: new.default_pool_id.clone(),
            actor: new.actor.clone(),
        };
        let row = crate::transaction!(&self.store, SiteError, |tx| {
            let existing = read::site(tx, &cmd.site_id).await?;
            let state = existing.as_ref().map(rows::site_state);
            let events = decide_create_site(&cmd, state.as_ref())?.events;
            let versions = vec![(format!("site/{}", cmd.site_id), None)];
            append_decided(tx, events, &cmd.tenant_id, now_us, &versions).await?;
            site_back(tx, &cmd.site_id).await
        })?;
        Ok(SiteView::from(&row))
    }

    /// `site list`, of one tenant or all.
    pub async fn list(&self, tenant: Option<&str>) -> Result<Vec<SiteView>, SiteError> {
        let rows = read::sites_in_store(&self.store, tenant).await?;
        Ok(rows.iter().map(SiteView::from).collect())
    }

    /// `site show`: the site, its boot lease and its boot entries.
    pub async fn show(&self, site_id: &str) -> Result<SiteDetail, SiteError> {
        let now_us = self.clock.now_us();
        let site = read::site_in_store(&self.store, site_id)
            .await?
            .ok_or_else(|| SiteRefusal::UnknownSite(site_id.into()))?;
        let lease = read::site_lease_in_store(&self.store, site_id).await?;
        let entries = read::boot_entries_in_store(&self.store, site_id).await?;
        Ok(SiteDetail {
            site: SiteView::from(&site),
            lease: lease.as_ref().map(|l| LeaseView::new(l, now_us)),
            boot_entries: entries
                .iter()
                .map(|e| BootEntryView::new(e, now_us))
                .collect(),
        })
    }

    /// `site lease fence`: an operator ends the live holding of the site's boot lease
    /// (`cause = "fenced"`); the fenced agent can no longer vouch and must ACQUIRE again.
    pub async fn fence(&self, site_id: &str, actor: &str) -> Result<LeaseView, SiteError> {
        let now_us = self.clock.now_us();
        // A fence starts no holding: the TTL is not used.
        let ttl_us = DEFAULT_BOOT_LEASE_TTL_US;
        let row = crate::transaction!(&self.store, SiteError, |tx| {
            let site = read::site(tx, site_id)
                .await?
                .ok_or_else(|| SiteRefusal::UnknownSite(site_id.into()))?;
            let lease_row = read::site_lease(tx, site_id).await?;
            let lease = lease_row.as_ref().map(rows::lease_state).transpose()?;
            let decision = decide_lease(
                LeaseCommand::Fence,
                site_id,
                actor,
                lease.as_ref(),
                now_us,
                ttl_us,
            )?;
            let versions = vec![(lease_stream(site_id), lease_row.map(|l| l.version))];
            append_decided(tx, decision.events, &site.tenant_id, now_us, &versions).await?;
            read::site_lease(tx, site_id).await?.ok_or_else(|| {
                SiteError::from(IdentityError::Corrupt(format!(
                    "the boot lease of site {site_id} has no row"
                )))
            })
        })?;
        Ok(LeaseView::new(&row, now_us))
    }
}

async fn site_back(tx: &mut StoreTx, site_id: &str) -> Result<read::SiteRow, SiteError> {
    read::site(tx, site_id)
        .await?
        .ok_or_else(|| IdentityError::Corrupt(format!("site {site_id} has no row")).into())
}

/// The operator commands on boot entries.
#[derive(Clone)]
pub struct BootEntries {
    store: EventStore,
    clock: Arc<dyn Clock>,
}

impl BootEntries {
    /// Boot entries over `store`, on `clock`.
    pub fn new(store: EventStore, clock: Arc<dyn Clock>) -> Self {
        BootEntries { store, clock }
    }

    /// `site boot add`: refused when the MAC has an active entry at the site, unless
    /// `replace` (the old entry is then removed in the same append).
    pub async fn add(&self, new: &NewBootEntry) -> Result<BootEntryView, SiteError> {
        let now_us = self.clock.now_us();
        let cmd = AddBootEntry {
            entry_id: fresh_id("boot"),
            site_id: new.site_id.clone(),
            mac: new.mac.clone(),
            product_uuid: new.product_uuid.clone(),
            kernel_url: new.kernel_url.clone(),
            initrd_url: new.initrd_url.clone(),
            kernel_args: new.kernel_args.clone(),
            pool_id: new.pool_id.clone(),
            expires_in_us: new.expires_in_us,
            replace: new.replace,
            actor: new.actor.clone(),
        };
        let mac = normalize_mac(&cmd.mac);
        let row = crate::transaction!(&self.store, SiteError, |tx| {
            let site = read::site(tx, &cmd.site_id).await?;
            let entries = match (&site, &mac) {
                (Some(_), Some(mac)) => read::boot_entries_for_mac(tx, &cmd.site_id, mac).await?,
                _ => Vec::new(),
            };
            let states: Vec<_> = entries.iter().map(rows::boot_entry_state).collect();
            let state = site.as_ref().map(rows::site_state);
            let events = decide_add_boot_entry(&cmd, state.as_ref(), &states, now_us)?.events;
            let Some(site) = site else {
                return Err(SiteRefusal::UnknownSite(cmd.site_id.clone()).into());
            };
            let versions = vec![(format!("site/{}", site.site_id), Some(site.version))];
            append_decided(tx, events, &site.tenant_id, now_us, &versions).await?;
            entry_back(tx, &cmd.entry_id).await
        })?;
        Ok(BootEntryView::new(&row, now_us))
    }

    /// `site boot list`: every entry of the site, removed and expired ones too, oldest first.
    pub async fn list(&self, site_id: &str) -> Result<Vec<BootEntryView>, SiteError> {
        let now_us = self.clock.now_us();
        if read::site_in_store(&self.store, site_id).await?.is_none() {
            return Err(SiteRefusal::UnknownSite(site_id.into()).into());
        }
        let rows = read::boot_entries_in_store(&self.store, site_id).await?;
        Ok(rows.iter().map(|r| BootEntryView::new(r, now_us)).collect())
    }

    /// `site boot remove`.
    pub async fn remove(
        &self,
        entry_id: &str,
        actor: &str,
        reason: &str,
    ) -> Result<BootEntryView, SiteError> {
        let now_us = self.clock.now_us();
        let row = crate::transaction!(&self.store, SiteError, |tx| {
            let entry = read::boot_entry(tx, entry_id).await?;
            let state = entry.as_ref().map(rows::boot_entry_state);
            let events = decide_remove_boot_entry(entry_id, state.as_ref(), actor, reason)?.events;
            let Some(entry) = entry else {
                return Err(SiteRefusal::UnknownBootEntry(entry_id.into()).into());
            };
            let site = site_back(tx, &entry.site_id).await?;
            let versions = vec![(format!("site/{}", site.site_id), Some(site.version))];
            append_decided(tx, events, &site.tenant_id, now_us, &versions).await?;
            entry_back(tx, entry_id).await
        })?;
        Ok(BootEntryView::new(&row, now_us))
    }
}

async fn entry_back(tx: &mut StoreTx, entry_id: &str) -> Result<read::BootEntryRow, SiteError> {
    read::boot_entry(tx, entry_id)
        .await?
        .ok_or_else(|| IdentityError::Corrupt(format!("boot entry {entry_id} has no row")).into())
}
