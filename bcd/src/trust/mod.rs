//! What the node trusts beyond its three pins: the trust bundle the JoinService signs (the node
//! CAs, the command-signing roots, an approver set offered at an epoch) and the approver set the
//! node holds, whose quorum a destructive command must carry ([`crate::signed_commands::quorum`]).
//!
//! | module | holds |
//! | --- | --- |
//! | [`bundle`] | a `Welcome`'s (or a join answer's) signed trust bundle: checked, then kept in `identity.json` |
//! | [`approver_set`] | the held approver set (`approver-set.json`) under the one epoch rule |
//!
//! Nothing here ever trusts what the gateway relays before it verified under the pinned join
//! signing key, goes back to a bundle older than the one held, or replaces a held approver set
//! with one its held quorum did not sign at a higher epoch.

pub mod approver_set;
pub mod bundle;
