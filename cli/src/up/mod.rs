//! `bcctl up`: the quickest way to a running control plane on the embedded default. [`cmd`] is
//! the verb (its one sequence and its startup report), [`args`] its command line, and
//! [`config_error`] how a `bcctl serve` configuration error becomes `up`'s (kept here so that
//! `crate::serve` names nothing of `up`).
//!
//! It composes: the server is `crate::serve`'s, the bundle and the token are the verbs'
//! (`crate::verbs::pki`, `crate::verbs::token`), the node's files `crate::deployment::node_setup`.
//! It must never hold a step of its own that `serve` or a verb already has, and nothing but
//! `main` (and the grammar, for [`args`]) imports it.

pub(crate) mod args;
pub(crate) mod cmd;
pub(crate) mod config_error;
