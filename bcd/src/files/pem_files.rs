//! The node identity as PEM files other software reads (nginx, envoy, a sidecar), and the
//! `[files] on_renew` command that tells it they changed.
//!
//! | file (default, in the data directory) | what | mode |
//! | --- | --- | --- |
//! | `cert.pem` | the certificate chain: the leaf, then the node CA | `[files] mode`, 0644 |
//! | `bundle.pem` | the X.509 trust anchor of peer nodes: the node CA certificate(s) | `[files] mode`, 0644 |
//! | `key.pem` | the node key as PKCS#8 PEM, only when the key is a file (a TPM key never leaves the TPM) | `[files] key_mode`, 0600 |
//! | `crl.pem` | the node CA's revocation list, as pushed over the session ([`crate::files::crl`]) | `[files] mode`, 0644 |
//!
//! ```toml
//! [files]
//! cert = "cert.pem"          # relative paths are inside data_dir
//! key = "key.pem"
//! bundle = "bundle.pem"
//! crl = "crl.pem"            # the node CA's revocation list
//! mode = 0o644               # cert, bundle and crl
//! key_mode = 0o600           # never readable by others (bcd refuses o+rwx bits)
//! on_renew = "systemctl reload nginx"   # sh -c, after each renewal and the join
//! on_renew_timeout_seconds = 60
//! ```
//!
//! `identity.json` is the truth and is committed first; these files are derived from it
//! ([`refresh`]) after every join and renewal, and again when `bcd node` starts, so a crash
//! between the two is repaired at the next start. Each is replaced atomically (temporary file,
//! fsync, rename, directory fsync): a reader sees the old file or the new one. The key is written
//! before the chain, so a reload after both sees a matching pair. A file whose bytes and mode are
//! already right is not rewritten, and `on_renew` runs only when something was written. Nothing
//! here is fatal: a failed write or a failed `on_renew` is logged and the node keeps its identity
//! and its session.

use std::collections::BTreeMap;
use std::io::Read as _;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Deserialize;

use crate::files::identity::LoadedIdentity;
use crate::files::{key_to_pem, pem_encode, write_atomic_mode, FileError};
use crate::node_key::NodeKey;

/// Default name of the certificate chain file.
pub const CERT_PEM: &str = "cert.pem";
/// Default name of the key file.
pub const KEY_PEM: &str = "key.pem";
/// Default name of the trust bundle file.
pub const BUNDLE_PEM: &str = "bundle.pem";
/// Default name of the revocation list file ([`crate::files::crl`]).
pub const CRL_PEM: &str = "crl.pem";
/// Default mode of the chain and the bundle (public material).
pub const DEFAULT_MODE: u32 = 0o644;
/// Default mode of the key file.
pub const DEFAULT_KEY_MODE: u32 = 0o600;
/// Default `on_renew_timeout_seconds`.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest existing PEM file read back to compare.
const MAX_PEM_LEN: u64 = 1024 * 1024;

/// `[files]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawFiles {
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    bundle: Option<PathBuf>,
    crl: Option<PathBuf>,
    mode: Option<u32>,
    key_mode: Option<u32>,
    on_renew: Option<String>,
    on_renew_timeout_seconds: Option<u64>,
}

/// `[files]` after defaults, paths resolved against the data directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSettings {
    /// The certificate chain (leaf, then the node CA).
    pub cert: PathBuf,
    /// The node key (written only for a file key).
    pub key: PathBuf,
    /// The trust bundle (the node CA certificate(s)).
    pub bundle: PathBuf,
    /// The node CA's revocation list, as the gateway pushed it ([`crate::files::crl`]).
    pub crl: PathBuf,
    /// The chain's, the bundle's and the list's mode.
    pub mode: u32,
    /// The key's mode.
    pub key_mode: u32,
    /// The command run (`sh -c`) after the files changed.
    pub on_renew: Option<String>,
    /// How long `on_renew` may run before it is killed.
    pub on_renew_timeout: Duration,
}

impl FileSettings {
    /// The defaults for `data_dir` (no `[files]`).
    pub fn defaults(data_dir: &Path) -> FileSettings {
        FileSettings {
            cert: data_dir.join(CERT_PEM),
            key: data_dir.join(KEY_PEM),
            bundle: data_dir.join(BUNDLE_PEM),
            crl: data_dir.join(CRL_PEM),
            mode: DEFAULT_MODE,
            key_mode: DEFAULT_KEY_MODE,
            on_renew: None,
            on_renew_timeout: DEFAULT_HOOK_TIMEOUT,
        }
    }
}

impl RawFiles {
    /// Resolves `[files]` against `data_dir`; `Err` is the message for `[files]`.
    pub fn settings(self, data_dir: &Path) -> Result<FileSettings, String> {
        let path = |p: Option<PathBuf>, default: &str| -> Result<PathBuf, String> {
            match p {
                None => Ok(data_dir.join(default)),
                Some(p) if p.as_os_str().is_empty() || p.file_name().is_none() => Err(format!(
                    "{:?} is not a file path (name a file, such as {default:?})",
                    p.display().to_string()
                )),
                Some(p) => Ok(data_dir.join(p)),
            }
        };
        let mode = self.mode.unwrap_or(DEFAULT_MODE);
        if mode > 0o777 {
            return Err(format!(
                "mode = {mode:#o} is not a file mode (write it in octal, such as mode = 0o644)"
            ));
        }
        let key_mode = self.key_mode.unwrap_or(DEFAULT_KEY_MODE);
        if key_mode > 0o777 || key_mode & 0o007 != 0 {
            return Err(format!(
                "key_mode = {key_mode:#o} would let every user read the node key: use 0o600, or \
                 0o640 for a group such as nginx's"
            ));
        }
        if key_mode & 0o400 == 0 || mode & 0o400 == 0 {
            return Err("mode and key_mode must let the owner read the file (0o400)".to_owned());
        }
        let on_renew = self.on_renew.filter(|c| !c.trim().is_empty());
        let timeout = match self.on_renew_timeout_seconds {
            None => DEFAULT_HOOK_TIMEOUT,
            Some(s @ 1..=3600) => Duration::from_secs(s),
            Some(s) => {
                return Err(format!(
                    "on_renew_timeout_seconds = {s}: it must be from 1 to 3600"
                ))
            }
        };
        let settings = FileSettings {
            cert: path(self.cert, CERT_PEM)?,
            key: path(self.key, KEY_PEM)?,
            bundle: path(self.bundle, BUNDLE_PEM)?,
            crl: path(self.crl, CRL_PEM)?,
            mode,
            key_mode,
            on_renew,
            on_renew_timeout: timeout,
        };
        let names = [
            &settings.cert,
            &settings.key,
            &settings.bundle,
            &settings.crl,
        ];
        if (1..names.len()).any(|i| names[..i].contains(&names[i])) {
            return Err("cert, key, bundle and crl must be four different files".to_owned());
        }
        Ok(settings)
    }
}

/// The PEM texts of one identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PemSet {
    /// The chain, leaf first.
    pub cert: String,
    /// The CA certificates after the leaf.
    pub bundle: String,
    /// The key's PKCS#8 PEM, `None` for a TPM key.
    pub key: Option<String>,
}

/// Why the PEM files could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PemFileError {
    /// The stored chain has only the leaf: there is no CA certificate for the bundle.
    #[error(
        "identity.json's chain has no CA certificate after the leaf, so there is no trust bundle \
         to write; join again: bcd join --reset --yes, then bcd join"
    )]
    NoCaCertificate,
    /// A file could not be written.
    #[error("{0} (check [files] in config.toml: the directory must exist and be bcd's to write)")]
    File(#[from] FileError),
}

/// `cert.pem`, `bundle.pem` and (for a file key) `key.pem` of `loaded`.
pub fn pem_set(loaded: &LoadedIdentity) -> Result<PemSet, PemFileError> {
    let chain = &loaded.stored.chain;
    if chain.len() < 2 {
        return Err(PemFileError::NoCaCertificate);
    }
    let cert: String = chain
        .iter()
        .map(|der| pem_encode("CERTIFICATE", der))
        .collect();
    let bundle: String = chain[1..]
        .iter()
        .map(|der| pem_encode("CERTIFICATE", der))
        .collect();
    let key = match &loaded.key {
        NodeKey::File(key) => Some(key_to_pem(key)),
        NodeKey::Tpm(_) => None,
    };
    Ok(PemSet { cert, bundle, key })
}

/// What [`write_pem_files`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Written {
    /// The files written (already right ones are left alone).
    pub written: Vec<PathBuf>,
    /// A `key.pem` removed because the key is now in the TPM (it no longer matches).
    pub removed: Option<PathBuf>,
}

impl Written {
    /// Whether any file changed.
    pub fn changed(&self) -> bool {
        !self.written.is_empty() || self.removed.is_some()
    }
}

fn is_current(path: &Path, bytes: &[u8], mode: u32) -> bool {
    let Ok(meta) = std::fs::metadata(path) else {
        return false;
    };
    if meta.len() != bytes.len() as u64
        || meta.len() > MAX_PEM_LEN
        || meta.permissions().mode() & 0o7777 != mode
    {
        return false;
    }
    let mut current = Vec::with_capacity(bytes.len());
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_PEM_LEN).read_to_end(&mut current))
        .is_ok()
        && current == bytes
}

fn write_one(path: &Path, bytes: &[u8], mode: u32) -> Result<bool, FileError> {
    if is_current(path, bytes, mode) {
        return Ok(false);
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    write_atomic_mode(dir, &name, bytes, mode)?;
    Ok(true)
}

/// Writes the files of `set` where `settings` says: the key first, then the chain, then the
/// bundle. A `key.pem` left from a file key is removed once the key is in the TPM.
pub fn write_pem_files(settings: &FileSettings, set: &PemSet) -> Result<Written, PemFileError> {
    let mut out = Written::default();
    match &set.key {
        Some(key) => {
            if write_one(&settings.key, key.as_bytes(), settings.key_mode)? {
                out.written.push(settings.key.clone());
            }
        }
        None => match std::fs::remove_file(&settings.key) {
            Ok(()) => out.removed = Some(settings.key.clone()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(FileError::Io {
                    path: settings.key.clone(),
                    action: "removing the key file of the previous (file) key",
                    source,
                }
                .into())
            }
        },
    }
    for (path, text) in [(&settings.cert, &set.cert), (&settings.bundle, &set.bundle)] {
        if write_one(path, text.as_bytes(), settings.mode)? {
            out.written.push(path.clone());
        }
    }
    Ok(out)
}

/// Why `on_renew` did not succeed (logged; never fatal).
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// `sh` could not be started.
    #[error("[files] on_renew {command:?} could not start: {source}")]
    Spawn {
        /// The command.
        command: String,
        /// Cause.
        source: std::io::Error,
    },
    /// It exited non-zero or was killed by a signal.
    #[error(
        "[files] on_renew {command:?} failed ({status}); the new files are in place, the node \
         goes on: fix the command (it runs as sh -c, as bcd's user)"
    )]
    Failed {
        /// The command.
        command: String,
        /// How it ended.
        status: std::process::ExitStatus,
    },
    /// It ran longer than `on_renew_timeout_seconds` and was killed.
    #[error(
        "[files] on_renew {command:?} ran longer than {seconds} s and was killed with its process \
         group; the new files are in place: make it finish sooner, or raise \
         on_renew_timeout_seconds"
    )]
    TimedOut {
        /// The command.
        command: String,
        /// The timeout.
        seconds: u64,
    },
}

/// Runs `command` with `sh -c` in a process group of its own, with `env` added, standard input
/// from /dev/null and its output bcd's; kills the group after `timeout`.
pub fn run_hook(
    command: &str,
    env: &BTreeMap<&'static str, String>,
    timeout: Duration,
) -> Result<(), HookError> {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(command)
        .envs(env)
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|source| HookError::Spawn {
            command: command.to_owned(),
            source,
        })?;
    let started = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) if status.success() => return Ok(()),
            Ok(Some(status)) => {
                return Err(HookError::Failed {
                    command: command.to_owned(),
                    status,
                })
            }
            Ok(None) if started.elapsed() >= timeout => {
                if let Ok(pid) = i32::try_from(child.id()) {
                    // SAFETY: kill(2) on the process group this function created.
                    unsafe {
                        libc::kill(-pid, libc::SIGKILL);
                    }
                }
                let _ = child.kill();
                let _ = child.wait();
                return Err(HookError::TimedOut {
                    command: command.to_owned(),
                    seconds: timeout.as_secs(),
                });
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            Err(source) => {
                return Err(HookError::Spawn {
                    command: command.to_owned(),
                    source,
                })
            }
        }
    }
}

/// The environment `on_renew` runs with: where the files are and what they hold.
pub fn hook_env(
    settings: &FileSettings,
    loaded: &LoadedIdentity,
) -> BTreeMap<&'static str, String> {
    let mut env = BTreeMap::new();
    env.insert("BCD_CERT_FILE", settings.cert.display().to_string());
    env.insert("BCD_BUNDLE_FILE", settings.bundle.display().to_string());
    if matches!(loaded.key, NodeKey::File(_)) {
        env.insert("BCD_KEY_FILE", settings.key.display().to_string());
    }
    env.insert("BCD_SERIAL", loaded.leaf.serial.to_hex());
    env.insert("BCD_NOT_AFTER", loaded.stored.not_after.clone());
    env.insert("BCD_SPIFFE_ID", loaded.leaf.spiffe_id.to_string());
    env
}

/// Brings the PEM files in line with `loaded` and, when any changed, runs `on_renew`. Every
/// outcome is a line for `log`; nothing fails the caller. Returns whether files changed.
pub fn refresh(
    settings: &FileSettings,
    loaded: &LoadedIdentity,
    log: &mut dyn FnMut(String),
) -> bool {
    let written = match pem_set(loaded).and_then(|set| write_pem_files(settings, &set)) {
        Ok(written) => written,
        Err(e) => {
            log(format!("files: the PEM files were not updated: {e}"));
            return false;
        }
    };
    if !written.changed() {
        return false;
    }
    let names: Vec<String> = written
        .written
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    let mut line = format!(
        "files: wrote {} (certificate serial {})",
        if names.is_empty() {
            "nothing new".to_owned()
        } else {
            names.join(", ")
        },
        loaded.leaf.serial.to_hex()
    );
    if let Some(removed) = &written.removed {
        line.push_str(&format!(
            "; removed {} (the node key is now in the TPM and never leaves it)",
            removed.display()
        ));
    }
    log(line);
    if let Some(command) = &settings.on_renew {
        match run_hook(
            command,
            &hook_env(settings, loaded),
            settings.on_renew_timeout,
        ) {
            Ok(()) => log(format!("files: on_renew {command:?} succeeded")),
            Err(e) => log(format!("files: {e}")),
        }
    }
    true
}

/// `bcd doctor`'s `pem files` check: whether the files match the identity (bytes and mode).
/// `Ok` names what matches; `Err` what does not and the fix (a warning).
pub fn files_check(settings: &FileSettings, loaded: &LoadedIdentity) -> Result<String, String> {
    let set = pem_set(loaded).map_err(|e| e.to_string())?;
    let mut stale = Vec::new();
    if let Some(key) = &set.key {
        if !is_current(&settings.key, key.as_bytes(), settings.key_mode) {
            stale.push(settings.key.display().to_string());
        }
    } else if settings.key.exists() {
        stale.push(format!(
            "{} (the key is in the TPM)",
            settings.key.display()
        ));
    }
    for (path, text) in [(&settings.cert, &set.cert), (&settings.bundle, &set.bundle)] {
        if !is_current(path, text.as_bytes(), settings.mode) {
            stale.push(path.display().to_string());
        }
    }
    if stale.is_empty() {
        Ok(format!(
            "{} and {} match the identity",
            settings.cert.display(),
            settings.bundle.display()
        ))
    } else {
        Err(format!(
            "{}: missing, or not the current identity or mode; bcd node rewrites them when it \
             starts (systemctl restart bcd)",
            stale.join(", ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(text: &str) -> RawFiles {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn defaults_and_relative_paths_live_in_the_data_dir() {
        let d = Path::new("/var/lib/bcd");
        assert_eq!(raw("").settings(d).unwrap(), FileSettings::defaults(d));
        let s = raw("cert = \"tls/c.pem\"\nkey = \"/etc/nginx/k.pem\"\nmode = 0o640\n")
            .settings(d)
            .unwrap();
        assert_eq!(s.cert, PathBuf::from("/var/lib/bcd/tls/c.pem"));
        assert_eq!(s.key, PathBuf::from("/etc/nginx/k.pem"));
        assert_eq!(s.mode, 0o640);
    }

    #[test]
    fn refuses_a_world_readable_key_and_unknown_keys() {
        let d = Path::new("/d");
        let e = raw("key_mode = 0o644\n").settings(d).unwrap_err();
        assert_eq!(
            e,
            "key_mode = 0o644 would let every user read the node key: use 0o600, or 0o640 for a \
             group such as nginx's"
        );
        assert!(toml::from_str::<RawFiles>("on_renewal = \"x\"\n").is_err());
        assert_eq!(
            raw("on_renew_timeout_seconds = 0\n")
                .settings(d)
                .unwrap_err(),
            "on_renew_timeout_seconds = 0: it must be from 1 to 3600"
        );
        assert_eq!(
            raw("cert = \"a.pem\"\nbundle = \"a.pem\"\n")
                .settings(d)
                .unwrap_err(),
            "cert, key, bundle and crl must be four different files"
        );
    }

    #[test]
    fn files_are_written_with_their_modes_once_and_a_stale_key_is_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let settings = FileSettings::defaults(tmp.path());
        let set = PemSet {
            cert: "C1\nCA\n".into(),
            bundle: "CA\n".into(),
            key: Some("K\n".into()),
        };
        let w = write_pem_files(&settings, &set).unwrap();
        assert_eq!(
            w.written,
            vec![
                settings.key.clone(),
                settings.cert.clone(),
                settings.bundle.clone()
            ]
        );
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(
            (
                mode(&settings.cert),
                mode(&settings.bundle),
                mode(&settings.key)
            ),
            (0o644, 0o644, 0o600)
        );
        // Already right: nothing is rewritten, so on_renew would not run.
        assert!(!write_pem_files(&settings, &set).unwrap().changed());
        // A mode changed by hand is put back.
        std::fs::set_permissions(&settings.key, std::fs::Permissions::from_mode(0o644)).unwrap();
        let w = write_pem_files(&settings, &set).unwrap();
        assert_eq!(w.written, vec![settings.key.clone()]);
        assert_eq!(mode(&settings.key), 0o600);
        // The key moved into the TPM: key.pem no longer matches and goes.
        let tpm = PemSet {
            cert: "C2\nCA\n".into(),
            key: None,
            ..set
        };
        let w = write_pem_files(&settings, &tpm).unwrap();
        assert_eq!(w.removed, Some(settings.key.clone()));
        assert_eq!(w.written, vec![settings.cert.clone()]);
        assert!(!settings.key.exists());
        assert_eq!(std::fs::read_to_string(&settings.cert).unwrap(), "C2\nCA\n");
        // No temporaries left behind.
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 2);
    }

    #[test]
    fn a_hook_gets_its_environment() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("env");
        let mut env = BTreeMap::new();
        env.insert("BCD_SERIAL", "0a1b".to_owned());
        run_hook(
            &format!("printf %s \"$BCD_SERIAL\" > {}", out.display()),
            &env,
            Duration::from_secs(5),
        )
        .unwrap();
        assert_eq!(std::fs::read_to_string(out).unwrap(), "0a1b");
    }

    #[test]
    fn a_hook_that_fails_or_hangs_is_reported() {
        let env = BTreeMap::new();
        assert!(run_hook("exit 0", &env, Duration::from_secs(5)).is_ok());
        let e = run_hook("exit 3", &env, Duration::from_secs(5)).unwrap_err();
        assert!(matches!(e, HookError::Failed { .. }), "{e}");
        let e = run_hook("sleep 30", &env, Duration::from_secs(1)).unwrap_err();
        assert!(matches!(e, HookError::TimedOut { seconds: 1, .. }), "{e}");
    }
}
