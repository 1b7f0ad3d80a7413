//! bcctl: the operator's and auditor's command line.
//!
//! Each subcommand lives in a module of its own and talks to the store through the `events`
//! crate (and, as they arrive, the `commands` crate). It must never write the event log by any
//! other road than the command layer, and every output a script may read has `--json`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod store_cmd;

#[derive(Parser)]
#[command(name = "bcctl", version, about = "Operate the machine-identity plane")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create the embedded store in a working directory (default ./.bcctl), migrate it and
    /// print its status: the quickest way to a working control plane.
    Up(store_cmd::UpArgs),
    /// Apply the schema migrations to a store.
    Migrate(store_cmd::StoreArgs),
    /// Print a store's status: backend, schema version, events, head position.
    Status(store_cmd::StatusArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("bcctl: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Up(args) => store_cmd::up(args).await,
            Command::Migrate(args) => store_cmd::migrate(args).await,
            Command::Status(args) => store_cmd::status(args).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bcctl: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
