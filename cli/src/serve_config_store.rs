//! `bcctl serve`'s database settings beside `database_url`: the pool sizes, the read replica a
//! gateway may tail, and the log hub's safety poll. File keys over defaults, the environment
//! over the file (as every serve setting).
//!
//! | key | environment | default |
//! | --- | --- | --- |
//! | `database_pool_size` | `BC_DATABASE_POOL_SIZE` | `32` (most connections to `database_url`) |
//! | `read_database_url` | `BC_READ_DATABASE_URL` | none (role `gateway` only: a Postgres streaming replica the revocation feed reads) |
//! | `read_pool_size` | `BC_READ_POOL_SIZE` | `8` (most connections to `read_database_url`) |
//! | `feed_poll_interval` | `BC_FEED_POLL_INTERVAL` | the backend's: `5s` on Postgres (commits are notified; this is the safety poll), `20ms` on SQLite |
//!
//! Besides its pool, every process holds two connections of its own on Postgres: the commit
//! listener (`LISTEN`) and the commit notifier; docs/SCALING.md adds them up for a deployment.

use std::time::Duration;

use crate::serve_config::{env, parse_duration, ConfigError, Role};

/// Most connections to `database_url` unless told otherwise.
pub const DEFAULT_POOL_SIZE: u32 = events::store::DEFAULT_POOL_SIZE;
/// Most connections to `read_database_url` unless told otherwise.
pub const DEFAULT_READ_POOL_SIZE: u32 = 8;
/// A pool larger than this is refused (a typo, or more than one Postgres serves well).
pub const MAX_POOL_SIZE: u32 = 1000;

/// The database settings, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreSettings {
    pub pool_size: u32,
    pub read_database_url: Option<String>,
    pub read_pool_size: u32,
    /// `None`: the backend's default.
    pub feed_poll_interval: Option<Duration>,
}

/// The file's keys, as written.
pub struct FileStore<'a> {
    pub pool_size: Option<u32>,
    pub read_database_url: Option<&'a str>,
    pub read_pool_size: Option<u32>,
    pub feed_poll_interval: Option<&'a str>,
}

fn pool_size(
    key: &'static str,
    env_name: &str,
    file: Option<u32>,
    default: u32,
) -> Result<u32, ConfigError> {
    let size = match env(env_name) {
        Some(text) => text
            .trim()
            .parse::<u32>()
            .map_err(|_| ConfigError::Invalid {
                key,
                message: format!("{text:?} is not a whole number of connections"),
            })?,
        None => file.unwrap_or(default),
    };
    if size == 0 || size > MAX_POOL_SIZE {
        return Err(ConfigError::Invalid {
            key,
            message: format!("{size} connections: give 1 to {MAX_POOL_SIZE}"),
        });
    }
    Ok(size)
}

/// Resolves the database settings of a process of `role` whose store is `database_url`.
pub fn store_settings(
    file: FileStore<'_>,
    role: Role,
    database_url: &str,
) -> Result<StoreSettings, ConfigError> {
    let read_database_url =
        env("BC_READ_DATABASE_URL").or(file.read_database_url.map(str::to_owned));
    if let Some(url) = &read_database_url {
        if role != Role::Gateway {
            return Err(ConfigError::Invalid {
                key: "read_database_url",
                message: "only a gateway (role gateway) reads a replica; the api and `all` write, so they stay on database_url".into(),
            });
        }
        let postgres = |u: &str| u.starts_with("postgres://") || u.starts_with("postgresql://");
        if !postgres(url) || !postgres(database_url) {
            return Err(ConfigError::Invalid {
                key: "read_database_url",
                message: "a read replica is a Postgres streaming replica of the Postgres database_url: both must be postgres:// URLs".into(),
            });
        }
    }
    let feed_poll_interval =
        match env("BC_FEED_POLL_INTERVAL").or(file.feed_poll_interval.map(str::to_owned)) {
            Some(text) => {
                let interval = parse_duration(&text).map_err(|message| ConfigError::Invalid {
                    key: "feed_poll_interval",
                    message,
                })?;
                if interval < Duration::from_millis(1) {
                    return Err(ConfigError::Invalid {
                        key: "feed_poll_interval",
                        message: "at least \"1ms\"".into(),
                    });
                }
                Some(interval)
            }
            None => None,
        };
    Ok(StoreSettings {
        pool_size: pool_size(
            "database_pool_size",
            "BC_DATABASE_POOL_SIZE",
            file.pool_size,
            DEFAULT_POOL_SIZE,
        )?,
        read_database_url,
        read_pool_size: pool_size(
            "read_pool_size",
            "BC_READ_POOL_SIZE",
            file.read_pool_size,
            DEFAULT_READ_POOL_SIZE,
        )?,
        feed_poll_interval,
    })
}
