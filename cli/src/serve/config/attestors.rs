//! The `[attestors]` tables of `bcctl serve`'s configuration file.
//!
//! Settings of the built-in attestors, file first, the environment over it; every key is
//! optional and a missing one keeps the attestor's default:
//!
//! | key | environment | default |
//! | --- | --- | --- |
//! | `[attestors.x509pop] grace` | `BC_X509POP_GRACE` | `7d`: how long after its notAfter a certificate may still re-join |
//!
//! `[attestors.tpm]`: the `tpm` attestor registers only when the table is present, file only:
//!
//! ```toml
//! [attestors.tpm]
//! ek_roots = ["/etc/bc/ek-root.pem"]   # required: PEM files of the TPM makers' EK roots
//! pcr_policy = { "7" = ["<64 hex>"] }  # optional: PCR index -> allowed SHA-256 values
//! node_key = "certified"               # or "any" (default "certified")
//! challenge_ttl = "5m"                 # optional, at most 5m (the default)
//! [attestors.tpm.enrollment]           # optional: unknown EKs wait for approval here
//! tenant = "acme"
//! site = "par1"
//! pool = "edge"
//! ```
//!
//! `[attestors.discovery]`: the `discovery` attestor is a built-in; the table is optional, file
//! only, and every key keeps its default when missing:
//!
//! ```toml
//! [attestors.discovery]
//! approval = "never"        # or "unknown-machines", "always" (default "never")
//! allowed_kinds = ["inventory.refresh", "logs.collect", "diag.*", "disk.wipe", "deploy.*", "boot.kexec"]
//! cert_ttl = "2h"           # a ramdisk certificate's life, at most (and by default) 2h
//! ```
//! `[attestors.cloud-iid]`: the `cloud-iid` attestor registers only when the table is present
//! (its keys: `crate::serve::config::cloud`).
//!
//! `[[attestors.external]]`: out-of-process attestors (`bc.attestor.v1` over a Unix socket),
//! file only:
//!
//! ```toml
//! [[attestors.external]]
//! id = "acme-asset"          # what agents name in JoinRequest.attestor (kebab-case)
//! roles = ["node"]           # the agent roles it may admit
//! socket = "/run/acme.sock"  # absolute path of its Unix socket
//! timeout = "5s"             # optional: one Verify call, connecting included (default 5s)
//! ```
//!
//! Each entry is checked by [`gateway::join::external_attestor::ExternalAttestorConfig`] (id
//! format, not a built-in attestor's id, at least one role, absolute socket); two entries with
//! one id are refused too.

use std::collections::BTreeMap;
use std::path::PathBuf;

use domain::attest::discovery::{DiscoveryApproval, DiscoveryConfig, DiscoveryConfigError};
use domain::attest::kinds::check_kind_list;
use domain::attest::tpm::{NodeKeyPolicy, Placement, TpmConfig, MAX_CHALLENGE_TTL};
use gateway::external_attestor::ExternalAttestorConfig;
use serde::Deserialize;

/// How a duration is read (`crate::serve::config::parse_duration`, passed in).
pub type ParseDuration = fn(&str) -> Result<std::time::Duration, String>;

/// `[attestors]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileAttestors {
    pub x509pop: Option<FileX509Pop>,
    pub tpm: Option<FileTpm>,
    pub discovery: Option<FileDiscovery>,
    /// `[attestors.cloud-iid]` (read by `crate::serve::config::cloud`).
    #[serde(rename = "cloud-iid")]
    pub cloud_iid: Option<crate::serve::config::cloud::FileCloudIid>,
    #[serde(default)]
    pub external: Vec<FileExternalAttestor>,
}

/// `[attestors.x509pop]` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileX509Pop {
    pub grace: Option<String>,
}

/// The x509pop grace period: `BC_X509POP_GRACE`, else the file's, else 7 days. Refuses one
/// that does not parse, with the message of `parse`.
pub fn x509pop_grace(
    file: &Option<FileAttestors>,
    env: Option<String>,
    parse: ParseDuration,
) -> Result<std::time::Duration, String> {
    let text = env.or_else(|| {
        file.as_ref()
            .and_then(|a| a.x509pop.as_ref())
            .and_then(|x| x.grace.clone())
    });
    match text {
        None => Ok(domain::attest::x509pop::DEFAULT_GRACE),
        Some(t) => parse(&t),
    }
}

/// `[attestors.tpm]` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileTpm {
    pub ek_roots: Option<Vec<PathBuf>>,
    #[serde(default)]
    pub pcr_policy: BTreeMap<String, Vec<String>>,
    pub node_key: Option<String>,
    pub challenge_ttl: Option<String>,
    pub enrollment: Option<FilePlacement>,
}

/// `[attestors.tpm.enrollment]` as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilePlacement {
    pub tenant: String,
    pub site: String,
    pub pool: String,
}

/// The `tpm` attestor's settings, resolved: everything of its [`TpmConfig`] but the challenge
/// key, which the server derives from the deployment's keys when it starts.
#[derive(Debug, Clone)]
pub struct TpmSettings {
    /// The EK roots, DER, in the order of the files.
    pub ek_roots: Vec<Vec<u8>>,
    pub pcr_policy: BTreeMap<u32, Vec<[u8; 32]>>,
    pub node_key: NodeKeyPolicy,
    pub enrollment: Option<Placement>,
    pub challenge_ttl: std::time::Duration,
}

impl TpmSettings {
    /// The attestor's configuration, with the deployment's challenge key.
    pub fn config(&self, challenge_key: [u8; 32]) -> TpmConfig {
        TpmConfig {
            ek_roots: self.ek_roots.clone(),
            pcr_policy: self.pcr_policy.clone(),
            node_key: self.node_key,
            enrollment: self.enrollment.clone(),
            challenge_key,
            challenge_ttl: self.challenge_ttl,
        }
    }
}

/// Why `[attestors.tpm]` was refused: the key it names and the message.
pub type TpmSettingError = (&'static str, String);

/// `[attestors.tpm]`, checked, its EK root files read (`None` without the table).
pub fn tpm_settings(
    file: &Option<FileAttestors>,
    parse: ParseDuration,
) -> Result<Option<TpmSettings>, TpmSettingError> {
    let Some(tpm) = file.as_ref().and_then(|a| a.tpm.as_ref()) else {
        return Ok(None);
    };
    let roots = tpm.ek_roots.as_ref().filter(|r| !r.is_empty()).ok_or((
        "attestors.tpm.ek_roots",
        "is required: the PEM files of the EK roots an EK certificate must chain to".to_owned(),
    ))?;
    let mut ek_roots = Vec::new();
    for path in roots {
        let text = std::fs::read_to_string(path).map_err(|e| {
            (
                "attestors.tpm.ek_roots",
                format!("{}: cannot read the EK root: {e}", path.display()),
            )
        })?;
        let blocks = crate::pem::pem_blocks(&text, "CERTIFICATE")
            .map_err(|m| ("attestors.tpm.ek_roots", format!("{}: {m}", path.display())))?;
        if blocks.is_empty() {
            return Err((
                "attestors.tpm.ek_roots",
                format!("{}: holds no PEM CERTIFICATE block", path.display()),
            ));
        }
        ek_roots.extend(blocks);
    }
    let mut pcr_policy = BTreeMap::new();
    for (index, values) in &tpm.pcr_policy {
        let pcr: u32 = index.parse().ok().filter(|i| *i < 24).ok_or((
            "attestors.tpm.pcr_policy",
            format!("PCR {index:?} is not an index from 0 to 23"),
        ))?;
        if values.is_empty() {
            return Err((
                "attestors.tpm.pcr_policy",
                format!("PCR {pcr} lists no value (drop the entry for no policy on it)"),
            ));
        }
        let mut digests = Vec::new();
        for v in values {
            let digest: [u8; 32] = hex::decode(v)
                .ok()
                .and_then(|b| b.try_into().ok())
                .filter(|_| v.len() == 64)
                .ok_or((
                    "attestors.tpm.pcr_policy",
                    format!("PCR {pcr}: {v:?} is not a SHA-256 value (64 hex digits)"),
                ))?;
            digests.push(digest);
        }
        pcr_policy.insert(pcr, digests);
    }
    let node_key = match tpm.node_key.as_deref() {
        None | Some("certified") => NodeKeyPolicy::Certified,
        Some("any") => NodeKeyPolicy::Any,
        Some(other) => {
            return Err((
                "attestors.tpm.node_key",
                format!("{other:?} is not \"certified\" or \"any\""),
            ))
        }
    };
    let challenge_ttl = match &tpm.challenge_ttl {
        None => MAX_CHALLENGE_TTL,
        Some(t) => parse(t).map_err(|m| ("attestors.tpm.challenge_ttl", m))?,
    };
    if challenge_ttl > MAX_CHALLENGE_TTL || challenge_ttl.is_zero() {
        return Err((
            "attestors.tpm.challenge_ttl",
            format!(
                "{challenge_ttl:?} is not above 0 and at most {}s (spec: a challenge lives at \
                 most 5 minutes)",
                MAX_CHALLENGE_TTL.as_secs()
            ),
        ));
    }
    let enrollment = tpm.enrollment.as_ref().map(|e| Placement {
        tenant_id: e.tenant.clone(),
        site_id: e.site.clone(),
        pool_id: e.pool.clone(),
    });
    Ok(Some(TpmSettings {
        ek_roots,
        pcr_policy,
        node_key,
        enrollment,
        challenge_ttl,
    }))
}

/// `[attestors.discovery]` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileDiscovery {
    pub approval: Option<String>,
    pub allowed_kinds: Option<Vec<String>>,
    pub cert_ttl: Option<String>,
}

/// `[attestors.discovery]`, checked (the defaults without the table). Refusals name the key.
pub fn discovery_settings(
    file: &Option<FileAttestors>,
    parse: ParseDuration,
) -> Result<DiscoveryConfig, TpmSettingError> {
    let mut config = DiscoveryConfig::default();
    let Some(d) = file.as_ref().and_then(|a| a.discovery.as_ref()) else {
        return Ok(config);
    };
    if let Some(text) = &d.approval {
        config.approval = DiscoveryApproval::parse(text).ok_or((
            "attestors.discovery.approval",
            format!("{text:?} is not \"never\", \"unknown-machines\" or \"always\""),
        ))?;
    }
    if let Some(kinds) = &d.allowed_kinds {
        check_kind_list(kinds).map_err(|e| ("attestors.discovery.allowed_kinds", e.to_string()))?;
        config.allowed_kinds = kinds.clone();
    }
    if let Some(text) = &d.cert_ttl {
        config.cert_ttl = parse(text).map_err(|m| ("attestors.discovery.cert_ttl", m))?;
    }
    config.validate().map_err(|e| match e {
        DiscoveryConfigError::Kinds(e) => ("attestors.discovery.allowed_kinds", e.to_string()),
        e @ DiscoveryConfigError::CertTtl(_) => ("attestors.discovery.cert_ttl", e.to_string()),
    })?;
    Ok(config)
}

/// One `[[attestors.external]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileExternalAttestor {
    pub id: String,
    pub roles: Vec<String>,
    pub socket: PathBuf,
    pub timeout: Option<String>,
}

/// The external attestors, checked.
/// Refusals are the message of the `attestors.external` key.
pub fn external_attestors(
    file: &Option<FileAttestors>,
    parse_duration: impl Fn(&str) -> Result<std::time::Duration, String>,
) -> Result<Vec<ExternalAttestorConfig>, String> {
    let mut out: Vec<ExternalAttestorConfig> = Vec::new();
    for entry in file.iter().flat_map(|f| f.external.iter()) {
        let timeout = match &entry.timeout {
            None => None,
            Some(t) => Some(parse_duration(t).map_err(|m| format!("{}: {m}", entry.id))?),
        };
        let config =
            ExternalAttestorConfig::new(&entry.id, &entry.roles, entry.socket.clone(), timeout)
                .map_err(|e| e.to_string())?;
        if out.iter().any(|c| c.id == config.id) {
            return Err(format!("attestor id {:?} is configured twice", config.id));
        }
        out.push(config);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::duration::parse_duration;

    fn parse(text: &str) -> Result<Vec<ExternalAttestorConfig>, String> {
        #[derive(Deserialize)]
        struct File {
            attestors: Option<FileAttestors>,
        }
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        external_attestors(&file.attestors, parse_duration)
    }

    #[test]
    fn entries_are_read_and_checked() {
        let ok = parse(
            "[[attestors.external]]\nid = \"acme\"\nroles = [\"node\"]\nsocket = \"/run/a.sock\"\n\
             [[attestors.external]]\nid = \"acme-2\"\nroles = [\"node\", \"site\"]\n\
             socket = \"/run/b.sock\"\ntimeout = \"250ms\"\n",
        )
        .unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[1].timeout, std::time::Duration::from_millis(250));
        assert!(parse("").unwrap().is_empty());
        for bad in [
            "[[attestors.external]]\nid = \"x509pop\"\nroles = [\"node\"]\nsocket = \"/s\"\n",
            "[[attestors.external]]\nid = \"Acme\"\nroles = [\"node\"]\nsocket = \"/s\"\n",
            "[[attestors.external]]\nid = \"acme\"\nroles = []\nsocket = \"/s\"\n",
            "[[attestors.external]]\nid = \"acme\"\nroles = [\"node\"]\nsocket = \"s\"\n",
            "[[attestors.external]]\nid = \"acme\"\nroles = [\"node\"]\nsocket = \"/s\"\n\
             timeout = \"5\"\n",
            "[[attestors.external]]\nid = \"acme\"\nroles = [\"node\"]\nsocket = \"/s\"\nport = 1\n",
            "[[attestors.external]]\nid = \"acme\"\nroles = [\"node\"]\nsocket = \"/s\"\n\
             [[attestors.external]]\nid = \"acme\"\nroles = [\"node\"]\nsocket = \"/t\"\n",
        ] {
            assert!(parse(bad).is_err(), "accepted:\n{bad}");
        }
    }

    #[test]
    fn the_tpm_table_is_read_whole_and_absent_means_no_tpm_attestor() {
        let dir = tempfile_dir();
        let root = dir.join("root.pem");
        let der_a = vec![1u8, 2, 3];
        let der_b = vec![4u8, 5];
        std::fs::write(
            &root,
            "-----BEGIN CERTIFICATE-----\nAQID\n-----END CERTIFICATE-----\n\
             -----BEGIN CERTIFICATE-----\nBAU=\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        let digest = "ab".repeat(32);
        let text = format!(
            "[tpm]\nek_roots = [{:?}]\npcr_policy = {{ \"7\" = [\"{digest}\"], \"0\" = \
             [\"{}\"] }}\nnode_key = \"any\"\nchallenge_ttl = \"90s\"\n\
             [tpm.enrollment]\ntenant = \"acme\"\nsite = \"par1\"\npool = \"edge\"\n",
            root.display().to_string(),
            digest.to_uppercase()
        );
        let file: FileAttestors = toml::from_str(&text).unwrap();
        let t = tpm_settings(&Some(file), parse_duration).unwrap().unwrap();
        assert_eq!(t.ek_roots, vec![der_a, der_b]);
        assert_eq!(
            t.pcr_policy.into_iter().collect::<Vec<_>>(),
            vec![(0, vec![[0xab; 32]]), (7, vec![[0xab; 32]])]
        );
        assert_eq!(t.node_key, NodeKeyPolicy::Any);
        assert_eq!(t.challenge_ttl, Duration::from_secs(90));
        assert_eq!(
            t.enrollment,
            Some(Placement {
                tenant_id: "acme".into(),
                site_id: "par1".into(),
                pool_id: "edge".into(),
            })
        );
        let minimal = format!("[tpm]\nek_roots = [{:?}]\n", root.display().to_string());
        let file: FileAttestors = toml::from_str(&minimal).unwrap();
        let t = tpm_settings(&Some(file), parse_duration).unwrap().unwrap();
        assert_eq!(
            (
                t.node_key,
                t.challenge_ttl,
                t.enrollment.clone(),
                t.pcr_policy.len()
            ),
            (NodeKeyPolicy::Certified, MAX_CHALLENGE_TTL, None, 0)
        );
        let config = t.config([9; 32]);
        assert_eq!(config.challenge_key, [9; 32]);
        assert!(tpm_settings(&None, parse_duration).unwrap().is_none());
        let empty: FileAttestors = toml::from_str("[x509pop]\n").unwrap();
        assert!(tpm_settings(&Some(empty), parse_duration)
            .unwrap()
            .is_none());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "bc-tpm-config-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_discovery_table_is_optional_and_checked() {
        let read = |text: &str| {
            let file: FileAttestors = toml::from_str(text).map_err(|e| e.to_string())?;
            discovery_settings(&Some(file), parse_duration).map_err(|(k, m)| format!("{k}: {m}"))
        };
        assert_eq!(
            discovery_settings(&None, parse_duration),
            Ok(DiscoveryConfig::default())
        );
        assert_eq!(read("[discovery]\n"), Ok(DiscoveryConfig::default()));
        let c = read(
            "[discovery]\napproval = \"unknown-machines\"\nallowed_kinds = [\"disk.wipe\", \
             \"diag.*\"]\ncert_ttl = \"30m\"\n",
        )
        .unwrap();
        assert_eq!(c.approval, DiscoveryApproval::UnknownMachines);
        assert_eq!(c.allowed_kinds, vec!["disk.wipe", "diag.*"]);
        assert_eq!(c.cert_ttl, Duration::from_secs(1800));
        for (bad, key) in [
            ("approval = \"sometimes\"", "attestors.discovery.approval"),
            (
                "allowed_kinds = [\"disk wipe\"]",
                "attestors.discovery.allowed_kinds",
            ),
            ("cert_ttl = \"3h\"", "attestors.discovery.cert_ttl"),
            ("cert_ttl = \"soon\"", "attestors.discovery.cert_ttl"),
        ] {
            let err = read(&format!("[discovery]\n{bad}\n")).unwrap_err();
            assert!(err.starts_with(key), "{bad}: {err}");
        }
        assert!(read("[discovery]\nttl = \"1h\"\n").is_err());
    }

    #[test]
    fn grace_defaults_to_seven_days_and_reads_the_file_then_the_environment() {
        assert_eq!(
            x509pop_grace(&None, None, parse_duration),
            Ok(Duration::from_secs(7 * 86_400))
        );
        let file: FileAttestors = toml::from_str("[x509pop]\ngrace = \"2d\"\n").unwrap();
        let file = Some(file);
        assert_eq!(
            x509pop_grace(&file, None, parse_duration),
            Ok(Duration::from_secs(2 * 86_400))
        );
        assert_eq!(
            x509pop_grace(&file, Some("12h".into()), parse_duration),
            Ok(Duration::from_secs(12 * 3600))
        );
        assert!(x509pop_grace(&file, Some("soon".into()), parse_duration).is_err());
        assert!(toml::from_str::<FileAttestors>("[x509pop]\ngrase = \"2d\"\n").is_err());
    }
}
