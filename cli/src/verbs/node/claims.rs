//! What `node list` and `node show` show of a node's claims (issue 45: what the machine said
//! about itself at its last join: hostname, serials, GPU UUIDs, bcd version, boot id), and
//! `node list`'s filters on them. Claims are shown as sent; they prove nothing.
//!
//! Takes only [`NodeClaimsView`]: the parent module's types stay out of here.

use clap::Args;
use commands::identity::NodeClaimsView;

/// `node list`'s filters on the claims, each an exact match (all given must hold).
#[derive(Args, Debug, Default, Clone)]
pub struct ClaimFilters {
    /// Only nodes whose claimed hostname is exactly this.
    #[arg(long)]
    pub hostname: Option<String>,
    /// Only nodes claiming this serial (product, board or chassis).
    #[arg(long)]
    pub serial: Option<String>,
    /// Only nodes whose last join was from this bcd version.
    #[arg(long)]
    pub bcd_version: Option<String>,
}

impl ClaimFilters {
    /// Whether a node with `claims` passes every filter given.
    pub fn admits(&self, claims: &NodeClaimsView) -> bool {
        let same = |want: &Option<String>, have: &Option<String>| {
            want.as_ref().is_none_or(|w| have.as_deref() == Some(w))
        };
        same(&self.hostname, &claims.hostname)
            && same(&self.bcd_version, &claims.bcd_version)
            && self.serial.as_ref().is_none_or(|s| claims.has_serial(s))
    }
}

/// A claim as a table cell: `-` when not sent.
pub fn cell(value: &Option<String>) -> String {
    value.clone().unwrap_or_else(|| "-".into())
}

/// The lines `node show` prints under the node's status.
pub fn print_claims(claims: &NodeClaimsView) {
    crate::outln!("claims (as the node sent them at its last join; never verified):");
    let gpus = if claims.gpu_uuids.is_empty() {
        "-".to_owned()
    } else {
        claims.gpu_uuids.join(",")
    };
    for (name, value) in [
        ("hostname", cell(&claims.hostname)),
        ("product serial", cell(&claims.product_serial)),
        ("board serial", cell(&claims.board_serial)),
        ("chassis serial", cell(&claims.chassis_serial)),
        ("gpu uuids", gpus),
        ("bcd version", cell(&claims.bcd_version)),
        ("boot id", cell(&claims.boot_id)),
    ] {
        crate::outln!("  {name:<15} {value}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(host: &str, serial: &str, version: &str) -> NodeClaimsView {
        NodeClaimsView {
            hostname: Some(host.into()),
            product_serial: Some(serial.into()),
            board_serial: Some(format!("B{serial}")),
            bcd_version: Some(version.into()),
            ..Default::default()
        }
    }

    #[test]
    fn each_filter_is_an_exact_match_and_all_must_hold() {
        let n = claims("web-1", "S1", "0.1.0");
        assert!(ClaimFilters::default().admits(&n));
        let by_host = ClaimFilters {
            hostname: Some("web-1".into()),
            ..Default::default()
        };
        assert!(by_host.admits(&n));
        assert!(!by_host.admits(&claims("web-10", "S1", "0.1.0")));
        let by_board = ClaimFilters {
            serial: Some("BS1".into()),
            ..Default::default()
        };
        assert!(by_board.admits(&n));
        let both = ClaimFilters {
            hostname: Some("web-1".into()),
            bcd_version: Some("0.2.0".into()),
            ..Default::default()
        };
        assert!(!both.admits(&n));
        assert!(!by_host.admits(&NodeClaimsView::default()));
    }
}
