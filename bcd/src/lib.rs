//! bcd, the node agent, as a library: everything the agent does on its own machine.
//!
//! | module | job |
//! | --- | --- |
//! | [`config`] | `config.toml`, environment overrides, the three pins |
//! | [`config_template`] | `bcd config template`: every key with its default, checked against the parser |
//! | [`files`] | the data directory: durable 0600 writes, `identity.json` and `node.key`, the PEM files, `revoked.json` |
//! | [`fault`] | fault points the crash tests stop the process at (debug builds only) |
//! | [`token_input`] | where `bcd join` takes its token from (never the command line) |
//! | [`hardware`] | the hardware claims a join sends (product UUID, permanent MACs), and why one is missing |
//! | [`handover`] | under `[helper]`: a root join gives the identity to the helper's user |
//! | [`reset`] | `bcd join --reset [--yes]` |
//! | [`verify_join`] | verifying a JoinResponse against the pins and this request |
//! | [`join`] | the join's local parts and the transport trait |
//! | [`join_tpm`] | where the join's node key is made; `bcd join --attestor tpm`'s producer |
//! | [`join_cmd`] | `bcd join` as a command: credentials, `--reset`, the exchange, then the PEM files |
//! | [`join_loop`] | the join loop: retries, pending waits, challenge rounds, storing |
//! | [`attest`] | the attestors' agent halves: join-token, provisioned, x509pop, `--evidence-command` |
//! | [`renewal`] | a renewal's request parts and the check of its answer |
//! | [`verify_renewal`] | verifying a signed renewal answer before anything is stored |
//! | [`renewal_schedule`] | when to renew and retry (pure) |
//! | [`status`] | `bcd status` and `bcd doctor` |
//! | [`client`] | gRPC over TLS 1.3 pinned to the serving CA; the Join transport |
//! | [`node_key`] | the node key, a PKCS#8 file or held by the TPM; making it where it belongs |
//! | [`agent_cmd`] | `bcd node` and `bcd site` as commands: pins, runtime, the x509pop re-join loop |
//! | [`node`] | `bcd node`: the session, renewal, revocation; doctor's network checks |
//! | [`site`] | `bcd site`: the site agent: `bcd node` plus the boot lease and the iPXE server |
//! | [`ramdisk`] | `bcd ramdisk`: the kernel command line's token and assertion, the discovery join |
//! | [`helper`] | `bcd helper` (root, holds the TPM) and the unprivileged node's client of it |
//! | [`privilege`] | who this process is; the `[helper] user` from the user database |
//! | [`tpm`] | the TPM: EK, AK, activation, quotes, node keys that never leave it (tss-esapi) |
//! | [`tpm_access`] | `bcd doctor`'s `tpm` check: the node's user cannot open the TPM |
//! | [`tpm_show`] | `bcd tpm show`: the EK's SHA-256 to allow-list and the AK's statement |
//! | [`commands`] | signed commands on the machine: verify, admit, `journal.db`, hooks, built-ins |
//! | [`trust`] | the signed trust bundle, checked and kept; the held approver set under the one epoch rule |
//!
//! The network (gRPC over pinned mTLS) plugs in through [`join::JoinTransport`] and
//! [`status::NetworkChecks`].

pub mod admission_store;
pub mod agent_cmd;
pub mod attest;
pub mod client;
pub mod commands;
pub mod config;
pub mod config_template;
pub mod fault;
pub mod files;
pub mod handover;
pub mod hardware;
pub mod helper;
pub mod join;
pub mod join_cmd;
pub mod join_loop;
pub mod join_tpm;
pub mod node;
pub mod node_key;
pub mod privilege;
pub mod ramdisk;
pub mod renewal;
pub mod renewal_schedule;
pub mod reset;
pub mod site;
pub mod status;
pub mod token_input;
pub mod tpm;
pub mod tpm_access;
pub mod tpm_show;
pub mod trust;
pub mod verify_join;
pub mod verify_renewal;

// Old paths kept for users outside bcd (cli's tests, fuzz); bcd itself names the new ones.
pub use files::identity as identity_store;
pub use trust::bundle as trust_bundle;
