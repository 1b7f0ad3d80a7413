//! The approver set a daemon holds, governed by the one epoch rule (spec 003 "Changing the
//! approver set", "Pinning the first set").
//!
//! The trust bundle's content (`bc.events.v1.TrustBundleContent`, kept as `trustBundle` in
//! `identity.json`) offers an approver set at an epoch with its signatures. [`settle_held_set`]
//! decides with [`domain::quorum::check_set_change`] whether the daemon takes it:
//!
//! - a keyless daemon takes the first set as it comes, or, with `approver_set_sha256` pinned in
//!   `config.toml`, only the pinned one (and admission refuses destructive commands until it holds
//!   one: `awaiting-pinned-set`);
//! - a daemon holding keys takes a new set only at a higher epoch signed by its held threshold;
//! - a refusal keeps the held quorum; the rest of the bundle (roots, version) was already applied
//!   by the caller. The refusal is returned for the log.
//!
//! The held set lives in `approver-set.json` beside `identity.json` (mode 0600, written atomically
//! through [`DataDir::write`]). A missing file is a daemon that never held a set; a file that does
//! not parse is an error (destructive commands are refused while it cannot be read). Settling is
//! idempotent: the same bundle settles to the same held set, so it is re-run at every session
//! start and after every stored bundle (a crash between storing a bundle and settling its set is
//! repaired on the next start).

use domain::quorum::{
    check_set_change, ApproverSetOffer, HeldApproverSet, SetChange, SetChangeRefusal, SetDigest,
    TrustDomain,
};
use prost::Message as _;

use crate::files::identity::StoredIdentity;
use crate::files::{DataDir, FileError};

/// The held set's file in the data directory.
pub const APPROVER_SET_FILE: &str = "approver-set.json";
/// The largest held-set file read.
pub const MAX_APPROVER_SET_LEN: u64 = 1024 * 1024;

/// Why the held set cannot be read, decided or stored.
#[derive(Debug, thiserror::Error)]
pub enum ApproverStateError {
    /// The file cannot be read or written.
    #[error("{APPROVER_SET_FILE}: {0}")]
    File(#[from] FileError),
    /// The file is not a held set.
    #[error("{APPROVER_SET_FILE} is not a valid held approver set ({0}); destructive commands stay refused until it is repaired or removed (removing it makes the daemon take the bundle's set as a first set)")]
    Corrupt(String),
    /// The stored trust bundle's content does not decode.
    #[error(
        "the stored trust bundle's content does not decode ({0}); its approver set is not taken"
    )]
    Bundle(String),
    /// The stored identity's trust domain is invalid.
    #[error("the stored identity's trust domain {0:?} is not valid")]
    TrustDomain(String),
}

/// What settling the stored bundle's set did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetOutcome {
    /// No trust bundle is held: nothing to settle.
    NoBundle,
    /// The held set stays as it is (same set and epoch, or still no keys).
    Unchanged(HeldApproverSet),
    /// The offered set was taken.
    Adopted {
        /// The set now held.
        held: HeldApproverSet,
        /// Taken as a first set (no keys were held).
        first: bool,
    },
    /// The offered set was refused; the held quorum stays.
    Refused {
        /// The set still held.
        held: HeldApproverSet,
        /// Why.
        refusal: SetChangeRefusal,
    },
}

impl SetOutcome {
    /// The set held after settling (`None` for [`SetOutcome::NoBundle`]).
    pub fn held(&self) -> Option<&HeldApproverSet> {
        match self {
            SetOutcome::NoBundle => None,
            SetOutcome::Unchanged(held)
            | SetOutcome::Adopted { held, .. }
            | SetOutcome::Refused { held, .. } => Some(held),
        }
    }
}

/// The held set; a missing file is [`HeldApproverSet::initial`].
pub fn load_held(dir: &DataDir) -> Result<HeldApproverSet, ApproverStateError> {
    if !dir.exists(APPROVER_SET_FILE) {
        return Ok(HeldApproverSet::initial());
    }
    let bytes = dir.read(APPROVER_SET_FILE, MAX_APPROVER_SET_LEN)?;
    serde_json::from_slice(&bytes).map_err(|e| ApproverStateError::Corrupt(e.to_string()))
}

/// Stores `held` (0600, atomically).
pub fn store_held(dir: &DataDir, held: &HeldApproverSet) -> Result<(), ApproverStateError> {
    let bytes =
        serde_json::to_vec_pretty(held).map_err(|e| ApproverStateError::Corrupt(e.to_string()))?;
    dir.write(APPROVER_SET_FILE, &bytes)?;
    Ok(())
}

/// What Hello and StatusReport carry: the held epoch and SHA-256(approverSetInput), empty
/// without keys. A held set that cannot be read reports epoch 0 and no digest.
pub fn reported(dir: &DataDir) -> (u64, Vec<u8>) {
    match load_held(dir) {
        Ok(held) => (
            held.epoch,
            held.reported_digest()
                .map(|d| d.as_bytes().to_vec())
                .unwrap_or_default(),
        ),
        Err(_) => (0, Vec::new()),
    }
}

/// The offer a stored bundle content makes.
pub fn offer_of(content: &[u8]) -> Result<ApproverSetOffer, ApproverStateError> {
    let content = events::schema::TrustBundleContent::decode(content)
        .map_err(|e| ApproverStateError::Bundle(e.to_string()))?;
    let published = domain::trust_bundle::read_content(content)
        .map_err(|e| ApproverStateError::Bundle(e.to_string()))?;
    Ok(ApproverSetOffer {
        set: published.held.set,
        epoch: published.held.epoch,
        signatures: published.signatures,
    })
}

/// Applies the one epoch rule to the set the stored bundle offers (see the module docs) and
/// stores the held set when it changes.
pub fn settle_held_set(
    dir: &DataDir,
    stored: &StoredIdentity,
    pin: Option<&SetDigest>,
) -> Result<SetOutcome, ApproverStateError> {
    let Some(content) = stored.trust_bundle.as_deref() else {
        return Ok(SetOutcome::NoBundle);
    };
    let trust_domain = TrustDomain::new(&stored.trust_domain)
        .map_err(|_| ApproverStateError::TrustDomain(stored.trust_domain.clone()))?;
    let held = load_held(dir)?;
    let offer = offer_of(content)?;
    match check_set_change(&offer, &held, pin, &trust_domain) {
        Ok(SetChange::Unchanged) => Ok(SetOutcome::Unchanged(held)),
        Ok(change @ SetChange::Adopt { .. }) => {
            let first = matches!(change, SetChange::Adopt { first: true, .. });
            let next = change.apply(&held);
            store_held(dir, &next)?;
            Ok(SetOutcome::Adopted { held: next, first })
        }
        Err(refusal) => Ok(SetOutcome::Refused { held, refusal }),
    }
}

/// A one-line description of a settle outcome, for bcd's log.
pub fn describe(outcome: &SetOutcome) -> Option<String> {
    match outcome {
        SetOutcome::NoBundle | SetOutcome::Unchanged(_) => None,
        SetOutcome::Adopted { held, first } => Some(format!(
            "approver set {} taken at epoch {}{}",
            held.set.digest(),
            held.epoch,
            if *first { " (first set)" } else { " (signed by the held set)" }
        )),
        SetOutcome::Refused { held, refusal } => Some(format!(
            "the trust bundle's approver set was refused ({refusal}); keeping the held set at epoch {}",
            held.epoch
        )),
    }
}
