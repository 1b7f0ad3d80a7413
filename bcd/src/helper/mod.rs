//! `bcd helper` and its clients (spec 002 "Through bcd helper", spec 000 "Under [helper]").
//!
//! The kernel's resource manager filters no TPM command, so whoever can open `/dev/tpmrm0` can
//! change the hierarchies' authorization, clear the TPM or trip its lockout. Under `[helper]`
//! the long-running, network-facing `bcd node` runs unprivileged and never opens the TPM: root's
//! `bcd helper` holds the TPM connection and serves the node's key operations on a Unix socket
//! that only the `[helper] user` may use. The helper builds every TPM command itself, so the
//! node picks no template, handle, hierarchy or authorization; the node checks every answer.
//!
//! | module | job |
//! | --- | --- |
//! | [`privilege`] | who this process is (root or not); the `[helper] user` from the user database |
//! | [`settings`] | `[helper]`: the user and the socket |
//! | [`protocol`] | the wire: one JSON request per line, one answer per line |
//! | [`server`] | `bcd helper`: the socket, the peer check, the five operations on the TPM |
//! | [`client`] | the node's connection to it, with timeouts and typed errors |
//! | [`checks`] | what the node checks in every answer |
//! | [`keys`] | [`keys::HelperTpm`]: node keys, the AK and certifications through the helper |

pub mod checks;
pub mod client;
pub mod keys;
pub mod privilege;
pub mod protocol;
pub mod server;
pub mod settings;
