//! bcctl: the operator's and auditor's command line.
//!
//! Each subcommand lives in a module of its own and talks to the store through the `events`
//! crate (and, as they arrive, the `commands` crate). It must never write the event log by any
//! other road than the command layer, and every output a script may read has `--json`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[macro_use]
mod invocation;
mod admin;
mod audit_cmd;
mod batch_cmd;
mod bundle_cmd;
mod cloud_cmd;
mod command_cmd;
mod config_template_cmd;
mod deployment;
mod doctor_cmd;
mod duration;
mod events_cmd;
mod healthcheck_cmd;
mod internal_cert_cmd;
mod join_request_cmd;
mod located;
mod node_cmd;
mod node_setup;
mod node_setup_cmd;
mod operator_cmd;
mod output;
mod pem;
mod pki_cmd;
mod pki_common;
mod pki_gateway_cmd;
mod pki_lifecycle_cmd;
mod pki_operator_cmd;
mod pki_trust_cmd;
mod pool_cmd;
mod progress;
mod rebuild_cmd;
mod replay_cmd;
mod serve_attestors;
mod serve_batches;
mod serve_cmd;
mod serve_config;
mod serve_config_admin;
mod serve_config_attestors;
mod serve_config_cloud;
mod serve_config_errors;
mod serve_config_limits;
mod serve_config_quorum;
mod serve_config_store;
mod serve_error;
mod serve_leader;
mod serve_roles;
mod serve_split;
mod serve_trust;
mod site_cmd;
mod store_cmd;
mod tenant_cmd;
mod token_cmd;
mod tpm_cmd;
mod up_cmd;

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
    Up(up_cmd::UpArgs),
    /// Serve the JoinService and the gateway (Join, Renew, node sessions over mTLS).
    Serve(serve_cmd::ServeArgs),
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

/// mimalloc rather than the system allocator: a rebuild allocates and frees millions of small
/// rows, across threads, and spent about a third of its own CPU in glibc's malloc and free
/// (see docs/DECISIONS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    use clap::FromArgMatches;
    let json = output::json_requested(std::env::args());
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let matches = match admin::remote::command().try_get_matches_from(&args) {
        Ok(m) => m,
        Err(e) => {
            use clap::error::ErrorKind;
            if !matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                if let Some(message) = admin::remote::refused_remote_flag(&args) {
                    output::print_error(&message, output::EXIT_USAGE, json);
                    return ExitCode::from(output::EXIT_USAGE);
                }
            }
            return parse_failure(e, json);
        }
    };
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => return parse_failure(e, json),
    };
    // `--server` / `--profile`: the verb runs through the admin API (cli/src/admin/remote.rs).
    let remote = match admin::remote::plan(&args, &matches) {
        Ok(plan) => plan,
        Err(e) => {
            output::print_error(&e.message, e.code, json);
            return ExitCode::from(e.code);
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            output::print_error(&format!("cannot start the async runtime: {e}"), 1, json);
            return ExitCode::from(1);
        }
    };
    if let Some(plan) = remote {
        return runtime.block_on(admin::remote::call(plan, json));
    }
    let result: Result<(), Failure> = runtime.block_on(dispatch(cli.command));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            output::print_error(&e.message, e.code, json);
            ExitCode::from(e.code)
        }
    }
}

/// Runs one parsed verb: what `main` does for the command line, and what the admin API server
/// does for a call (inside [`invocation::Invocation::scope`]).
pub(crate) async fn dispatch(command: Command) -> Result<(), Failure> {
    match command {
        Command::Up(args) => up_cmd::up(args).await.map_err(Failure::from),
        Command::Serve(args) => serve_roles::serve(args).await.map_err(Failure::from),
        Command::Migrate(args) => store_cmd::migrate(args).await.map_err(Failure::from),
        Command::Status(args) => store_cmd::status(args).await.map_err(Failure::from),
        Command::Pki(cmd) => pki_cmd::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Batch(cmd) => batch_cmd::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Audit(cmd) => audit_cmd::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Queue(cmd) => command_cmd::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Operator(cmd) => operator_cmd::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Token(cmd) => token_cmd::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Node(cmd) => node_cmd::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Pool(cmd) => pool_cmd::run(cmd).await.map_err(Failure::from),
        Command::JoinRequest(cmd) => join_request_cmd::run(cmd).await.map_err(Failure::from),
        Command::Tpm(cmd) => tpm_cmd::run(cmd).await.map_err(Failure::from),
        Command::Site(cmd) => site_cmd::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Cloud(cmd) => cloud_cmd::run(cmd).await.map_err(Failure::from),
        Command::Replay(args) => replay_cmd::run(args)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Bundle(cmd) => bundle_cmd::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Events(cmd) => events_cmd::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Tenant(cmd) => tenant_cmd::run(cmd)
            .await
            .map_err(|e| Failure::coded(e.to_string(), e.exit_code())),
        Command::Config(cmd) => {
            config_template_cmd::run(cmd);
            Ok(())
        }
        Command::Rebuild(args) => rebuild_cmd::run(args).await.map_err(|e| match e {
            rebuild_cmd::RebuildCmdError::BadBatch(_) => Failure::coded(e.to_string(), 2),
            other => Failure::from(other),
        }),
        Command::Doctor(args) => match doctor_cmd::run(args).await {
            Ok(0) => Ok(()),
            Ok(code) => Err(Failure::coded(
                format!(
                    "doctor: the worst finding is {}",
                    doctor_cmd::worst_name(code)
                ),
                code,
            )),
            Err(e) => Err(e),
        },
        Command::Healthcheck(args) => healthcheck_cmd::run(args).await,
    }
}

/// A command line the parser refused: `--help` and `--version` print and exit 0; anything else
/// is a usage error, exit 2, printed as JSON under `--json`.
fn parse_failure(e: clap::Error, json: bool) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            ExitCode::from(
                if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                    output::EXIT_USAGE
                } else {
                    0
                },
            )
        }
        _ if json => {
            let text = e.render().to_string();
            let first = text
                .lines()
                .next()
                .unwrap_or("invalid command line")
                .trim_start_matches("error: ");
            output::print_error(first, output::EXIT_USAGE, true);
            ExitCode::from(output::EXIT_USAGE)
        }
        _ => {
            let _ = e.print();
            ExitCode::from(output::EXIT_USAGE)
        }
    }
}

/// A failed subcommand: what to tell the operator and the exit code. Each subcommand's typed
/// error converts into it with exit code 1; a subcommand that documents other codes builds it
/// with [`Failure::coded`].
pub(crate) struct Failure {
    pub(crate) message: String,
    pub(crate) code: u8,
}

impl Failure {
    /// A usage error the verb found itself (a bad value): exit 2, as for the parser's.
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Failure::coded(message, output::EXIT_USAGE)
    }

    /// A failure with the exit code the verb documents.
    pub(crate) fn coded(message: impl Into<String>, code: u8) -> Self {
        Failure {
            message: message.into(),
            code,
        }
    }
}

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure {
            message: e.to_string(),
            code: 1,
        }
    }
}
