//! What the operator configures for the `tpm` attestor (`[attestors.tpm]` in `bcctl serve`'s
//! configuration; spec 000 "tpm") and how the table is read ([`TpmSettings`]; the attestor
//! registers in [`super::factory`]). The attestor runs only when the table is present:
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
//! The EK root files are read with the deployment's reader and the challenge key derived by the
//! shell under [`TPM_CHALLENGE_INFO`] when the attestor is built.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::wire::TPM_ATTESTOR;
use crate::attest::factory::{parse_table, ConfigTable, FromDeployment, SettingError};

/// The longest a challenge state may live (spec: at most 5 minutes).
pub const MAX_CHALLENGE_TTL: Duration = Duration::from_secs(300);

/// Whether a join must prove its node key is held by the TPM.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NodeKeyPolicy {
    /// `node_key = "certified"` (the default): an answer without the AK's certification of the
    /// node key is refused `tpm:node-key-not-certified`.
    #[default]
    Certified,
    /// `node_key = "any"`: an answer without one is admitted and claims nothing about the key.
    Any,
}

/// Where a machine joins: a tenant, site and pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The tenant.
    pub tenant_id: String,
    /// The site.
    pub site_id: String,
    /// The pool.
    pub pool_id: String,
}

/// The `tpm` attestor's configuration.
#[derive(Debug, Clone)]
pub struct TpmConfig {
    /// The EK roots (DER): an EK certificate must chain to one of them.
    pub ek_roots: Vec<Vec<u8>>,
    /// PCR index → the SHA-256 values it may have; empty means no PCR policy.
    pub pcr_policy: BTreeMap<u32, Vec<[u8; 32]>>,
    /// Whether the node key must be certified.
    pub node_key: NodeKeyPolicy,
    /// Where an EK neither bound nor allow-listed waits for an operator's approval (a join
    /// request); `None` refuses it (`tpm:unknown-ek`).
    pub enrollment: Option<Placement>,
    /// The AES-256-GCM key that seals challenge states; every replica of one deployment has the
    /// same (derived from the deployment's keys by the shell).
    pub challenge_key: [u8; 32],
    /// How long a challenge may be answered (at most [`MAX_CHALLENGE_TTL`]).
    pub challenge_ttl: Duration,
}

/// The `info` the shell derives the challenge-state key under (HKDF-SHA256 over the
/// JoinService encryption key: [`FromDeployment::derive_key`]). Changing it would leave every
/// challenge state sealed before unopenable.
pub const TPM_CHALLENGE_INFO: &[u8] = b"bc tpm challenge state v1";

/// `[attestors.tpm]`, read and checked: everything of a [`TpmConfig`] but the EK roots' bytes
/// (their files are read when the attestor is built) and the challenge key (derived then).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TpmSettings {
    /// The EK roots' PEM files, in order.
    pub ek_roots: Vec<PathBuf>,
    /// PCR index → the SHA-256 values it may have.
    pub pcr_policy: BTreeMap<u32, Vec<[u8; 32]>>,
    /// Whether the node key must be certified.
    pub node_key: NodeKeyPolicy,
    /// Where unknown EKs wait for approval.
    pub enrollment: Option<Placement>,
    /// How long a challenge may be answered.
    pub challenge_ttl: Duration,
}

/// `[attestors.tpm]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TpmTable {
    ek_roots: Option<Vec<PathBuf>>,
    #[serde(default)]
    pcr_policy: BTreeMap<String, Vec<String>>,
    node_key: Option<String>,
    challenge_ttl: Option<String>,
    enrollment: Option<PlacementTable>,
}

/// `[attestors.tpm.enrollment]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PlacementTable {
    tenant: String,
    site: String,
    pool: String,
}

fn pcr_policy(
    written: &BTreeMap<String, Vec<String>>,
) -> Result<BTreeMap<u32, Vec<[u8; 32]>>, SettingError> {
    const KEY: &str = "attestors.tpm.pcr_policy";
    let mut policy = BTreeMap::new();
    for (index, values) in written {
        let pcr: u32 = index.parse().ok().filter(|i| *i < 24).ok_or_else(|| {
            SettingError::new(KEY, format!("PCR {index:?} is not an index from 0 to 23"))
        })?;
        if values.is_empty() {
            return Err(SettingError::new(
                KEY,
                format!("PCR {pcr} lists no value (drop the entry for no policy on it)"),
            ));
        }
        let mut digests = Vec::new();
        for v in values {
            let digest: [u8; 32] = hex::decode(v)
                .ok()
                .and_then(|b| b.try_into().ok())
                .filter(|_| v.len() == 64)
                .ok_or_else(|| {
                    SettingError::new(
                        KEY,
                        format!("PCR {pcr}: {v:?} is not a SHA-256 value (64 hex digits)"),
                    )
                })?;
            digests.push(digest);
        }
        policy.insert(pcr, digests);
    }
    Ok(policy)
}

fn challenge_ttl(written: Option<&str>) -> Result<Duration, SettingError> {
    const KEY: &str = "attestors.tpm.challenge_ttl";
    let ttl = match written {
        None => MAX_CHALLENGE_TTL,
        Some(t) => crate::duration::parse_duration(t).map_err(|m| SettingError::new(KEY, m))?,
    };
    if ttl > MAX_CHALLENGE_TTL || ttl.is_zero() {
        return Err(SettingError::new(
            KEY,
            format!(
                "{ttl:?} is not above 0 and at most {}s (spec: a challenge lives at most 5 \
                 minutes)",
                MAX_CHALLENGE_TTL.as_secs()
            ),
        ));
    }
    Ok(ttl)
}

impl TpmSettings {
    /// Reads `[attestors.tpm]`; `None` without the table (the attestor does not run). A refusal
    /// names its key.
    pub fn from_table(table: Option<&ConfigTable>) -> Result<Option<Self>, String> {
        if table.is_none() {
            return Ok(None);
        }
        let written: TpmTable = parse_table(TPM_ATTESTOR, table)?;
        let ek_roots = written.ek_roots.filter(|r| !r.is_empty()).ok_or_else(|| {
            SettingError::new(
                "attestors.tpm.ek_roots",
                "is required: the PEM files of the EK roots an EK certificate must chain to",
            )
        })?;
        let pcr_policy = pcr_policy(&written.pcr_policy)?;
        let node_key = match written.node_key.as_deref() {
            None | Some("certified") => NodeKeyPolicy::Certified,
            Some("any") => NodeKeyPolicy::Any,
            Some(other) => {
                return Err(SettingError::new(
                    "attestors.tpm.node_key",
                    format!("{other:?} is not \"certified\" or \"any\""),
                )
                .into())
            }
        };
        let challenge_ttl = challenge_ttl(written.challenge_ttl.as_deref())?;
        let enrollment = written.enrollment.map(|e| Placement {
            tenant_id: e.tenant,
            site_id: e.site,
            pool_id: e.pool,
        });
        Ok(Some(TpmSettings {
            ek_roots,
            pcr_policy,
            node_key,
            enrollment,
            challenge_ttl,
        }))
    }

    /// The attestor's configuration: the EK roots read from their files, every CERTIFICATE
    /// block of each a root; the challenge key derived under [`TPM_CHALLENGE_INFO`].
    pub fn config(&self, from: &FromDeployment<'_>) -> Result<TpmConfig, SettingError> {
        let ek_roots =
            from.pem_certificates("attestors.tpm.ek_roots", &self.ek_roots, "EK root")?;
        Ok(TpmConfig {
            ek_roots,
            pcr_policy: self.pcr_policy.clone(),
            node_key: self.node_key,
            enrollment: self.enrollment.clone(),
            challenge_key: (from.derive_key)(TPM_CHALLENGE_INFO),
            challenge_ttl: self.challenge_ttl,
        })
    }
}

#[cfg(test)]
#[path = "config_tests.rs"]
mod tests;
