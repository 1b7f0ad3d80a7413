//! bcctl's grammar: [`Cli`] and its [`Command`]s, one per verb, each holding that verb's
//! arguments. Parsed by `main` for the command line and by the admin API server for a call
//! (`admin/run.rs`); it names the verbs' argument types, never their code.

use clap::{Parser, Subcommand};

use crate::{
    audit_cmd, batch_cmd, bundle_cmd, cloud_cmd, command_cmd, config_template_cmd, doctor_cmd,
    events_cmd, healthcheck_cmd, join_request_cmd, node_cmd, operator_cmd, pki_cmd, pool_cmd,
    rebuild_cmd, replay_cmd, site_cmd, store_cmd, tenant_cmd, token_cmd, tpm_cmd,
};

#[derive(Parser)]
#[command(name = "bcctl", version, about = "Operate the machine-identity plane")]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// The main job on the embedded default: create ./.bcctl (secret, PKI bundle, SQLite
    /// store), serve, and print a join token with the exact bcd command that joins a machine.
    Up(crate::up::args::UpArgs),
    /// Serve the JoinService and the gateway (Join, Renew, node sessions over mTLS).
    Serve(crate::serve::config::ServeArgs),
    /// Apply the schema migrations to a store.
    Migrate(store_cmd::StoreArgs),
    /// Print a store's status: backend, schema version, events, head position.
    Status(store_cmd::StatusArgs),
    /// The deployment's keys: create the bundle once, print its pins.
    #[command(subcommand)]
    Pki(pki_cmd::PkiCommand),
    /// Destructive batches: approver keys, create, show, approve, sign approver sets.
    #[command(subcommand)]
    Batch(batch_cmd::BatchCommand),
    /// The audit trail: export, verify offline against a pinned key, seal, prove inclusion.
    #[command(subcommand)]
    Audit(audit_cmd::AuditCommand),
    /// Signed commands to nodes: run, list, show.
    #[command(subcommand, name = "command")]
    Queue(command_cmd::CommandCommand),
    /// Operator certificates (the admin API's clients): list, revoke.
    #[command(subcommand)]
    Operator(operator_cmd::OperatorCommand),
    /// Join tokens: create (the secret is shown once), list, revoke.
    #[command(subcommand)]
    Token(token_cmd::TokenCommand),
    /// Nodes: list, show, revoke their identity, delete, retire.
    #[command(subcommand)]
    Node(node_cmd::NodeCommand),
    /// Pools and their attestor policy: create, show, list, update.
    #[command(subcommand)]
    Pool(pool_cmd::PoolCommand),
    /// Join requests awaiting approval: list, show, approve, reject.
    #[command(subcommand)]
    JoinRequest(join_request_cmd::JoinRequestCommand),
    /// The TPM allow-list: allow an EK, list, revoke.
    #[command(subcommand)]
    Tpm(tpm_cmd::TpmCommand),
    /// Sites, their boot entries and boot lease: create, list, show; boot add, list, remove;
    /// lease fence.
    #[command(subcommand)]
    Site(site_cmd::SiteCommand),
    /// Cloud instance identity: the registry of cloud accounts whose instances join.
    #[command(subcommand)]
    Cloud(cloud_cmd::CloudCommand),
    /// The identity state as of a log position or time, rebuilt from the events (read only).
    Replay(replay_cmd::ReplayArgs),
    /// Rebuild every projection from the log, in one transaction, with progress.
    Rebuild(rebuild_cmd::RebuildArgs),
    /// Check the control plane: PKI bundle and CAs, rotation and quorum, store, revocation feed,
    /// audit sequencer and sealer, clock, certificate expiry (exit 0 ok, 3 warning, 1 error).
    Doctor(doctor_cmd::DoctorArgs),
    /// The gRPC health of a running server over TLS pinned to the serving CA (exit 0 SERVING).
    Healthcheck(healthcheck_cmd::HealthcheckArgs),
    /// The X.509 roots and the published trust bundle: show (PEM or JSON).
    #[command(subcommand)]
    Bundle(bundle_cmd::BundleCommand),
    /// Browse the event log: list (filtered), show one event.
    #[command(subcommand)]
    Events(events_cmd::EventsCommand),
    /// Tenants the log names, with their node counts: list.
    #[command(subcommand)]
    Tenant(tenant_cmd::TenantCommand),
    /// Configuration templates: template serve.
    #[command(subcommand)]
    Config(config_template_cmd::ConfigCommand),
}
