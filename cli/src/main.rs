//! bcctl: the operator's and auditor's command line.
//!
//! Each subcommand lives in a module of its own and talks to the store through the `events`
//! crate (and, as they arrive, the `commands` crate). It must never write the event log by any
//! other road than the command layer, and every output a script may read has `--json`.
//!
//! Where things are: [`command_line`] (the grammar, the dispatch of a parsed verb and its
//! failure: the top, which only this file and the admin API import), [`verbs`] (one file or folder per noun
//! of the command line), [`serve`] (`bcctl serve`: its configuration, roles and start-up), [`up`]
//! (`bcctl up`), [`admin`] (the admin API, both ends), [`deployment`] (finding and opening a
//! deployment, and the files a node needs of it), and the shared files every verb uses:
//! [`invocation`] (who runs a verb and where its output goes: `outln!` and friends), [`output`]
//! (the output convention), [`progress`], [`duration`], [`pem`]. This file only parses, runs
//! `up` and `serve` itself, hands every other verb to [`command_line::dispatch`], and turns the
//! result into an exit code.

use std::process::ExitCode;

#[macro_use]
mod invocation;
mod admin;
mod command_line;
mod deployment;
mod output;
mod progress;
mod serve;
mod up;
mod verbs;

use command_line::failure::Failure;
use command_line::{Cli, Command};

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

/// Runs one parsed verb: `up` and `serve` here (they start the servers, the admin API's among
/// them), every other verb through [`command_line::dispatch::dispatch`], which the admin API
/// server runs too.
async fn dispatch(command: Command) -> Result<(), Failure> {
    match command {
        Command::Up(args) => up::cmd::up(args).await.map_err(Failure::from),
        Command::Serve(args) => serve::roles::serve(args).await.map_err(Failure::from),
        other => command_line::dispatch::dispatch(other).await,
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
