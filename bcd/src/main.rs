//! bcd, the node agent: joins a machine, keeps its identity files, renews and holds the session.
//!
//! It talks to the control plane only through the wire API (gRPC over TLS 1.3 pinned to the
//! serving CA, see `bcd::client`) and never trusts a response it has not verified against its
//! pins. This binary wires the library to a command line.
//!
//! Exit codes: 0 success (and `already joined`), 1 failure, 2 usage errors and the dry run of
//! `bcd join --reset`.

use std::ffi::OsString;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use bcd::agent_cmd::run_agent;
use bcd::attest::cloud_iid::{cloud_producer, CLOUD_IID};
use bcd::attest::command::CommandProducer;
use bcd::attest::{EvidenceProducer, NoEvidence, JOIN_TOKEN, PROVISIONED, X509POP};
use bcd::client::GrpcJoinTransport;
use bcd::config::{Config, Environment, Overrides};
use bcd::files::DataDir;
use bcd::identity_store::{load_in, LoadError};
use bcd::join::{
    load_join_encryption_key, load_join_signing_key, prepare_with_key, JOIN_ENCRYPTION_JWK,
    JOIN_SIGNING_JWK,
};
use bcd::join_loop::{parse_duration, run_join, JoinEnv, JoinLoop};
use bcd::join_tpm::join_key;
use bcd::node::{rejoin_x509pop, NetworkDoctor};
use bcd::renewal_schedule::jitter;
use bcd::reset::{plan, DRY_RUN_EXIT};
use bcd::status::{doctor, doctor_exit_code, doctor_text, status_of};
use bcd::token_input::{discard_token_file, read_token, Consumed, ProcessEnv};
use clap::{Parser, Subcommand, ValueEnum};
use domain::attest::tpm::TPM_ATTESTOR;
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
        /// The boot server's address, host:port (overrides `[site] listen`; default
        /// 0.0.0.0:8069).
        #[arg(long, value_name = "HOST:PORT")]
        listen: Option<String>,
    },
    /// Join a PXE-booted ramdisk with the bc.token= and bc.assertion= its site's boot server
    /// put on the kernel command line.
    Ramdisk {
        /// The kernel command line to read (default /proc/cmdline).
        #[arg(long, value_name = "FILE", default_value = bcd::ramdisk::PROC_CMDLINE)]
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

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().collect();
    // A token pasted anywhere on the command line is refused before clap can echo it.
    if args
        .iter()
        .skip(1)
        .map(|a| a.to_string_lossy().into_owned())
        .any(|a| a.starts_with(TOKEN_PREFIX) || a.contains(&format!("={TOKEN_PREFIX}")))
    {
        eprintln!("{NO_TOKEN_ARGUMENTS}");
        return ExitCode::from(2);
    }
    let cli = match Cli::try_parse_from(&args) {
        Ok(cli) => cli,
        Err(e) => {
            use clap::error::ErrorKind;
            return match e.kind() {
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
            };
        }
    };

    if let Command::Config(ConfigCommand::Template) = cli.command {
        print!("{}", bcd::config_template::TEMPLATE);
        return ExitCode::SUCCESS;
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
    let now = OffsetDateTime::now_utc();

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
        Command::Site { listen } => {
            let listen = config.site.listen_or(listen.as_deref());
            agent(run_agent(&config, &dir, Some(listen)))
        }
        Command::Ramdisk {
            cmdline,
            approval_timeout,
        } => {
            let approval_timeout = match parse_duration(&approval_timeout) {
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
            let args = bcd::ramdisk::RamdiskArgs {
                cmdline,
                approval_timeout,
            };
            match bcd::ramdisk::run_ramdisk(&config, &dir, &args) {
                Ok(message) => {
                    println!("{message}");
                    publish_files(&config, &dir, "bcd ramdisk");
                    ExitCode::SUCCESS
                }
                Err(e) => fail(e),
            }
        }
        Command::Status { json } => {
            let report = status_of(&config, &dir, now);
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
        Command::Doctor => {
            let checks = doctor(&config, &dir, &NetworkDoctor::new(), now);
            print!("{}", doctor_text(&checks));
            ExitCode::from(doctor_exit_code(&checks) as u8)
        }
        Command::Config(ConfigCommand::Template) => ExitCode::SUCCESS,
        Command::Tpm(TpmCommand::Show { json }) => {
            let shown = config
                .tpm_host()
                .open()
                .and_then(|tpm| bcd::tpm_show::show(&tpm));
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
    }
}

/// After a join committed identity.json: the PEM files (`[files]`), then `on_renew`. Never
/// fails the join; `bcd node` repairs the files at its start.
fn publish_files(config: &Config, dir: &DataDir, verb: &str) {
    match load_in(dir, &config.tpm_host()) {
        Ok(loaded) => {
            bcd::node_files::refresh(&config.files, &loaded, &mut |line| {
                eprintln!("{verb}: {line}")
            });
        }
        Err(e) => eprintln!("{verb}: files: the PEM files were not written: {e}"),
    }
}

/// `bcd join`'s options.
struct JoinArgs {
    token_file: Option<PathBuf>,
    reset: bool,
    yes: bool,
    role: NodeRole,
    attestor: Option<String>,
    evidence_command: Option<String>,
    provider: Option<String>,
    node_id: Option<String>,
    approval_timeout: String,
}

fn usage(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("bcd join: {message}");
    ExitCode::from(2)
}

/// Whether `attestor` takes a token (sealed into the request) as its credential.
fn takes_token(attestor: &str) -> bool {
    attestor == JOIN_TOKEN || attestor == PROVISIONED
}

fn join(config: &Config, dir: &DataDir, args: JoinArgs, now: OffsetDateTime) -> ExitCode {
    let JoinArgs {
        token_file,
        reset,
        yes,
        role,
        attestor,
        evidence_command,
        provider,
        node_id,
        approval_timeout,
    } = args;
    let attestor = attestor.unwrap_or_else(|| {
        if node_id.is_some() {
            PROVISIONED.to_owned()
        } else {
            JOIN_TOKEN.to_owned()
        }
    });
    let approval_timeout = match parse_duration(&approval_timeout) {
        Ok(d) if d.is_positive() => d,
        Ok(_) => return usage("--approval-timeout must be more than 0s"),
        Err(e) => return usage(format_args!("--approval-timeout: {e}")),
    };
    let builtin =
        takes_token(&attestor) || [X509POP, TPM_ATTESTOR, CLOUD_IID].contains(&&*attestor);
    let cloud = match cloud_producer(&attestor, provider.as_deref(), &config.cloud) {
        Ok(cloud) => cloud,
        Err(e) => return usage(e),
    };
    match (&evidence_command, builtin) {
        (Some(_), true) => {
            return usage(format_args!(
                "--evidence-command is for another attestor; {attestor} evidence is bcd's own"
            ))
        }
        (None, false) => {
            return usage(format_args!(
            "bcd has no producer of its own for attestor {attestor:?}: give --evidence-command CMD"
        ))
        }
        _ => {}
    }
    if !takes_token(&attestor) {
        if token_file.is_some() && attestor == TPM_ATTESTOR {
            return usage(
                "--token-file with --attestor tpm: the TPM is the credential of a tpm join; no \
                 token is read or sent (drop --token-file)",
            );
        }
        if token_file.is_some() {
            return usage(format_args!(
                "--token-file: the {attestor} attestor takes no token"
            ));
        }
        // No token is read or sent: drop one from the environment so no child inherits it.
        std::env::remove_var(bcd::token_input::TOKEN_ENV);
    }
    if attestor == X509POP && reset {
        return usage("--reset moves the identity aside, and x509pop re-joins from it: not both");
    }

    if reset {
        let plan = plan(dir, now);
        if !yes {
            print!("{}", plan.describe_dry_run());
            return ExitCode::from(DRY_RUN_EXIT as u8);
        }
        match plan.execute() {
            Ok(moved) if moved.is_empty() => {
                println!(
                    "bcd join --reset: no identity in {}; nothing moved",
                    dir.root().display()
                )
            }
            Ok(moved) => {
                for m in moved {
                    println!(
                        "moved {} -> {}",
                        dir.file(&m.from).display(),
                        dir.file(&m.to).display()
                    );
                }
            }
            Err(e) => return fail(format_args!("bcd join --reset: {e}")),
        }
        let _ = std::io::stdout().flush();
    }

    let mut current = None;
    match load_in(dir, &config.tpm_host()) {
        Ok(loaded) if attestor == X509POP => current = Some(loaded),
        Ok(loaded) => {
            if let Some(wanted) = node_id.as_deref() {
                if loaded.leaf.spiffe_id.node.as_str() != wanted {
                    return fail(format_args!(
                        "bcd join: already joined as {}, not as {wanted} (--node-id); nothing \
                         was read or sent",
                        loaded.describe()
                    ));
                }
            }
            // No credential is read on a machine whose identity loads.
            println!("already joined as {}", loaded.describe());
            if let Some(record) = bcd::revocation::revoked(dir, &loaded.leaf.serial.to_hex()) {
                eprintln!(
                    "bcd join: {}; {}",
                    record.describe(),
                    bcd::revocation::REVOKED_WAY_BACK
                );
            }
            if let Some(path) = token_file {
                if let Consumed::Kept { warning, .. } = discard_token_file(&path) {
                    eprintln!("{warning}");
                }
            }
            return ExitCode::SUCCESS;
        }
        Err(LoadError::NotJoined) if attestor == X509POP => {
            return fail(format_args!(
                "bcd join --attestor x509pop: this node has not joined: x509pop re-joins from the \
                 identity on disk (in {}); join with a token first",
                dir.root().display()
            ))
        }
        Err(LoadError::NotJoined) => {}
        Err(e) => return fail(format_args!("bcd join: {e}")),
    }

    // Configuration problems first, so a token is not read for a join that cannot start.
    if let Err(e) = config.join_pins() {
        return fail(format_args!("bcd join: {e}"));
    }
    if let Err(e) = config.require_server() {
        return fail(format_args!("bcd join: {e}"));
    }
    let stdin = std::io::stdin();
    let mut stdin = stdin.lock();
    let pins = match config.join_pins() {
        Ok(pins) => pins,
        Err(e) => return fail(format_args!("bcd join: {e}")),
    };
    let server = match config.require_server() {
        Ok(server) => server.to_owned(),
        Err(e) => return fail(format_args!("bcd join: {e}")),
    };
    let token = if takes_token(&attestor) {
        match read_token(token_file.as_deref(), &mut ProcessEnv, &mut stdin) {
            Ok(token) => Some(token),
            Err(e) => return fail(format_args!("bcd join: {e}")),
        }
    } else {
        None
    };
    // The JoinService's public keys live beside config.toml, each checked against its pin.
    // (Read after the token: a missing file is a setup problem, and the token is not lost.)
    let beside = config.keys_dir();
    let encryption_key = match &token {
        Some(_) => {
            match load_join_encryption_key(&beside.join(JOIN_ENCRYPTION_JWK), &pins.join_encryption)
            {
                Ok(key) => Some(key),
                Err(e) => return fail(e),
            }
        }
        None => None,
    };
    let signing_key =
        match load_join_signing_key(&beside.join(JOIN_SIGNING_JWK), &pins.join_signing) {
            Ok(key) => key,
            Err(e) => return fail(e),
        };
    let claims = bcd::hardware::read_claims(&bcd::hardware::sysfs_root());
    let mut transport =
        match GrpcJoinTransport::new(&server, pins.serving_ca, signing_key.spki_der().to_vec()) {
            Ok(transport) => transport,
            Err(e) => return fail(format_args!("bcd join: cannot start an async runtime: {e}")),
        };
    let mut sleep = |d: time::Duration| {
        eprintln!("bcd join: retrying in {:.1} s", d.as_seconds_f64().max(0.0));
        std::thread::sleep(d.try_into().unwrap_or_default());
    };
    let mut draw = jitter;
    let mut say = |line: &str| eprintln!("{line}");
    let mut env = JoinEnv {
        sleep: &mut sleep,
        jitter: &mut draw,
        now: &OffsetDateTime::now_utc,
        log: &mut say,
    };

    if let Some(current) = current {
        // x509pop: the identity on disk proves itself; the issued identity must be this node.
        if let Some(wanted) = node_id.as_deref() {
            if current.leaf.spiffe_id.node.as_str() != wanted {
                return fail(format_args!(
                    "bcd join --attestor x509pop: the identity on disk is {}, not {wanted} \
                     (--node-id); nothing was sent",
                    current.describe()
                ));
            }
        }
        return match rejoin_x509pop(
            dir,
            &mut transport,
            &current,
            &signing_key,
            claims,
            approval_timeout,
            &mut env,
        ) {
            Ok(rejoined) => {
                bcd::fault::point("join:stored");
                println!("{}", rejoined.message());
                println!(
                    "the previous certificate (serial {}) is revoked",
                    rejoined.replaced_serial
                );
                publish_files(config, dir, "bcd join");
                ExitCode::SUCCESS
            }
            Err(e) => fail(e),
        };
    }

    let made = match join_key(config, &attestor) {
        Ok(made) => made,
        Err(e) => return fail(e),
    };
    if let Some(warning) = &made.warning {
        eprintln!("bcd join: {warning}");
    }
    let producer: Box<dyn EvidenceProducer> = match (made.producer, &evidence_command, cloud) {
        (Some(tpm), _, _) => tpm,
        (None, _, Some(cloud)) => Box::new(cloud),
        (None, Some(command), None) => Box::new(CommandProducer::new(&attestor, command)),
        (None, None, None) => Box::new(NoEvidence::new(&attestor)),
    };
    let sealed = match (&encryption_key, &token) {
        (Some(key), Some(token)) => Some((key, &token.secret)),
        _ => None,
    };
    let prepared = match prepare_with_key(made.key, sealed, &attestor, role, claims) {
        Ok(prepared) => prepared,
        Err(e) => return fail(e),
    };
    let options = JoinLoop {
        join_signing: pins.join_signing,
        trust_domain: None,
        node_id: node_id.as_deref(),
        approval_timeout,
    };
    let result = run_join(
        dir,
        &mut transport,
        prepared,
        producer.as_ref(),
        &options,
        &mut env,
    );
    match result {
        Ok(joined) => {
            bcd::fault::point("join:stored");
            println!("{}", joined.message());
            if let Some(moved) = &joined.stored.journal_moved_to {
                println!("another node's journal.db moved to {moved}");
            }
            // The join's trust bundle offers an approver set: take it under the one epoch rule
            // (and the first-set pin) now; every session start settles it again.
            bcd::node::settle_stored_set(dir, config.approver_set_pin.as_ref());
            publish_files(config, dir, "bcd join");
            if let Some(token) = token {
                if let Consumed::Kept { warning, .. } = token.consume() {
                    eprintln!("{warning}");
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}
