//! The site agent's calls (`bcd site`, a node of role site, over its mTLS connection): its
//! site's boot lease (ACQUIRE / RENEW / RELEASE) and, while it holds the lease, a discovery
//! token for a machine it is about to boot. The caller is the certificate it presented: byte
//! for byte a `node_certs` row of an active site node, not revoked, unexpired
//! ([`domain::site::check_site_agent`]); its site is the node's.

use std::fmt;
use std::sync::Arc;

use domain::attest::discovery::wire::normalize_mac;
use domain::identity::{
    decide_create_token, lease_stream, unix_us, CreateToken, ExpectBinding, TokenRole,
    TokenTargets,
};
use domain::pki::{NodeIdentity, TokenSecret, TrustDomain};
use domain::site::{
    active_entry_for_mac, check_site_agent, decide_lease, LeaseCommand, SiteAgentId, SiteRefusal,
};
use events::store::{EventStore, StoreTx};
use projections::identity::read as identity_read;

use super::error::SiteError;
use super::settings::{SiteSettings, DISCOVERY_TOKEN_TTL_US};
use super::{read, rows};
use crate::identity::{append_decided, fresh_id, rows as identity_rows, IdentityError};
use crate::Clock;

/// What a site agent asks of its lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseAction {
    /// Take it, or renew it when held live.
    Acquire,
    /// Extend the live holding at the epoch given.
    Renew,
    /// Give it up.
    Release,
}

/// The lease after the call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseAnswer {
    /// Whether the caller holds it now.
    pub held: bool,
    /// The lease's current epoch (0: never held).
    pub epoch: u64,
    /// When the live holding lapses (0: free).
    pub expires_at_us: i64,
    /// The live holder (`None`: free).
    pub holder_node_id: Option<String>,
    /// The server's clock.
    pub server_time_us: i64,
    /// How often the holder should renew.
    pub renew_every_ms: i64,
}

/// A boot entry and the discovery token minted for one boot of it.
#[derive(Clone, PartialEq, Eq)]
pub struct BootTokenAnswer {
    /// The entry.
    pub entry_id: String,
    /// Its MAC.
    pub mac: String,
    /// Its product UUID, if registered.
    pub product_uuid: Option<String>,
    /// Kernel URL.
    pub kernel_url: String,
    /// Initrd URL.
    pub initrd_url: String,
    /// Extra kernel arguments.
    pub kernel_args: String,
    /// The entry's end (µs).
    pub entry_not_after_us: i64,
    /// The token's id (stored; not secret).
    pub token_id: String,
    /// The token's secret: shown to the agent once, never logged, never stored.
    pub token: String,
    /// The token's expiry (µs).
    pub token_expires_at_us: i64,
    /// The server's clock.
    pub server_time_us: i64,
}

impl fmt::Debug for BootTokenAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BootTokenAnswer")
            .field("entry_id", &self.entry_id)
            .field("mac", &self.mac)
            .field("token_id", &self.token_id)
            .field("token", &"<redacted>")
            .field("token_expires_at_us", &self.token_expires_at_us)
            .finish_non_exhaustive()
    }
}

/// The site agent's calls over one store.
#[derive(Clone)]
pub struct SiteAgent {
    store: EventStore,
    clock: Arc<dyn Clock>,
    trust_domain: TrustDomain,
    settings: SiteSettings,
}

impl SiteAgent {
    /// The calls over `store`, on `clock`, for certificates of `trust_domain`.
    pub fn new(
        store: EventStore,
        clock: Arc<dyn Clock>,
        trust_domain: TrustDomain,
        settings: SiteSettings,
    ) -> Self {
        SiteAgent {
            store,
            clock,
            trust_domain,
            settings,
        }
    }

    /// The settings (the lease TTL).
    pub fn settings(&self) -> SiteSettings {
        self.settings
    }

    /// The same calls with other settings.
    pub fn with_settings(mut self, settings: SiteSettings) -> Self {
        self.settings = settings;
        self
    }

    /// The presented leaf's identity: a node certificate of this trust domain.
    fn identity(&self, leaf_der: &[u8]) -> Result<NodeIdentity, SiteError> {
        NodeIdentity::from_leaf_der(leaf_der, &self.trust_domain).map_err(|_| SiteError::NoIdentity)
    }

    /// SiteLease: ACQUIRE, RENEW or RELEASE the boot lease of the caller's site.
    pub async fn lease(
        &self,
        leaf_der: &[u8],
        action: LeaseAction,
        epoch: u64,
    ) -> Result<LeaseAnswer, SiteError> {
        let identity = self.identity(leaf_der)?;
        let now_us = self.clock.now_us();
        let ttl_us = self.settings.ttl_us();
        let cmd = match action {
            LeaseAction::Acquire => LeaseCommand::Acquire,
            LeaseAction::Renew => LeaseCommand::Renew { epoch },
            LeaseAction::Release => LeaseCommand::Release { epoch },
        };
        let outcome = crate::transaction!(&self.store, SiteError, |tx| {
            let agent = agent_of(tx, &identity, leaf_der, now_us).await?;
            let site = read::site(tx, &agent.site_id)
                .await?
                .ok_or_else(|| SiteRefusal::UnknownSite(agent.site_id.clone()))?;
            let lease_row = read::site_lease(tx, &agent.site_id).await?;
            let lease = lease_row.as_ref().map(rows::lease_state).transpose()?;
            let decision = decide_lease(
                cmd,
                &agent.site_id,
                &agent.node_id,
                lease.as_ref(),
                now_us,
                ttl_us,
            )?;
            if !decision.events.is_empty() {
                let versions = vec![(lease_stream(&agent.site_id), lease_row.map(|l| l.version))];
                append_decided(tx, decision.events, &site.tenant_id, now_us, &versions).await?;
            }
            Ok(decision.outcome)
        })?;
        Ok(LeaseAnswer {
            held: outcome.held,
            epoch: outcome.epoch,
            expires_at_us: outcome.expires_at_us,
            holder_node_id: outcome.holder_node_id,
            server_time_us: now_us,
            renew_every_ms: self.settings.renew_every_ms(),
        })
    }

    /// BootToken: the caller, holding its site's boot lease at exactly `lease_epoch`, asks for
    /// the site's active boot entry for `mac` and a fresh single-use discovery token bound to
    /// it (role discovery, the site's tenant, the entry's pool, MAC and product UUID, expiring
    /// at the earlier of 15 minutes and the entry's end), appended as `token.created`.
    pub async fn boot_token(
        &self,
        leaf_der: &[u8],
        mac: &str,
        lease_epoch: u64,
    ) -> Result<BootTokenAnswer, SiteError> {
        let identity = self.identity(leaf_der)?;
        let now = self.clock.now();
        let now_us = unix_us(now);
        let secret = TokenSecret::generate().map_err(|e| IdentityError::Failed(e.to_string()))?;
        let token_id = fresh_id("tok");
        let answer = crate::transaction!(&self.store, SiteError, |tx| {
            let agent = agent_of(tx, &identity, leaf_der, now_us).await?;
            let held = read::site_lease(tx, &agent.site_id)
                .await?
                .as_ref()
                .map(rows::lease_state)
                .transpose()?
                .is_some_and(|l| l.as_fact().held_by(&agent.node_id, lease_epoch, now_us));
            if !held {
                return Err(SiteError::NotLeaseHolder {
                    node_id: agent.node_id.clone(),
                    site_id: agent.site_id.clone(),
                    epoch: lease_epoch,
                });
            }
            let mac = normalize_mac(mac).ok_or_else(|| {
                SiteRefusal::Invalid(format!(
                    "the MAC {mac:?} must be six hex pairs separated by ':' or '-'"
                ))
            })?;
            let site = read::site(tx, &agent.site_id)
                .await?
                .ok_or_else(|| SiteRefusal::UnknownSite(agent.site_id.clone()))?;
            let rows_for_mac = read::boot_entries_for_mac(tx, &agent.site_id, &mac).await?;
            let states: Vec<_> = rows_for_mac.iter().map(rows::boot_entry_state).collect();
            let Some(entry) = active_entry_for_mac(&states, &mac, now_us) else {
                return Err(SiteError::NoBootEntry {
                    site_id: agent.site_id.clone(),
                    mac,
                });
            };
            let Some(row) = rows_for_mac.iter().find(|r| r.entry_id == entry.entry_id) else {
                return Err(IdentityError::Corrupt("the boot entry has no row".into()).into());
            };
            let expires_at_us = now_us
                .saturating_add(DISCOVERY_TOKEN_TTL_US)
                .min(entry.not_after_us);
            let cmd = CreateToken {
                token_id: token_id.clone(),
                tenant_id: site.tenant_id.clone(),
                site_id: site.site_id.clone(),
                pool_id: entry.pool_id.clone(),
                role: TokenRole::Discovery,
                uses: 1,
                expires_at_us,
                secret_hash: secret.hash(),
                expect: ExpectBinding {
                    product_uuid: entry.product_uuid.clone(),
                    mac: Some(entry.mac.clone()),
                },
                reclaim_node_id: None,
                for_node_id: None,
                require_approval: false,
                boot_entry_id: Some(entry.entry_id.clone()),
            };
            let events = decide_create_token(&cmd, &TokenTargets::default(), now)
                .map_err(IdentityError::from)?
                .events;
            append_decided(tx, events, &site.tenant_id, now_us, &[]).await?;
            Ok(BootTokenAnswer {
                entry_id: row.entry_id.clone(),
                mac: row.mac.clone(),
                product_uuid: row.product_uuid.clone(),
                kernel_url: row.kernel_url.clone(),
                initrd_url: row.initrd_url.clone(),
                kernel_args: row.kernel_args.clone(),
                entry_not_after_us: row.not_after_us,
                token_id: token_id.clone(),
                token: String::new(),
                token_expires_at_us: expires_at_us,
                server_time_us: now_us,
            })
        })?;
        Ok(BootTokenAnswer {
            token: secret.expose().to_owned(),
            ..answer
        })
    }
}

/// Checks, inside the transaction, that the presented leaf is a site agent's.
async fn agent_of(
    tx: &mut StoreTx,
    identity: &NodeIdentity,
    leaf_der: &[u8],
    now_us: i64,
) -> Result<SiteAgentId, SiteError> {
    let serial = identity.serial.to_hex();
    let cert = identity_read::cert_by_serial(tx, &serial).await?;
    let cert = cert.as_ref().map(identity_rows::cert_state).transpose()?;
    let node = identity_read::node_by_id(tx, identity.spiffe_id.node.as_str()).await?;
    let node = node.as_ref().map(identity_rows::node_state).transpose()?;
    check_site_agent(identity, leaf_der, cert.as_ref(), node.as_ref(), now_us)
        .map_err(SiteError::NotSiteAgent)
}
