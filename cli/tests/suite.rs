//! The `cli` crate's integration tests (the real `bcctl` and `bcd` binaries), compiled into one
//! test binary instead of one per file. Each `tests/*.rs` file is a module here; `support` is
//! declared once for all. Run one file's tests with `cargo test -p cli --test suite <file>::`.

mod support;
// The cloud of the cloud-iid tests (keys, tokens, documents), shared with domain's tests.
#[path = "../../domain/tests/cloud_iid_support.rs"]
mod cloud_iid_support;

mod admin_client;
mod admin_client_e2e;
mod admin_e2e;
mod admin_roles;
mod admin_server;
mod api_watch_e2e;
mod approval_e2e;
mod audit_actor;
mod audit_coverage;
mod audit_seal_kill;
mod audit_tamper;
mod batch_approvers_cli;
mod batch_cli;
mod batch_payload_cli;
mod cli_convention;
mod cloud_iid_e2e;
mod command_cli;
mod commands_e2e;
mod crl_e2e;
mod crl_publish_e2e;
mod deb_packages;
mod discovery_e2e;
mod doctor_cli;
mod e2e_bcd;
mod e2e_split;
mod edge_limits;
mod external_attestor;
mod failover_e2e;
mod fault_join_kill;
mod fault_postgres_restart;
mod grpc_python;
mod helper_e2e;
mod install_script_pins;
mod internal_reload_e2e;
mod lost_answers_e2e;
mod named_commands;
mod nginx_pem;
mod node_claims_e2e;
mod node_names_cli;
mod node_runtime_e2e;
mod node_setup_e2e;
mod oidc_e2e;
mod operator_cli;
mod operator_views;
mod pki_and_store_cli;
mod pki_kdf_cli;
mod pki_lifecycle;
mod pki_trust_cli;
mod pool_cli;
mod privilege_join;
mod provisioned_e2e;
mod readme_walk;
mod rebuild_cli;
mod reconnect_e2e;
mod replica_e2e;
mod serve_leadership;
mod serve_plaintext;
mod serve_quorum_cli;
mod site_cli;
mod spiffe_bundle_e2e;
mod ssh_e2e;
mod status_truths_cli;
mod test_layout;
mod token_node_cli;
mod token_node_sealing;
mod tpm_cli;
mod tpm_e2e;
mod x509pop_e2e;
