//! `bcctl pki trust-version` and `bcctl pki rotate-command-root`: the published trust bundle
//! compared with this configuration, and the three stages of a command-signing root rotation.
//!
//! - `trust-version` (spec 003 "pki trust-version") reads the published bundle and compares it
//!   with what this configuration would publish ([`crate::serve::trust::configured_bundle`]: the
//!   serve configuration's `[quorum]` over the published roots). Before anything is published it
//!   is NOT_FOUND.
//! - `rotate-command-root --stage add` generates a new command-signing root, writes it into the
//!   PKI bundle beside the current one (re-sealed; `domain::pki::bundle::next`) and publishes it
//!   beside the old root; `--stage switch` makes workers sign under it (refused while a connected
//!   node is behind the published version, unless `--force`); `--stage drop` stops trusting the
//!   former root (at least 24 h after the switch, unless `--force`) and makes the new root the
//!   bundle's own. Out of order is INVALID_STATE. Every stage needs the bundle's keys
//!   (`BC_DEPLOYMENT_SECRET` for a sealed bundle) and prints the roots and the trust version.
//!
//! Errors start with their code; the exit code is 1 (2 for INVALID_INPUT).

use std::path::Path;

use clap::{Args, ValueEnum};
use commands::quorum::{
    drop_command_root, published_bundle, rotate_add_command_root, switch_command_root,
    PublishedBundle, QuorumError, CONNECTED_WINDOW_US,
};
use commands::{Clock, DatabaseClock, SystemClock};
use domain::pki::bundle::next::{generate_command_root, write_bundle_with_next};
use domain::pki::LoadedBundle;
use domain::trust_bundle::validate;
use events::store::{EventStore, LogStore, LogTx, StoreError};
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::deployment::{Deployment, DeploymentError};
use crate::serve::config::{resolve, ConfigError, ServeArgs};

/// How many nodes behind `trust-version` names.
const SAMPLE: usize = 5;

/// Errors of the trust-bundle verbs, each starting with its code.
#[derive(Debug, thiserror::Error)]
pub enum PkiTrustError {
    #[error("{0}")]
    Locate(#[from] crate::deployment::LocateError),
    #[error("NOT_FOUND: no trust bundle is published yet: `bcctl serve` publishes one at start")]
    NotPublished,
    #[error("{0}")]
    Config(#[from] ConfigError),
    #[error("{0}")]
    Deployment(#[from] DeploymentError),
    #[error("INVALID_CONFIG: {0}")]
    InvalidConfig(String),
    #[error("INVALID_STATE: {0}")]
    State(String),
    #[error("{0}")]
    WriteBack(#[from] crate::verbs::pki::common::PkiCmdError),
    #[error("{}", crate::verbs::batch::quorum_message(.0))]
    Quorum(#[from] QuorumError),
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("PKI bundle: {0}")]
    Bundle(#[from] domain::pki::BundleError),
}

/// Where the deployment is (the one rule of [`crate::deployment::DeploymentArgs`]; the serve
/// configuration, `--config` or the directory's `bcctl.toml`, also gives the `[quorum]`).
pub type DeploymentArgs = crate::deployment::CommonArgs;

#[derive(Args)]
pub struct TrustVersionArgs {
    #[command(flatten)]
    pub deployment: DeploymentArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Stage {
    Add,
    Switch,
    Drop,
}

#[derive(Args)]
pub struct RotateArgs {
    #[command(flatten)]
    pub deployment: DeploymentArgs,
    /// add (a new root beside the old), switch (workers sign under it), drop (the old root goes).
    #[arg(long, value_enum)]
    pub stage: Stage,
    /// Switch although connected nodes are behind; drop before 24 h after the switch.
    #[arg(long)]
    pub force: bool,
}

struct Opened {
    settings: crate::serve::config::Settings,
    store: EventStore,
    deployment: Deployment,
}

async fn open(args: &DeploymentArgs) -> Result<Opened, PkiTrustError> {
    let located = args.deployment.locate()?;
    // The serve configuration naming the deployment (the server's own during an admin API call).
    let config = located.config.clone();
    let settings = resolve(&ServeArgs {
        config,
        database_url: Some(located.existing_store_url()?.to_string()),
        pki_bundle: Some(located.deployment.bundle.clone()),
        ..ServeArgs::default()
    })?;
    let deployment = located.deployment.clone();
    let store = crate::deployment::open_at(&settings.database_url).await?;
    Ok(Opened {
        settings,
        store,
        deployment,
    })
}

fn hex_sha(der: &[u8]) -> String {
    hex::encode(Sha256::digest(der))
}

/// `pki trust-version`.
pub async fn trust_version(args: TrustVersionArgs) -> Result<(), PkiTrustError> {
    let opened = open(&args.deployment).await?;
    let public = opened.deployment.open()?.public;
    let trust_domain = domain::quorum::TrustDomain::new(public.trust_domain.as_str())
        .map_err(|e| PkiTrustError::InvalidConfig(format!("trust domain: {e}")))?;
    let published = published_bundle(&opened.store)
        .await?
        .ok_or(PkiTrustError::NotPublished)?;
    let config = crate::serve::trust::configured_bundle(
        &trust_domain,
        &public.command_signing_root_der,
        Some(&published),
        opened.settings.quorum.as_ref(),
        opened.settings.trust_version_floor,
    )
    .map_err(PkiTrustError::InvalidConfig)?;
    let valid = validate(&config).map_err(|e| PkiTrustError::InvalidConfig(e.to_string()))?;
    let matches = valid.digest().as_slice() == published.digest.as_slice();
    let next_version = if matches {
        published.version.max(config.floor)
    } else {
        (published.version + 1).max(config.floor)
    };
    let configured_set = &config.approvers.set;
    let published_set = &published.held.set;
    let set_digest = |s: &domain::quorum::ApproverSet| (!s.is_empty()).then(|| s.digest().to_hex());
    let configured_sha = set_digest(configured_set);
    let published_sha = set_digest(published_set);
    let quorum_changed = configured_set != published_set;
    let connected = connected(&opened.store).await?;
    let behind: Vec<&(String, u64)> = connected
        .iter()
        .filter(|(_, v)| *v < published.version)
        .collect();
    // Nodes enforcing another approver set than the published one (spec 003 "Nodes that hold
    // another set"): with published keys, one without keys, another digest or another epoch;
    // without, any node that still holds a set.
    let sets = commands::quorum::bundle::read::connected_approver_sets(
        &opened.store,
        SystemClock.now_us(),
    )
    .await?;
    let lagging = lagging_approver_sets(&sets, &published);
    let mut out = json!({
        "version": published.version,
        "configurationMatches": matches,
        "nextVersion": next_version,
        "approverSetEpoch": published.held.epoch,
        "approverSetSha256": configured_sha,
        "approverSetBehind": lagging.len(),
        "approverSetSample": lagging
            .iter()
            .take(SAMPLE)
            .map(|n| json!({"nodeId": n.node_id, "epoch": n.epoch}))
            .collect::<Vec<_>>(),
        "quorumChanged": quorum_changed,
        "rotationStage": published.rotation_stage,
        "connectedDaemons": connected.len(),
        "behind": behind.len(),
        "behindSample": behind.iter().take(SAMPLE).map(|(n, v)| json!({"nodeId": n, "trustVersion": v})).collect::<Vec<_>>(),
    });
    if configured_sha != published_sha {
        out["publishedApproverSetSha256"] = json!(published_sha);
    }
    if quorum_changed {
        out["signQuorumForEpoch"] = json!(published.held.epoch + 1);
    }
    if args.deployment.json {
        crate::outln!("{out}");
        return Ok(());
    }
    crate::outln!("trust version:         {}", published.version);
    crate::outln!(
        "configuration matches: {}{}",
        if matches { "yes" } else { "no" },
        if matches {
            String::new()
        } else {
            format!(" (it would publish version {next_version})")
        }
    );
    crate::outln!("approver set epoch:    {}", published.held.epoch);
    crate::outln!(
        "approver set sha256:   {}",
        configured_sha.as_deref().unwrap_or("(no approver keys)")
    );
    if configured_sha != published_sha {
        crate::outln!(
            "  published set:       {}",
            published_sha.as_deref().unwrap_or("(no approver keys)")
        );
    }
    if quorum_changed {
        crate::outln!(
            "quorum changed:        yes: sign it for epoch {} (bcctl batch sign-approvers --epoch {})",
            published.held.epoch + 1,
            published.held.epoch + 1
        );
    }
    crate::outln!(
        "approver set behind:   {} connected node(s) enforce another set",
        lagging.len()
    );
    crate::outln!("rotation stage:        {}", published.rotation_stage);
    crate::outln!(
        "connected daemons:     {} ({} behind version {})",
        connected.len(),
        behind.len(),
        published.version
    );
    Ok(())
}

/// The connected nodes enforcing another approver set than the published one (spec 003 "Nodes
/// that hold another set"): with published keys, one without keys, another digest or another
/// epoch; without, any node that still holds a set. `bcctl doctor` reports them too.
pub(crate) fn lagging_approver_sets<'a>(
    sets: &'a [commands::quorum::bundle::read::ConnectedApproverSet],
    published: &PublishedBundle,
) -> Vec<&'a commands::quorum::bundle::read::ConnectedApproverSet> {
    let published_set = &published.held.set;
    let published_digest = (!published_set.is_empty()).then(|| published_set.digest());
    sets.iter()
        .filter(|n| match &published_digest {
            Some(d) => {
                n.sha256.as_deref() != Some(d.as_bytes().as_slice())
                    || n.epoch != published.held.epoch
            }
            None => n.sha256.is_some(),
        })
        .collect()
}

/// Connected nodes (a session seen within the window) and the trust version each reported.
pub(crate) async fn connected(store: &EventStore) -> Result<Vec<(String, u64)>, PkiTrustError> {
    let now = SystemClock.now_us();
    let mut tx = store.begin().await?;
    let rows = projections::quorum::connected_nodes(&mut tx, now - CONNECTED_WINDOW_US).await;
    let _ = tx.rollback().await;
    Ok(rows?
        .into_iter()
        .map(|r| (r.node_id, r.trust_version))
        .collect())
}

/// `pki rotate-command-root`.
pub async fn rotate(args: RotateArgs) -> Result<(), PkiTrustError> {
    let opened = open(&args.deployment).await?;
    let path = opened.deployment.bundle.clone();
    let secret = opened.deployment.secret()?;
    let loaded = opened.deployment.open()?;
    // A write-back vouches for what it writes: never for a bundle nothing authenticated
    // (`bcctl pki reseal` is the one way to vouch for one).
    crate::verbs::pki::lifecycle::writable(&path, &loaded, opened.deployment.secret()?)?;
    if loaded.keys.is_none() {
        return Err(DeploymentError::Sealed { path }.into());
    }
    let published = published_bundle(&opened.store)
        .await?
        .ok_or(PkiTrustError::NotPublished)?;
    let clock = DatabaseClock::system();
    let store = &opened.store;
    let note = match args.stage {
        Stage::Add => {
            if published.rotation_stage != "none" {
                return Err(PkiTrustError::State(format!(
                    "a rotation is already in progress (stage {}): run `bcctl pki rotate-command-root --stage {}` next",
                    published.rotation_stage,
                    if published.rotation_stage == "added" {
                        "switch"
                    } else {
                        "drop"
                    }
                )));
            }
            let root_der = ensure_next_root(&path, loaded, secret.as_ref())?;
            let settled = rotate_add_command_root(store, &clock, &root_der).await?;
            format!(
                "added command-signing root {} beside the current one (trust version {})",
                hex_sha(&root_der),
                settled.version
            )
        }
        Stage::Switch => {
            let added = published
                .command_signing_roots
                .iter()
                .find(|r| Sha256::digest(r).as_slice() != published.active_root_sha256.as_slice())
                .cloned();
            let holds = |der: &[u8]| {
                loaded
                    .keys
                    .as_ref()
                    .is_some_and(|k| k.command_signing_root.cert_der() == der)
                    || loaded
                        .next_command_signing_root
                        .as_ref()
                        .is_some_and(|r| r.cert_der() == der)
            };
            if published.rotation_stage == "added" {
                if let Some(der) = added.as_deref().filter(|d| !holds(d)) {
                    return Err(PkiTrustError::State(format!(
                        "{} does not hold the key of the added root {}: switch with the bundle `--stage add` wrote",
                        path.display(),
                        hex_sha(der)
                    )));
                }
            }
            let switched = switch_command_root(store, &clock, args.force).await?;
            format!(
                "workers now sign under the new root ({} of {} connected node(s) behind version {})",
                switched.behind, switched.connected, switched.gated_version
            )
        }
        Stage::Drop => {
            let settled = drop_command_root(store, &clock, args.force).await?;
            let after = published_bundle(store)
                .await?
                .ok_or(PkiTrustError::NotPublished)?;
            promote_next(&path, loaded, secret.as_ref(), &after)?;
            format!(
                "dropped the former command-signing root (trust version {})",
                settled.version
            )
        }
    };
    let after = published_bundle(store)
        .await?
        .ok_or(PkiTrustError::NotPublished)?;
    print_roots(&after, &note, args.deployment.json);
    Ok(())
}

/// The rotation's second root in the bundle: the one a former `add` wrote (and did not publish),
/// or a new one, written into the bundle before anything is published so its key is never lost.
fn ensure_next_root(
    path: &Path,
    loaded: LoadedBundle,
    secret: Option<&domain::pki::DeploymentSecret>,
) -> Result<Vec<u8>, PkiTrustError> {
    if let Some(next) = &loaded.next_command_signing_root {
        return Ok(next.cert_der().to_vec());
    }
    let Some(keys) = &loaded.keys else {
        return Err(PkiTrustError::State("the bundle's keys are sealed".into()));
    };
    let next = generate_command_root(keys, time::OffsetDateTime::now_utc())?;
    let bytes = write_bundle_with_next(keys, Some(&next), loaded.protection, secret, loaded.kdf)?;
    replace_file(path, &bytes)?;
    Ok(next.cert_der().to_vec())
}

/// After `drop`: the bundle's second root becomes its root when the former one is no longer
/// published.
fn promote_next(
    path: &Path,
    loaded: LoadedBundle,
    secret: Option<&domain::pki::DeploymentSecret>,
    published: &PublishedBundle,
) -> Result<(), PkiTrustError> {
    let LoadedBundle {
        keys,
        next_command_signing_root: next,
        protection,
        kdf,
        ..
    } = loaded;
    let (Some(mut keys), Some(next)) = (keys, next) else {
        return Ok(());
    };
    let trusted = |der: &[u8]| published.command_signing_roots.iter().any(|r| r == der);
    if trusted(keys.command_signing_root.cert_der()) || !trusted(next.cert_der()) {
        return Ok(());
    }
    keys.command_signing_root = next;
    let bytes = write_bundle_with_next(&keys, None, protection, secret, kdf)?;
    replace_file(path, &bytes)
}

/// Replaces `path` with `bytes` atomically (`common::replace_private`).
fn replace_file(path: &Path, bytes: &[u8]) -> Result<(), PkiTrustError> {
    Ok(crate::verbs::pki::common::replace_private(path, bytes)?)
}

fn print_roots(published: &PublishedBundle, note: &str, as_json: bool) {
    let active = hex::encode(&published.active_root_sha256);
    let roots: Vec<serde_json::Value> = published
        .command_signing_roots
        .iter()
        .map(|r| {
            let sha = hex_sha(r);
            json!({ "sha256": sha, "active": sha == active })
        })
        .collect();
    if as_json {
        crate::outln!(
            "{}",
            json!({
                "version": published.version,
                "rotationStage": published.rotation_stage,
                "activeRootSha256": active,
                "roots": roots,
            })
        );
        return;
    }
    crate::outln!("{note}");
    crate::outln!(
        "trust version {} (rotation stage {})",
        published.version,
        published.rotation_stage
    );
    for r in published.command_signing_roots.iter().map(|r| hex_sha(r)) {
        crate::outln!(
            "  root {r}{}",
            if r == active {
                "  (workers sign here)"
            } else {
                ""
            }
        );
    }
}
