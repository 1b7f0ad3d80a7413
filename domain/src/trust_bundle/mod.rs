//! The published trust bundle's decisions: its content digest, the checks a configuration must
//! pass, settling a configuration into a version, and the three stages of a command-signing root
//! rotation.
//!
//! Spec (`spec/003`), issue 6. The version follows the content: the set of command-signing roots,
//! the approver set and its epoch ([`bundle_digest`]). Set signatures and the active root are not
//! content, so adding a signature or switching the signing root publishes no new version. Every
//! decider is pure (state and time come in as values) and returns a [`Decision`] holding the
//! events to append on the `trust-bundle` stream and what the command answers; the command layer
//! loads the state, calls it, appends the events and commits.
//!
//! One job per module:
//!
//! - [`digest`]: the content digest and root hashes.
//! - [`content`]: the published content, built from domain values and read back into them.
//! - [`config`]: what a process is configured to publish, and its validation.
//! - [`state`]: the published bundle as the deciders read it; their outcomes.
//! - [`event`]: the events they produce.
//! - [`refusal`]: why a decision is refused (and the corrupt-state error).
//! - [`settle`]: settling a configuration.
//! - [`rotate`]: the add, switch and drop stages.
//! - [`report`]: a node's report of the trust it holds.
//! - [`spiffe`]: the trust domain's X.509 authorities as a SPIFFE bundle (JWK Set).
//!
//! [`Decision`]: crate::decision::Decision

pub mod config;
pub mod content;
pub mod digest;
pub mod event;
pub mod refusal;
pub mod report;
pub mod rotate;
pub mod settle;
pub mod spiffe;
pub mod state;

pub use config::{validate, BundleConfig, ValidConfig};
pub use content::{content_of, read_content, ContentError, PublishedContent};
pub use digest::{bundle_digest, root_hashes, root_sha256, set_sha256, sorted_roots};
pub use event::{PublishCause, TrustBundleEvent};
pub use refusal::{TrustBundleError, TrustBundleRefusal};
pub use report::{decide_trust_report, TrustReport};
pub use rotate::{check_new_root, decide_add_root, decide_drop_root, decide_switch_root};
pub use settle::decide_settle;
pub use spiffe::{
    render_spiffe_bundle, x509_authorities, SpiffeBundleError, DEFAULT_REFRESH_HINT_SECS,
};
pub use state::{
    ConnectedNode, PublishedState, RotationStage, SettleOutcome, Settled, Switched,
    CONNECTED_WINDOW_US, DROP_AFTER_SWITCH_US,
};
