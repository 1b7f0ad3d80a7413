//! `bc.wire.v1.NodeService`, the node endpoint's gRPC routes ([`server`]: Join, Renew, Session,
//! SiteLease, BootToken), and what answers them behind it ([`backend`]): the JoinService and the
//! site agent service in this process (`--role all`), or the api process over internal mTLS
//! (`--role gateway`, through `crate::split::relay`). [`site_agent`] holds the site agent's
//! calls in their wire forms.
//!
//! Identity comes from the connection, never from a message. A caller must never learn why it
//! was refused: every Join refusal is PERMISSION_DENIED "Join refused", every Renew refusal
//! "Renew refused", the reasons only in the log and the refusal events. A backend that relays
//! must never hold a signing key: what it answers is signed by the api.

pub mod backend;
pub mod outcomes;
pub mod server;
pub mod site_agent;
