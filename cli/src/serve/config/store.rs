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

/// Most connections to `database_url` unless told otherwise.
pub const DEFAULT_POOL_SIZE: u32 = events::store::DEFAULT_POOL_SIZE;
/// Most connections to `read_database_url` unless told otherwise.
pub const DEFAULT_READ_POOL_SIZE: u32 = 8;
/// A pool larger than this is refused (a typo, or more than one Postgres serves well).
pub const MAX_POOL_SIZE: u32 = 1000;

/// A setting that does not resolve: its key and what is wrong with it.
pub type Invalid = (&'static str, String);

/// Where the environment and duration parsing come from (`serve::config`'s own, passed in so
/// that this module does not import the one that imports it).
pub struct Sources<'a> {
    pub env: &'a dyn Fn(&str) -> Option<String>,
    pub parse_duration: &'a dyn Fn(&str) -> Result<Duration, String>,
}

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
    sources: &Sources<'_>,
    key: &'static str,
    env_name: &str,
    file: Option<u32>,
    default: u32,
) -> Result<u32, Invalid> {
    let size = match (sources.env)(env_name) {
        Some(text) => text.trim().parse::<u32>().map_err(|_| {
            (
                key,
                format!("{text:?} is not a whole number of connections"),
            )
        })?,
        None => file.unwrap_or(default),
    };
    if size == 0 || size > MAX_POOL_SIZE {
        return Err((
            key,
            format!("{size} connections: give 1 to {MAX_POOL_SIZE}"),
        ));
    }
    Ok(size)
}

fn is_postgres(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// Resolves the database settings of a process whose store is `database_url`; `gateway`: the
/// process runs the gateway role (the only one that may read a replica).
pub fn store_settings(
    file: FileStore<'_>,
    gateway: bool,
    database_url: &str,
    sources: &Sources<'_>,
) -> Result<StoreSettings, Invalid> {
    let read_database_url =
        (sources.env)("BC_READ_DATABASE_URL").or(file.read_database_url.map(str::to_owned));
    if let Some(url) = &read_database_url {
        if !gateway {
            return Err((
                "read_database_url",
                "only a gateway (role gateway) reads a replica; the api and `all` write, so they stay on database_url".into(),
            ));
        }
        if !is_postgres(url) || !is_postgres(database_url) {
            return Err((
                "read_database_url",
                "a read replica is a Postgres streaming replica of the Postgres database_url: both must be postgres:// URLs".into(),
            ));
        }
    }
    let poll_text =
        (sources.env)("BC_FEED_POLL_INTERVAL").or(file.feed_poll_interval.map(str::to_owned));
    let feed_poll_interval = match poll_text {
        Some(text) => {
            let interval = (sources.parse_duration)(&text)
                .map_err(|message| ("feed_poll_interval", message))?;
            if interval < Duration::from_millis(1) {
                return Err(("feed_poll_interval", "at least \"1ms\"".into()));
            }
            Some(interval)
        }
        None => None,
    };
    Ok(StoreSettings {
        pool_size: pool_size(
            sources,
            "database_pool_size",
            "BC_DATABASE_POOL_SIZE",
            file.pool_size,
            DEFAULT_POOL_SIZE,
        )?,
        read_database_url,
        read_pool_size: pool_size(
            sources,
            "read_pool_size",
            "BC_READ_POOL_SIZE",
            file.read_pool_size,
            DEFAULT_READ_POOL_SIZE,
        )?,
        feed_poll_interval,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(
        file: FileStore<'_>,
        gateway: bool,
        vars: &[(&str, &str)],
    ) -> Result<StoreSettings, Invalid> {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let env = move |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        let parse = |t: &str| domain::duration::parse_duration(t);
        store_settings(
            file,
            gateway,
            "postgres://db/bc",
            &Sources {
                env: &env,
                parse_duration: &parse,
            },
        )
    }

    fn empty() -> FileStore<'static> {
        FileStore {
            pool_size: None,
            read_database_url: None,
            read_pool_size: None,
            feed_poll_interval: None,
        }
    }

    #[test]
    fn defaults_and_overrides() {
        let s = resolve(empty(), false, &[]).unwrap();
        assert_eq!((s.pool_size, s.read_pool_size), (32, 8));
        assert_eq!((s.read_database_url, s.feed_poll_interval), (None, None));
        let mut file = empty();
        file.pool_size = Some(12);
        file.feed_poll_interval = Some("2s");
        let s = resolve(file, true, &[("BC_DATABASE_POOL_SIZE", "7")]).unwrap();
        assert_eq!(s.pool_size, 7);
        assert_eq!(s.feed_poll_interval, Some(Duration::from_secs(2)));
    }

    #[test]
    fn refusals_name_the_key() {
        let zero = resolve(empty(), false, &[("BC_DATABASE_POOL_SIZE", "0")]).unwrap_err();
        assert_eq!(
            zero,
            ("database_pool_size", "0 connections: give 1 to 1000".into())
        );
        let word = resolve(empty(), false, &[("BC_READ_POOL_SIZE", "many")]).unwrap_err();
        assert_eq!(word.0, "read_pool_size");
        let mut file = empty();
        file.read_database_url = Some("postgres://replica/bc");
        let api = resolve(file, false, &[]).unwrap_err();
        assert_eq!(api.0, "read_database_url");
        assert!(api.1.starts_with("only a gateway"), "{}", api.1);
        let mut file = empty();
        file.read_database_url = Some("sqlite://x.db");
        let sqlite = resolve(file, true, &[]).unwrap_err();
        assert!(
            sqlite.1.contains("both must be postgres://"),
            "{}",
            sqlite.1
        );
        let mut file = empty();
        file.read_database_url = Some("postgres://replica/bc");
        assert_eq!(
            resolve(file, true, &[])
                .unwrap()
                .read_database_url
                .as_deref(),
            Some("postgres://replica/bc")
        );
    }
}
