//! `config.toml`: where the control plane is, where the identity lives, and the three pins.
//!
//! ```toml
//! server = "gateway.example.com:8443"
//! data_dir = "/var/lib/bcd"
//! serving_ca_spki_pin = "sha256/..."
//! join_encryption_key_pin = "sha256/..."
//! join_signing_key_pin = "sha256/..."
//!
//! [tpm]
//! tcti = "device:/dev/tpmrm0"          # the default; BCD_TPM_TCTI overrides it
//! ek_intermediates = ["/etc/bcd/ek-issuer.pem"]
//!
//! [site]
//! listen = "192.0.2.10:8069"            # `bcd site`'s iPXE server (no default); --listen overrides it
//! [cloud]                                # bcd join --attestor cloud-iid
//! metadata_url = "http://169.254.169.254"  # BCD_CLOUD_METADATA_URL overrides it
//! audience = "https://bc.example.com"     # GCP: the identity token's audience
//! token_file = "/run/oidc/token"          # --provider oidc
//!
//! approver_set_sha256 = "<64 hex>"        # top level: the first approver set this node takes
//! [commands]
//! hook_timeout_seconds = 600              # the default
//! log_file = "/var/log/bcd.log"           # logs.collect without a unit (else journalctl -u bcd)
//! [commands.hooks]
//! "node.reboot" = "/usr/libexec/bcd/reboot"
//! [files]                                 # the PEM files (bcd::files::pem_files)
//! on_renew = "systemctl reload nginx"
//! ```
//!
//! `bcd config template` prints every key with its default ([`crate::config::template`]).
//!
//! Every pin is parsed when the file is read, before bcd does anything else: a malformed pin is
//! a [`ConfigError::MalformedPin`] naming the key, and bcd stops. A missing pin is allowed while
//! loading (a machine that only runs `bcd status` or `bcd join --reset` needs none) and refused by
//! [`Config::join_pins`] where the pins are used. Keys this module does not know (`[helper]`,
//! `command_root_sha256`, ...) belong to other parts of bcd and are ignored here.
//!
//! Precedence for the server and the data directory: a command-line flag, then the environment
//! (`BCD_SERVER`, `BCD_DATA_DIR`), then the file, then the default (`/var/lib/bcd`; no server).
//!
//! | module | holds |
//! | --- | --- |
//! | this file | [`Config`]: the file, the environment overrides, the pins |
//! | [`template`] | `bcd config template`: every key with its default, checked against the parser |
//! | `tests` | the parser's unit tests |
//!
//! The sections that belong to one part of bcd are that part's: `[commands]`
//! ([`crate::signed_commands::settings`]), `[files]` ([`crate::files::pem_files`]), `[helper]`
//! ([`crate::helper::settings`]). Reading the configuration never writes a file or reaches the
//! network, and a pin that does not parse never lets bcd go on.

pub mod template;

use std::path::{Path, PathBuf};

use domain::pki::{Pin, PinError};
use serde::Deserialize;

use crate::node_key::{TpmHost, TPM_TCTI_ENV};
use crate::tpm::DEFAULT_TCTI;

/// Where bcd looks for its configuration when `--config` is not given.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/bcd/config.toml";
/// The default data directory.
pub const DEFAULT_DATA_DIR: &str = "/var/lib/bcd";
/// Environment override of the configuration file's path.
pub const CONFIG_ENV: &str = "BCD_CONFIG";
/// Environment override of `server`.
pub const SERVER_ENV: &str = "BCD_SERVER";
/// Environment override of `data_dir`.
pub const DATA_DIR_ENV: &str = "BCD_DATA_DIR";
/// Largest configuration file read.
pub const MAX_CONFIG_LEN: u64 = 64 * 1024;

/// The key names of the three pins, as written in `config.toml`.
pub const PIN_KEYS: [&str; 3] = [
    "serving_ca_spki_pin",
    "join_encryption_key_pin",
    "join_signing_key_pin",
];

/// Why the configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file given with `--config` or `BCD_CONFIG` does not exist.
    #[error(
        "{path}: no such configuration file (pass --config with the path of bcd's config.toml)"
    )]
    Missing {
        /// Path tried.
        path: PathBuf,
    },
    /// The file exists but cannot be read.
    #[error("{path}: cannot read the configuration: {source}")]
    Read {
        /// Path.
        path: PathBuf,
        /// Cause.
        source: std::io::Error,
    },
    /// The file is larger than [`MAX_CONFIG_LEN`].
    #[error("{path}: the configuration is larger than 64 KiB; is it the right file?")]
    TooLarge {
        /// Path.
        path: PathBuf,
    },
    /// Not TOML, or a known key holds the wrong type.
    #[error("{path}: not a valid bcd config.toml: {message}")]
    Syntax {
        /// Path.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// A pin that does not parse. bcd stops before it starts.
    #[error("{path}: {key}: {source}; copy the pin again from `bcctl pki show`")]
    MalformedPin {
        /// Path.
        path: PathBuf,
        /// The configuration key, such as `join_signing_key_pin`.
        key: &'static str,
        /// Why the pin was refused.
        source: PinError,
    },
    /// `approver_set_sha256` is not 64 hex characters.
    #[error("{path}: approver_set_sha256 is not 64 hex characters; copy approverSetSha256 from `bcctl pki trust-version`")]
    MalformedSetPin {
        /// Path.
        path: PathBuf,
    },
    /// A `[commands]` value that cannot work.
    #[error("{path}: [commands]: {message}")]
    Commands {
        /// Path.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A `[files]` value that cannot work.
    #[error("{path}: [files]: {message}")]
    Files {
        /// Path.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A `[helper]` value that cannot work.
    #[error("{path}: [helper]: {message}")]
    Helper {
        /// Path.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A pin needed for this command is not in the file.
    #[error(
        "{path}: {key} is not set; bcd needs all three pins (serving_ca_spki_pin, \
         join_encryption_key_pin, join_signing_key_pin) to join: copy them from `bcctl pki show`, \
         or write the whole file with `bcctl node config --out DIR`"
    )]
    MissingPin {
        /// Path (or `<no config.toml>`).
        path: PathBuf,
        /// The configuration key.
        key: &'static str,
    },
    /// No configuration file at all (none named, none at [`DEFAULT_CONFIG_PATH`]) and a command
    /// that needs one.
    #[error(
        "no configuration at {path}: bcd needs its config.toml (the server and the three pins) \
         with join-encryption.jwk and join-signing.jwk beside it; on the control plane run \
         `bcctl node config --out DIR`, copy DIR's three files to /etc/bcd (or pass --config \
         DIR/config.toml)"
    )]
    NoConfig {
        /// The default path that was looked at.
        path: PathBuf,
    },
    /// No server address in the file, the environment or the flags.
    #[error("no server address: set `server` in {path}, or {SERVER_ENV}, or pass --server")]
    MissingServer {
        /// Path (or `<no config.toml>`).
        path: PathBuf,
    },
    /// An empty data directory.
    #[error("the data directory is empty: set `data_dir` in {path}, or {DATA_DIR_ENV}, or pass --data-dir")]
    EmptyDataDir {
        /// Path (or `<no config.toml>`).
        path: PathBuf,
    },
}

/// The file as written, before the pins are parsed.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawConfig {
    server: Option<String>,
    data_dir: Option<PathBuf>,
    serving_ca_spki_pin: Option<String>,
    join_encryption_key_pin: Option<String>,
    join_signing_key_pin: Option<String>,
    #[serde(default)]
    tpm: RawTpm,
    #[serde(default)]
    site: RawSite,
    #[serde(default)]
    cloud: CloudSettings,
    approver_set_sha256: Option<String>,
    #[serde(default)]
    commands: crate::signed_commands::settings::RawCommands,
    #[serde(default)]
    files: crate::files::pem_files::RawFiles,
    #[serde(default)]
    helper: crate::helper::settings::RawHelper,
}

/// `[site]` as written.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawSite {
    listen: Option<String>,
}

/// What `bcd site` says when neither `--listen` nor `[site] listen` names the boot server's
/// address: there is no default, so the iPXE server is never opened on every interface by
/// accident (decision 0083).
pub const NO_SITE_LISTEN: &str = "bcd site: no address for the iPXE boot server: set `[site] \
     listen = \"HOST:PORT\"` in config.toml (`bcctl node install-script --site-listen` writes it) \
     or pass --listen HOST:PORT, naming the address on the network the machines boot from \
     (for example 192.0.2.10:8069)";

/// `[site]`: the site agent (`bcd site`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SiteSettings {
    /// `[site] listen`: where the boot server listens for iPXE (`host:port`), if set.
    pub listen: Option<String>,
}

impl SiteSettings {
    /// `--listen`, else `[site] listen`; `None` when neither names one (there is no default:
    /// [`NO_SITE_LISTEN`]).
    pub fn listen_or(&self, flag: Option<&str>) -> Option<String> {
        flag.map(str::to_owned)
            .or_else(|| self.listen.clone())
            .filter(|l| !l.trim().is_empty())
    }
}

/// `[tpm]` as written.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct RawTpm {
    tcti: Option<String>,
    #[serde(default)]
    ek_intermediates: Vec<PathBuf>,
}

/// `[tpm]`: how bcd reaches the host's TPM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TpmSettings {
    /// The TCTI: `BCD_TPM_TCTI`, else `[tpm] tcti`, else `device:/dev/tpmrm0`.
    pub tcti: String,
    /// `[tpm] ek_intermediates`: PEM files of the EK certificate's issuers, sent with a tpm join.
    pub ek_intermediates: Vec<PathBuf>,
    /// The TPM at `tcti`, opened at most once for every user of this configuration.
    host: TpmHost,
}

/// `[cloud]`: where `bcd join --attestor cloud-iid` fetches its identity document
/// (`bcd::attest::cloud_iid`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct CloudSettings {
    /// The metadata service's base URL (`BCD_CLOUD_METADATA_URL` overrides it); default
    /// `http://169.254.169.254`, for GCP `http://metadata.google.internal`.
    pub metadata_url: Option<String>,
    /// The audience GCP's identity token is asked for (the control plane's configured one).
    pub audience: Option<String>,
    /// `--provider oidc`: the file holding the OIDC token.
    pub token_file: Option<PathBuf>,
}

/// The pins as loaded; each is absent or well formed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pins {
    /// `serving_ca_spki_pin`: the TLS connection to the gateway.
    pub serving_ca_spki_pin: Option<Pin>,
    /// `join_encryption_key_pin`: the key a token is sealed to.
    pub join_encryption_key_pin: Option<Pin>,
    /// `join_signing_key_pin`: the JoinResponse signature and trust bundles.
    pub join_signing_key_pin: Option<Pin>,
}

/// All three pins, as a join needs them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JoinPins {
    /// `serving_ca_spki_pin`.
    pub serving_ca: Pin,
    /// `join_encryption_key_pin`.
    pub join_encryption: Pin,
    /// `join_signing_key_pin`.
    pub join_signing: Pin,
}

/// Overrides from the command line (highest precedence).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    /// `--server`.
    pub server: Option<String>,
    /// `--data-dir`.
    pub data_dir: Option<PathBuf>,
}

/// What the environment says, read once (see [`Environment::from_process`]).
#[derive(Debug, Clone, Default)]
pub struct Environment {
    /// `BCD_CONFIG`.
    pub config: Option<PathBuf>,
    /// `BCD_SERVER`.
    pub server: Option<String>,
    /// `BCD_DATA_DIR`.
    pub data_dir: Option<PathBuf>,
    /// `BCD_TPM_TCTI`.
    pub tpm_tcti: Option<String>,
}

impl Environment {
    /// Reads `BCD_CONFIG`, `BCD_SERVER` and `BCD_DATA_DIR`; empty values count as unset.
    pub fn from_process() -> Environment {
        let path = |name: &str| {
            std::env::var_os(name)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        Environment {
            config: path(CONFIG_ENV),
            server: std::env::var_os(SERVER_ENV)
                .filter(|v| !v.is_empty())
                .map(|v| v.to_string_lossy().into_owned()),
            data_dir: path(DATA_DIR_ENV),
            tpm_tcti: std::env::var_os(TPM_TCTI_ENV)
                .filter(|v| !v.is_empty())
                .map(|v| v.to_string_lossy().into_owned()),
        }
    }
}

/// bcd's configuration after every override.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// The file it came from, or `None` when no file exists at the default path.
    pub path: Option<PathBuf>,
    /// The gateway address (`host:port`), if known.
    pub server: Option<String>,
    /// Where the identity files live.
    pub data_dir: PathBuf,
    /// The pins.
    pub pins: Pins,
    /// `[tpm]`.
    pub tpm: TpmSettings,
    /// `[site]`.
    pub site: SiteSettings,
    /// `[cloud]`.
    pub cloud: CloudSettings,
    /// `approver_set_sha256`: the only first approver set this node takes.
    pub approver_set_pin: Option<domain::quorum::SetDigest>,
    /// `[commands]`.
    pub commands: crate::signed_commands::CommandSettings,
    /// `[files]`: the PEM files other software reads, and `on_renew`.
    pub files: crate::files::pem_files::FileSettings,
    /// `[helper]`: the privilege split, when configured.
    pub helper: Option<crate::helper::settings::HelperSettings>,
}

fn parse_pin(
    path: &Path,
    key: &'static str,
    value: Option<String>,
) -> Result<Option<Pin>, ConfigError> {
    value
        .map(|text| {
            text.parse::<Pin>()
                .map_err(|source| ConfigError::MalformedPin {
                    path: path.to_owned(),
                    key,
                    source,
                })
        })
        .transpose()
}

impl Config {
    /// Loads the configuration: `--config` (`explicit`), else `BCD_CONFIG`, else
    /// [`DEFAULT_CONFIG_PATH`] when it exists (a machine without one uses the defaults). A path
    /// named explicitly or by the environment must exist.
    pub fn load(
        explicit: Option<&Path>,
        env: &Environment,
        overrides: &Overrides,
    ) -> Result<Config, ConfigError> {
        let (path, required) = match (explicit, &env.config) {
            (Some(p), _) => (p.to_owned(), true),
            (None, Some(p)) => (p.clone(), true),
            (None, None) => (PathBuf::from(DEFAULT_CONFIG_PATH), false),
        };
        let text = match std::fs::metadata(&path) {
            Ok(meta) if meta.len() > MAX_CONFIG_LEN => return Err(ConfigError::TooLarge { path }),
            Ok(_) => Some(
                std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
                    path: path.clone(),
                    source,
                })?,
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                if required {
                    return Err(ConfigError::Missing { path });
                }
                None
            }
            Err(source) => return Err(ConfigError::Read { path, source }),
        };
        let file_path = text.as_ref().map(|_| path.clone());
        let raw = match &text {
            Some(text) => Config::parse_raw(&path, text)?,
            None => RawConfig::default(),
        };
        Config::from_raw(file_path, raw, env, overrides)
    }

    /// Parses configuration text as if read from `path` (no environment, no overrides).
    pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
        let raw = Config::parse_raw(path, text)?;
        Config::from_raw(
            Some(path.to_owned()),
            raw,
            &Environment::default(),
            &Overrides::default(),
        )
    }

    fn parse_raw(path: &Path, text: &str) -> Result<RawConfig, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Syntax {
            path: path.to_owned(),
            message: e.message().to_owned(),
        })
    }

    fn from_raw(
        path: Option<PathBuf>,
        raw: RawConfig,
        env: &Environment,
        overrides: &Overrides,
    ) -> Result<Config, ConfigError> {
        let shown = path
            .clone()
            .unwrap_or_else(|| PathBuf::from("<no config.toml>"));
        let pins = Pins {
            serving_ca_spki_pin: parse_pin(&shown, PIN_KEYS[0], raw.serving_ca_spki_pin)?,
            join_encryption_key_pin: parse_pin(&shown, PIN_KEYS[1], raw.join_encryption_key_pin)?,
            join_signing_key_pin: parse_pin(&shown, PIN_KEYS[2], raw.join_signing_key_pin)?,
        };
        let server = overrides
            .server
            .clone()
            .or_else(|| env.server.clone())
            .or(raw.server)
            .filter(|s| !s.trim().is_empty());
        let data_dir = overrides
            .data_dir
            .clone()
            .or_else(|| env.data_dir.clone())
            .or(raw.data_dir)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_DATA_DIR));
        if data_dir.as_os_str().is_empty() {
            return Err(ConfigError::EmptyDataDir { path: shown });
        }
        let tcti = env
            .tpm_tcti
            .clone()
            .or(raw.tpm.tcti)
            .filter(|t| !t.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_TCTI.to_owned());
        let tpm = TpmSettings {
            host: TpmHost::new(&tcti),
            tcti,
            ek_intermediates: raw.tpm.ek_intermediates,
        };
        let approver_set_pin = raw
            .approver_set_sha256
            .map(|hex| {
                domain::quorum::SetDigest::from_hex(hex.trim()).map_err(|_| {
                    ConfigError::MalformedSetPin {
                        path: shown.clone(),
                    }
                })
            })
            .transpose()?;
        let commands = raw
            .commands
            .settings()
            .map_err(|message| ConfigError::Commands {
                path: shown.clone(),
                message,
            })?;
        let files = raw
            .files
            .settings(&data_dir)
            .map_err(|message| ConfigError::Files {
                path: shown.clone(),
                message,
            })?;
        let helper = raw
            .helper
            .settings()
            .map_err(|message| ConfigError::Helper {
                path: shown.clone(),
                message,
            })?;
        Ok(Config {
            helper,
            approver_set_pin,
            commands,
            files,
            path,
            server,
            data_dir,
            pins,
            tpm,
            site: SiteSettings {
                listen: raw.site.listen,
            },
            cloud: raw.cloud,
        })
    }

    /// Where the JoinService's public keys (`join-encryption.jwk`, `join-signing.jwk`) live:
    /// beside `config.toml`, `/etc/bcd` without one.
    pub fn keys_dir(&self) -> PathBuf {
        self.path
            .as_ref()
            .and_then(|p| p.parent().map(|d| d.to_path_buf()))
            .unwrap_or_else(|| PathBuf::from("/etc/bcd"))
    }

    /// The host's TPM at `[tpm] tcti`, shared by every caller (opened at the first use).
    pub fn tpm_host(&self) -> TpmHost {
        self.tpm.host.clone()
    }

    /// The TPM that holds the node keys for this process: `bcd helper`'s socket when `[helper]`
    /// is configured and this process is not root (an unprivileged `bcd node` never opens the
    /// TPM), else [`Config::tpm_host`].
    pub fn key_host(&self) -> TpmHost {
        match &self.helper {
            Some(helper) if !crate::helper::privilege::is_root() => {
                TpmHost::through_helper(&helper.socket)
            }
            _ => self.tpm_host(),
        }
    }

    fn shown_path(&self) -> PathBuf {
        self.path
            .clone()
            .unwrap_or_else(|| PathBuf::from("<no config.toml>"))
    }

    /// The error for a command that needs a configuration file when there is none, else `None`.
    pub fn no_config(&self) -> Option<ConfigError> {
        self.path.is_none().then(|| ConfigError::NoConfig {
            path: PathBuf::from(DEFAULT_CONFIG_PATH),
        })
    }

    /// All three pins, or the first missing one named.
    pub fn join_pins(&self) -> Result<JoinPins, ConfigError> {
        if self.pins == Pins::default() {
            if let Some(e) = self.no_config() {
                return Err(e);
            }
        }
        let need = |pin: Option<Pin>, key: &'static str| {
            pin.ok_or_else(|| ConfigError::MissingPin {
                path: self.shown_path(),
                key,
            })
        };
        Ok(JoinPins {
            serving_ca: need(self.pins.serving_ca_spki_pin, PIN_KEYS[0])?,
            join_encryption: need(self.pins.join_encryption_key_pin, PIN_KEYS[1])?,
            join_signing: need(self.pins.join_signing_key_pin, PIN_KEYS[2])?,
        })
    }

    /// The server address, or an error naming the three places it can come from.
    pub fn require_server(&self) -> Result<&str, ConfigError> {
        if self.server.is_none() {
            if let Some(e) = self.no_config() {
                return Err(e);
            }
        }
        self.server
            .as_deref()
            .ok_or_else(|| ConfigError::MissingServer {
                path: self.shown_path(),
            })
    }
}

#[cfg(test)]
mod tests;
