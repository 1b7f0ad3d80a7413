//! bcd, the node agent: joins a machine, keeps its identity files, renews and holds the session.
//!
//! It talks to the control plane only through the wire API (gRPC over TLS 1.3 pinned to the
//! serving CA, see `bcd::client`) and never trusts a response it has not verified against its
//! pins. This binary wires the library to a command line.
//!
//! Exit codes: 0 success (and `already joined`), 1 failure, 2 usage errors and the dry run of
//! `bcd join --reset`.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use bcd::config::{Config, Environment, Overrides};
use bcd::files::DataDir;
use bcd::join::command::{join, publish_files, JoinArgs};
use bcd::join::exchange::parse_duration;
use bcd::node::run_agent;
use bcd::node::NetworkDoctor;
use bcd::status::{doctor, doctor_exit_code, doctor_text, status_of};
use clap::{Parser, Subcommand, ValueEnum};
use domain::pki::token::TOKEN_PREFIX;
use domain::pki::NodeRole;
use time::OffsetDateTime;

/// What refusing a command-line token prints; the argument itself is never shown.
const NO_TOKEN_ARGUMENTS: &str = "bcd: a join token is never taken from the command line (the \
argument is not shown): set BCD_JOIN_TOKEN, pass it on standard input (bcd join < token.txt), or \
use --token-file PATH";

#[derive(Debug, Parser)]
#[command(
    name = "bcd",
    version,
    about = "The node agent: join, identity, renewal, sessions"
)]
struct Cli {
    /// bcd's config.toml (default /etc/bcd/config.toml, or BCD_CONFIG).
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The data directory (overrides data_dir and BCD_DATA_DIR).
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// The gateway address host:port (overrides server and BCD_SERVER).
    #[arg(long, global = true, value_name = "HOST:PORT")]
    server: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum RoleArg {
    Node,
    Site,
}

impl From<RoleArg> for NodeRole {
    fn from(r: RoleArg) -> NodeRole {
        match r {
            RoleArg::Node => NodeRole::Node,
            RoleArg::Site => NodeRole::Site,
        }
    }
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Join this machine: token from BCD_JOIN_TOKEN, standard input, or --token-file.
    Join {
        /// A file holding the token: regular, mode 0600 or 0400, at most 4 KiB; deleted once
        /// the join succeeded.
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
        /// Move the identity aside first (a dry run without --yes).
        #[arg(long)]
        reset: bool,
        /// With --reset: really move the files.
        #[arg(long, requires = "reset")]
        yes: bool,
        /// The role to join as.
        #[arg(long, value_enum, default_value = "node")]
        role: RoleArg,
        /// The attestor: join-token (default), provisioned (the default with --node-id),
        /// x509pop (re-join from the identity on disk, no token), tpm (the TPM is the
        /// credential, no token), or any other id with --evidence-command.
        #[arg(long, value_name = "ID")]
        attestor: Option<String>,
        /// For another attestor: the command that prints its evidence (JSON on its standard
        /// input, base64url on its standard output; see bcd::attest::command).
        #[arg(long, value_name = "CMD")]
        evidence_command: Option<String>,
        /// With --attestor cloud-iid: aws, gcp, azure or oidc (the document comes from the
        /// metadata service, `[cloud]` in config.toml; no token is read or sent).
        #[arg(long, value_name = "PROVIDER")]
        provider: Option<String>,
        /// The node this join must become (a provisioned re-key): the join fails, storing
        /// nothing, unless the issued identity is that node.
        #[arg(long, value_name = "NODE")]
        node_id: Option<String>,
        /// The longest a join waits for an operator's approval (and any challenge rounds):
        /// 90s, 15m, 24h, 7d.
        #[arg(long, value_name = "DURATION", default_value = "24h")]
        approval_timeout: String,
        /// Never accepted: a token on the command line is refused without being echoed.
        #[arg(hide = true, num_args = 0.., allow_hyphen_values = true, trailing_var_arg = true)]
        refused: Vec<OsString>,
    },
    /// Hold the session and renew the certificate.
    Node,
    /// The site agent: `bcd node` for this site node, plus the boot lease and the iPXE server.
    Site {
        /// The boot server's address, host:port (overrides `[site] listen`; no default: one of
        /// the two must name it).
        #[arg(long, value_name = "HOST:PORT")]
        listen: Option<String>,
    },
    /// Join a PXE-booted ramdisk with the bc.token= and bc.assertion= its site's boot server
    /// put on the kernel command line.
    Ramdisk {
        /// The kernel command line to read (default /proc/cmdline).
        #[arg(long, value_name = "FILE", default_value = bcd::join::ramdisk::PROC_CMDLINE)]
        cmdline: PathBuf,
        /// The longest the join waits for an operator's approval: 90s, 15m, 24h.
        #[arg(long, value_name = "DURATION", default_value = "24h")]
        approval_timeout: String,
    },
    /// Show this node's identity.
    Status {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
    /// Check the identity, the configuration and the connection.
    Doctor,
    /// The host's TPM.
    #[command(subcommand)]
    Tpm(TpmCommand),
    /// As root: hold the TPM for the unprivileged `bcd node` of `[helper]`, serving its key
    /// operations on `[helper] socket` (in the foreground, until SIGTERM or SIGINT).
    Helper,
    /// bcd's configuration file.
    #[command(subcommand)]
    Config(ConfigCommand),
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Print a commented config.toml with every key and its default.
    Template,
}

#[derive(Debug, Subcommand)]
enum TpmCommand {
    /// The EK's SHA-256 (what `bcctl tpm allow --ek-sha256` takes) and the AK's statement.
    Show {
        /// Machine-readable output.
        #[arg(long)]
        json: bool,
    },
}

/// How `bcd node` and `bcd site` end: 0 when a signal stopped `bcd site`, else 1.
fn agent(result: Result<(), String>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => fail(message),
    }
}

fn fail(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("{message}");
    ExitCode::from(1)
}

/// The command line parsed, or the exit code of a refusal: a token anywhere on it is refused
/// before clap can echo it; help and version print and exit 0; an unknown argument is not
/// shown (it may be a secret).
fn parse(args: &[OsString]) -> Result<Cli, ExitCode> {
    // A token pasted anywhere on the command line is refused before clap can echo it.
    if args
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .any(|a| a.starts_with(TOKEN_PREFIX) || a.contains(&format!("={TOKEN_PREFIX}")))
    {
        eprintln!("{NO_TOKEN_ARGUMENTS}");
        return Err(ExitCode::from(2));
    }
    match Cli::try_parse_from(args) {
        Ok(cli) => Ok(cli),
        Err(e) => {
            use clap::error::ErrorKind;
            Err(match e.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                    let _ = e.print();
                    ExitCode::SUCCESS
                }
                ErrorKind::UnknownArgument => {
                    eprintln!(
                        "bcd: unexpected argument (not shown, in case it is a secret); see bcd --help"
                    );
                    ExitCode::from(2)
                }
                _ => {
                    let _ = e.print();
                    ExitCode::from(2)
                }
            })
        }
    }
}

/// `bcd ramdisk`: join from the kernel command line, waiting at most `approval_timeout` for an
/// operator's approval.
fn ramdisk(config: &Config, dir: &DataDir, cmdline: PathBuf, approval_timeout: &str) -> ExitCode {
    let approval_timeout = match parse_duration(approval_timeout) {
        Ok(d) if d.is_positive() => d,
        Ok(_) => {
            eprintln!("bcd ramdisk: --approval-timeout must be more than 0s");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("bcd ramdisk: --approval-timeout: {e}");
            return ExitCode::from(2);
        }
    };
    let args = bcd::join::ramdisk::RamdiskArgs {
        cmdline,
        approval_timeout,
    };
    match bcd::join::ramdisk::run_ramdisk(config, dir, &args) {
        Ok(message) => {
            println!("{message}");
            publish_files(config, dir, "bcd ramdisk");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

/// `bcd status`: this node's identity, as text or JSON; the exit code says how it stands.
fn status(config: &Config, dir: &DataDir, now: OffsetDateTime, json: bool) -> ExitCode {
    let report = status_of(config, dir, now);
    if json {
        match serde_json::to_string_pretty(&report) {
            Ok(text) => println!("{text}"),
            Err(e) => return fail(format_args!("bcd status: {e}")),
        }
    } else {
        print!("{}", report.to_text());
    }
    ExitCode::from(report.exit_code() as u8)
}

/// `bcd tpm show`: the TPM's endorsement and attestation keys, as text or JSON.
fn tpm_show(config: &Config, json: bool) -> ExitCode {
    let shown = config
        .tpm_host()
        .open()
        .and_then(|tpm| bcd::tpm::show::show(&tpm));
    match shown {
        Ok(shown) if json => match serde_json::to_string_pretty(&shown) {
            Ok(text) => {
                println!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => fail(format_args!("bcd tpm show: {e}")),
        },
        Ok(shown) => {
            print!("{}", shown.to_text());
            ExitCode::SUCCESS
        }
        Err(e) => fail(format_args!("bcd tpm show: {e}")),
    }
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    let cli = match parse(&args) {
        Ok(cli) => cli,
        Err(code) => return code,
    };

    if let Command::Config(ConfigCommand::Template) = cli.command {
        print!("{}", bcd::config::template::TEMPLATE);
        return ExitCode::SUCCESS;
    }
    if matches!(cli.command, Command::Helper) && !bcd::helper::privilege::is_root() {
        return fail(bcd::helper::server::NOT_ROOT);
    }
    let overrides = Overrides {
        server: cli.server.clone(),
        data_dir: cli.data_dir.clone(),
    };
    // A malformed pin stops bcd here, before any command runs.
    let config = match Config::load(
        cli.config.as_deref(),
        &Environment::from_process(),
        &overrides,
    ) {
        Ok(config) => config,
        Err(e) => return fail(format_args!("bcd: {e}")),
    };
    let dir = DataDir::new(&config.data_dir);
    let now = bcd::clock::now();

    match cli.command {
        Command::Join {
            token_file,
            reset,
            yes,
            role,
            attestor,
            evidence_command,
            provider,
            node_id,
            approval_timeout,
            refused,
        } => {
            if !refused.is_empty() {
                eprintln!("{NO_TOKEN_ARGUMENTS}");
                return ExitCode::from(2);
            }
            let args = JoinArgs {
                token_file,
                reset,
                yes,
                role: role.into(),
                attestor,
                evidence_command,
                provider,
                node_id,
                approval_timeout,
            };
            join(&config, &dir, args, now)
        }
        Command::Node => agent(run_agent(&config, &dir, None)),
        Command::Helper => agent(bcd::helper::server::run_helper(&config)),
        Command::Site { listen } => {
            let Some(listen) = config.site.listen_or(listen.as_deref()) else {
                return fail(bcd::config::NO_SITE_LISTEN);
            };
            agent(run_agent(&config, &dir, Some(listen)))
        }
        Command::Ramdisk {
            cmdline,
            approval_timeout,
        } => ramdisk(&config, &dir, cmdline, &approval_timeout),
        Command::Status { json } => status(&config, &dir, now, json),
        Command::Doctor => {
            let checks = doctor(&config, &dir, &NetworkDoctor::new(), now);
            print!("{}", doctor_text(&checks));
            ExitCode::from(doctor_exit_code(&checks) as u8)
        }
        Command::Config(ConfigCommand::Template) => ExitCode::SUCCESS,
        Command::Tpm(TpmCommand::Show { json }) => tpm_show(&config, json),
    }
}
