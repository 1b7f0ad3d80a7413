//! The operator profile: the `profile.toml` that `bcctl pki issue-operator --out DIR` writes
//! beside the operator certificate, its key and the serving CA, and that `bcctl --server` /
//! `--profile` reads to reach the admin API.
//!
//! ```toml
//! server = "127.0.0.1:8444"      # optional: --server wins
//! cert = "operator.pem"           # the leaf, then the operator CA
//! key = "operator.key"            # PKCS#8; refused when group or others may read it (as ssh)
//! ca = "serving-ca.pem"           # the only CA the client trusts for the server
//! trust_domain = "example.org"
//! ```
//!
//! Relative paths are relative to the profile's directory. Every refusal names the file and
//! the way out; the certificate and the key must belong together (checked before any
//! connection, so a mixed-up directory is not reported as a TLS failure).

// Parts of this API serve the admin server (files) and `batch approve --server` (client).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use domain::pki::read_pem_blocks;

/// The environment variable naming the profile when `--server` is given without `--profile`.
pub const PROFILE_ENV: &str = "BCCTL_PROFILE";

/// The profile `--server` looks for in the working directory when neither `--profile` nor
/// `BCCTL_PROFILE` names one.
pub const DEFAULT_PROFILE: &str = "profile.toml";

/// Why a profile could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("profile {0}: no such file (`bcctl pki issue-operator --out DIR` writes DIR/profile.toml; pass --profile FILE or set BCCTL_PROFILE)")]
    Missing(PathBuf),
    #[error("profile {path}: cannot read it: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("profile {path}: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("profile {profile}: cannot read its {what} {path}: {source}")]
    ReadPart {
        profile: PathBuf,
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("profile {profile}: its {what} {path} holds no {label} block")]
    NoPem {
        profile: PathBuf,
        what: &'static str,
        path: PathBuf,
        label: &'static str,
    },
    #[error("profile {profile}: its {what} {path}: {why}")]
    BadPem {
        profile: PathBuf,
        what: &'static str,
        path: PathBuf,
        why: String,
    },
    #[error("the private key {path} is readable by others (mode {mode:04o}): refused, as ssh refuses such a key; run `chmod 600 {path}`")]
    KeyExposed { path: PathBuf, mode: u32 },
    #[error("profile {profile}: the certificate {cert} and the key {key} do not belong together (the key is not the certificate's; was one of them replaced?)")]
    Mismatch {
        profile: PathBuf,
        cert: PathBuf,
        key: PathBuf,
    },
}

/// The keys of `profile.toml`.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileFile {
    server: Option<String>,
    cert: PathBuf,
    key: PathBuf,
    ca: PathBuf,
    trust_domain: String,
}

/// A loaded profile: the operator's certificate chain and key, the serving CA to trust, and
/// the server the profile names (if any).
#[derive(Debug)]
pub struct Profile {
    /// The profile file itself.
    pub path: PathBuf,
    /// `server = "host:port"`, when the profile names one.
    pub server: Option<String>,
    /// The operator certificate (leaf first, then the operator CA), DER.
    pub chain: Vec<CertificateDer<'static>>,
    /// The operator key, PKCS#8 DER.
    key_der: Vec<u8>,
    /// The serving CA's certificates, DER: the only trust anchors for the server.
    pub serving_ca: Vec<CertificateDer<'static>>,
    /// The trust domain the profile was issued in.
    pub trust_domain: String,
}

impl Profile {
    /// The operator key, for the TLS client configuration.
    pub fn key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key_der.clone()))
    }

    /// The operator certificate's leaf, DER.
    pub fn leaf(&self) -> Option<&CertificateDer<'static>> {
        self.chain.first()
    }
}

/// Where the profile is: `--profile` when given, else `BCCTL_PROFILE` (set and not empty),
/// else `./profile.toml`.
pub fn profile_path(flag: Option<&Path>) -> PathBuf {
    if let Some(p) = flag {
        return p.to_path_buf();
    }
    std::env::var(PROFILE_ENV)
        .ok()
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_PROFILE))
}

/// Loads and checks the profile at `path` (see the module doc).
pub fn load(path: &Path) -> Result<Profile, ProfileError> {
    let text = std::fs::read_to_string(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            ProfileError::Missing(path.to_path_buf())
        } else {
            ProfileError::Read {
                path: path.to_path_buf(),
                source,
            }
        }
    })?;
    let file: ProfileFile =
        toml::from_str(&text).map_err(|e: toml::de::Error| ProfileError::Syntax {
            path: path.to_path_buf(),
            message: e.message().to_string(),
        })?;
    let base = path.parent().unwrap_or(Path::new(""));
    let resolve = |p: &Path| {
        if p.is_absolute() {
            p.to_path_buf()
        } else {
            base.join(p)
        }
    };
    let (cert_path, key_path, ca_path) =
        (resolve(&file.cert), resolve(&file.key), resolve(&file.ca));
    let chain = read_blocks(path, "certificate", &cert_path, "CERTIFICATE")?;
    let serving_ca = read_blocks(path, "serving CA", &ca_path, "CERTIFICATE")?;
    check_key_mode(&key_path).map_err(|e| match e {
        KeyModeError::Exposed(mode) => ProfileError::KeyExposed {
            path: key_path.clone(),
            mode,
        },
        KeyModeError::Io(source) => ProfileError::ReadPart {
            profile: path.to_path_buf(),
            what: "key",
            path: key_path.clone(),
            source,
        },
    })?;
    let mut keys = read_blocks(path, "key", &key_path, "PRIVATE KEY")?;
    let key_der = keys.swap_remove(0).to_vec();
    let profile = Profile {
        path: path.to_path_buf(),
        server: file.server.filter(|s| !s.is_empty()),
        chain,
        key_der,
        serving_ca,
        trust_domain: file.trust_domain,
    };
    check_pair(&profile).map_err(|why| match why {
        PairError::Mismatch => ProfileError::Mismatch {
            profile: path.to_path_buf(),
            cert: cert_path.clone(),
            key: key_path.clone(),
        },
        PairError::Key(why) => ProfileError::BadPem {
            profile: path.to_path_buf(),
            what: "key",
            path: key_path.clone(),
            why,
        },
    })?;
    Ok(profile)
}

/// Every `label` block of the profile's `what` file, at least one.
fn read_blocks(
    profile: &Path,
    what: &'static str,
    path: &Path,
    label: &'static str,
) -> Result<Vec<CertificateDer<'static>>, ProfileError> {
    let text = std::fs::read_to_string(path).map_err(|source| ProfileError::ReadPart {
        profile: profile.to_path_buf(),
        what,
        path: path.to_path_buf(),
        source,
    })?;
    let blocks = read_pem_blocks(label, &text).map_err(|why| ProfileError::BadPem {
        profile: profile.to_path_buf(),
        what,
        path: path.to_path_buf(),
        why,
    })?;
    if blocks.is_empty() {
        return Err(ProfileError::NoPem {
            profile: profile.to_path_buf(),
            what,
            path: path.to_path_buf(),
            label,
        });
    }
    Ok(blocks.into_iter().map(CertificateDer::from).collect())
}

enum KeyModeError {
    Exposed(u32),
    Io(std::io::Error),
}

/// A key file group or others may read (or write) is refused.
fn check_key_mode(path: &Path) -> Result<(), KeyModeError> {
    let meta = std::fs::metadata(path).map_err(KeyModeError::Io)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = meta.permissions().mode() & 0o7777;
        if mode & 0o077 != 0 {
            return Err(KeyModeError::Exposed(mode));
        }
    }
    #[cfg(not(unix))]
    let _ = meta;
    Ok(())
}

enum PairError {
    Mismatch,
    Key(String),
}

/// The key must be the certificate's (its public key is the leaf's SPKI).
fn check_pair(profile: &Profile) -> Result<(), PairError> {
    let provider = gateway::tls::provider();
    let signing = provider
        .key_provider
        .load_private_key(profile.key())
        .map_err(|e| PairError::Key(format!("not a usable PKCS#8 key: {e}")))?;
    let certified = rustls::sign::CertifiedKey::new(profile.chain.clone(), signing);
    match certified.keys_match() {
        Ok(()) => Ok(()),
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(PairError::Mismatch)
        }
        // The key cannot tell its public half: let the handshake decide.
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::Unknown)) => Ok(()),
        Err(e) => Err(PairError::Key(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A profile directory: a self-signed "operator" cert and its key (mode 0600), a serving
    /// CA, and profile.toml.
    fn dir_with_profile() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let op = rcgen::generate_simple_self_signed(vec!["operator.example".into()]).expect("cert");
        let ca = rcgen::generate_simple_self_signed(vec!["serving.example".into()]).expect("ca");
        std::fs::write(dir.path().join("operator.pem"), op.cert.pem()).expect("write");
        let key = dir.path().join("operator.key");
        std::fs::write(&key, op.signing_key.serialize_pem()).expect("write");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        std::fs::write(dir.path().join("serving-ca.pem"), ca.cert.pem()).expect("write");
        let profile = dir.path().join("profile.toml");
        std::fs::write(
            &profile,
            "server = \"127.0.0.1:8444\"\ncert = \"operator.pem\"\nkey = \"operator.key\"\nca = \"serving-ca.pem\"\ntrust_domain = \"example.org\"\n",
        )
        .expect("write");
        (dir, profile)
    }

    #[test]
    fn a_good_profile_loads_with_paths_relative_to_it() {
        let (_d, path) = dir_with_profile();
        let p = load(&path).expect("loads");
        assert_eq!(p.server.as_deref(), Some("127.0.0.1:8444"));
        assert_eq!(p.trust_domain, "example.org");
        assert_eq!(p.chain.len(), 1);
        assert_eq!(p.serving_ca.len(), 1);
    }

    #[test]
    fn a_missing_profile_says_where_one_comes_from() {
        let e = load(Path::new("/nonexistent/profile.toml")).expect_err("missing");
        assert_eq!(
            e.to_string(),
            "profile /nonexistent/profile.toml: no such file (`bcctl pki issue-operator --out DIR` writes DIR/profile.toml; pass --profile FILE or set BCCTL_PROFILE)"
        );
    }

    #[test]
    fn a_key_others_may_read_is_refused_as_ssh_does() {
        let (d, path) = dir_with_profile();
        let key = d.path().join("operator.key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let e = load(&path).expect_err("exposed");
        assert_eq!(
            e.to_string(),
            format!(
                "the private key {k} is readable by others (mode 0644): refused, as ssh refuses such a key; run `chmod 600 {k}`",
                k = key.display()
            )
        );
    }

    #[test]
    fn a_key_of_another_certificate_is_refused() {
        let (d, path) = dir_with_profile();
        let other = rcgen::generate_simple_self_signed(vec!["x".into()]).expect("cert");
        std::fs::write(d.path().join("operator.pem"), other.cert.pem()).expect("write");
        let e = load(&path).expect_err("mismatch");
        assert_eq!(
            e.to_string(),
            format!(
                "profile {}: the certificate {} and the key {} do not belong together (the key is not the certificate's; was one of them replaced?)",
                path.display(),
                d.path().join("operator.pem").display(),
                d.path().join("operator.key").display()
            )
        );
    }

    #[test]
    fn a_missing_part_and_an_unknown_key_are_named() {
        let (d, path) = dir_with_profile();
        std::fs::remove_file(d.path().join("serving-ca.pem")).expect("rm");
        let e = load(&path).expect_err("no ca");
        assert_eq!(
            e.to_string(),
            format!(
                "profile {}: cannot read its serving CA {}: No such file or directory (os error 2)",
                path.display(),
                d.path().join("serving-ca.pem").display()
            )
        );
        std::fs::write(
            &path,
            "cert = \"a\"\nkey = \"b\"\nca = \"c\"\ntrust_domain = \"t\"\nsever = \"x\"\n",
        )
        .expect("write");
        let e = load(&path).expect_err("typo");
        assert!(
            e.to_string().starts_with(&format!(
                "profile {}: unknown field `sever`",
                path.display()
            )),
            "{e}"
        );
    }
}
