//! The hardware claims `bcd join` sends (spec 002 "What the join does", step 3): the SMBIOS
//! product UUID and the permanent MACs of the machine's physical network interfaces, read from
//! sysfs.
//!
//! They are self-asserted. The control plane records only their SHA-256 digests and compares them
//! with a token's expect binding (`bcctl token create --expect-product-uuid / --expect-mac`), so a
//! token bound to one machine is refused on another. What cannot be read (no DMI table in a
//! container, a product UUID readable only by root) is left out rather than guessed.

use std::path::Path;

/// What this machine claims about its hardware.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HardwareClaims {
    /// The SMBIOS product UUID, lower case, when readable.
    pub product_uuid: Option<String>,
    /// The permanent MACs of the physical Ethernet interfaces, lower case, sorted, distinct.
    pub macs: Vec<String>,
}

/// Where the claims are read from: `/sys`, or `BCD_SYSFS_ROOT` when set (a directory laid out
/// like sysfs, for containers and tests; the claims are self-asserted either way).
pub fn sysfs_root() -> std::path::PathBuf {
    std::env::var_os(SYSFS_ROOT_ENV)
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("/sys"))
}

/// The environment variable naming another sysfs root ([`sysfs_root`]).
pub const SYSFS_ROOT_ENV: &str = "BCD_SYSFS_ROOT";

/// Reads the claims from the sysfs mounted at `sys` (`/sys` on a real machine).
pub fn read_claims(sys: &Path) -> HardwareClaims {
    read_claims_explained(sys).claims
}

/// Why the product UUID is not among the claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UuidMissing {
    /// No `class/dmi/id/product_uuid` (no DMI table: a container, some VMs and boards).
    NotFound,
    /// The file exists but this process may not read it (the kernel makes it 0400 root).
    PermissionDenied,
    /// Another read error, as the system gave it.
    Unreadable(String),
    /// It reads, but not as a UUID, or as the all-zeros / all-ones placeholder.
    NotAUuid,
}

/// The claims, and why the product UUID is missing when it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimsRead {
    /// What was read.
    pub claims: HardwareClaims,
    /// `Some` exactly when `claims.product_uuid` is `None`.
    pub uuid_missing: Option<UuidMissing>,
}

/// The path of the product UUID under the sysfs at `sys`.
pub fn product_uuid_path(sys: &Path) -> std::path::PathBuf {
    sys.join("class/dmi/id/product_uuid")
}

/// [`read_claims`], saying why the product UUID is left out when it is.
pub fn read_claims_explained(sys: &Path) -> ClaimsRead {
    let (product_uuid, uuid_missing) = match product_uuid(sys) {
        Ok(uuid) => (Some(uuid), None),
        Err(why) => (None, Some(why)),
    };
    ClaimsRead {
        claims: HardwareClaims {
            product_uuid,
            macs: permanent_macs(sys),
        },
        uuid_missing,
    }
}

fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

/// `class/dmi/id/product_uuid`, when it reads as a UUID (8-4-4-4-12 hex digits).
fn product_uuid(sys: &Path) -> Result<String, UuidMissing> {
    let text = match std::fs::read_to_string(product_uuid_path(sys)) {
        Ok(text) => text.trim().to_ascii_lowercase(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(UuidMissing::NotFound),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Err(UuidMissing::PermissionDenied)
        }
        Err(e) => return Err(UuidMissing::Unreadable(e.to_string())),
    };
    let groups: Vec<&str> = text.split('-').collect();
    let shape_ok = groups.iter().map(|g| g.len()).eq([8, 4, 4, 4, 12])
        && groups
            .iter()
            .all(|g| g.bytes().all(|b| b.is_ascii_hexdigit()));
    // All zeros (or all ones) is what firmware writes when it has no UUID to give.
    let placeholder = text.bytes().all(|b| b == b'0' || b == b'-')
        || text.bytes().all(|b| b == b'f' || b == b'-');
    if shape_ok && !placeholder {
        Ok(text)
    } else {
        Err(UuidMissing::NotAUuid)
    }
}

/// The MAC of every interface in `class/net` that is backed by a device (not virtual), is
/// Ethernet (`type` 1) and whose address is the permanent one (`addr_assign_type` 0).
fn permanent_macs(sys: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(sys.join("class/net")) else {
        return Vec::new();
    };
    let mut macs: Vec<String> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|iface| iface.join("device").exists())
        .filter(|iface| read_trimmed(&iface.join("type")).as_deref() == Some("1"))
        .filter(|iface| {
            // Kernels without the attribute report nothing: the address is taken as it is.
            read_trimmed(&iface.join("addr_assign_type")).is_none_or(|t| t == "0")
        })
        .filter_map(|iface| read_trimmed(&iface.join("address")))
        .map(|mac| mac.to_ascii_lowercase())
        .filter(|mac| is_unicast_mac(mac))
        .collect();
    macs.sort();
    macs.dedup();
    macs
}

/// Six colon-separated octets, not all zero, not multicast or broadcast.
fn is_unicast_mac(mac: &str) -> bool {
    let octets: Option<Vec<u8>> = mac
        .split(':')
        .map(|o| {
            (o.len() == 2)
                .then(|| u8::from_str_radix(o, 16).ok())
                .flatten()
        })
        .collect();
    octets.is_some_and(|o| o.len() == 6 && o.iter().any(|&b| b != 0) && o[0] & 1 == 0)
}

/// The warning of a join that cannot read the product UUID for want of privilege, else `None`.
pub fn uuid_warning(sys: &Path, missing: Option<&UuidMissing>) -> Option<String> {
    if missing != Some(&UuidMissing::PermissionDenied) {
        return None;
    }
    let uid = crate::helper::privilege::euid();
    Some(format!(
        "bcd join: cannot read the product UUID ({}): permission denied (it is readable by root \
         only, and this join runs as {} (uid {uid})); it is left out of the claims, so a token \
         bound with --expect-product-uuid refuses this machine: run bcd join as root",
        product_uuid_path(sys).display(),
        crate::helper::privilege::user_name(uid),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iface(sys: &Path, name: &str, address: &str, kind: &str, assign: &str, device: bool) {
        let dir = sys.join("class/net").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("address"), format!("{address}\n")).unwrap();
        std::fs::write(dir.join("type"), format!("{kind}\n")).unwrap();
        std::fs::write(dir.join("addr_assign_type"), format!("{assign}\n")).unwrap();
        if device {
            std::fs::create_dir_all(dir.join("device")).unwrap();
        }
    }

    #[test]
    fn reads_the_product_uuid_and_the_permanent_macs_of_physical_interfaces() {
        let sys = tempfile::tempdir().unwrap();
        let sys = sys.path();
        std::fs::create_dir_all(sys.join("class/dmi/id")).unwrap();
        std::fs::write(
            sys.join("class/dmi/id/product_uuid"),
            "4C4C4544-0042-3510-8052-B7C04F4E4E01\n",
        )
        .unwrap();
        iface(sys, "eth1", "AA:BB:CC:DD:EE:02", "1", "0", true);
        iface(sys, "eth0", "aa:bb:cc:dd:ee:01", "1", "0", true);
        iface(sys, "eth2", "aa:bb:cc:dd:ee:01", "1", "0", true); // the same MAC once
        iface(sys, "lo", "00:00:00:00:00:00", "772", "0", false);
        iface(sys, "veth0", "8e:fe:46:9a:4a:7c", "1", "1", false); // virtual, random
        iface(sys, "wlan0", "02:11:22:33:44:55", "1", "3", true); // set by userspace
        iface(sys, "ib0", "80:00:00:48:fe:80", "32", "0", true); // not Ethernet
        iface(sys, "eth3", "01:00:5e:00:00:01", "1", "0", true); // multicast
        assert_eq!(
            read_claims(sys),
            HardwareClaims {
                product_uuid: Some("4c4c4544-0042-3510-8052-b7c04f4e4e01".into()),
                macs: vec!["aa:bb:cc:dd:ee:01".into(), "aa:bb:cc:dd:ee:02".into()],
            }
        );
    }

    #[test]
    fn leaves_out_what_is_missing_or_a_placeholder() {
        let sys = tempfile::tempdir().unwrap();
        assert_eq!(read_claims(sys.path()), HardwareClaims::default());
        assert_eq!(
            read_claims_explained(sys.path()).uuid_missing,
            Some(UuidMissing::NotFound)
        );
        std::fs::create_dir_all(sys.path().join("class/dmi/id")).unwrap();
        for text in [
            "00000000-0000-0000-0000-000000000000",
            "FFFFFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF",
            "Not Settable",
            "4c4c4544-0042-3510-8052",
        ] {
            std::fs::write(sys.path().join("class/dmi/id/product_uuid"), text).unwrap();
            assert_eq!(read_claims(sys.path()).product_uuid, None, "{text}");
            assert_eq!(
                read_claims_explained(sys.path()).uuid_missing,
                Some(UuidMissing::NotAUuid),
                "{text}"
            );
        }
    }
}
