//! What the serving configuration sets for sites ([`SiteSettings`]), and how long a discovery
//! token minted for a boot lives.

use std::time::Duration;

/// How long a discovery token minted for a boot lives at most: 15 minutes (µs).
pub const DISCOVERY_TOKEN_TTL_US: i64 = 15 * 60 * 1_000_000;

/// What the serving configuration sets for sites (`[sites]` of `bcctl serve`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SiteSettings {
    /// How long a boot lease holding lasts unless renewed (`boot_lease_ttl`, 60 s by default);
    /// the holder is told to renew every third of it.
    pub boot_lease_ttl: Duration,
}

impl Default for SiteSettings {
    fn default() -> Self {
        SiteSettings {
            boot_lease_ttl: Duration::from_secs(60),
        }
    }
}

impl SiteSettings {
    /// The TTL in µs (at least 1).
    pub fn ttl_us(&self) -> i64 {
        i64::try_from(self.boot_lease_ttl.as_micros())
            .unwrap_or(i64::MAX)
            .max(1)
    }

    /// How often the holder should renew: a third of the TTL, in ms.
    pub fn renew_every_ms(&self) -> i64 {
        (self.ttl_us() / 3_000).max(1)
    }
}
