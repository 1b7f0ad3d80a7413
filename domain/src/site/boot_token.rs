//! A site agent's BootToken (issue 20): the agent holding its site's boot lease at exactly the
//! epoch it names asks for the site's active boot entry for a MAC and a fresh single-use
//! discovery token bound to it (role discovery, the site's tenant, the entry's pool, MAC and
//! product UUID, expiring at the earlier of the token TTL and the entry's end).

use time::OffsetDateTime;

use super::lease::BootLease;
use super::sites::SiteState;
use crate::attest::contract::BootEntryState;
use crate::attest::discovery::wire::normalize_mac;
use crate::identity::{
    decide_create_token, unix_us, AdminRefusal, CreateToken, Decision, ExpectBinding, TokenRole,
    TokenTargets,
};
use crate::pki::TokenHash;

/// What the agent asks, with the token's id and secret hash the shell drew.
#[derive(Clone)]
pub struct BootTokenAsk<'a> {
    /// The agent (its node id) and its site.
    pub agent_node_id: &'a str,
    pub site_id: &'a str,
    /// The lease epoch the agent names.
    pub lease_epoch: u64,
    /// The MAC as given (any case, ':' or '-').
    pub mac: &'a str,
    /// The new token's id and the SHA-256 of its secret.
    pub token_id: &'a str,
    pub secret_hash: TokenHash,
    /// How long a discovery token lives at most, µs.
    pub token_ttl_us: i64,
}

/// What the shell read: the site's boot lease and the site, and the site's entries for the
/// MAC (normalized).
#[derive(Debug, Clone, Default)]
pub struct BootTokenState {
    pub lease: Option<BootLease>,
    pub site: Option<SiteState>,
    pub entries: Vec<BootEntryState>,
}

/// What a BootToken decided: the entry the token is for and when the token ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootTokenPlan {
    pub entry_id: String,
    pub expires_at_us: i64,
}

/// Why a BootToken is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BootTokenRefusal {
    /// The agent does not hold the site's boot lease at the epoch it named.
    NotLeaseHolder {
        node_id: String,
        site_id: String,
        epoch: u64,
    },
    /// The MAC does not read as one.
    BadMac(String),
    /// The site is gone.
    UnknownSite(String),
    /// The site has no active boot entry for the MAC (normalized).
    NoBootEntry { site_id: String, mac: String },
    /// The token itself is refused.
    Token(AdminRefusal),
}

/// Decides a BootToken: the lease, the MAC, the site, its active entry for the MAC, then the
/// discovery token's `token.created`.
pub fn decide_boot_token(
    ask: &BootTokenAsk<'_>,
    state: &BootTokenState,
    now: OffsetDateTime,
) -> Result<Decision<BootTokenPlan>, BootTokenRefusal> {
    let now_us = unix_us(now);
    let held = state.lease.as_ref().is_some_and(|l| {
        l.as_fact()
            .held_by(ask.agent_node_id, ask.lease_epoch, now_us)
    });
    if !held {
        return Err(BootTokenRefusal::NotLeaseHolder {
            node_id: ask.agent_node_id.to_string(),
            site_id: ask.site_id.to_string(),
            epoch: ask.lease_epoch,
        });
    }
    let mac = normalize_mac(ask.mac).ok_or_else(|| BootTokenRefusal::BadMac(ask.mac.into()))?;
    let site = state
        .site
        .as_ref()
        .ok_or_else(|| BootTokenRefusal::UnknownSite(ask.site_id.into()))?;
    let Some(entry) = super::active_entry_for_mac(&state.entries, &mac, now_us) else {
        return Err(BootTokenRefusal::NoBootEntry {
            site_id: ask.site_id.to_string(),
            mac,
        });
    };
    let expires_at_us = now_us
        .saturating_add(ask.token_ttl_us)
        .min(entry.not_after_us);
    let cmd = CreateToken {
        token_id: ask.token_id.to_string(),
        tenant_id: site.tenant_id.clone(),
        site_id: site.site_id.clone(),
        pool_id: entry.pool_id.clone(),
        role: TokenRole::Discovery,
        uses: 1,
        expires_at_us,
        secret_hash: ask.secret_hash,
        expect: ExpectBinding {
            product_uuid: entry.product_uuid.clone(),
            mac: Some(entry.mac.clone()),
        },
        reclaim_node_id: None,
        for_node_id: None,
        require_approval: false,
        boot_entry_id: Some(entry.entry_id.clone()),
    };
    let created = decide_create_token(&cmd, &TokenTargets::default(), now)
        .map_err(BootTokenRefusal::Token)?;
    Ok(created.map_outcome(|()| BootTokenPlan {
        entry_id: entry.entry_id.clone(),
        expires_at_us,
    }))
}
