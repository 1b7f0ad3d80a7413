//! Joining: `bcd join` (a token, an attestor, `--reset`) and `bcd ramdisk`, from the credential
//! to the identity stored, the PEM files written and, under `[helper]`, handed over.
//!
//! | module | holds |
//! | --- | --- |
//! | [`command`] | `bcd join` as a command: the attestor and credential, `--reset`, the exchange, the PEM files |
//! | [`token_input`] | where `bcd join` takes its token from (never the command line) |
//! | [`request`] | the join minus the network: key, CSR, the token sealed to the pinned key; [`request::JoinTransport`] |
//! | [`key`] | where the join's node key is made; `--attestor tpm`'s producer on the TPM |
//! | [`pending`] | `join.pending`: a request sent and not answered, sent again by the next join |
//! | [`hardware`] | the hardware claims a join sends (product UUID, permanent MACs, hostname, serials, GPU UUIDs, boot id), and why one is missing |
//! | [`exchange`] | the join loop: retries, pending waits, challenge rounds, storing the verified answer |
//! | [`verify`] | verifying a JoinResponse against the pins and this request before anything is used |
//! | [`handover`] | under `[helper]`: a root join gives the identity to the helper's user |
//! | [`reset`] | `bcd join --reset [--yes]`: the identity moved aside, nothing deleted |
//! | [`ramdisk`] | `bcd ramdisk`: the kernel command line's token and assertion, the discovery join |
//!
//! The attestors' agent halves (the evidence a join sends) are [`crate::attest`]; the network
//! call is [`crate::client::GrpcJoinTransport`]; storing is [`crate::files::identity`].
//!
//! A join never takes its token from the command line, never sends it unsealed, and never
//! writes anything of an answer before [`verify`] accepted it under the pinned signing key.

pub mod command;
pub mod exchange;
pub mod handover;
pub mod hardware;
pub mod key;
pub mod pending;
pub mod ramdisk;
pub mod request;
pub mod reset;
pub mod token_input;
pub mod verify;

// The join's old paths (`bcd::join::prepare_join`, when request.rs was join.rs), kept for
// cli's tests; bcd itself names `join::request`.
pub use request::{prepare_join, PreparedJoin};
