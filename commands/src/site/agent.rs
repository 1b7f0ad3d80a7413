//! The site agent's calls (`bcd site`, a node of role site, over its mTLS connection): its
//! site's boot lease (ACQUIRE / RENEW / RELEASE) and, while it holds the lease, a discovery
//! token for a machine it is about to boot. The caller is the certificate it presented: byte
//! for byte a `node_certs` row of an active site node, not revoked, unexpired
//! ([`domain::site::check_site_agent`]); its site is the node's. Each call carries the agent's
//! proof by its node key ([`domain::site::check_site_call`]), judged at the deciding clock, so a
//! relaying gateway cannot call in its name with only its certificate.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use domain::attest::discovery::wire::normalize_mac;
use domain::decision::Refused;
use domain::identity::{lease_stream, IdentityEvent};
use domain::pki::{NodeIdentity, TokenHash, TokenSecret, TrustDomain};
use domain::site::{
    check_site_agent, check_site_call, decide_boot_token, decide_lease, BootLease, BootTokenAsk,
    BootTokenPlan, BootTokenRefusal, BootTokenState, LeaseCommand, LeaseOutcome, SiteAgentId,
    SiteCall, SiteCallProof, SiteRefusal,
};
use events::store::{EventStore, StoreTx};
use projections::identity::read as identity_read;
use rand_core::CryptoRngCore;

use super::error::SiteError;
use super::read::{BootEntryRow, SiteLeaseRow, SiteRow};
use super::settings::{SiteSettings, DISCOVERY_TOKEN_TTL_US};
use super::{read, rows};
use crate::identity::{append_decided, fresh_id, rows as identity_rows, IdentityError};
use crate::run::{decided, run, At, Command, Decided};
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

    /// SiteLease: ACQUIRE, RENEW or RELEASE the boot lease of the caller's site, with the
    /// caller's `proof` of the call.
    pub async fn lease(
        &self,
        leaf_der: &[u8],
        action: LeaseAction,
        epoch: u64,
        proof: SiteCallProof<'_>,
    ) -> Result<LeaseAnswer, SiteError> {
        let identity = self.identity(leaf_der)?;
        let (cmd, call) = match action {
            LeaseAction::Acquire => (LeaseCommand::Acquire, SiteCall::LeaseAcquire),
            LeaseAction::Renew => (
                LeaseCommand::Renew { epoch },
                SiteCall::LeaseRenew { epoch },
            ),
            LeaseAction::Release => (
                LeaseCommand::Release { epoch },
                SiteCall::LeaseRelease { epoch },
            ),
        };
        let lease = Lease {
            agent: Agent {
                identity: &identity,
                leaf_der,
                call,
                proof,
            },
            cmd,
            ttl_us: self.settings.ttl_us(),
        };
        let (outcome, now_us) = run(&self.store, self.clock.as_ref(), &lease).await?;
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
    /// at the earlier of 15 minutes and the entry's end), appended as `token.created`; `proof`
    /// is the caller's proof of the call.
    pub async fn boot_token(
        &self,
        leaf_der: &[u8],
        mac: &str,
        lease_epoch: u64,
        proof: SiteCallProof<'_>,
    ) -> Result<BootTokenAnswer, SiteError> {
        let identity = self.identity(leaf_der)?;
        let secret = TokenSecret::generate().map_err(|e| IdentityError::Failed(e.to_string()))?;
        let token = BootToken {
            agent: Agent {
                identity: &identity,
                leaf_der,
                call: SiteCall::boot_token(mac, lease_epoch),
                proof,
            },
            mac,
            lease_epoch,
            token_id: fresh_id("tok"),
            secret_hash: secret.hash(),
        };
        let answer = run(&self.store, self.clock.as_ref(), &token).await?;
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

/// The caller of a site agent's call: the presented leaf and its identity, what it asks and its
/// proof of asking.
#[derive(Clone)]
struct Agent<'a> {
    identity: &'a NodeIdentity,
    leaf_der: &'a [u8],
    call: SiteCall,
    proof: SiteCallProof<'a>,
}

impl Agent<'_> {
    /// The site agent, checked inside the transaction, then its proof of the call at the
    /// deciding clock.
    async fn check(&self, tx: &mut StoreTx, at: &At) -> Result<SiteAgentId, SiteError> {
        let agent = agent_of(tx, self.identity, self.leaf_der, at.now_us).await?;
        check_site_call(self.identity, self.call.clone(), self.proof, at.now)
            .map_err(SiteError::CallProof)?;
        Ok(agent)
    }
}

/// SiteLease, as the runner drives it.
struct Lease<'a> {
    agent: Agent<'a>,
    cmd: LeaseCommand,
    ttl_us: i64,
}

/// What a lease call reads: the agent, its site, the lease row and the lease.
struct LeaseFacts {
    agent: SiteAgentId,
    site: SiteRow,
    lease_row: Option<SiteLeaseRow>,
    lease: Option<BootLease>,
}

#[async_trait]
impl Command for Lease<'_> {
    type State = LeaseFacts;
    type Event = IdentityEvent;
    type Outcome = LeaseOutcome;
    type Answer = (LeaseOutcome, i64);
    type Error = SiteError;

    async fn load(&self, tx: &mut StoreTx, at: &At) -> Result<LeaseFacts, SiteError> {
        let agent = self.agent.check(tx, at).await?;
        let site = read::site(tx, &agent.site_id)
            .await?
            .ok_or_else(|| SiteRefusal::UnknownSite(agent.site_id.clone()))?;
        let lease_row = read::site_lease(tx, &agent.site_id).await?;
        let lease = lease_row.as_ref().map(rows::lease_state).transpose()?;
        Ok(LeaseFacts {
            agent,
            site,
            lease_row,
            lease,
        })
    }

    fn decide(&self, facts: &LeaseFacts, at: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        decided(decide_lease(
            self.cmd,
            &facts.agent.site_id,
            &facts.agent.node_id,
            facts.lease.as_ref(),
            at.now_us,
            self.ttl_us,
        ))
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        facts: &LeaseFacts,
        events: Vec<IdentityEvent>,
        at: &At,
    ) -> Result<(), SiteError> {
        let version = facts.lease_row.as_ref().map(|l| l.version);
        let versions = vec![(lease_stream(&facts.agent.site_id), version)];
        append_decided(tx, events, &facts.site.tenant_id, at.now_us, &versions).await?;
        Ok(())
    }

    async fn answer(
        &self,
        _: &mut StoreTx,
        _: LeaseFacts,
        outcome: LeaseOutcome,
        at: &At,
    ) -> Result<(LeaseOutcome, i64), SiteError> {
        Ok((outcome, at.now_us))
    }
}

/// BootToken, as the runner drives it.
struct BootToken<'a> {
    agent: Agent<'a>,
    mac: &'a str,
    lease_epoch: u64,
    token_id: String,
    secret_hash: TokenHash,
}

/// What a BootToken reads: the agent, the domain's state, and the entries' rows (answered).
struct BootTokenFacts {
    agent: SiteAgentId,
    state: BootTokenState,
    entry_rows: Vec<BootEntryRow>,
}

#[async_trait]
impl Command for BootToken<'_> {
    type State = BootTokenFacts;
    type Event = IdentityEvent;
    type Outcome = BootTokenPlan;
    type Answer = BootTokenAnswer;
    type Error = SiteError;

    async fn load(&self, tx: &mut StoreTx, at: &At) -> Result<BootTokenFacts, SiteError> {
        let agent = self.agent.check(tx, at).await?;
        let lease = read::site_lease(tx, &agent.site_id).await?;
        let site = read::site(tx, &agent.site_id).await?;
        let entry_rows = match normalize_mac(self.mac) {
            Some(mac) => read::boot_entries_for_mac(tx, &agent.site_id, &mac).await?,
            None => Vec::new(),
        };
        let state = BootTokenState {
            lease: lease.as_ref().map(rows::lease_state).transpose()?,
            site: site.as_ref().map(rows::site_state),
            entries: entry_rows.iter().map(rows::boot_entry_state).collect(),
        };
        Ok(BootTokenFacts {
            agent,
            state,
            entry_rows,
        })
    }

    fn decide(&self, facts: &BootTokenFacts, at: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        let ask = BootTokenAsk {
            agent_node_id: &facts.agent.node_id,
            site_id: &facts.agent.site_id,
            lease_epoch: self.lease_epoch,
            mac: self.mac,
            token_id: &self.token_id,
            secret_hash: self.secret_hash,
            token_ttl_us: DISCOVERY_TOKEN_TTL_US,
        };
        decide_boot_token(&ask, &facts.state, at.now).map_err(|refusal| {
            Refused::from(match refusal {
                BootTokenRefusal::NotLeaseHolder {
                    node_id,
                    site_id,
                    epoch,
                } => SiteError::NotLeaseHolder {
                    node_id,
                    site_id,
                    epoch,
                },
                BootTokenRefusal::BadMac(mac) => SiteError::Refused(SiteRefusal::Invalid(format!(
                    "the MAC {mac:?} must be six hex pairs separated by ':' or '-'"
                ))),
                BootTokenRefusal::UnknownSite(site) => {
                    SiteError::Refused(SiteRefusal::UnknownSite(site))
                }
                BootTokenRefusal::NoBootEntry { site_id, mac } => {
                    SiteError::NoBootEntry { site_id, mac }
                }
                BootTokenRefusal::Token(r) => SiteError::Identity(IdentityError::from(r)),
            })
        })
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        facts: &BootTokenFacts,
        events: Vec<IdentityEvent>,
        at: &At,
    ) -> Result<(), SiteError> {
        let tenant = match &facts.state.site {
            Some(site) => site.tenant_id.as_str(),
            None => return Err(SiteRefusal::UnknownSite(facts.agent.site_id.clone()).into()),
        };
        append_decided(tx, events, tenant, at.now_us, &[]).await?;
        Ok(())
    }

    async fn answer(
        &self,
        _: &mut StoreTx,
        facts: BootTokenFacts,
        plan: BootTokenPlan,
        at: &At,
    ) -> Result<BootTokenAnswer, SiteError> {
        let Some(row) = facts
            .entry_rows
            .into_iter()
            .find(|r| r.entry_id == plan.entry_id)
        else {
            return Err(IdentityError::Corrupt("the boot entry has no row".into()).into());
        };
        Ok(BootTokenAnswer {
            entry_id: row.entry_id,
            mac: row.mac,
            product_uuid: row.product_uuid,
            kernel_url: row.kernel_url,
            initrd_url: row.initrd_url,
            kernel_args: row.kernel_args,
            entry_not_after_us: row.not_after_us,
            token_id: self.token_id.clone(),
            token: String::new(),
            token_expires_at_us: plan.expires_at_us,
            server_time_us: at.now_us,
        })
    }
}
