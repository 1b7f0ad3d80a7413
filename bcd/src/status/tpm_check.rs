//! `bcd doctor`'s `tpm` check under `[helper]` (spec 002 "Through bcd helper"): the node's user
//! must not be able to open the TPM itself; only root's `bcd helper` holds it. It fails while
//! the `[helper] user` is in the `tss` group, or when the TPM's device (`device:PATH`) or socket
//! (`swtpm:path=PATH`) is one it may open by owner, group and mode (every directory on the way
//! searchable by it too); when doctor runs as that user it also tries to open it. Without
//! `[helper]` there is no check: root's `bcd node` opens the TPM itself.

use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::helper::privilege::{euid, user_name, SystemUser};

/// What the check found; `bcd::status` makes it doctor's `tpm` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// The node's user cannot open the TPM.
    Ok(String),
    /// Not checked.
    Warn(String),
    /// The node's user can open the TPM (or is not there).
    Fail(String),
}

/// Where a TCTI's TPM is, as a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TpmPath {
    /// `device:PATH` (`device` alone is `/dev/tpm0`, as in tpm2-tss).
    Device(PathBuf),
    /// `swtpm:path=PATH`: a Unix socket.
    Socket(PathBuf),
    /// `swtpm:host=..,port=..` (or `swtpm` alone): TCP, which any local process can reach.
    Tcp,
    /// Any other TCTI (tabrmd, mssim, ...).
    Other,
}

/// Where the TPM of `tcti` is.
pub fn tpm_path(tcti: &str) -> TpmPath {
    if let Some(device) = crate::node_key::device_path(tcti) {
        return TpmPath::Device(PathBuf::from(device));
    }
    let (name, conf) = tcti.split_once(':').unwrap_or((tcti, ""));
    match name {
        "swtpm" => conf
            .split(',')
            .find_map(|kv| kv.strip_prefix("path="))
            .map(|p| TpmPath::Socket(PathBuf::from(p)))
            .unwrap_or(TpmPath::Tcp),
        _ => TpmPath::Other,
    }
}

/// Whether `user` has every bit of `want` (4 read, 2 write, 1 search) on a file of `meta`, by
/// owner, then group, then others (as the kernel decides, ACLs aside).
fn allows(meta: &std::fs::Metadata, user: &SystemUser, want: u32) -> bool {
    let mode = meta.mode();
    let bits = if meta.uid() == user.uid {
        mode >> 6
    } else if user.groups.contains(&meta.gid()) {
        mode >> 3
    } else {
        mode
    };
    bits & want == want
}

/// Why `user` may open `path` (`want`: the bits it needs on the file itself), or `None` when it
/// may not. A missing file cannot be opened.
fn may_open(path: &Path, user: &SystemUser, want: u32) -> Option<String> {
    let meta = std::fs::metadata(path).ok()?;
    for dir in path
        .ancestors()
        .skip(1)
        .filter(|d| !d.as_os_str().is_empty())
    {
        let dir_meta = std::fs::metadata(dir).ok()?;
        if !allows(&dir_meta, user, 1) {
            return None;
        }
    }
    allows(&meta, user, want).then(|| {
        format!(
            "{} is owned by {}, gid {}, mode {:04o}",
            path.display(),
            user_name(meta.uid()),
            meta.gid(),
            meta.mode() & 0o7777
        )
    })
}

/// Whether this process opens the TPM at `path` (a device read-write, or a socket connect).
fn opens(path: &TpmPath) -> bool {
    match path {
        TpmPath::Device(p) => std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(p)
            .is_ok(),
        TpmPath::Socket(p) => std::os::unix::net::UnixStream::connect(p).is_ok(),
        TpmPath::Tcp | TpmPath::Other => false,
    }
}

/// The `tpm` check under `[helper]`; `None` without it.
pub fn tpm_check(config: &Config) -> Option<Finding> {
    let helper = config.helper.as_ref()?;
    let tcti = &config.tpm.tcti;
    let user = match SystemUser::by_name(&helper.user) {
        Ok(user) => user,
        Err(e) => return Some(Finding::Fail(format!("[helper] user: {e}"))),
    };
    Some(check_user(&user, tcti))
}

/// The `tpm` check of `user` (the `[helper] user`) against the TPM at `tcti`.
pub fn check_user(user: &SystemUser, tcti: &str) -> Finding {
    let name = &user.name;
    if user.in_group("tss") {
        return Finding::Fail(format!(
            "{name} (bcd node's user) is in the tss group, which may open the TPM: take it \
                 out (gpasswd -d {name} tss) so that only bcd helper opens it"
        ));
    }
    let path = tpm_path(tcti);
    let (file, want) = match &path {
        TpmPath::Device(p) => (p, 6),
        TpmPath::Socket(p) => (p, 2),
        TpmPath::Tcp => {
            return Finding::Warn(format!(
                "not checked: {tcti} is a TPM on TCP, which any local process can connect \
                     to, {name} included; give bcd a device that only root (and tss) can open \
                     (device:/dev/tpmrm0)"
            ))
        }
        TpmPath::Other => {
            return Finding::Warn(format!(
                "not checked: doctor knows who may open device: and swtpm:path= TPMs, not \
                     {tcti}"
            ))
        }
    };
    if let Some(why) = may_open(file, user, want) {
        return Finding::Fail(format!(
            "{name} (bcd node's user) may open the TPM: {why}; only root (bcd helper) \
                 should: make it root's and the tss group's, 0660 (as the tpm udev rules do \
                 for /dev/tpmrm0)"
        ));
    }
    if euid() == user.uid && opens(&path) {
        return Finding::Fail(format!(
            "{name} (bcd node's user, as which this doctor runs) opened the TPM {}: only \
                 root (bcd helper) should be able to",
            file.display()
        ));
    }
    Finding::Ok(format!(
        "{name} (bcd node's user) cannot open the TPM ({tcti}); bcd helper holds it for \
             bcd node"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tctis_name_their_files() {
        assert_eq!(
            tpm_path("device:/dev/tpmrm0"),
            TpmPath::Device("/dev/tpmrm0".into())
        );
        assert_eq!(tpm_path("device"), TpmPath::Device("/dev/tpm0".into()));
        assert_eq!(
            tpm_path("swtpm:path=/run/t.sock"),
            TpmPath::Socket("/run/t.sock".into())
        );
        assert_eq!(tpm_path("swtpm:host=127.0.0.1,port=2321"), TpmPath::Tcp);
        assert_eq!(tpm_path("tabrmd:bus_type=system"), TpmPath::Other);
    }
}
