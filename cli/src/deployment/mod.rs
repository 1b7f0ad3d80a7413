//! The one way every `bcctl` command finds its deployment, reads the deployment secret and opens
//! the PKI bundle.
//!
//! - The bundle is the file given (`--pki`, or `bundle` in `bcctl serve`'s configuration), by
//!   default [`DEFAULT_BUNDLE`] (`.bcctl/pki.json`, where `bcctl up` puts it).
//! - The secret is `BC_DEPLOYMENT_SECRET` when it is set and not empty; otherwise the file named
//!   by `BC_DEPLOYMENT_SECRET_FILE` (or by `deployment_secret_file` in `bcctl serve`'s
//!   configuration), its content trimmed; otherwise there is none. A secret that is given but
//!   unusable (too short, an unreadable file) is an error, never a silent fallback to reading
//!   the bundle unauthenticated.
//! - [`Deployment::open`] opens the bundle with the secret when there is one (then a sealed
//!   bundle's public half is authenticated and its keys are open); [`Deployment::keys`] also
//!   requires the keys; [`Deployment::public_half`] never reads the secret (a split gateway).
//! - [`Deployment::serving_keys`] is what `bcctl serve` loads: a plaintext bundle while a
//!   secret is set is refused ([`DeploymentError::PlaintextWithSecret`]: whoever can write the
//!   file would choose every key, and the secret would protect nothing) unless the operator
//!   allowed it (`--allow-plaintext`); a plaintext bundle that is served comes with a warning.
//!
//! The folder: this file (finding, reading and opening a deployment), [`located`] (the two
//! plain types an admin API call carries, apart so that `crate::invocation` can name them) and
//! [`node_setup`] (the files a node needs before `bcd join`, built from the bundle's public half).
//! It must never run a verb nor print anything of its own: verbs, `serve` and `up` call it, and
//! it names none of them.

pub(crate) mod located;
pub(crate) mod node_setup;
pub(crate) mod node_units;

use std::path::{Path, PathBuf};

use domain::pki::{
    open_bundle, BundleError, DeploymentSecret, KeySet, LoadedBundle, Protection, SecretError,
    DEPLOYMENT_SECRET_ENV,
};

/// The bundle's default place, beside the embedded store.
pub const DEFAULT_BUNDLE: &str = ".bcctl/pki.json";

/// The bundle's file name inside a deployment directory.
pub const BUNDLE_FILE: &str = "pki.json";

/// The development secret's file name inside a deployment directory (`bcctl up`).
pub const SECRET_FILE: &str = "deployment-secret";

/// The environment variable naming a file that holds the deployment secret.
pub const SECRET_FILE_ENV: &str = "BC_DEPLOYMENT_SECRET_FILE";

/// Why the deployment's secret or bundle could not be opened, each with the way out.
#[derive(Debug, thiserror::Error)]
pub enum DeploymentError {
    #[error("cannot read the PKI bundle {path}: {source} (create one with `bcctl pki init` or run `bcctl up`, or pass --pki)")]
    ReadBundle {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("PKI bundle {path}: {source}")]
    Bundle { path: PathBuf, source: BundleError },
    #[error("PKI bundle {path}: its private keys are sealed: set {DEPLOYMENT_SECRET_ENV} (or {SECRET_FILE_ENV}) to this deployment's secret")]
    Sealed { path: PathBuf },
    #[error("{0}")]
    Secret(#[from] SecretError),
    #[error("deployment secret file {path}: {why}")]
    SecretFile { path: PathBuf, why: String },
    #[error("PKI bundle {path}: its private keys are in PLAINTEXT, but a deployment secret is set ({DEPLOYMENT_SECRET_ENV} or {SECRET_FILE_ENV}): whoever can write this file chooses every key, and the secret protects nothing. Point --pki at the sealed bundle (`bcctl pki init` writes one while the secret is set), or unset the secret for a development deployment, or pass --allow-plaintext (BC_ALLOW_PLAINTEXT=true, or allow_plaintext = true in the configuration) to serve it anyway")]
    PlaintextWithSecret { path: PathBuf },
}

/// What `bcctl serve` logs when it serves a plaintext bundle.
pub const PLAINTEXT_WARNING: &str = "serving a PLAINTEXT PKI bundle: its private keys are unsealed and whoever can write the file chooses every key; development only (seal it with `bcctl pki init` under BC_DEPLOYMENT_SECRET)";

// The two types an admin API call carries (`located.rs`): defined where the invocation can
// name them without naming this module, which names the invocation.
pub use crate::deployment::located::{Deployment, Located};

/// An environment variable's value, `None` when unset or empty.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl Deployment {
    /// The deployment whose bundle is `bundle`, its secret file from `BC_DEPLOYMENT_SECRET_FILE`.
    pub fn new(bundle: impl Into<PathBuf>) -> Self {
        Deployment {
            bundle: bundle.into(),
            secret_file: env(SECRET_FILE_ENV).map(PathBuf::from),
        }
    }

    /// The deployment `bcctl up` keeps in `dir`: its bundle and its development secret file.
    pub fn in_dir(dir: &Path) -> Self {
        Deployment {
            bundle: dir.join(BUNDLE_FILE),
            secret_file: Some(dir.join(SECRET_FILE)),
        }
    }

    /// The same deployment with the secret file a configuration resolved (it already holds
    /// `BC_DEPLOYMENT_SECRET_FILE` when that is set; `None` keeps no file).
    pub fn with_secret_file(mut self, file: Option<PathBuf>) -> Self {
        self.secret_file = file;
        self
    }

    /// The deployment secret, if one is given (see the module doc for where from).
    pub fn secret(&self) -> Result<Option<DeploymentSecret>, DeploymentError> {
        secret_from(env(DEPLOYMENT_SECRET_ENV), self.secret_file.as_deref())
    }

    /// The deployment secret, which must be given (`bcctl pki init` seals with it).
    pub fn required_secret(&self) -> Result<DeploymentSecret, DeploymentError> {
        self.secret()?
            .ok_or(DeploymentError::Secret(SecretError::Missing))
    }

    fn read_bundle(&self) -> Result<Vec<u8>, DeploymentError> {
        std::fs::read(&self.bundle).map_err(|source| DeploymentError::ReadBundle {
            path: self.bundle.clone(),
            source,
        })
    }

    fn opened(
        &self,
        bytes: &[u8],
        secret: Option<&DeploymentSecret>,
    ) -> Result<LoadedBundle, DeploymentError> {
        open_bundle(bytes, secret).map_err(|source| DeploymentError::Bundle {
            path: self.bundle.clone(),
            source,
        })
    }

    /// The bundle, opened with the secret when one is given: a sealed bundle's public half is
    /// then authenticated and its keys open; a wrong secret is an error.
    pub fn open(&self) -> Result<LoadedBundle, DeploymentError> {
        let secret = self.secret()?;
        let bytes = self.read_bundle()?;
        self.opened(&bytes, secret.as_ref())
    }

    /// The bundle's key set: a plaintext bundle's, or a sealed one's opened with the secret.
    pub fn keys(&self) -> Result<KeySet, DeploymentError> {
        self.open()?.keys.ok_or_else(|| DeploymentError::Sealed {
            path: self.bundle.clone(),
        })
    }

    /// The key set `bcctl serve` runs with, and whether it must warn that the bundle is
    /// plaintext. A plaintext bundle while a secret is set is refused unless `allow_plaintext`.
    pub fn serving_keys(
        &self,
        allow_plaintext: bool,
    ) -> Result<(KeySet, Option<&'static str>), DeploymentError> {
        let secret = self.secret()?;
        let bytes = self.read_bundle()?;
        let loaded = self.opened(&bytes, secret.as_ref())?;
        let warning = match loaded.protection {
            Protection::Sealed => None,
            Protection::Plaintext if secret.is_some() && !allow_plaintext => {
                return Err(DeploymentError::PlaintextWithSecret {
                    path: self.bundle.clone(),
                })
            }
            Protection::Plaintext => Some(PLAINTEXT_WARNING),
        };
        let keys = loaded.keys.ok_or_else(|| DeploymentError::Sealed {
            path: self.bundle.clone(),
        })?;
        Ok((keys, warning))
    }

    /// Only the bundle's public half, unauthenticated, without reading any secret.
    pub fn public_half(&self) -> Result<LoadedBundle, DeploymentError> {
        let bytes = self.read_bundle()?;
        self.opened(&bytes, None)
    }
}

/// The secret from the environment variable's value (`None`: unset or empty), else from `file`.
fn secret_from(
    env_value: Option<String>,
    file: Option<&Path>,
) -> Result<Option<DeploymentSecret>, DeploymentError> {
    if let Some(value) = env_value.filter(|v| !v.is_empty()) {
        return Ok(Some(DeploymentSecret::new(&value)?));
    }
    let Some(path) = file else {
        return Ok(None);
    };
    let text = std::fs::read_to_string(path).map_err(|e| DeploymentError::SecretFile {
        path: path.to_path_buf(),
        why: format!("cannot read it: {e}"),
    })?;
    DeploymentSecret::new(text.trim())
        .map(Some)
        .map_err(|e| DeploymentError::SecretFile {
            path: path.to_path_buf(),
            why: e.to_string(),
        })
}

/// The deployment directory `bcctl up` makes, found by every verb when it exists in the
/// working directory.
pub const DEFAULT_DIR: &str = ".bcctl";

/// The file `bcctl up` writes in its directory: a `bcctl serve` configuration naming the store,
/// the bundle and the secret file, which every verb given `--dir` (or finding `./.bcctl`) reads.
pub const DIR_CONFIG_FILE: &str = "bcctl.toml";

/// The store's file name inside a deployment directory when no configuration names another.
pub const STORE_FILE: &str = "events.db";

/// The environment variable naming the PKI bundle (as for `bcctl serve`).
pub const BUNDLE_ENV: &str = "BC_PKI_BUNDLE";

/// The environment variable naming the store.
pub const DATABASE_URL_ENV: &str = "DATABASE_URL";

/// Where a verb finds its deployment: the one rule every `bcctl` verb follows.
///
/// 1. `--database-url` and `--pki` win for what they name;
/// 2. then `--config FILE` (a `bcctl serve` configuration: `database_url`, `pki_bundle`,
///    `deployment_secret_file`);
/// 3. then `--dir DIR` (its `bcctl.toml` when present, else `DIR/events.db`, `DIR/pki.json`,
///    `DIR/deployment-secret`);
/// 4. then the environment (`DATABASE_URL`, `BC_PKI_BUNDLE`, `BC_DEPLOYMENT_SECRET[_FILE]`);
/// 5. then `./.bcctl` when it exists, as in 3.
///
/// `BC_DEPLOYMENT_SECRET` (the secret itself) is read whenever it is set.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct DeploymentArgs {
    /// The deployment directory `bcctl up` made (default: ./.bcctl when it exists).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// A `bcctl serve` configuration file: its database_url, pki_bundle and
    /// deployment_secret_file.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// postgres://... or sqlite://PATH (wins over --config and --dir; DATABASE_URL when none of
    /// them is given).
    #[arg(long, value_name = "URL")]
    pub database_url: Option<String>,
    /// The PKI bundle file (wins over --config and --dir; BC_PKI_BUNDLE when none is given).
    #[arg(long, value_name = "FILE")]
    pub pki: Option<PathBuf>,
    /// Run the verb through a server's admin API instead of opening the store.
    #[command(flatten)]
    pub remote: RemoteArgs,
}

/// `--server` / `--profile`: run the verb through the admin API of a running `bcctl serve`
/// (mutual TLS with an operator certificate) instead of opening the store; no database
/// credentials or deployment secret are needed (docs/CLI.md, "Through the admin API").
#[derive(clap::Args, Clone, Debug, Default)]
pub struct RemoteArgs {
    /// The admin API, HOST:PORT (`[admin] listen` of bcctl serve; `admin_listen` of
    /// .bcctl/bcctl.toml): run this verb there as the profile's operator.
    #[arg(long, value_name = "HOST:PORT")]
    pub server: Option<String>,
    /// The operator profile (profile.toml from `bcctl pki issue-operator`); with --server
    /// alone: $BCCTL_PROFILE, else ./profile.toml.
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
}

impl RemoteArgs {
    /// Whether these flags ask for an admin API call (`--server` or `--profile` given).
    pub fn is_remote(&self) -> bool {
        self.server.is_some() || self.profile.is_some()
    }
}

/// The three keys of a serve configuration a verb reads; the rest of the file is ignored here
/// (`bcctl serve` checks it).
#[derive(serde::Deserialize, Default)]
struct LocatorFile {
    database_url: Option<String>,
    pki_bundle: Option<PathBuf>,
    deployment_secret_file: Option<PathBuf>,
}

/// Why the deployment could not be located.
#[derive(Debug, thiserror::Error)]
pub enum LocateError {
    #[error("cannot read the configuration {path}: {source}")]
    ReadConfig {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("configuration {path}: {message}")]
    ConfigSyntax { path: PathBuf, message: String },
    #[error("--dir {0}: no such directory (run `bcctl up --dir {0}` to make one)")]
    NoDir(PathBuf),
    #[error("no store given: pass --database-url, --config or --dir, set DATABASE_URL, or run where `bcctl up` made ./.bcctl")]
    NoStore,
    #[error("no store at {path}: the SQLite file does not exist (a mistyped path? `bcctl up` or `bcctl migrate --database-url sqlite://{path}` creates one)")]
    NoSqliteFile { path: String },
}

fn read_locator(path: &Path) -> Result<LocatorFile, LocateError> {
    let text = std::fs::read_to_string(path).map_err(|source| LocateError::ReadConfig {
        path: path.to_path_buf(),
        source,
    })?;
    toml::from_str(&text).map_err(|e: toml::de::Error| LocateError::ConfigSyntax {
        path: path.to_path_buf(),
        message: e.message().to_string(),
    })
}

/// What a deployment directory names: its `bcctl.toml` when present, else the defaults.
fn dir_locator(dir: &Path) -> Result<LocatorFile, LocateError> {
    let file = dir.join(DIR_CONFIG_FILE);
    let mut found = if file.exists() {
        read_locator(&file)?
    } else {
        LocatorFile::default()
    };
    found
        .database_url
        .get_or_insert_with(|| format!("sqlite://{}", dir.join(STORE_FILE).display()));
    found
        .pki_bundle
        .get_or_insert_with(|| dir.join(BUNDLE_FILE));
    if found.deployment_secret_file.is_none() && dir.join(SECRET_FILE).exists() {
        found.deployment_secret_file = Some(dir.join(SECRET_FILE));
    }
    Ok(found)
}

impl DeploymentArgs {
    /// The deployment directory these arguments name, or `./.bcctl` when it exists and no
    /// `--config` is given.
    pub fn directory(&self) -> Option<PathBuf> {
        self.dir.clone().or_else(|| {
            let d = PathBuf::from(DEFAULT_DIR);
            (self.config.is_none() && d.is_dir()).then_some(d)
        })
    }

    /// Finds the store, the bundle and the secret file by the rule in the type's doc.
    pub fn locate(&self) -> Result<Located, LocateError> {
        // An admin API call runs against the server's deployment, whatever these say (the
        // server refuses a call that names a deployment before it runs).
        if let Some(call) = crate::invocation::current() {
            return Ok(call.located.clone());
        }
        if let Some(d) = &self.dir {
            if !d.is_dir() {
                return Err(LocateError::NoDir(d.clone()));
            }
        }
        let explicit = match (&self.config, &self.dir) {
            (Some(file), _) => Some(read_locator(file)?),
            (None, Some(dir)) => Some(dir_locator(dir)?),
            (None, None) => None,
        };
        let fallback = match (&explicit, self.directory()) {
            (None, Some(dir)) => Some(dir_locator(&dir)?),
            _ => None,
        };
        let (file_url, file_bundle, file_secret) = match explicit {
            Some(f) => (f.database_url, f.pki_bundle, f.deployment_secret_file),
            None => (None, None, None),
        };
        let (fb_url, fb_bundle, fb_secret) = match fallback {
            Some(f) => (f.database_url, f.pki_bundle, f.deployment_secret_file),
            None => (None, None, None),
        };
        let store_url = self
            .database_url
            .clone()
            .or(file_url)
            .or_else(|| env(DATABASE_URL_ENV))
            .or(fb_url);
        let bundle = self
            .pki
            .clone()
            .or(file_bundle)
            .or_else(|| env(BUNDLE_ENV).map(PathBuf::from))
            .or(fb_bundle)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_BUNDLE));
        let secret_file = file_secret
            .or_else(|| env(SECRET_FILE_ENV).map(PathBuf::from))
            .or(fb_secret);
        Ok(Located {
            store_url,
            deployment: Deployment {
                bundle,
                secret_file,
            },
            config: self.config.clone().or_else(|| {
                self.directory()
                    .map(|d| d.join(DIR_CONFIG_FILE))
                    .filter(|f| f.is_file())
            }),
            dir: self.directory(),
        })
    }
}

impl Located {
    /// The store's URL, which must have been found; a verb that writes may create it.
    pub fn writable_store_url(&self) -> Result<&str, LocateError> {
        self.store_url.as_deref().ok_or(LocateError::NoStore)
    }

    /// [`Located::writable_store_url`] for a verb that writes, else
    /// [`Located::existing_store_url`].
    pub fn store_url_for(&self, write: bool) -> Result<&str, LocateError> {
        if write {
            self.writable_store_url()
        } else {
            self.existing_store_url()
        }
    }

    /// The store's URL, which must have been found. A `sqlite://` path that does not exist is
    /// an error: a verb reading a store never creates one.
    pub fn existing_store_url(&self) -> Result<&str, LocateError> {
        let url = self.store_url.as_deref().ok_or(LocateError::NoStore)?;
        if let Some(rest) = url
            .strip_prefix("sqlite://")
            .or(url.strip_prefix("sqlite:"))
        {
            let path = rest.split('?').next().unwrap_or(rest);
            if path != ":memory:" && !Path::new(path).exists() {
                return Err(LocateError::NoSqliteFile {
                    path: path.to_string(),
                });
            }
        }
        Ok(url)
    }
}

/// The arguments nearly every verb flattens: where the deployment is, and `--json`.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct CommonArgs {
    #[command(flatten)]
    pub deployment: DeploymentArgs,
    /// Print JSON instead of text (docs/CLI.md).
    #[arg(long)]
    pub json: bool,
}

/// Why a verb could not open its deployment's store.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("{0}")]
    Locate(#[from] LocateError),
    #[error("{0}")]
    Deployment(#[from] DeploymentError),
    #[error("store: {0}")]
    Store(#[from] events::store::StoreError),
}

impl DeploymentArgs {
    /// The store of an existing deployment, migrated (a verb that writes applies the
    /// migrations it needs; a SQLite path that does not exist is an error, never a new file).
    /// Reads no secret and opens no key.
    pub async fn open_store(&self) -> Result<events::store::EventStore, OpenError> {
        self.open_store_as(false).await
    }

    /// The store for a verb that writes (`write`: a SQLite file that does not exist is created,
    /// as `bcctl migrate` would) or reads (it must exist).
    pub async fn open_store_as(&self, write: bool) -> Result<events::store::EventStore, OpenError> {
        if let Some(call) = crate::invocation::current() {
            return Ok(call.store.clone());
        }
        let located = self.locate()?;
        let url = located.store_url_for(write)?;
        Ok(open_at(url).await?)
    }

    /// As [`DeploymentArgs::open_store_as`], and the bundle must exist and parse (it names the
    /// deployment): its public half only, no secret read.
    pub async fn open_store_checked(
        &self,
        write: bool,
    ) -> Result<events::store::EventStore, OpenError> {
        if let Some(call) = crate::invocation::current() {
            return Ok(call.store.clone());
        }
        let located = self.locate()?;
        let url = located.store_url_for(write)?;
        located.deployment.public_half()?;
        Ok(open_at(url).await?)
    }

    /// The store, connected without migrating (a read verb that must not change the schema).
    pub async fn connect_store(&self) -> Result<events::store::EventStore, OpenError> {
        if let Some(call) = crate::invocation::current() {
            return Ok(call.store.clone());
        }
        let located = self.locate()?;
        let url = located.existing_store_url()?;
        Ok(connect_at(url).await?)
    }
}

/// The store at `url`, migrated: during an admin API call the server's store (acting as the
/// caller) whatever `url` says; in direct mode opened here, acting as
/// [`crate::invocation::local_actor`] (database access is admin access).
pub async fn open_at(url: &str) -> Result<events::store::EventStore, events::store::StoreError> {
    if let Some(call) = crate::invocation::current() {
        return Ok(call.store.clone());
    }
    let store = events::store::EventStore::open(url).await?;
    Ok(store.acting_as(crate::invocation::local_actor()))
}

/// As [`open_at`], connected without migrating.
pub async fn connect_at(url: &str) -> Result<events::store::EventStore, events::store::StoreError> {
    if let Some(call) = crate::invocation::current() {
        return Ok(call.store.clone());
    }
    let store = events::store::EventStore::connect(url).await?;
    Ok(store.acting_as(crate::invocation::local_actor()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const LONG: &str = "a-deployment-secret-of-more-than-32-characters";

    fn file_with(text: &str) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(SECRET_FILE);
        std::fs::write(&path, text).expect("write");
        (dir, path)
    }

    #[test]
    fn the_environment_wins_over_the_file() {
        let (_d, path) = file_with("short");
        assert!(secret_from(Some(LONG.into()), Some(&path))
            .expect("secret")
            .is_some());
    }

    #[test]
    fn the_file_is_read_trimmed_when_the_environment_is_unset_or_empty() {
        let (_d, path) = file_with(&format!("{LONG}\n"));
        assert!(secret_from(None, Some(&path)).expect("secret").is_some());
        assert!(secret_from(Some(String::new()), Some(&path))
            .expect("secret")
            .is_some());
    }

    #[test]
    fn no_secret_without_either() {
        assert!(secret_from(None, None).expect("none").is_none());
        assert!(secret_from(Some(String::new()), None)
            .expect("none")
            .is_none());
    }

    #[test]
    fn a_secret_given_but_unusable_is_refused() {
        assert!(matches!(
            secret_from(Some("short".into()), None),
            Err(DeploymentError::Secret(SecretError::TooShort { chars: 5 }))
        ));
        let (_d, path) = file_with("short\n");
        assert!(matches!(
            secret_from(None, Some(&path)),
            Err(DeploymentError::SecretFile { .. })
        ));
        let missing = PathBuf::from("/nonexistent/deployment-secret");
        match secret_from(None, Some(&missing)) {
            Err(DeploymentError::SecretFile { path, why }) => {
                assert_eq!(path, missing);
                assert!(why.contains("cannot read it"), "{why}");
            }
            other => panic!("expected an unreadable file, got {other:?}"),
        }
    }

    #[test]
    fn a_missing_required_secret_names_the_variable() {
        let deployment = Deployment {
            bundle: PathBuf::from(DEFAULT_BUNDLE),
            secret_file: None,
        };
        if env(DEPLOYMENT_SECRET_ENV).is_none() {
            let e = deployment.required_secret().expect_err("missing");
            assert!(
                e.to_string()
                    .contains("MISSING_ENV: set BC_DEPLOYMENT_SECRET"),
                "{e}"
            );
        }
    }
}
