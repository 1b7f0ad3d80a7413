//! bcd, the node agent, as a library: everything the agent does on its own machine.
//!
//! | module | job |
//! | --- | --- |
//! | [`config`] | `config.toml`, environment overrides, the three pins; `bcd config template` |
//! | [`clock`] | the machine's clock (a test may set it off, debug builds only) and the trusted time signed commands are judged at |
//! | [`files`] | the data directory: durable 0600 writes, `identity.json` and `node.key`, the PEM files, `revoked.json` |
//! | [`fault`] | fault points the crash tests stop the process at (debug builds only) |
//! | [`join`] | `bcd join` and `bcd ramdisk`: the token, the request, the join loop, verifying the answer, reset, hand-over |
//! | [`attest`] | the attestors' agent halves: join-token, provisioned, x509pop, `--evidence-command` |
//! | [`renewal`] | when to renew, the request's parts, verifying the signed answer |
//! | [`status`] | `bcd status` and `bcd doctor` (its local checks, the TPM access check) |
//! | [`client`] | gRPC over TLS 1.3 pinned to the serving CA; the Join transport |
//! | [`node_key`] | the node key, a PKCS#8 file or held by the TPM; making it where it belongs |
//! | [`node`] | `bcd node` and `bcd site` as commands; the session, renewal, revocation; doctor's network checks |
//! | [`site`] | `bcd site`: the site agent: `bcd node` plus the boot lease and the iPXE server |
//! | [`helper`] | `bcd helper` (root, holds the TPM), the unprivileged node's client of it, who this process is |
//! | [`tpm`] | the TPM: EK, AK, activation, quotes, node keys that never leave it (tss-esapi); `bcd tpm show` |
//! | [`signed_commands`] | signed commands on the machine: verify, the approver quorum check, `journal.db`, hooks, built-ins |
//! | [`trust`] | the signed trust bundle, checked and kept; the held approver set under the one epoch rule |
//!
//! The network (gRPC over pinned mTLS) plugs in through [`join::request::JoinTransport`] and
//! [`status::NetworkChecks`].

pub mod attest;
pub mod client;
pub mod clock;
pub mod config;
pub mod fault;
pub mod files;
pub mod helper;
pub mod join;
pub mod node;
pub mod node_key;
pub mod renewal;
pub mod signed_commands;
pub mod site;
pub mod status;
pub mod tpm;
pub mod trust;

// Old paths kept for users outside bcd (cli's tests, fuzz); bcd itself names the new ones.
pub use files::identity as identity_store;
pub use join::hardware;
pub use join::verify as verify_join;
pub use trust::bundle as trust_bundle;
