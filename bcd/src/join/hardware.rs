//! The hardware claims `bcd join` sends (spec 002 "What the join does", step 3): the SMBIOS
//! product UUID and the permanent MACs of the machine's physical network interfaces, read from
//! sysfs; and what lets an operator recognise the machine (issue 45): the hostname, the SMBIOS
//! product, board and chassis serials, the NVIDIA GPU UUIDs and the boot id.
//!
//! They are self-asserted. The control plane records only the SHA-256 digests of the product
//! UUID and MACs and compares them with a token's expect binding (`bcctl token create
//! --expect-product-uuid / --expect-mac`), so a token bound to one machine is refused on another.
//! The rest it records as sent, for operators to read, and never compares. What cannot be read
//! (no DMI table in a container, a value readable only by root, no NVIDIA driver) is left out
//! rather than guessed, and so is a value the control plane would refuse to record
//! ([`domain::identity::claim_text_ok`]): a join never fails for a claim.
//!
//! GPU UUIDs are read only where that is cheap: the NVIDIA driver's
//! `/proc/driver/nvidia/gpus/*/information` (`GPU UUID:` lines). Other vendors' GPUs are not
//! claimed (a documented gap: no file lists them without a vendor library).

use std::path::Path;

/// What this machine claims about its hardware.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HardwareClaims {
    /// The SMBIOS product UUID, lower case, when readable.
    pub product_uuid: Option<String>,
    /// The permanent MACs of the physical Ethernet interfaces, lower case, sorted, distinct.
    pub macs: Vec<String>,
    /// The kernel's hostname (`sys/kernel/hostname` under procfs); empty when unreadable.
    pub hostname: String,
    /// `class/dmi/id/product_serial`, `board_serial`, `chassis_serial` (root only on most
    /// kernels); empty when unreadable or a placeholder.
    pub product_serial: String,
    /// See `product_serial`.
    pub board_serial: String,
    /// See `product_serial`.
    pub chassis_serial: String,
    /// NVIDIA GPU UUIDs (`GPU-...`), sorted.
    pub gpu_uuids: Vec<String>,
    /// `sys/kernel/random/boot_id` under procfs: new at every boot.
    pub boot_id: String,
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

/// Where the hostname, boot id and GPU UUIDs are read from: `/proc`, or `BCD_PROCFS_ROOT` when
/// set (for tests, like [`SYSFS_ROOT_ENV`]).
pub fn procfs_root() -> std::path::PathBuf {
    std::env::var_os(PROCFS_ROOT_ENV)
        .filter(|v| !v.is_empty())
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::PathBuf::from("/proc"))
}

/// The environment variable naming another procfs root ([`procfs_root`]).
pub const PROCFS_ROOT_ENV: &str = "BCD_PROCFS_ROOT";

/// Reads the claims from the sysfs mounted at `sys` (`/sys` on a real machine) and the procfs
/// at [`procfs_root`].
pub fn read_claims(sys: &Path) -> HardwareClaims {
    read_claims_explained(sys).claims
}

/// [`read_claims`] with the procfs at `proc`.
pub fn read_claims_at(sys: &Path, proc: &Path) -> HardwareClaims {
    read_claims_explained_at(sys, proc).claims
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
    read_claims_explained_at(sys, &procfs_root())
}

/// [`read_claims_explained`] with the procfs at `proc`.
pub fn read_claims_explained_at(sys: &Path, proc: &Path) -> ClaimsRead {
    let (product_uuid, uuid_missing) = match product_uuid(sys) {
        Ok(uuid) => (Some(uuid), None),
        Err(why) => (None, Some(why)),
    };
    let dmi = |name: &str| claim_text(&sys.join("class/dmi/id").join(name));
    ClaimsRead {
        claims: HardwareClaims {
            product_uuid,
            macs: permanent_macs(sys),
            hostname: claim_text(&proc.join("sys/kernel/hostname")),
            product_serial: dmi("product_serial"),
            board_serial: dmi("board_serial"),
            chassis_serial: dmi("chassis_serial"),
            gpu_uuids: nvidia_gpu_uuids(proc),
            boot_id: claim_text(&proc.join("sys/kernel/random/boot_id")),
        },
        uuid_missing,
    }
}

/// This boot's id as a session's Hello reports it (decision 0105): the join's file under
/// [`procfs_root`], empty when unread or not a UUID (the gateway would not record it).
pub fn current_boot_id() -> String {
    let id = claim_text(&procfs_root().join("sys/kernel/random/boot_id"));
    if domain::identity::runtime_report::boot_id_ok(&id) {
        id
    } else {
        String::new()
    }
}

fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_owned())
}

/// What firmware writes into an SMBIOS string it has nothing for.
const SERIAL_PLACEHOLDERS: &[&str] = &[
    "",
    "none",
    "n/a",
    "na",
    "0",
    "not specified",
    "not applicable",
    "default string",
    "to be filled by o.e.m.",
    "system serial number",
    "chassis serial number",
    "0123456789",
];

/// The trimmed text at `path` as a claim: empty when unreadable, a firmware placeholder, or not
/// recordable (over the bound, a control character).
fn claim_text(path: &Path) -> String {
    match read_trimmed(path) {
        Some(text)
            if domain::identity::claim_text_ok(&text)
                && !SERIAL_PLACEHOLDERS.contains(&text.to_ascii_lowercase().as_str()) =>
        {
            text
        }
        _ => String::new(),
    }
}

/// The `GPU UUID:` of every GPU the NVIDIA driver lists under `driver/nvidia/gpus`, sorted,
/// at most [`domain::identity::self_report::MAX_GPU_UUIDS`].
fn nvidia_gpu_uuids(proc: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(proc.join("driver/nvidia/gpus")) else {
        return Vec::new();
    };
    let mut uuids: Vec<String> = entries
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("information")).ok())
        .filter_map(|info| {
            info.lines().find_map(|line| {
                let (key, value) = line.split_once(':')?;
                (key.trim() == "GPU UUID").then(|| value.trim().to_owned())
            })
        })
        .filter(|uuid| !uuid.is_empty() && domain::identity::claim_text_ok(uuid))
        .collect();
    uuids.sort();
    uuids.dedup();
    uuids.truncate(domain::identity::self_report::MAX_GPU_UUIDS);
    uuids
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
        let no_proc = tempfile::tempdir().unwrap();
        assert_eq!(
            read_claims_at(sys, no_proc.path()),
            HardwareClaims {
                product_uuid: Some("4c4c4544-0042-3510-8052-b7c04f4e4e01".into()),
                macs: vec!["aa:bb:cc:dd:ee:01".into(), "aa:bb:cc:dd:ee:02".into()],
                ..HardwareClaims::default()
            }
        );
    }

    #[test]
    fn leaves_out_what_is_missing_or_a_placeholder() {
        let sys = tempfile::tempdir().unwrap();
        assert_eq!(
            read_claims_at(sys.path(), sys.path()),
            HardwareClaims::default()
        );
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

    fn write(root: &Path, rel: &str, text: &str) {
        let path = root.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn reads_the_hostname_serials_boot_id_and_gpu_uuids() {
        let (sys, proc) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (sys, proc) = (sys.path(), proc.path());
        write(sys, "class/dmi/id/product_serial", "SN-4471 \n");
        write(sys, "class/dmi/id/board_serial", "BRD/77\n");
        write(sys, "class/dmi/id/chassis_serial", "Default string\n"); // a placeholder
        write(proc, "sys/kernel/hostname", "rack4-n17\n");
        write(
            proc,
            "sys/kernel/random/boot_id",
            "0b4f3c2a-6d1e-4f5a-9b8c-7d6e5f4a3b2c\n",
        );
        write(
            proc,
            "driver/nvidia/gpus/0000:3b:00.0/information",
            "Model: \t\t NVIDIA H100\nGPU UUID: \t GPU-bbbb\nBus Type: \t PCIe\n",
        );
        write(
            proc,
            "driver/nvidia/gpus/0000:1a:00.0/information",
            "Model: \t\t NVIDIA H100\nGPU UUID: \t GPU-aaaa\n",
        );
        let claims = read_claims_at(sys, proc);
        assert_eq!(claims.hostname, "rack4-n17");
        assert_eq!(claims.product_serial, "SN-4471");
        assert_eq!(claims.board_serial, "BRD/77");
        assert_eq!(claims.chassis_serial, "");
        assert_eq!(claims.boot_id, "0b4f3c2a-6d1e-4f5a-9b8c-7d6e5f4a3b2c");
        assert_eq!(claims.gpu_uuids, vec!["GPU-aaaa", "GPU-bbbb"]);
    }

    #[test]
    fn leaves_out_a_value_the_control_plane_would_not_record() {
        let (sys, proc) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let long = "S".repeat(domain::identity::self_report::MAX_CLAIM_BYTES + 1);
        write(sys.path(), "class/dmi/id/product_serial", &long);
        write(sys.path(), "class/dmi/id/board_serial", "a\u{7}b");
        write(proc.path(), "sys/kernel/hostname", "ok-host");
        let claims = read_claims_at(sys.path(), proc.path());
        assert_eq!(claims.product_serial, "");
        assert_eq!(claims.board_serial, "");
        assert_eq!(claims.hostname, "ok-host");
    }
}
