//! The operator commands on sites (`bcctl site create | list | show`, `bcctl site lease fence`)
//! and boot entries (`bcctl site boot add | list | remove`). A boot entry is appended to its
//! site's stream at the version read, so two concurrent adds for one MAC cannot both succeed.

use std::sync::Arc;

use async_trait::async_trait;
use domain::attest::discovery::wire::normalize_mac;
use domain::identity::lease_stream;
use domain::identity::IdentityEvent;
use domain::site::{
    decide_add_boot_entry, decide_create_site, decide_lease, decide_remove_boot_entry,
    AddBootEntry, BootLease, CreateSite, LeaseCommand, LeaseOutcome, SiteRefusal,
    DEFAULT_BOOT_LEASE_TTL_US,
};
use events::store::{EventStore, StoreTx};
use rand_core::CryptoRngCore;

use super::error::SiteError;
use super::read::{BootEntryRow, SiteLeaseRow, SiteRow};
use super::views::{BootEntryView, LeaseView, SiteDetail, SiteView};
use super::{read, rows};
use crate::identity::{append_decided, fresh_id, IdentityError};
use crate::run::{decided, run, At, Command, Decided};
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
        let cmd = CreateSite {
            site_id: new.site_id.clone(),
            tenant_id: new.tenant_id.clone(),
            description: new.description.clone(),
            default_pool_id: new.default_pool_id.clone(),
            actor: new.actor.clone(),
        };
        let row = run(&self.store, self.clock.as_ref(), &Create(cmd)).await?;
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
        let (row, now_us) =
            run(&self.store, self.clock.as_ref(), &Fence { site_id, actor }).await?;
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
        let (row, now_us) = run(&self.store, self.clock.as_ref(), &AddEntry(cmd)).await?;
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
        let remove = RemoveEntry {
            entry_id,
            actor,
            reason,
        };
        let (row, now_us) = run(&self.store, self.clock.as_ref(), &remove).await?;
        Ok(BootEntryView::new(&row, now_us))
    }
}

async fn entry_back(tx: &mut StoreTx, entry_id: &str) -> Result<read::BootEntryRow, SiteError> {
    read::boot_entry(tx, entry_id)
        .await?
        .ok_or_else(|| IdentityError::Corrupt(format!("boot entry {entry_id} has no row")).into())
}

/// `site create`, as the runner drives it.
struct Create(CreateSite);

#[async_trait]
impl Command for Create {
    type State = Option<SiteRow>;
    type Event = IdentityEvent;
    type Outcome = ();
    type Answer = SiteRow;
    type Error = SiteError;

    async fn load(&self, tx: &mut StoreTx, _: &At) -> Result<Option<SiteRow>, SiteError> {
        Ok(read::site(tx, &self.0.site_id).await?)
    }

    fn decide(&self, row: &Option<SiteRow>, _: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        let state = row.as_ref().map(rows::site_state);
        decided(decide_create_site(&self.0, state.as_ref()))
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        _: &Option<SiteRow>,
        events: Vec<IdentityEvent>,
        at: &At,
    ) -> Result<(), SiteError> {
        let versions = vec![(format!("site/{}", self.0.site_id), None)];
        append_decided(tx, events, &self.0.tenant_id, at.now_us, &versions).await?;
        Ok(())
    }

    async fn answer(
        &self,
        tx: &mut StoreTx,
        _: Option<SiteRow>,
        _: (),
        _: &At,
    ) -> Result<SiteRow, SiteError> {
        site_back(tx, &self.0.site_id).await
    }
}

/// `site lease fence`, as the runner drives it.
struct Fence<'a> {
    site_id: &'a str,
    actor: &'a str,
}

#[async_trait]
impl Command for Fence<'_> {
    type State = (SiteRow, Option<SiteLeaseRow>, Option<BootLease>);
    type Event = IdentityEvent;
    type Outcome = LeaseOutcome;
    type Answer = (SiteLeaseRow, i64);
    type Error = SiteError;

    async fn load(&self, tx: &mut StoreTx, _: &At) -> Result<Self::State, SiteError> {
        let site = read::site(tx, self.site_id)
            .await?
            .ok_or_else(|| SiteRefusal::UnknownSite(self.site_id.into()))?;
        let lease_row = read::site_lease(tx, self.site_id).await?;
        let lease = lease_row.as_ref().map(rows::lease_state).transpose()?;
        Ok((site, lease_row, lease))
    }

    fn decide(&self, state: &Self::State, at: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        // A fence starts no holding: the TTL is not used.
        decided(decide_lease(
            LeaseCommand::Fence,
            self.site_id,
            self.actor,
            state.2.as_ref(),
            at.now_us,
            DEFAULT_BOOT_LEASE_TTL_US,
        ))
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        (site, lease_row, _): &Self::State,
        events: Vec<IdentityEvent>,
        at: &At,
    ) -> Result<(), SiteError> {
        let versions = vec![(
            lease_stream(self.site_id),
            lease_row.as_ref().map(|l| l.version),
        )];
        append_decided(tx, events, &site.tenant_id, at.now_us, &versions).await?;
        Ok(())
    }

    async fn answer(
        &self,
        tx: &mut StoreTx,
        _: Self::State,
        _: LeaseOutcome,
        at: &At,
    ) -> Result<(SiteLeaseRow, i64), SiteError> {
        let row = read::site_lease(tx, self.site_id).await?.ok_or_else(|| {
            SiteError::from(IdentityError::Corrupt(format!(
                "the boot lease of site {} has no row",
                self.site_id
            )))
        })?;
        Ok((row, at.now_us))
    }
}

/// `site boot add`, as the runner drives it.
struct AddEntry(AddBootEntry);

#[async_trait]
impl Command for AddEntry {
    type State = (Option<SiteRow>, Vec<BootEntryRow>);
    type Event = IdentityEvent;
    type Outcome = ();
    type Answer = (BootEntryRow, i64);
    type Error = SiteError;

    async fn load(&self, tx: &mut StoreTx, _: &At) -> Result<Self::State, SiteError> {
        let site = read::site(tx, &self.0.site_id).await?;
        let entries = match (&site, normalize_mac(&self.0.mac)) {
            (Some(_), Some(mac)) => read::boot_entries_for_mac(tx, &self.0.site_id, &mac).await?,
            _ => Vec::new(),
        };
        Ok((site, entries))
    }

    fn decide(&self, state: &Self::State, at: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        let (site, entries) = state;
        let states: Vec<_> = entries.iter().map(rows::boot_entry_state).collect();
        let site = site.as_ref().map(rows::site_state);
        decided(decide_add_boot_entry(
            &self.0,
            site.as_ref(),
            &states,
            at.now_us,
        ))
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        (site, _): &Self::State,
        events: Vec<IdentityEvent>,
        at: &At,
    ) -> Result<(), SiteError> {
        let Some(site) = site else {
            return Err(SiteRefusal::UnknownSite(self.0.site_id.clone()).into());
        };
        let versions = vec![(format!("site/{}", site.site_id), Some(site.version))];
        append_decided(tx, events, &site.tenant_id, at.now_us, &versions).await?;
        Ok(())
    }

    async fn answer(
        &self,
        tx: &mut StoreTx,
        _: Self::State,
        _: (),
        at: &At,
    ) -> Result<(BootEntryRow, i64), SiteError> {
        Ok((entry_back(tx, &self.0.entry_id).await?, at.now_us))
    }
}

/// `site boot remove`, as the runner drives it.
struct RemoveEntry<'a> {
    entry_id: &'a str,
    actor: &'a str,
    reason: &'a str,
}

#[async_trait]
impl Command for RemoveEntry<'_> {
    type State = (Option<BootEntryRow>, Option<SiteRow>);
    type Event = IdentityEvent;
    type Outcome = ();
    type Answer = (BootEntryRow, i64);
    type Error = SiteError;

    async fn load(&self, tx: &mut StoreTx, _: &At) -> Result<Self::State, SiteError> {
        let entry = read::boot_entry(tx, self.entry_id).await?;
        let site = match &entry {
            Some(entry) => Some(site_back(tx, &entry.site_id).await?),
            None => None,
        };
        Ok((entry, site))
    }

    fn decide(&self, state: &Self::State, _: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        let entry = state.0.as_ref().map(rows::boot_entry_state);
        decided(decide_remove_boot_entry(
            self.entry_id,
            entry.as_ref(),
            self.actor,
            self.reason,
        ))
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        (_, site): &Self::State,
        events: Vec<IdentityEvent>,
        at: &At,
    ) -> Result<(), SiteError> {
        let Some(site) = site else {
            return Err(SiteRefusal::UnknownBootEntry(self.entry_id.into()).into());
        };
        let versions = vec![(format!("site/{}", site.site_id), Some(site.version))];
        append_decided(tx, events, &site.tenant_id, at.now_us, &versions).await?;
        Ok(())
    }

    async fn answer(
        &self,
        tx: &mut StoreTx,
        _: Self::State,
        _: (),
        at: &At,
    ) -> Result<(BootEntryRow, i64), SiteError> {
        Ok((entry_back(tx, self.entry_id).await?, at.now_us))
    }
}
