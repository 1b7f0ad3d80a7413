//! The `discovery` attestor (spec 000 "discovery"): a PXE-booted ramdisk joins on two vouchers,
//! the single-use discovery token its iPXE script carried and its site's boot server's signed
//! statement that it just served that MAC, signed while it held the site's boot lease.
//!
//! | module | job |
//! | --- | --- |
//! | [`wire`] | the `SignedDiscoveryAssertion`, its signing input, the kernel command line |
//! | [`refusal`] | why a discovery join was refused (`discovery:<reason>`) |
//! | [`config`] | `[attestors.discovery]`: approval, allowed kinds, certificate lifetime |
//! | [`factory`] | how it registers: its [`FACTORY`] |
//! | [`attestor`] | the [`DiscoveryAttestor`] itself |

pub mod attestor;
pub mod config;
pub mod factory;
pub mod refusal;
pub mod wire;

pub use attestor::{
    assertion_subject, assertion_valid_until_ms, DiscoveryAttestor, MAX_CLOCK_AHEAD_MS,
};
pub use config::{
    DiscoveryApproval, DiscoveryConfig, DiscoveryConfigError, DEFAULT_ALLOWED_KINDS, MAX_CERT_TTL,
};
pub use factory::FACTORY;
pub use refusal::DiscoveryRefusal;
pub use wire::{
    normalize_mac, AssertionStatement, AssertionWireError, DiscoveryAssertion,
    SignedDiscoveryAssertion, CMDLINE_ASSERTION, CMDLINE_TOKEN, DISCOVERY_ATTESTOR,
    MAX_ASSERTION_AGE_MS,
};
