//! `bcctl serve`: the server's process. [`roles`] is the verb (resolve the configuration, run the
//! role it names), [`start`] starts `--role all` and the parts the split roles share with it (the
//! core of keys, store, JoinService and audit; the hub; the gateway's configuration; waiting for
//! a stop), [`split`] runs `--role api` and `--role gateway`. Beside them: [`config`] (every key,
//! from file, environment and flags), [`trust`] (settling the trust bundle at start),
//! [`attestors`] (every attestor the server runs, built with the deployment), [`leader`] and
//! [`batches`] (the singleton work under leadership), [`error`] (the errors every file here
//! names).
//!
//! It starts things; it decides nothing a command decides (that is the `commands` crate's) and
//! writes the log only through it. It must never import `crate::up` nor the grammar and the
//! dispatch (`crate::command_line`): `up` starts a server through this folder, and the admin API
//! it serves reaches the verbs through `crate::admin`.

pub(crate) mod attestors;
pub(crate) mod batches;
pub(crate) mod config;
pub(crate) mod error;
pub(crate) mod leader;
pub(crate) mod roles;
pub(crate) mod split;
pub(crate) mod start;
pub(crate) mod trust;
pub(crate) mod watch;
