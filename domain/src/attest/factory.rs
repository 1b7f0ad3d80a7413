//! How an attestor configures and registers itself (issue 39, decision 0078). An
//! [`AttestorFactory`] names the attestor's id and the operator-managed lists it reads
//! ([`EntryList`]), and builds the attestor from its own table of the serve configuration
//! (`[attestors.<id>]`, handed over as a serde value): the attestor owns its configuration type
//! and its parsing. Building takes two steps, both the attestor's:
//!
//! 1. **Its table** (the factory's `build`, pure, given the table alone): read into the
//!    attestor's configuration type, every refusal naming its key
//!    (`attestors.tpm.challenge_ttl: …`, [`SettingError`]). An attestor that needs nothing more
//!    is built there ([`built`]); one that needs something of the deployment answers its
//!    configuration ([`configured`], an [`AttestorConfig`]); one that runs only with a table
//!    answers `None` without one.
//! 2. **What the deployment gives it** ([`AttestorConfig::attestor`], given [`FromDeployment`]):
//!    the trust domain, the node CA certificate, a key the shell derives for it, and the files
//!    its table names, read by the shell's reader (the domain reads no file).
//!
//! The shell keeps one list of factories, one line per attestor
//! (`commands::identity::attestors::FACTORIES`), and [`configure`] walks it with the tables of
//! the configuration (`bcctl serve` does so when it reads its configuration, so a bad table stops
//! it before anything else starts). An out-of-tree crate exports its factory and its binary
//! registers it (`AttestorRegistry::register_factory`). Durations are read with
//! [`crate::duration::parse_duration`], as every duration of the configuration is.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use super::contract::AnyAttestor;
use super::entries::EntryList;
use crate::pki::TrustDomain;

/// An attestor's configuration table (`[attestors.<id>]`), as a serde value.
pub type ConfigTable = serde_json::Value;

/// The configuration's attestor tables by id (`[attestors.<id>]`).
pub type AttestorTables = BTreeMap<String, ConfigTable>;

/// What a factory is handed: its attestor's configuration table, `None` when the configuration
/// has none.
#[derive(Debug, Clone, Copy)]
pub struct AttestorSetup<'a> {
    /// `[attestors.<id>]`, as the configuration file wrote it.
    pub table: Option<&'a ConfigTable>,
}

/// What the deployment gives an attestor once its table is read (the second step).
pub struct FromDeployment<'a> {
    /// The deployment's trust domain.
    pub trust_domain: &'a TrustDomain,
    /// The node CA's certificate (DER): what signs every agent certificate.
    pub node_ca_der: &'a [u8],
    /// A 32-byte key of the deployment for this attestor, derived by the shell under `info`
    /// (HKDF-SHA256 over the JoinService encryption key, which every replica loads from the one
    /// PKI bundle: every replica derives the same key). An attestor asks under its own `info`.
    pub derive_key: &'a dyn Fn(&[u8]) -> [u8; 32],
    /// Reads a file the table names (the shell's reader; the message says why it could not).
    pub read_file: &'a dyn Fn(&Path) -> Result<Vec<u8>, String>,
}

impl FromDeployment<'_> {
    /// Every PEM `CERTIFICATE` of the files at `paths` (DER, in order), refusals naming `key`
    /// and the file: one that cannot be read ("cannot read the `what`"), is not PEM, or holds
    /// no certificate.
    pub fn pem_certificates<P: AsRef<Path>>(
        &self,
        key: &str,
        paths: &[P],
        what: &str,
    ) -> Result<Vec<Vec<u8>>, SettingError> {
        let mut out = Vec::new();
        for path in paths {
            let path = path.as_ref();
            let bytes = (self.read_file)(path).map_err(|e| {
                SettingError::new(
                    key,
                    format!("{}: cannot read the {what}: {e}", path.display()),
                )
            })?;
            let text = String::from_utf8_lossy(&bytes);
            let blocks = crate::pki::read_pem_blocks("CERTIFICATE", &text)
                .map_err(|m| SettingError::new(key, format!("{}: {m}", path.display())))?;
            if blocks.is_empty() {
                return Err(SettingError::new(
                    key,
                    format!("{}: holds no PEM CERTIFICATE block", path.display()),
                ));
            }
            out.extend(blocks);
        }
        Ok(out)
    }
}

/// An attestor's configuration, read from its table, that needs what the deployment gives
/// before it is an attestor.
pub trait AttestorConfig: Any + Send + Sync + fmt::Debug {
    /// The id of the attestor it configures.
    fn id(&self) -> &str;
    /// The attestor, with what the deployment gives; a refusal names the key it is about.
    fn attestor(&self, from: &FromDeployment<'_>) -> Result<Arc<dyn AnyAttestor>, String>;
}

/// What the first step answers: the attestor itself, or its configuration waiting for the
/// deployment.
#[derive(Clone)]
pub enum Configured {
    /// Built from the table alone.
    Attestor(Arc<dyn AnyAttestor>),
    /// Its configuration, built into an attestor with what the deployment gives.
    Config(Arc<dyn AttestorConfig>),
}

impl Configured {
    /// The id of the attestor.
    pub fn id(&self) -> &str {
        match self {
            Configured::Attestor(a) => a.id(),
            Configured::Config(c) => c.id(),
        }
    }

    /// The attestor, with what the deployment gives when its configuration needs it.
    pub fn attestor(&self, from: &FromDeployment<'_>) -> Result<Arc<dyn AnyAttestor>, String> {
        match self {
            Configured::Attestor(a) => Ok(a.clone()),
            Configured::Config(c) => c.attestor(from),
        }
    }

    /// The configuration, when it is a `T` (a setting the shell also applies outside the
    /// attestor, such as discovery's ramdisk certificate lifetime).
    pub fn config<T: AttestorConfig>(&self) -> Option<&T> {
        match self {
            Configured::Attestor(_) => None,
            Configured::Config(c) => {
                let any: &dyn Any = c.as_ref();
                any.downcast_ref::<T>()
            }
        }
    }
}

impl fmt::Debug for Configured {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Configured::Attestor(a) => write!(f, "Attestor({})", a.id()),
            Configured::Config(c) => c.fmt(f),
        }
    }
}

/// What building an attestor from its table answers: the attestor or its configuration, or
/// `None` when it is not configured (an attestor that runs only when its table is present), or
/// why its table is refused.
pub type Built = Result<Option<Configured>, String>;

/// One attestor, as the shell registers it.
#[derive(Debug, Clone, Copy)]
pub struct AttestorFactory {
    /// The id agents name.
    pub id: &'static str,
    /// The operator-managed lists it reads (`bcctl attestor entry --list <name>`).
    pub lists: &'static [EntryList],
    /// Reads its table (the first step).
    pub build: fn(&AttestorSetup<'_>) -> Built,
}

/// An attestor built from its table alone (for a factory's `build`).
pub fn built<A: AnyAttestor + 'static>(attestor: A) -> Built {
    Ok(Some(Configured::Attestor(Arc::new(attestor))))
}

/// An attestor's configuration, waiting for the deployment (for a factory's `build`).
pub fn configured<C: AttestorConfig>(config: C) -> Built {
    Ok(Some(Configured::Config(Arc::new(config))))
}

/// Why a key of an attestor's table was refused: the key (`attestors.tpm.ek_roots`) and what
/// is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct SettingError {
    /// The key, from `attestors`.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl SettingError {
    /// The refusal of `key`.
    pub fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        SettingError {
            key: key.into(),
            message: message.into(),
        }
    }
}

impl From<SettingError> for String {
    fn from(e: SettingError) -> String {
        e.to_string()
    }
}

/// A table read as the attestor's own configuration type, its errors named for the operator.
pub fn parse_table<T: serde::de::DeserializeOwned + Default>(
    id: &str,
    table: Option<&ConfigTable>,
) -> Result<T, String> {
    match table {
        None => Ok(T::default()),
        Some(v) => serde_json::from_value(v.clone()).map_err(|e| format!("[attestors.{id}]: {e}")),
    }
}

/// Refuses a table for an attestor that takes no configuration.
pub fn no_table(id: &str, setup: &AttestorSetup<'_>) -> Result<(), String> {
    match setup.table {
        None => Ok(()),
        Some(_) => Err(format!(
            "[attestors.{id}]: the {id} attestor takes no configuration (leave the table out)"
        )),
    }
}

/// Every attestor of `factories` with its table of `tables` (the first step), in the factories'
/// order, leaving out those that run only with a table and have none. A table no factory reads
/// is refused, naming the ids that are built in.
pub fn configure(
    factories: &[AttestorFactory],
    tables: &AttestorTables,
) -> Result<Vec<Configured>, String> {
    if let Some(id) = tables
        .keys()
        .find(|id| !factories.iter().any(|f| f.id == id.as_str()))
    {
        let known: Vec<&str> = factories.iter().map(|f| f.id).collect();
        return Err(format!(
            "attestors.{id}: no attestor {id:?} is built in (built in: {}); an attestor of its \
             own process is an [[attestors.external]] entry",
            known.join(", ")
        ));
    }
    let mut out = Vec::new();
    for factory in factories {
        let setup = AttestorSetup {
            table: tables.get(factory.id),
        };
        out.extend((factory.build)(&setup)?);
    }
    Ok(out)
}

/// The list named `name` among `factories`' lists, else the generic rules under that name.
pub fn entry_list(factories: &[AttestorFactory], name: &'static str) -> EntryList {
    factories
        .iter()
        .flat_map(|f| f.lists.iter())
        .find(|l| l.name == name)
        .copied()
        .unwrap_or(EntryList::generic(name))
}

/// `[attestors.<id>]` of the `[attestors]` contents `toml_text`, as `bcctl serve` hands it over
/// (TOML read, then a serde value): for the attestors' table tests.
#[cfg(test)]
pub(crate) fn toml_table(toml_text: &str, id: &str) -> Result<Option<ConfigTable>, String> {
    let file: toml::Table = toml::from_str(toml_text).map_err(|e| e.to_string())?;
    file.get(id)
        .map(|t| serde_json::to_value(t).map_err(|e| e.to_string()))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Late(&'static str);

    impl AttestorConfig for Late {
        fn id(&self) -> &str {
            self.0
        }
        fn attestor(&self, _: &FromDeployment<'_>) -> Result<Arc<dyn AnyAttestor>, String> {
            Err(format!("attestors.{}: built late", self.0))
        }
    }

    const LATE: AttestorFactory = AttestorFactory {
        id: "late",
        lists: &[],
        build: |setup| match setup.table {
            Some(_) => configured(Late("late")),
            None => Ok(None),
        },
    };

    const PLAIN: AttestorFactory = AttestorFactory {
        id: "join-token",
        lists: &[],
        build: |setup| {
            no_table("join-token", setup)?;
            built(crate::attest::JoinTokenAttestor)
        },
    };

    #[test]
    fn configure_walks_every_factory_with_its_table_and_refuses_a_stray_table() {
        let none = configure(&[PLAIN, LATE], &AttestorTables::new()).unwrap();
        assert_eq!(
            none.iter().map(Configured::id).collect::<Vec<_>>(),
            ["join-token"]
        );
        let mut tables = AttestorTables::new();
        tables.insert("late".into(), serde_json::json!({}));
        let both = configure(&[PLAIN, LATE], &tables).unwrap();
        assert_eq!(
            both.iter().map(Configured::id).collect::<Vec<_>>(),
            ["join-token", "late"]
        );
        assert!(both[1].config::<Late>().is_some() && both[0].config::<Late>().is_none());
        tables.insert("nope".into(), serde_json::json!({}));
        assert_eq!(
            configure(&[PLAIN, LATE], &tables).unwrap_err(),
            "attestors.nope: no attestor \"nope\" is built in (built in: join-token, late); an \
             attestor of its own process is an [[attestors.external]] entry"
        );
        let mut tables = AttestorTables::new();
        tables.insert("join-token".into(), serde_json::json!({}));
        assert_eq!(
            configure(&[PLAIN], &tables).unwrap_err(),
            "[attestors.join-token]: the join-token attestor takes no configuration (leave the \
             table out)"
        );
    }

    #[test]
    fn certificates_are_read_through_the_shells_reader_and_refusals_name_the_key() {
        let td = TrustDomain::new("example.org").unwrap();
        let read = |p: &Path| match p.to_str() {
            Some("/two.pem") => Ok(
                b"x\n-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n\
                 -----BEGIN CERTIFICATE-----\nBAU=\n-----END CERTIFICATE-----\n"
                    .to_vec(),
            ),
            Some("/none.pem") => Ok(b"hello".to_vec()),
            Some("/cut.pem") => Ok(b"-----BEGIN CERTIFICATE-----\nAQID\n".to_vec()),
            _ => Err("No such file or directory (os error 2)".to_owned()),
        };
        let from = FromDeployment {
            trust_domain: &td,
            node_ca_der: &[],
            derive_key: &|_| [0; 32],
            read_file: &read,
        };
        let certs = |path: &str| from.pem_certificates("attestors.x.roots", &[path], "root");
        assert_eq!(certs("/two.pem"), Ok(vec![vec![1, 2, 3], vec![4, 5]]));
        assert_eq!(
            certs("/gone.pem").unwrap_err().to_string(),
            "attestors.x.roots: /gone.pem: cannot read the root: No such file or directory (os \
             error 2)"
        );
        assert_eq!(
            certs("/none.pem").unwrap_err().message,
            "/none.pem: holds no PEM CERTIFICATE block"
        );
        assert_eq!(
            certs("/cut.pem").unwrap_err().message,
            "/cut.pem: a CERTIFICATE block has no END line"
        );
    }
}
