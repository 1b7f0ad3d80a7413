//! `bcctl migrate`, `bcctl status`: migrating and inspecting a store (`bcctl up` is in
//! `crate::up`).

use clap::Args;
use events::store::{Backend, EventStore, LogStore, StoreError};
use serde_json::json;

/// Errors of the store subcommands, each with the way out.
#[derive(Debug, thiserror::Error)]
pub enum StoreCmdError {
    #[error("{0}")]
    Locate(#[from] crate::deployment::LocateError),
    #[error("the store at {0} has no schema yet: run `bcctl migrate` with the same --dir, --config or --database-url (or `bcctl up`)")]
    NotMigrated(String),
    #[error("{0}")]
    Store(#[from] StoreError),
}

#[derive(Args)]
pub struct StoreArgs {
    #[command(flatten)]
    pub deployment: crate::deployment::DeploymentArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub deployment: crate::deployment::DeploymentArgs,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `bcctl migrate`: the one verb that may create a SQLite store.
pub async fn migrate(args: StoreArgs) -> Result<(), StoreCmdError> {
    let located = args.deployment.locate()?;
    let url = located
        .store_url
        .ok_or(crate::deployment::LocateError::NoStore)?;
    let store = EventStore::open(&url).await?;
    let status = store.status().await?;
    if args.json {
        crate::output::print_json(&json!({
            "backend": backend_name(store.backend()),
            "databaseUrl": redact(&url),
            "schemaVersion": status.schema_version,
        }));
    } else {
        crate::outln!(
            "migrated {} store to schema version {}",
            backend_name(store.backend()),
            status.schema_version
        );
    }
    Ok(())
}

pub async fn status(args: StatusArgs) -> Result<(), StoreCmdError> {
    let located = args.deployment.locate()?;
    let url = located.existing_store_url()?;
    let store = crate::deployment::connect_at(url).await?;
    print_status(&store, url, args.json).await
}

async fn print_status(store: &EventStore, url: &str, as_json: bool) -> Result<(), StoreCmdError> {
    let status = match store.status().await {
        Ok(s) => s,
        Err(e) if e.is_missing_table() => return Err(StoreCmdError::NotMigrated(redact(url))),
        Err(e) => return Err(e.into()),
    };
    let shown_url = redact(url);
    if as_json {
        crate::outln!(
            "{}",
            json!({
                "backend": backend_name(store.backend()),
                "databaseUrl": shown_url,
                "schemaVersion": status.schema_version,
                "events": status.events,
                "headPosition": status.head_position,
            })
        );
    } else {
        crate::outln!(
            "store:          {} ({shown_url})",
            backend_name(store.backend())
        );
        crate::outln!("schema version: {}", status.schema_version);
        crate::outln!("events:         {}", status.events);
        crate::outln!("head position:  {}", status.head_position);
    }
    Ok(())
}

fn backend_name(b: Backend) -> &'static str {
    match b {
        Backend::Postgres => "postgres",
        Backend::Sqlite => "sqlite",
    }
}

/// Hides a password in a database URL before printing it.
fn redact(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{}:***{}", &url[..s + 3], user, &url[at..]),
                None => url.to_string(),
            }
        }
        _ => url.to_string(),
    }
}
