//! The domain's integration tests, compiled into one test binary instead of one per file. Each
//! `tests/*.rs` file is a module here; `quorum_support` is declared once for all. Run one file's
//! tests with `cargo test -p domain --test suite <file>::`.

mod cloud_iid_support;
mod discovery_support;
mod quorum_support;
mod tpm_support;

mod attest_admission;
mod audit_merkle;
mod audit_notes;
mod audit_seal;
mod audit_trail;
mod bundle_kdf;
mod cloud_iid;
mod command_enqueue;
mod command_verify;
mod command_wire;
mod discovery_admit;
mod discovery_join;
mod identity_decide;
mod identity_runtime_report;
mod pki_bundle;
mod pki_certificates;
mod pki_crl_distribution_point;
mod pki_lifecycle;
mod pki_operator_ca;
mod pki_tokens;
mod quorum_admission;
mod quorum_admission_cache;
mod quorum_approver_set;
mod quorum_batch_decisions;
mod quorum_golden;
mod quorum_scope;
mod quorum_scope_storage;
mod quorum_trust_bundle;
mod ssh_certificates;
mod tpm_join;
mod tpm_renew;
