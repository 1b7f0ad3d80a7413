//! bcctl's command line, its top: the grammar ([`Cli`] and its [`Command`]s, one per verb, each
//! holding that verb's arguments; this file), [`dispatch`] (runs a parsed verb other than `up`
//! and `serve`) and [`failure`] (what a failed verb tells the operator, and its exit code).
//! Parsed by `main` for the command line and by the admin API server for a call
//! (`admin/run.rs`, which runs it through [`dispatch`]); `main` runs `up` and `serve` itself.
//!
//! It must never hold a verb's code: the grammar names the verbs' argument types, [`dispatch`]
//! calls each verb's `run` and maps its error to a [`failure::Failure`]. Nothing under `verbs/`,
//! `serve/`, `up/` or `deployment/`, and none of the shared files at the root (`invocation.rs`,
//! `output.rs`, `progress.rs`, `duration.rs`, `pem.rs`), may import the grammar or [`dispatch`]:
//! only `main.rs` and the admin API's two ends (`admin/run.rs` runs a call through [`dispatch`],
//! `admin/remote.rs` reads the grammar) do. `Failure` is a leaf (it imports only `output.rs`):
//! `verbs/doctor` and `verbs/healthcheck` return it.

pub(crate) mod dispatch;
pub(crate) mod failure;

use clap::{Parser, Subcommand};

use crate::verbs::{
    attestor, audit, batch, bundle, cloud, command, config_template, doctor, events, healthcheck,
    join_request, node, oidc, operator, pki, pool, rebuild, replay, site, ssh, store, tenant,
    token, tpm,
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
    Migrate(store::StoreArgs),
    /// Print a store's status: backend, schema version, events, head position.
    Status(store::StatusArgs),
    /// The deployment's keys: create the bundle once, print its pins.
    #[command(subcommand)]
    Pki(pki::PkiCommand),
    /// Destructive batches: approver keys, create, show, approve, sign approver sets.
    #[command(subcommand)]
    Batch(batch::BatchCommand),
    /// The audit trail: export, verify offline against a pinned key, seal, prove inclusion.
    #[command(subcommand)]
    Audit(audit::AuditCommand),
    /// Signed commands to nodes: run, list, show.
    #[command(subcommand, name = "command")]
    Queue(command::CommandCommand),
    /// Operator certificates (the admin API's clients): list, revoke.
    #[command(subcommand)]
    Operator(operator::OperatorCommand),
    /// Break-glass SSH: the SSH CA's trust lines, user certificates (issue, list, revoke),
    /// the key revocation list.
    #[command(subcommand)]
    Ssh(ssh::SshCommand),
    /// Join tokens: create (the secret is shown once), list, revoke.
    #[command(subcommand)]
    Token(token::TokenCommand),
    /// Nodes: list, show, revoke their identity, delete, retire.
    #[command(subcommand)]
    Node(node::NodeCommand),
    /// Pools and their attestor policy: create, show, list, update.
    #[command(subcommand)]
    Pool(pool::PoolCommand),
    /// Join requests awaiting approval: list, show, approve, reject.
    #[command(subcommand)]
    JoinRequest(join_request::JoinRequestCommand),
    /// Attestors' operator-managed lists (the TPM allow-list, cloud accounts, yours): entry
    /// add, list, remove.
    #[command(subcommand)]
    Attestor(attestor::AttestorCommand),
    /// The TPM allow-list: allow an EK, list, revoke.
    #[command(subcommand)]
    Tpm(tpm::TpmCommand),
    /// Sites, their boot entries and boot lease: create, list, show; boot add, list, remove;
    /// lease fence.
    #[command(subcommand)]
    Site(site::SiteCommand),
    /// Cloud instance identity: the registry of cloud accounts whose instances join.
    #[command(subcommand)]
    Cloud(cloud::CloudCommand),
    /// The identity state as of a log position or time, rebuilt from the events (read only).
    Replay(replay::ReplayArgs),
    /// Rebuild every projection from the log, in one transaction, with progress.
    Rebuild(rebuild::RebuildArgs),
    /// Check the control plane: PKI bundle and CAs, rotation and quorum, store, revocation feed,
    /// audit sequencer and sealer, clock, certificate expiry (exit 0 ok, 3 warning, 1 error).
    Doctor(doctor::DoctorArgs),
    /// The gRPC health of a running server over TLS pinned to the serving CA (exit 0 SERVING).
    Healthcheck(healthcheck::HealthcheckArgs),
    /// The X.509 roots and the published trust bundle: show (PEM or JSON).
    #[command(subcommand)]
    Bundle(bundle::BundleCommand),
    /// Browse the event log: list (filtered), show one event.
    #[command(subcommand)]
    Events(events::EventsCommand),
    /// Tenants: create, list, show, delete (with its nodes retired, tokens revoked, batches
    /// cancelled).
    #[command(subcommand)]
    Tenant(tenant::TenantCommand),
    /// Workload identity's OIDC issuer: its signing keys (list, add, promote, retire) and
    /// the discovery document and JWK Set it publishes.
    #[command(subcommand)]
    Oidc(oidc::OidcCommand),
    /// Configuration templates: template serve.
    #[command(subcommand)]
    Config(config_template::ConfigCommand),
}
