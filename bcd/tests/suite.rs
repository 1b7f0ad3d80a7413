//! bcd's integration tests, compiled into one test binary (one link, one process) instead of
//! one per file. Each `tests/*.rs` file is a module here; `common` is declared once for all.
//! Run one file's tests with `cargo test -p bcd --test suite <file>::`.

mod command_support;
mod common;
mod renewal_support;

mod approver_set;
mod cli;
mod command_journal;
mod command_refusals;
mod command_session;
mod evidence;
mod helper_ops;
mod helper_peers;
mod identity_store;
mod join;
mod join_loop;
mod join_trust_bundle;
mod node_key;
mod node_key_tls;
mod node_key_tpm;
mod pinned_verifier;
mod privilege_local;
mod ramdisk;
mod renewal_forged;
mod renewal_lost;
mod session_pushback;
mod session_revocation_notice;
mod site;
mod tpm_answer;
mod tpm_attestor;
mod tpm_client;
mod tpm_support;
mod trust_bundle;
mod verify_join;
mod verify_renewal;
