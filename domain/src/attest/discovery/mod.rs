//! The `discovery` attestor (spec 000 "discovery"): a PXE-booted ramdisk joins on two vouchers,
//! the single-use discovery token its iPXE script carried and its site's boot server's signed
//! statement that it just served that MAC, signed while it held the site's boot lease.
//!
//! | module | job |
//! | --- | --- |
//! | [`wire`] | the `SignedDiscoveryAssertion`, its signing input, the kernel command line |

pub mod wire;

pub use wire::{
    normalize_mac, AssertionStatement, AssertionWireError, DiscoveryAssertion,
    SignedDiscoveryAssertion, CMDLINE_ASSERTION, CMDLINE_TOKEN, DISCOVERY_ATTESTOR,
    MAX_ASSERTION_AGE_MS,
};
