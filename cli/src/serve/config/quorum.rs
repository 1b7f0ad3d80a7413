//! `bcctl serve`'s `[quorum]` table: the approver set this deployment publishes (spec 003
//! "Changing the approver set"), file only.
//!
//! ```toml
//! [quorum]
//! approver_keys = ["alice.pem.pub", "bob.pem.pub", "carol.pem.pub"]   # SPKI PEM files
//! threshold = 2
//! tiers = ["5:1"]            # optional, MAX:THRESHOLD, ascending
//! unbatched_per_hour = 0
//! epoch = 1                  # default 1
//! set_signatures = []        # JSON files printed by `bcctl batch sign-approvers`
//! ```
//!
//! Relative paths are read from the process's working directory, as `pki_bundle` is. Resolving
//! checks everything that needs no store: the keys are distinct P-256 keys, the threshold is 1 to
//! the key count, tiers ascend and never need more than the threshold, the epoch is 1 or more,
//! and every signature file signs exactly this epoch and this set. At start
//! ([`crate::serve::trust`]) the signatures made by keys of the configured set are verified in the
//! deployment's trust domain (a bad one is refused); those by keys of the held set are the
//! settle's to count.

use std::path::{Path, PathBuf};

use domain::quorum::{
    approver_set_signing_input, ApproverKey, ApproverSet, ApproverSetOffer, Kid, SetSignature,
    Tier, TrustDomain,
};
use serde::Deserialize;

/// `[quorum]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileQuorum {
    pub approver_keys: Vec<PathBuf>,
    pub threshold: u32,
    #[serde(default)]
    pub tiers: Vec<String>,
    #[serde(default)]
    pub unbatched_per_hour: u32,
    pub epoch: Option<u64>,
    #[serde(default)]
    pub set_signatures: Vec<PathBuf>,
}

/// A signature file as `batch sign-approvers --json` prints it.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct SignatureFile {
    kid: String,
    sig: String,
    epoch: u64,
    approver_set_sha256: String,
}

/// The configured quorum, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuorumConfig {
    /// The set.
    pub set: ApproverSet,
    /// Its epoch.
    pub epoch: u64,
    /// The signatures the files hold (each over this epoch and this set).
    pub signatures: Vec<SetSignature>,
}

/// Reads and checks `[quorum]`; `Err((key, message))` names the offending key.
pub fn quorum_settings(
    file: Option<&FileQuorum>,
) -> Result<Option<QuorumConfig>, (&'static str, String)> {
    let Some(q) = file else {
        return Ok(None);
    };
    let mut keys = Vec::new();
    for path in &q.approver_keys {
        let spki = read_public_key(path).map_err(|m| ("quorum.approver_keys", m))?;
        let key = ApproverKey::from_spki(&spki)
            .map_err(|e| ("quorum.approver_keys", format!("{}: {e}", path.display())))?;
        keys.push(key);
    }
    if keys.is_empty() {
        return Err((
            "quorum.approver_keys",
            "no approver keys: list the approvers' .pub files (batch keygen writes them), or remove [quorum]".into(),
        ));
    }
    let mut tiers = Vec::new();
    for tier in &q.tiers {
        tiers.push(parse_tier(tier).map_err(|m| ("quorum.tiers", m))?);
    }
    let set = ApproverSet::new(keys, q.threshold, tiers, q.unbatched_per_hour)
        .map_err(|e| ("quorum", e.to_string()))?;
    let epoch = q.epoch.unwrap_or(1);
    if epoch == 0 {
        return Err((
            "quorum.epoch",
            "epoch 0 means no set was ever held: give 1 or more".into(),
        ));
    }
    let digest = set.digest().to_hex();
    let mut signatures = Vec::new();
    for path in &q.set_signatures {
        let text = std::fs::read_to_string(path).map_err(|e| {
            (
                "quorum.set_signatures",
                format!("{}: cannot read it: {e}", path.display()),
            )
        })?;
        let file: SignatureFile = serde_json::from_str(&text).map_err(|e| {
            (
                "quorum.set_signatures",
                format!(
                    "{}: not the JSON batch sign-approvers --json prints: {e}",
                    path.display()
                ),
            )
        })?;
        if file.epoch != epoch {
            return Err((
                "quorum.set_signatures",
                format!(
                    "{} signs epoch {}, not the configured epoch {epoch}: sign this epoch (batch sign-approvers --epoch {epoch}) or set quorum.epoch",
                    path.display(),
                    file.epoch
                ),
            ));
        }
        if !file.approver_set_sha256.eq_ignore_ascii_case(&digest) {
            return Err((
                "quorum.set_signatures",
                format!(
                    "{} signs approver set {}, not the configured set {digest}: sign exactly these keys, threshold, tiers and unbatched cap",
                    path.display(),
                    file.approver_set_sha256
                ),
            ));
        }
        let kid = Kid::from_hex(&file.kid).map_err(|e| {
            (
                "quorum.set_signatures",
                format!("{}: kid: {e}", path.display()),
            )
        })?;
        let sig = hex::decode(&file.sig).map_err(|e| {
            (
                "quorum.set_signatures",
                format!("{}: sig is not hex: {e}", path.display()),
            )
        })?;
        signatures.push(SetSignature { kid, sig });
    }
    Ok(Some(QuorumConfig {
        set,
        epoch,
        signatures,
    }))
}

impl QuorumConfig {
    /// The offer this configuration publishes, after checking, in `trust_domain`, every
    /// signature made by a key of the configured set (one that does not verify is refused:
    /// it would be published and count for nothing).
    pub fn offer(&self, trust_domain: &TrustDomain) -> Result<ApproverSetOffer, String> {
        let message = approver_set_signing_input(self.epoch, &self.set.digest(), trust_domain);
        for s in &self.signatures {
            if let Some(key) = self.set.key(&s.kid) {
                if !key.verifies(&message, &s.sig) {
                    return Err(format!(
                        "quorum.set_signatures: the signature of approver {} does not verify over epoch {} and this set in trust domain {}: sign again with batch sign-approvers --epoch {} --trust-domain {}",
                        s.kid.to_hex(),
                        self.epoch,
                        trust_domain.as_str(),
                        self.epoch,
                        trust_domain.as_str()
                    ));
                }
            }
        }
        Ok(ApproverSetOffer {
            set: self.set.clone(),
            epoch: self.epoch,
            signatures: self.signatures.clone(),
        })
    }
}

fn parse_tier(text: &str) -> Result<Tier, String> {
    let parsed = text
        .split_once(':')
        .and_then(|(m, t)| Some((m.trim().parse().ok()?, t.trim().parse().ok()?)));
    match parsed {
        Some((max_scope_size, threshold)) => Ok(Tier {
            max_scope_size,
            threshold,
        }),
        None => Err(format!(
            "{text:?} is not MAX:THRESHOLD (e.g. \"5:1\": scopes of up to 5 leaves need 1 approval)"
        )),
    }
}

fn read_public_key(path: &Path) -> Result<Vec<u8>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: cannot read it: {e}", path.display()))?;
    let mut blocks = domain::pki::read_pem_blocks("PUBLIC KEY", &text)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    match blocks.len() {
        1 => Ok(blocks.remove(0)),
        n => Err(format!(
            "{}: {n} PUBLIC KEY blocks, expected exactly one (the .pub file batch keygen writes)",
            path.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_parse_as_max_colon_threshold() {
        assert_eq!(
            parse_tier("5:1"),
            Ok(Tier {
                max_scope_size: 5,
                threshold: 1
            })
        );
        assert!(parse_tier("5").unwrap_err().contains("not MAX:THRESHOLD"));
    }

    #[test]
    fn no_table_is_no_quorum_and_no_keys_is_refused() {
        assert_eq!(quorum_settings(None), Ok(None));
        let (key, message) = quorum_settings(Some(&FileQuorum::default())).unwrap_err();
        assert_eq!(key, "quorum.approver_keys");
        assert!(message.starts_with("no approver keys"), "{message}");
    }
}
