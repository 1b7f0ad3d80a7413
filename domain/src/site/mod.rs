//! Sites, their boot entries and their boot lease (issue 20; spec 000 "discovery", "Both halves
//! in bcd"). A site is a stream (`site/<id>`) an operator creates; its boot entries are the
//! machines it commissions (one active entry per MAC, the site stream's version the race guard);
//! its boot lease (`lease/site:<id>:boot`) is held by one site agent at a time, with an epoch that
//! rises at every change of holder and after every lapse. Every decision here is pure: the
//! shell passes the state it read, the clock and the lease TTL.
//!
//! | module | decides |
//! | --- | --- |
//! | [`sites`] | `site create` |
//! | [`agent`] | whether a presented certificate is a site agent's |
//! | [`call_proof`] | whether a SiteLease or BootToken carries the agent's proof |
//! | [`boot`] | `site boot add / remove` |
//! | [`boot_token`] | a site agent's BootToken: the entry for a MAC and its discovery token |
//! | [`lease`] | a site agent's ACQUIRE / RENEW / RELEASE and an operator's fence |

pub mod agent;
pub mod boot;
pub mod boot_token;
pub mod call_proof;
pub mod lease;
mod refusal;
pub mod sites;

pub use agent::{check_site_agent, AgentRefusal, SiteAgentId};
pub use boot::{
    active_entry_for_mac, decide_add_boot_entry, decide_remove_boot_entry, evolve_boot_entry,
    AddBootEntry, BOOT_ENTRY_DEFAULT_TTL_US, BOOT_ENTRY_ID_PREFIX, BOOT_ENTRY_MAX_TTL_US,
};
pub use boot_token::{
    decide_boot_token, BootTokenAsk, BootTokenPlan, BootTokenRefusal, BootTokenState,
};
pub use call_proof::{
    check_site_call, SiteCall, SiteCallProof, SiteCallProofRefusal, SiteCallStatement,
};
pub use lease::{
    decide_lease, evolve_lease, BootLease, LeaseCommand, LeaseOutcome, DEFAULT_BOOT_LEASE_TTL_US,
};
pub(crate) use refusal::{check_actor, check_id, check_text};
pub use refusal::{SiteRefusal, MAX_SITE_TEXT};
pub use sites::{check_site_id, decide_create_site, evolve_site, CreateSite, SiteState};
