//! `bcd site`: the site agent (spec 000 "Both halves in bcd"). It is `bcd node` for its own
//! identity (the same loop, [`crate::node::run_node`]: renewal, session, revocation) and, beside
//! it, the site's boot server:
//!
//! - it holds the site's boot lease `site:<id>:boot` ([`lease::hold_lease`]): ACQUIRE at start
//!   and whenever it is not held, RENEW every `renew_every_ms`, RELEASE on SIGTERM/SIGINT before
//!   exiting; every change of epoch is logged;
//! - it serves iPXE over plain HTTP ([`http`], [`boot`]): `GET /boot.ipxe?mac=…` answers a
//!   script whose kernel line carries a single-use discovery token (one per MAC and lease epoch,
//!   reused until it nears its expiry: [`cache`]) and an assertion signed by the agent's node
//!   key at the lease epoch; `GET /healthz` the lease state; each client is held to a rate
//!   bound ([`limit`], 429 over it); there is no default address (`[site] listen` or
//!   `--listen`);
//! - it stops vouching (503) the moment the lease lapses by the server's clock, a RENEW answers
//!   `held=false`, or the control plane refuses a boot token at its epoch.
//!
//! | module  | job                                                                 |
//! |---------|---------------------------------------------------------------------|
//! | `run`   | [`run_site`]: the node loop, the lease task, the server, the signals |
//! | `agent` | what the tasks share: the lease view, the identity and its connection |
//! | `view`  | the lease as last answered (pure): vouching, waits, changes          |
//! | `lease` | the task that holds the lease                                       |
//! | `boot`  | `/boot.ipxe` and `/healthz`: the query, the assertion, the script    |
//! | `cache` | one boot token per (MAC, lease epoch), reused while it has time left  |
//! | `limit` | the rate bound per client address                                   |
//! | `http`  | a small HTTP/1.1 server on tokio                                     |

pub mod agent;
pub mod boot;
pub mod cache;
pub mod http;
pub mod lease;
pub mod limit;
mod log_line;
mod run;
pub mod view;

pub use log_line::site_log;
pub use run::{run_site, SiteExit, SiteOptions, STOPPED_MESSAGE};
