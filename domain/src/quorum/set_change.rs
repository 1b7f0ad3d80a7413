//! Taking a new approver set: the one epoch rule, signatures by the held set, and the pin.
//!
//! Spec, "Changing the approver set": "a daemon holding set H at epoch e takes (N, e') only when
//! e' > e and at least H's threshold of H's keys signed (e', N, its own trust domain). That holds
//! for N == H too [...]. The same set at the same epoch needs nothing; anything else is stale-epoch
//! or approver-set-unsigned. [...] only held keys count. A daemon without keys takes the first set
//! as it comes, or only its pinned one, never at or below an epoch it held, and keeps its epoch
//! through a signed removal." "A current threshold of 0 admits no change." "Pinning the first set":
//! a daemon with a pin and no keys "takes only a matching set (pin-mismatch otherwise)".
//!
//! [`check_set_change`] is the pure decision (`decide(offer, held) -> Result<change, refusal>`);
//! [`SetChange::apply`] is its evolve. A refusal keeps the held quorum; the caller still applies
//! the rest of the trust bundle (roots, version). Epoch 0 means "never held a set", so an offered
//! set needs epoch 1 or more.

use std::collections::BTreeSet;

use super::approver_set::{approver_set_signing_input, ApproverSet, Kid, SetDigest, SetSignature};
use super::trust_domain::TrustDomain;

/// The set a daemon (or the deployment) holds, with its epoch. Serializable for the daemon's store.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HeldApproverSet {
    /// The held set; [`ApproverSet::none`] when no quorum is held.
    pub set: ApproverSet,
    /// The epoch it was taken at; 0 when no set was ever held.
    pub epoch: u64,
}

impl HeldApproverSet {
    /// A daemon that never held a set.
    pub fn initial() -> Self {
        HeldApproverSet {
            set: ApproverSet::none(),
            epoch: 0,
        }
    }

    /// The digest a daemon reports in Hello and StatusReport: `None` (an empty digest on the
    /// wire) while it holds no keys.
    pub fn reported_digest(&self) -> Option<SetDigest> {
        (!self.set.is_empty()).then(|| self.set.digest())
    }
}

/// A set offered by a trust bundle: the quorum fields, `approver_set_epoch` and
/// `approver_set_signatures`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ApproverSetOffer {
    /// The offered set.
    pub set: ApproverSet,
    /// The epoch it is offered at.
    pub epoch: u64,
    /// Signatures over (epoch, set digest, trust domain); may mix the old and the new set's keys.
    pub signatures: Vec<SetSignature>,
}

/// What a daemon does with an offered set it does not refuse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetChange {
    /// The same set at the same epoch (or still no keys at all): nothing changes.
    Unchanged,
    /// Take the offered set at its epoch.
    Adopt {
        /// The new held set.
        held: HeldApproverSet,
        /// Whether it is a first set (taken without signatures, from a daemon without keys).
        first: bool,
        /// The held keys whose valid signatures carried the change (empty for a first set).
        signed_by: Vec<Kid>,
    },
}

impl SetChange {
    /// Evolve: the held set after this change.
    pub fn apply(&self, held: &HeldApproverSet) -> HeldApproverSet {
        match self {
            SetChange::Unchanged => held.clone(),
            SetChange::Adopt { held: new, .. } => new.clone(),
        }
    }
}

/// Why an offered set is not taken. The held quorum stays.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SetChangeRefusal {
    /// The offered epoch is not above the held one (stale-epoch).
    #[error("stale-epoch: the offered approver set is at epoch {offered}, not above the held epoch {held}; have the current approvers sign the set for epoch {next} (batch sign-approvers --epoch {next})", next = held.saturating_add(1))]
    StaleEpoch {
        /// The held epoch.
        held: u64,
        /// The offered epoch.
        offered: u64,
    },
    /// Too few distinct held keys signed the offered set (approver-set-unsigned).
    #[error("approver-set-unsigned: {valid} of the held approvers signed the set for epoch {epoch} in this trust domain, {required} needed; have the current approvers run batch sign-approvers --epoch {epoch}")]
    Unsigned {
        /// Distinct held keys with a valid signature.
        valid: u32,
        /// The held threshold.
        required: u32,
        /// The offered epoch.
        epoch: u64,
    },
    /// The held set has keys but threshold 0, which admits no change.
    #[error("approver-set-unsigned: the held approver set has threshold 0, which admits no change; re-provision the daemon")]
    NoThreshold,
    /// The same set at a higher epoch without its own signatures: kept silently at the held epoch.
    #[error("approver-set-unsigned: the unchanged approver set is offered at epoch {offered} without enough of its own signatures; it stays at epoch {held}")]
    UnchangedSetUnsigned {
        /// The held epoch.
        held: u64,
        /// The offered epoch.
        offered: u64,
    },
    /// A daemon with a pin and no keys was offered another set (pin-mismatch).
    #[error("pin-mismatch: the offered approver set has digest {offered}, not the pinned {pinned}; check approverSetSha256 from pki trust-version and the node's approver_set_sha256")]
    PinMismatch {
        /// The pinned digest.
        pinned: SetDigest,
        /// The offered set's digest.
        offered: SetDigest,
    },
}

impl SetChangeRefusal {
    /// The short reason (`stale-epoch`, `approver-set-unsigned`, `pin-mismatch`) for logs and events.
    pub fn reason(&self) -> &'static str {
        match self {
            SetChangeRefusal::StaleEpoch { .. } => "stale-epoch",
            SetChangeRefusal::Unsigned { .. }
            | SetChangeRefusal::NoThreshold
            | SetChangeRefusal::UnchangedSetUnsigned { .. } => "approver-set-unsigned",
            SetChangeRefusal::PinMismatch { .. } => "pin-mismatch",
        }
    }
}

/// The distinct keys of `signers` with a valid signature over `(epoch, set, trust_domain)`.
/// Signatures by keys outside `signers` are ignored; a key signing twice counts once.
pub fn valid_set_signers(
    signers: &ApproverSet,
    offered: &ApproverSet,
    epoch: u64,
    signatures: &[SetSignature],
    trust_domain: &TrustDomain,
) -> Vec<Kid> {
    let message = approver_set_signing_input(epoch, &offered.digest(), trust_domain);
    let mut valid = BTreeSet::new();
    for signature in signatures {
        if valid.contains(&signature.kid) {
            continue;
        }
        if let Some(key) = signers.key(&signature.kid) {
            if key.verifies(&message, &signature.sig) {
                valid.insert(signature.kid);
            }
        }
    }
    valid.into_iter().collect()
}

/// Decides whether a daemon holding `held` takes `offer`, under its own `trust_domain` and its
/// optional first-set `pin`.
pub fn check_set_change(
    offer: &ApproverSetOffer,
    held: &HeldApproverSet,
    pin: Option<&SetDigest>,
    trust_domain: &TrustDomain,
) -> Result<SetChange, SetChangeRefusal> {
    if held.set.is_empty() {
        if offer.set.is_empty() {
            return Ok(SetChange::Unchanged);
        }
        if offer.epoch <= held.epoch {
            return Err(SetChangeRefusal::StaleEpoch {
                held: held.epoch,
                offered: offer.epoch,
            });
        }
        if let Some(pinned) = pin {
            let offered = offer.set.digest();
            if offered != *pinned {
                return Err(SetChangeRefusal::PinMismatch {
                    pinned: *pinned,
                    offered,
                });
            }
        }
        return Ok(SetChange::Adopt {
            held: HeldApproverSet {
                set: offer.set.clone(),
                epoch: offer.epoch,
            },
            first: true,
            signed_by: Vec::new(),
        });
    }
    let same_set = offer.set == held.set;
    if same_set && offer.epoch == held.epoch {
        return Ok(SetChange::Unchanged);
    }
    if offer.epoch <= held.epoch {
        return Err(SetChangeRefusal::StaleEpoch {
            held: held.epoch,
            offered: offer.epoch,
        });
    }
    let required = held.set.threshold();
    if required == 0 {
        return Err(SetChangeRefusal::NoThreshold);
    }
    let signed_by = valid_set_signers(
        &held.set,
        &offer.set,
        offer.epoch,
        &offer.signatures,
        trust_domain,
    );
    let valid = u32::try_from(signed_by.len()).unwrap_or(u32::MAX);
    if valid < required {
        if same_set {
            return Err(SetChangeRefusal::UnchangedSetUnsigned {
                held: held.epoch,
                offered: offer.epoch,
            });
        }
        return Err(SetChangeRefusal::Unsigned {
            valid,
            required,
            epoch: offer.epoch,
        });
    }
    Ok(SetChange::Adopt {
        held: HeldApproverSet {
            set: offer.set.clone(),
            epoch: offer.epoch,
        },
        first: false,
        signed_by,
    })
}
