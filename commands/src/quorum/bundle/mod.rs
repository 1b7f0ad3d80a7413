//! The published trust bundle's handlers: settling a configuration, command-signing root
//! rotation (add, switch, drop), the published bundle as the CLI shows it, and the trust versions
//! nodes report. Every decision is `domain::trust_bundle`'s; these load, decide, append, project
//! and commit.
//!
//! - [`settle`]: settling this process's configuration.
//! - [`rotate`]: the three rotation stages.
//! - [`read`]: the published bundle with its history.
//! - [`report`]: recording a node's trust report.
//! - `load`: the shared steps (the published state as the deciders read it, decided events as
//!   log events).

pub(crate) mod load;
pub mod read;
pub mod report;
pub mod rotate;
pub mod settle;

pub use read::{published_bundle, PublishedBundle};
pub use report::{report_node_trust, TrustReport};
pub use rotate::{drop_command_root, rotate_add_command_root, switch_command_root};
pub use settle::settle_trust_bundle;
