//! The command handlers' integration tests, compiled into one test binary instead of one per
//! file. Each `tests/*.rs` file is a module here; the shared fixtures (`audit_support`,
//! `identity_support`, `quorum_support`) are declared once for all. Run one file's tests with
//! `cargo test -p commands --test suite <file>::`.

// Four tests at once: this suite mostly waits on Postgres, processes and timers (at the default
// of one per core it took about twice as long on the CI machine; decision 0093).
events::suite_test_threads!("4");

mod audit_support;
// The cloud of the cloud-iid tests (keys, tokens, documents), shared with domain's tests.
#[path = "../../domain/tests/cloud_iid_support.rs"]
mod cloud_iid_support;
mod identity_support;
mod quorum_support;
mod site_support;
// The TPM test client of domain's tests (swtpm driven by tpm2-tools), shared rather than copied.
#[path = "../../domain/tests/tpm_support.rs"]
mod tpm_support;
mod x509pop_support;

mod attest_admission;
mod attest_commands;
mod attest_projections;
mod attestor_entries;
mod audit_sequencer;
mod audit_worked_example;
mod batch_payload_types;
mod cloud_iid_join;
mod command_queue;
mod command_queue_batches;
mod command_queue_replay;
mod database_time;
mod discovery_race;
mod dispatch_kinds;
mod handlers_are_send;
mod identity_attestors;
mod identity_core;
mod identity_maintenance;
mod identity_races;
mod join_answered_again;
mod join_replay;
mod leadership;
mod node_claims;
mod node_names;
mod node_runtime;
mod oidc_issuer;
mod pool_policy;
mod projection_runner;
mod provisioned_join;
mod quorum_commands;
mod quorum_concurrency;
mod quorum_replay;
mod quorum_scope_storage;
mod ramdisk_certs;
mod rebuild_pipeline;
mod refusal_budget;
mod remote_attestor;
mod renew_guard;
mod site_commands;
mod site_facts;
mod status_truths;
mod tenant_lifecycle;
mod tpm_allows;
mod tpm_join;
mod x509pop_join;
mod x509pop_python;
