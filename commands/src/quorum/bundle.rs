//! The published trust bundle: settling a configuration, approver-set changes, command-signing
//! root rotation and the trust versions nodes report.
//!
//! The version follows the content. The content is the set of command-signing roots, the approver
//! set (approverSetInput) and its epoch; its digest is SHA-256 over purpose `trust-bundle` and
//! `[root SHA-256s in ascending order, concatenated; approverSetInput; uint64_be(epoch)]` framed
//! as `domain::quorum::signing::signed_parts`. Set signatures and the active root are not content:
//! adding a signature or switching the signing root does not publish a new version.
//!
//! Settling (`settle_trust_bundle`), in one transaction on the `trust-bundle` stream with an
//! exact expected version, so two processes with the same configuration agree (the loser of a
//! race re-reads and finds the content published):
//!
//! - nothing published yet: publish at max(1, floor);
//! - the same digest as published: keep the version (republish at the floor if the floor is
//!   above it);
//! - a digest published before and since replaced: serve it at its old version and warn, change
//!   nothing (unless the floor is above the published version, which publishes it again);
//! - new content: publish at max(published + 1, floor), after `domain::quorum::decide_set_change`
//!   took the approver part (first set without signatures, pin checked; later sets only at a
//!   higher epoch signed by the current threshold of current keys in this trust domain).

use domain::quorum::signing::signed_parts;
use domain::quorum::{
    decide_set_change, ApproverKey, ApproverSet, ApproverSetOffer, HeldApproverSet, SetChange,
    SetDigest, SetSignature, Tier, TrustDomain,
};
use events::schema::{
    ApproverKeyEntry, ApproverSetChanged, CommandRootAdded, CommandRootDropped,
    CommandRootSwitched, NodeTrustReported, QuorumSignature, QuorumTier, TrustBundleContent,
    TrustBundlePublished,
};
use events::store::{EventStore, ExpectedVersion, LogStore, LogTx, StoreTx};
use events::NewEvent;
use projections::quorum::{
    connected_nodes, history_version_of, read_bundle_state, read_history, BundleStateRow,
    HistoryRow,
};
use prost::Message;
use sha2::{Digest, Sha256};

use super::{
    new_event_id, projections, refused, QuorumError, QuorumRefusal, DEPLOYMENT_TENANT,
    TRUST_BUNDLE_STREAM,
};
use crate::clock::Clock;
use crate::run::append_and_project;

/// A node is connected when its session has not ended and it was seen within this window.
pub const CONNECTED_WINDOW_US: i64 = 120 * 1_000_000;
/// The drop stage waits this long after the switch (worker keys live at most 24 h).
pub const DROP_AFTER_SWITCH_US: i64 = 24 * 3600 * 1_000_000;

/// What a process is configured to publish.
#[derive(Debug, Clone)]
pub struct BundleConfig {
    /// The deployment's trust domain (set signatures are checked in it).
    pub trust_domain: TrustDomain,
    /// Command-signing root certificates (DER) the bundle trusts.
    pub command_signing_roots: Vec<Vec<u8>>,
    /// The root workers sign under (DER; one of `command_signing_roots`). Empty only without roots.
    pub active_root: Vec<u8>,
    /// The approver set offered, its epoch and its signatures (`ApproverSet::none()` at epoch 0
    /// for no quorum).
    pub approvers: ApproverSetOffer,
    /// pki.trustVersion: the published version is never below it.
    pub floor: u64,
    /// The first-set pin (SHA-256 of approverSetInput), if the operator set one.
    pub pin: Option<SetDigest>,
}

/// How a settle ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettleOutcome {
    /// A new version was published.
    Published { previous: u64 },
    /// The configuration is what is published.
    Unchanged,
    /// The configuration is a bundle published before and since replaced: it is served at its
    /// old version (which daemons ignore) and the record is not changed.
    Stale { published: u64 },
}

/// The version this process serves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    pub version: u64,
    pub digest: [u8; 32],
    pub outcome: SettleOutcome,
    /// A warning to log (a stale configuration).
    pub warning: Option<String>,
}

/// The published bundle as the store holds it.
#[derive(Debug, Clone)]
pub struct PublishedBundle {
    pub version: u64,
    pub digest: Vec<u8>,
    pub command_signing_roots: Vec<Vec<u8>>,
    pub active_root_sha256: Vec<u8>,
    /// `none`, `added` or `switched`.
    pub rotation_stage: String,
    pub held: HeldApproverSet,
    pub set_signatures: Vec<SetSignature>,
    pub floor: u64,
    pub history: Vec<HistoryRow>,
}

/// A node's report of the trust version it holds.
#[derive(Debug, Clone)]
pub struct TrustReport {
    pub tenant_id: String,
    pub node_id: String,
    pub trust_version: u64,
    /// Hello (sets the version as reported) rather than a StatusReport (only raises it).
    pub session_start: bool,
    /// False when the session ended.
    pub connected: bool,
}

fn root_hashes(roots: &[Vec<u8>]) -> Vec<[u8; 32]> {
    roots.iter().map(|r| Sha256::digest(r).into()).collect()
}

/// The content digest of a bundle (see the module docs).
pub fn bundle_digest(roots: &[Vec<u8>], set: &ApproverSet, epoch: u64) -> [u8; 32] {
    let mut hashes = root_hashes(roots);
    hashes.sort_unstable();
    let concatenated: Vec<u8> = hashes.concat();
    let framed = signed_parts(
        "trust-bundle",
        &[&concatenated, &set.encode(), &epoch.to_be_bytes()],
    );
    Sha256::digest(framed).into()
}

fn sorted_roots(roots: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut roots: Vec<Vec<u8>> = roots.to_vec();
    roots.sort_by_key(|r| <[u8; 32]>::from(Sha256::digest(r)));
    roots
}

fn content_of(
    roots: &[Vec<u8>],
    set: &ApproverSet,
    epoch: u64,
    signatures: &[SetSignature],
) -> TrustBundleContent {
    TrustBundleContent {
        command_signing_roots: sorted_roots(roots),
        approver_keys: set
            .keys()
            .iter()
            .map(|k| ApproverKeyEntry {
                kid: k.kid().as_bytes().to_vec(),
                spki_der: k.spki_der().to_vec(),
            })
            .collect(),
        approver_threshold: set.threshold(),
        quorum_tiers: set
            .tiers()
            .iter()
            .map(|t| QuorumTier {
                max_scope_size: t.max_scope_size,
                threshold: t.threshold,
            })
            .collect(),
        unbatched_destructive_per_hour: set.unbatched_per_hour(),
        approver_set_epoch: epoch,
        approver_set_signatures: signatures
            .iter()
            .map(|s| QuorumSignature {
                kid: s.kid.as_bytes().to_vec(),
                sig: s.sig.clone(),
            })
            .collect(),
    }
}

/// Reads a stored content back into the approver set, its epoch and signatures.
fn decode_content(
    row: &BundleStateRow,
) -> Result<(TrustBundleContent, HeldApproverSet, Vec<SetSignature>), QuorumError> {
    let content = TrustBundleContent::decode(row.content.as_slice())
        .map_err(|e| QuorumError::Corrupt(format!("trust_bundle_state.content: {e}")))?;
    let keys = content
        .approver_keys
        .iter()
        .map(|k| ApproverKey::from_wire(&k.kid, &k.spki_der))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| QuorumError::Corrupt(format!("published approver key: {e}")))?;
    let set = if keys.is_empty() {
        ApproverSet::none()
    } else {
        ApproverSet::new(
            keys,
            content.approver_threshold,
            content
                .quorum_tiers
                .iter()
                .map(|t| Tier {
                    max_scope_size: t.max_scope_size,
                    threshold: t.threshold,
                })
                .collect(),
            content.unbatched_destructive_per_hour,
        )
        .map_err(|e| QuorumError::Corrupt(format!("published approver set: {e}")))?
    };
    let signatures = content
        .approver_set_signatures
        .iter()
        .map(|s| {
            domain::quorum::Kid::from_slice(&s.kid)
                .map(|kid| SetSignature {
                    kid,
                    sig: s.sig.clone(),
                })
                .map_err(|e| QuorumError::Corrupt(format!("published set signature: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let held = HeldApproverSet {
        set,
        epoch: content.approver_set_epoch,
    };
    Ok((content, held, signatures))
}

/// The approver set currently published (none before any bundle), read in `tx`.
pub(crate) async fn current_set(tx: &mut StoreTx) -> Result<HeldApproverSet, QuorumError> {
    match read_bundle_state(tx).await? {
        None => Ok(HeldApproverSet::initial()),
        Some(row) => Ok(decode_content(&row)?.1),
    }
}

fn validate(config: &BundleConfig) -> Result<(), QuorumError> {
    let mut hashes = root_hashes(&config.command_signing_roots);
    if config.command_signing_roots.iter().any(|r| r.is_empty()) {
        return refused(QuorumRefusal::InvalidConfig(
            "a command-signing root is empty: give the root certificate's DER".to_string(),
        ));
    }
    hashes.sort_unstable();
    if hashes.windows(2).any(|w| w[0] == w[1]) {
        return refused(QuorumRefusal::InvalidConfig(
            "a command-signing root is listed twice".to_string(),
        ));
    }
    if !config.approvers.set.is_empty() && config.command_signing_roots.is_empty() {
        return refused(QuorumRefusal::InvalidConfig(
            "approver keys need a command-signing root in the bundle (pki.commandSigning)"
                .to_string(),
        ));
    }
    if !config.approvers.set.is_empty() && config.approvers.epoch == 0 {
        return refused(QuorumRefusal::InvalidConfig(
            "an approver set needs an epoch of 1 or more (pki.approvers.epoch)".to_string(),
        ));
    }
    if !config.command_signing_roots.is_empty()
        && !config.command_signing_roots.contains(&config.active_root)
    {
        return refused(QuorumRefusal::InvalidConfig(
            "the active command-signing root (pki.commandSigning) is not among the trusted roots"
                .to_string(),
        ));
    }
    Ok(())
}

struct Publication {
    content: TrustBundleContent,
    digest: [u8; 32],
    version: u64,
    previous: u64,
    floor: u64,
    cause: &'static str,
    active_root_sha256: Vec<u8>,
    set_sha256: Vec<u8>,
}

fn published_event(now_us: i64, p: Publication) -> NewEvent {
    NewEvent::from_payload(
        new_event_id(),
        DEPLOYMENT_TENANT,
        now_us,
        &TrustBundlePublished {
            version: p.version,
            digest: p.digest.to_vec(),
            content: Some(p.content),
            previous_version: p.previous,
            floor: p.floor,
            cause: p.cause.to_string(),
            active_root_sha256: p.active_root_sha256,
            approver_set_sha256: p.set_sha256,
        },
    )
}

fn set_sha256(set: &ApproverSet) -> Vec<u8> {
    if set.is_empty() {
        Vec::new()
    } else {
        set.digest().as_bytes().to_vec()
    }
}

fn expected(state: Option<&BundleStateRow>) -> ExpectedVersion {
    match state {
        None => ExpectedVersion::NoStream,
        Some(row) => ExpectedVersion::Exact(row.stream_version),
    }
}

/// Settles this configuration's bundle: publishes it at the version its content calls for, or
/// reports the version it is already published at (see the module docs).
pub async fn settle_trust_bundle(
    store: &EventStore,
    clock: &dyn Clock,
    config: &BundleConfig,
) -> Result<Settled, QuorumError> {
    validate(config)?;
    let digest = bundle_digest(
        &config.command_signing_roots,
        &config.approvers.set,
        config.approvers.epoch,
    );
    crate::transaction!(store, QuorumError, |tx| {
        let now_us = clock.now_us();
        let state = read_bundle_state(tx).await?;
        let (held, previous, active) = match &state {
            None => (HeldApproverSet::initial(), 0, None),
            Some(row) => {
                let (_, held, _) = decode_content(row)?;
                if row.digest == digest {
                    if config.floor <= row.version {
                        return Ok(Settled {
                            version: row.version,
                            digest,
                            outcome: SettleOutcome::Unchanged,
                            warning: None,
                        });
                    }
                } else if let Some(old) = history_version_of(tx, &digest).await? {
                    if config.floor <= row.version {
                        return Ok(Settled {
                            version: old,
                            digest,
                            outcome: SettleOutcome::Stale {
                                published: row.version,
                            },
                            warning: Some(format!(
                                "this configuration's trust bundle was published as version {old} \
                                 and has since been replaced (the deployment publishes version {}); \
                                 serving it at version {old}, which daemons ignore: update this \
                                 process's configuration, or raise pki.trustVersion above {} to \
                                 publish it again",
                                row.version, row.version
                            )),
                        });
                    }
                }
                (held, row.version, Some(row.active_root_sha256.clone()))
            }
        };
        let change = if state.as_ref().is_some_and(|row| row.digest == digest) {
            SetChange::Unchanged
        } else {
            decide_set_change(
                &config.approvers,
                &held,
                config.pin.as_ref(),
                &config.trust_domain,
            )
            .map_err(QuorumRefusal::SetChange)?
        };
        let version = (previous + 1).max(config.floor).max(1);
        let config_active: Vec<u8> = if config.active_root.is_empty() {
            Vec::new()
        } else {
            Sha256::digest(&config.active_root).to_vec()
        };
        let roots = root_hashes(&config.command_signing_roots);
        let active_root_sha256 = match active {
            Some(a) if roots.iter().any(|r| r.as_slice() == a.as_slice()) => a,
            _ => config_active,
        };
        let mut events = vec![published_event(
            now_us,
            Publication {
                content: content_of(
                    &config.command_signing_roots,
                    &config.approvers.set,
                    config.approvers.epoch,
                    &config.approvers.signatures,
                ),
                digest,
                version,
                previous,
                floor: config.floor,
                cause: if state.as_ref().is_some_and(|row| row.digest == digest) {
                    "floor"
                } else {
                    "settled"
                },
                active_root_sha256,
                set_sha256: set_sha256(&config.approvers.set),
            },
        )];
        if let SetChange::Adopt {
            held: new,
            first,
            signed_by,
        } = &change
        {
            events.push(NewEvent::from_payload(
                new_event_id(),
                DEPLOYMENT_TENANT,
                now_us,
                &ApproverSetChanged {
                    epoch: new.epoch,
                    approver_set_sha256: new.set.digest().as_bytes().to_vec(),
                    first: *first,
                    signed_by: signed_by.iter().map(|k| k.as_bytes().to_vec()).collect(),
                    previous_epoch: held.epoch,
                },
            ));
        }
        append_and_project(
            tx,
            &projections(),
            TRUST_BUNDLE_STREAM,
            expected(state.as_ref()),
            &events,
        )
        .await?;
        Ok(Settled {
            version,
            digest,
            outcome: SettleOutcome::Published { previous },
            warning: None,
        })
    })
}

/// The published bundle, or `None` before any process published one.
pub async fn published_bundle(store: &EventStore) -> Result<Option<PublishedBundle>, QuorumError> {
    let mut tx = store.begin().await?;
    let result = async {
        let Some(row) = read_bundle_state(&mut tx).await? else {
            return Ok(None);
        };
        let (content, held, set_signatures) = decode_content(&row)?;
        let history = read_history(&mut tx).await?;
        Ok(Some(PublishedBundle {
            version: row.version,
            digest: row.digest,
            command_signing_roots: content.command_signing_roots,
            active_root_sha256: row.active_root_sha256,
            rotation_stage: row.rotation_stage,
            held,
            set_signatures,
            floor: row.floor,
            history,
        }))
    }
    .await;
    let _ = tx.rollback().await;
    result
}

async fn require_state(tx: &mut StoreTx) -> Result<BundleStateRow, QuorumError> {
    match read_bundle_state(tx).await? {
        Some(row) => Ok(row),
        None => refused(QuorumRefusal::InvalidState(
            "no trust bundle is published yet: start the server (or settle the configuration) first"
                .to_string(),
        )),
    }
}

/// Stage 1: trust `new_root_der` beside the current root; the version goes up.
pub async fn rotate_add_command_root(
    store: &EventStore,
    clock: &dyn Clock,
    new_root_der: &[u8],
) -> Result<Settled, QuorumError> {
    if new_root_der.is_empty() {
        return refused(QuorumRefusal::InvalidConfig(
            "the new command-signing root is empty".to_string(),
        ));
    }
    crate::transaction!(store, QuorumError, |tx| {
        let now_us = clock.now_us();
        let row = require_state(tx).await?;
        if row.rotation_stage != "none" {
            return refused(QuorumRefusal::InvalidState(format!(
                "a rotation is already in progress (stage {}): run --stage {} next",
                row.rotation_stage,
                if row.rotation_stage == "added" {
                    "switch"
                } else {
                    "drop"
                }
            )));
        }
        let (content, held, signatures) = decode_content(&row)?;
        let new_hash: [u8; 32] = Sha256::digest(new_root_der).into();
        let mut roots = content.command_signing_roots.clone();
        if root_hashes(&roots).contains(&new_hash) {
            return refused(QuorumRefusal::InvalidState(
                "that root is already trusted by the published bundle".to_string(),
            ));
        }
        if roots.len() != 1 {
            return refused(QuorumRefusal::InvalidState(format!(
                "the published bundle trusts {} command-signing roots; a rotation starts from exactly one",
                roots.len()
            )));
        }
        roots.push(new_root_der.to_vec());
        let digest = bundle_digest(&roots, &held.set, held.epoch);
        let version = (row.version + 1).max(row.floor);
        let events = [
            NewEvent::from_payload(
                new_event_id(),
                DEPLOYMENT_TENANT,
                now_us,
                &CommandRootAdded {
                    root_der: new_root_der.to_vec(),
                    root_sha256: new_hash.to_vec(),
                },
            ),
            published_event(
                now_us,
                Publication {
                    content: content_of(&roots, &held.set, held.epoch, &signatures),
                    digest,
                    version,
                    previous: row.version,
                    floor: row.floor,
                    cause: "rotation-add",
                    active_root_sha256: row.active_root_sha256.clone(),
                    set_sha256: set_sha256(&held.set),
                },
            ),
        ];
        append_and_project(
            tx,
            &projections(),
            TRUST_BUNDLE_STREAM,
            ExpectedVersion::Exact(row.stream_version),
            &events,
        )
        .await?;
        Ok(Settled {
            version,
            digest,
            outcome: SettleOutcome::Published {
                previous: row.version,
            },
            warning: None,
        })
    })
}

/// The result of a switch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Switched {
    pub gated_version: u64,
    pub connected: usize,
    /// Connected nodes behind the version (non-zero only with `force`).
    pub behind: usize,
}

/// Stage 2: workers sign under the new root. Refused while a connected node reports a trust
/// version below the published one (which carries the new root), unless `force`.
pub async fn switch_command_root(
    store: &EventStore,
    clock: &dyn Clock,
    force: bool,
) -> Result<Switched, QuorumError> {
    crate::transaction!(store, QuorumError, |tx| {
        let now_us = clock.now_us();
        let row = require_state(tx).await?;
        if row.rotation_stage != "added" {
            return refused(QuorumRefusal::InvalidState(format!(
                "switch comes after add: the rotation is at stage {}",
                row.rotation_stage
            )));
        }
        let Some(to) = row.rotation_root_sha256.clone() else {
            return Err(QuorumError::Corrupt(
                "rotation stage added without its root".to_string(),
            ));
        };
        let nodes = connected_nodes(tx, now_us - CONNECTED_WINDOW_US).await?;
        let behind: Vec<_> = nodes
            .iter()
            .filter(|n| n.trust_version < row.version)
            .collect();
        if !behind.is_empty() && !force {
            let sample = behind
                .iter()
                .take(5)
                .map(|n| format!("{} at {}", n.node_id, n.trust_version))
                .collect::<Vec<_>>()
                .join(", ");
            return refused(QuorumRefusal::NodesBehind {
                behind: behind.len(),
                connected: nodes.len(),
                version: row.version,
                sample,
            });
        }
        let event = NewEvent::from_payload(
            new_event_id(),
            DEPLOYMENT_TENANT,
            now_us,
            &CommandRootSwitched {
                from_sha256: row.active_root_sha256.clone(),
                to_sha256: to,
                gated_version: row.version,
                forced: force,
                behind: u32::try_from(behind.len()).unwrap_or(u32::MAX),
            },
        );
        append_and_project(
            tx,
            &projections(),
            TRUST_BUNDLE_STREAM,
            ExpectedVersion::Exact(row.stream_version),
            &[event],
        )
        .await?;
        Ok(Switched {
            gated_version: row.version,
            connected: nodes.len(),
            behind: behind.len(),
        })
    })
}

/// Stage 3: the former root is no longer trusted; the version goes up. Refused less than 24 h
/// after the switch (worker keys live at most 24 h), unless `force`.
pub async fn drop_command_root(
    store: &EventStore,
    clock: &dyn Clock,
    force: bool,
) -> Result<Settled, QuorumError> {
    crate::transaction!(store, QuorumError, |tx| {
        let now_us = clock.now_us();
        let row = require_state(tx).await?;
        if row.rotation_stage != "switched" {
            return refused(QuorumRefusal::InvalidState(format!(
                "drop comes after switch: the rotation is at stage {}",
                row.rotation_stage
            )));
        }
        let switched_at = row.switched_at_us.unwrap_or(i64::MIN);
        if !force && now_us.saturating_sub(switched_at) < DROP_AFTER_SWITCH_US {
            return refused(QuorumRefusal::InvalidState(
                "the switch was less than 24 hours ago: worker certificates under the old root may \
                 still be valid; drop later or use --force"
                    .to_string(),
            ));
        }
        let (content, held, signatures) = decode_content(&row)?;
        let roots: Vec<Vec<u8>> = content
            .command_signing_roots
            .iter()
            .filter(|r| Sha256::digest(r).as_slice() == row.active_root_sha256.as_slice())
            .cloned()
            .collect();
        let dropped: Vec<[u8; 32]> = root_hashes(&content.command_signing_roots)
            .into_iter()
            .filter(|h| h.as_slice() != row.active_root_sha256.as_slice())
            .collect();
        let Some(old) = dropped.first() else {
            return Err(QuorumError::Corrupt(
                "rotation stage switched without a former root".to_string(),
            ));
        };
        let digest = bundle_digest(&roots, &held.set, held.epoch);
        let version = (row.version + 1).max(row.floor);
        let events = [
            NewEvent::from_payload(
                new_event_id(),
                DEPLOYMENT_TENANT,
                now_us,
                &CommandRootDropped {
                    root_sha256: old.to_vec(),
                },
            ),
            published_event(
                now_us,
                Publication {
                    content: content_of(&roots, &held.set, held.epoch, &signatures),
                    digest,
                    version,
                    previous: row.version,
                    floor: row.floor,
                    cause: "rotation-drop",
                    active_root_sha256: row.active_root_sha256.clone(),
                    set_sha256: set_sha256(&held.set),
                },
            ),
        ];
        append_and_project(
            tx,
            &projections(),
            TRUST_BUNDLE_STREAM,
            ExpectedVersion::Exact(row.stream_version),
            &events,
        )
        .await?;
        Ok(Settled {
            version,
            digest,
            outcome: SettleOutcome::Published {
                previous: row.version,
            },
            warning: None,
        })
    })
}

/// Records a node's trust report (the node sessions call this on Hello, StatusReport and end).
pub async fn report_node_trust(
    store: &EventStore,
    clock: &dyn Clock,
    report: &TrustReport,
) -> Result<(), QuorumError> {
    crate::transaction!(store, QuorumError, |tx| {
        let event = NewEvent::from_payload(
            new_event_id(),
            report.tenant_id.clone(),
            clock.now_us(),
            &NodeTrustReported {
                node_id: report.node_id.clone(),
                trust_version: report.trust_version,
                session_start: report.session_start,
                connected: report.connected,
            },
        );
        append_and_project(
            tx,
            &projections(),
            &format!("node-trust/{}", report.node_id),
            ExpectedVersion::Any,
            &[event],
        )
        .await?;
        Ok(())
    })
}
