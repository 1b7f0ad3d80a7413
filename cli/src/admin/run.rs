//! One `Run` call of the admin API: bcctl's own grammar, parsed on the server.
//!
//! The argv is parsed with the same clap definition as the command line ([`server_command`]: the
//! `Cli` tree with every `env = …` taken out, so no argument reads the server's environment).
//! The verb is the subcommand path ("token create"). A call naming a deployment
//! (`--database-url`, `--pki`, `--dir`, `--config`, `--server`, `--profile`, or an alias of
//! them) is refused: a call always runs against the server's own deployment. The caller's role
//! is checked against [`super::roles`] (a refusal is counted), the input files are checked
//! against the verb's input flags (`super::files`, the client's table), and the verb runs
//! in-process inside an [`Invocation`] acting as the caller: what it prints and writes is the
//! reply, with the exit code a direct run would have had.

use std::collections::BTreeMap;
use std::path::PathBuf;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches};
use domain::operator::OperatorRole;
use events::store::EventStore;
use events::Actor;
use proto::admin::{OutputFile, RunReply, RunRequest};
use tonic::Status;

use crate::deployment::Located;
use crate::invocation::Invocation;

use super::counters::AdminCounters;

/// The long flags that name a deployment: refused in a call (and their aliases, by the
/// argument they belong to).
pub const DEPLOYMENT_FLAGS: &[&str] =
    &["database-url", "pki", "dir", "config", "server", "profile"];

/// Who is calling, from the verified client certificate (never from the request).
#[derive(Clone, Debug)]
pub struct Caller {
    pub spiffe_id: String,
    pub role: OperatorRole,
    pub actor: Actor,
    /// The certificate's serial (big-endian bytes), checked against the revoked set per call.
    pub serial: Vec<u8>,
    /// The certificate's notAfter: nothing a call issues outlives it (`ssh issue`).
    pub not_after: time::OffsetDateTime,
}

/// The server's side of every call: its deployment and store, its counters.
#[derive(Clone)]
pub struct CallContext {
    pub located: Located,
    pub store: EventStore,
    pub counters: std::sync::Arc<AdminCounters>,
    /// The largest reply (stdout, stderr and files together), in bytes.
    pub max_reply_bytes: usize,
}

/// bcctl's command tree as the server parses calls with it: no argument reads the environment.
pub fn server_command() -> clap::Command {
    fn strip(cmd: clap::Command) -> clap::Command {
        cmd.mut_args(|a| a.env(None::<&str>)).mut_subcommands(strip)
    }
    strip(crate::command_line::Cli::command())
}

/// The subcommand path of parsed matches, and the leaf's matches.
fn verb_of(matches: &clap::ArgMatches) -> (String, &clap::ArgMatches) {
    let mut path = Vec::new();
    let mut leaf = matches;
    while let Some((name, sub)) = leaf.subcommand() {
        path.push(name.to_string());
        leaf = sub;
    }
    (path.join(" "), leaf)
}

/// The leaf command of `verb` in `root`.
fn leaf_command<'a>(root: &'a clap::Command, verb: &str) -> Option<&'a clap::Command> {
    let mut cmd = root;
    for name in verb.split(' ').filter(|n| !n.is_empty()) {
        cmd = cmd.find_subcommand(name)?;
    }
    Some(cmd)
}

/// Whether `arg`'s long name or an alias is one of `flags` (`--` optional).
fn names_flag(arg: &clap::Arg, flags: &[&str]) -> bool {
    let wanted = |n: &str| flags.iter().any(|f| f.trim_start_matches("--") == n);
    arg.get_long().is_some_and(wanted) || arg.get_all_aliases().into_iter().flatten().any(wanted)
}

/// Whether `arg` is one of `flags` by clap id (the file table's names) or long name.
fn is_input_flag(arg: &clap::Arg, flags: &[&str]) -> bool {
    flags.contains(&arg.get_id().as_str()) || names_flag(arg, flags)
}

/// A deployment flag given on the call's command line, as the caller spelled its long name.
fn deployment_flag(leaf: &clap::Command, matches: &clap::ArgMatches) -> Option<String> {
    leaf.get_arguments()
        .filter(|a| names_flag(a, DEPLOYMENT_FLAGS))
        .find(|a| matches.value_source(a.get_id().as_str()) == Some(ValueSource::CommandLine))
        .map(|a| format!("--{}", a.get_long().unwrap_or(a.get_id().as_str())))
}

/// The paths the verb's input flags name on this command line: the only files a call may send.
fn input_paths(leaf: &clap::Command, matches: &clap::ArgMatches, verb: &str) -> Vec<PathBuf> {
    let flags = super::files::input_flags(verb);
    let mut paths = Vec::new();
    for arg in leaf.get_arguments().filter(|a| is_input_flag(a, flags)) {
        if matches.value_source(arg.get_id().as_str()) != Some(ValueSource::CommandLine) {
            continue;
        }
        if let Some(values) = matches.get_raw(arg.get_id().as_str()) {
            paths.extend(values.map(PathBuf::from));
        }
    }
    paths
}

/// What a parse that did not yield a command answers: help and version are a reply (exit 0),
/// anything else is INVALID_ARGUMENT with clap's first error line.
fn parse_refusal(e: clap::Error) -> Result<RunReply, Status> {
    use clap::error::ErrorKind;
    let text = e.render().to_string();
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => Ok(RunReply {
            stdout: text.into_bytes(),
            stderr: Vec::new(),
            exit_code: 0,
            files: Vec::new(),
        }),
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => Ok(RunReply {
            stdout: Vec::new(),
            stderr: text.into_bytes(),
            exit_code: u32::from(crate::output::EXIT_USAGE),
            files: Vec::new(),
        }),
        _ => {
            let first = text
                .lines()
                .next()
                .unwrap_or("invalid command line")
                .trim_start_matches("error: ")
                .to_string();
            Err(Status::invalid_argument(first))
        }
    }
}

/// The PERMISSION_DENIED text for `caller` running `verb`.
pub fn denied_message(verb: &str, caller: &Caller) -> String {
    match super::roles::required_role(verb) {
        Some(role) => format!(
            "permission denied: {verb} needs the {role} role; {} is {}",
            caller.spiffe_id, caller.role
        ),
        None => format!(
            "permission denied: {verb} runs only against the store directly, never through the admin API; {} is {}",
            caller.spiffe_id, caller.role
        ),
    }
}

/// Runs the verb as `invocation` and answers its exit code. Some verbs hold values that are not
/// `Send` across their awaits (a boxed writer), so the verb runs on a blocking thread of this
/// runtime (`Handle::block_on`, which asks no `Send`), not as a task; if this future is dropped
/// (the call timed out, the client went away), the verb is dropped at its next await.
async fn execute(
    invocation: &std::sync::Arc<Invocation>,
    command: crate::command_line::Command,
    json: bool,
) -> Result<u8, Status> {
    let handle = tokio::runtime::Handle::current();
    let invocation = invocation.clone();
    // Dropping the sender (this future dropped) wakes the receiver: the verb stops there.
    let (_cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::task::spawn_blocking(move || {
        handle.block_on(async move {
            let verb = invocation.scope(async {
                match Box::pin(crate::command_line::dispatch::dispatch(command)).await {
                    Ok(()) => 0u8,
                    Err(failure) => {
                        crate::output::print_error(&failure.message, failure.code, json);
                        failure.code
                    }
                }
            });
            tokio::select! {
                code = verb => Some(code),
                _ = cancelled => None,
            }
        })
    });
    match task.await {
        Ok(Some(code)) => Ok(code),
        Ok(None) => Err(Status::cancelled("the call was stopped")),
        Err(e) => {
            tracing::error!(error = %e, "an admin call's verb panicked");
            Err(Status::internal(
                "the verb failed unexpectedly (the server's log has the details); nothing more is known of its effects",
            ))
        }
    }
}

/// Runs one call (see the module docs).
pub async fn run(
    ctx: &CallContext,
    caller: &Caller,
    request: RunRequest,
) -> Result<RunReply, Status> {
    let RunRequest { argv, inputs } = request;
    let root = server_command();
    let matches = match root
        .clone()
        .try_get_matches_from(std::iter::once("bcctl".to_string()).chain(argv.iter().cloned()))
    {
        Ok(m) => m,
        Err(e) => return parse_refusal(e),
    };
    let (verb, leaf_matches) = verb_of(&matches);
    let Some(leaf) = leaf_command(&root, &verb) else {
        return Err(Status::invalid_argument(format!("{verb:?} is not a verb")));
    };
    if let Some(flag) = deployment_flag(leaf, leaf_matches) {
        ctx.counters.invalid(&verb);
        return Err(Status::invalid_argument(format!(
            "{flag} names a deployment: an admin API call runs against the server's own deployment; leave it out"
        )));
    }
    if !super::roles::allows(caller.role, &verb) {
        let total = ctx.counters.denied(&verb, caller.role);
        let message = denied_message(&verb, caller);
        tracing::warn!(caller = %caller.spiffe_id, role = %caller.role, %verb, denied_total = total, "admin call denied");
        return Err(Status::permission_denied(message));
    }
    let allowed = input_paths(leaf, leaf_matches, &verb);
    let mut files = BTreeMap::new();
    for input in inputs {
        let path = PathBuf::from(&input.path);
        if !allowed.contains(&path) {
            ctx.counters.invalid(&verb);
            return Err(Status::invalid_argument(format!(
                "input file {:?} is not named by an input flag of {verb} on this command line (the admin API reads only the files the verb's table names)",
                input.path
            )));
        }
        files.insert(path, input.contents);
    }
    let cli = crate::command_line::Cli::from_arg_matches(&matches)
        .map_err(|e| Status::invalid_argument(e.to_string()))?;
    let json = crate::output::json_requested(argv.iter().cloned());
    let invocation = Invocation::new(
        ctx.located.clone(),
        ctx.store.acting_as(caller.actor.clone()),
        caller.actor.clone(),
        files,
        Some(caller.not_after),
    );
    let started = std::time::Instant::now();
    let code = execute(&invocation, cli.command, json).await?;
    let captured = invocation.take();
    let size = captured.stdout.len()
        + captured.stderr.len()
        + captured
            .files
            .iter()
            .map(|f| f.contents.len() + f.path.as_os_str().len())
            .sum::<usize>();
    tracing::info!(caller = %caller.spiffe_id, role = %caller.role, %verb, exit_code = code, reply_bytes = size, elapsed_ms = started.elapsed().as_millis() as u64, "admin call");
    ctx.counters.ran(&verb);
    if size > ctx.max_reply_bytes {
        return Err(Status::resource_exhausted(format!(
            "the reply of {verb} is {size} bytes, over the admin listener's max_reply_bytes ({}); the verb ran (exit code {code}): narrow it (--limit, filters) or raise [admin] max_reply_bytes",
            ctx.max_reply_bytes
        )));
    }
    Ok(RunReply {
        stdout: captured.stdout,
        stderr: captured.stderr,
        exit_code: u32::from(code),
        files: captured
            .files
            .into_iter()
            .map(|f| OutputFile {
                path: f.path.display().to_string(),
                contents: f.contents,
                mode: f.mode,
            })
            .collect(),
    })
}
