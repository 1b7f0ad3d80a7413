//! Every verb bcctl runs in-process, one file or folder per noun of the command line (`bcctl
//! node …` is [`node`], `bcctl pki …` is [`pki`], `bcctl migrate` and `bcctl status` are
//! [`store`]): its arguments, its `run`, its error and exit codes, its output. `up` and `serve`,
//! which start servers, are `crate::up` and `crate::serve`.
//!
//! A verb reaches the store through the `commands` and `events` crates, prints through
//! `crate::outln!` and friends (`crate::invocation`) so that the admin API can run it for a
//! caller, and finds its deployment through `crate::deployment`. A verb must never import the
//! grammar or the dispatch (`crate::command_line`): they name the verbs, not the other way round.
//! Verbs share through the few helpers they name (`token`'s table printer and identity
//! arguments, `pki::common`), never through this file, which only declares them.

pub(crate) mod attestor;
pub(crate) mod audit;
pub(crate) mod batch;
pub(crate) mod bundle;
pub(crate) mod cloud;
pub(crate) mod command;
pub(crate) mod config_template;
pub(crate) mod doctor;
pub(crate) mod events;
pub(crate) mod healthcheck;
pub(crate) mod join_request;
pub(crate) mod node;
pub(crate) mod oidc;
pub(crate) mod operator;
pub(crate) mod pki;
pub(crate) mod pool;
pub(crate) mod rebuild;
pub(crate) mod replay;
pub(crate) mod site;
pub(crate) mod ssh;
pub(crate) mod store;
pub(crate) mod tenant;
pub(crate) mod token;
pub(crate) mod tpm;
