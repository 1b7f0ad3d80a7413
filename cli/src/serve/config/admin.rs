//! `bcctl serve`'s `[admin]` table: the admin API listener (`bc.admin.v1`, operator mTLS) and
//! its limits. It runs on the roles holding the keys and the store (`all`, `api`); a `gateway`
//! given an `[admin]` table is refused.
//!
//! | key | environment | default |
//! | --- | --- | --- |
//! | `listen` | `BC_ADMIN_LISTEN` (`off` disables) | the top-level `admin_listen` (what `bcctl up` writes), else `127.0.0.1:8444` when the table is present; no listener without either |
//! | `names` | | `["localhost", "127.0.0.1"]` (the names of its serving certificate) |
//! | `max_connections` | | `64` |
//! | `max_connections_per_peer` | | `8` (below `max_connections`: one address never holds every connection) |
//! | `max_concurrent_calls` | | `8` (more are refused with RESOURCE_EXHAUSTED) |
//! | `max_request_bytes` | | `4194304` (4 MiB: argv and input files) |
//! | `max_reply_bytes` | | `67108864` (64 MiB: stdout, stderr and output files) |
//! | `call_timeout` | | `"120s"` (a call still running is stopped: DEADLINE_EXCEEDED) |
//!
//! Without `[admin]`, `admin_listen` or `BC_ADMIN_LISTEN` no admin listener runs (so two servers
//! on one machine do not fight over a default port).

use std::net::SocketAddr;
use std::time::Duration;

use serde::Deserialize;

/// `[admin]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileAdmin {
    pub listen: Option<String>,
    pub names: Option<Vec<String>>,
    pub max_connections: Option<usize>,
    pub max_connections_per_peer: Option<usize>,
    pub max_concurrent_calls: Option<usize>,
    pub max_request_bytes: Option<usize>,
    pub max_reply_bytes: Option<usize>,
    pub call_timeout: Option<String>,
}

/// The admin listener, resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AdminSettings {
    pub listen: SocketAddr,
    pub names: Vec<String>,
    pub max_connections: usize,
    /// Connections open at once from one peer address (below `max_connections`).
    pub max_connections_per_peer: usize,
    pub max_concurrent_calls: usize,
    pub max_request_bytes: usize,
    pub max_reply_bytes: usize,
    pub call_timeout: Duration,
}

/// The address `bcctl serve` listens on for the admin API when only the table is given.
pub const DEFAULT_ADMIN_LISTEN: &str = "127.0.0.1:8444";
pub const DEFAULT_MAX_CONNECTIONS: usize = 64;
/// An operator's bcctl holds one connection per call; a few scripts on one host fit in 8, and
/// 56 connections stay for everyone else (issue 40: with the per-peer cap at the global one, a
/// client re-opening 64 raw TCP connections kept every operator out).
pub const DEFAULT_MAX_CONNECTIONS_PER_PEER: usize = 8;
pub const DEFAULT_MAX_CONCURRENT_CALLS: usize = 8;
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 4 * 1024 * 1024;
pub const DEFAULT_MAX_REPLY_BYTES: usize = 64 * 1024 * 1024;
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// A smallest request: a command line and a small input file.
const MIN_REQUEST_BYTES: usize = 4 * 1024;
/// gRPC messages are at most 4 GiB; keep well below.
const MAX_BYTES: usize = 1024 * 1024 * 1024;

impl AdminSettings {
    /// The defaults, listening on `listen`.
    pub fn on(listen: SocketAddr) -> Self {
        AdminSettings {
            listen,
            names: vec!["localhost".into(), "127.0.0.1".into()],
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_peer: DEFAULT_MAX_CONNECTIONS_PER_PEER,
            max_concurrent_calls: DEFAULT_MAX_CONCURRENT_CALLS,
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            max_reply_bytes: DEFAULT_MAX_REPLY_BYTES,
            call_timeout: DEFAULT_CALL_TIMEOUT,
        }
    }
}

/// Resolves the admin listener from `[admin]`, the top-level `admin_listen` and
/// `BC_ADMIN_LISTEN` (`env`); `None`: no listener. Errors are (key, message).
pub fn admin_settings(
    file: Option<&FileAdmin>,
    admin_listen: Option<&str>,
    env: Option<String>,
    parse_duration: impl Fn(&str) -> Result<Duration, String>,
) -> Result<Option<AdminSettings>, (&'static str, String)> {
    let listen = match (env, file.and_then(|f| f.listen.clone()), admin_listen) {
        (Some(e), _, _) => e,
        (None, Some(l), _) => l,
        (None, None, Some(l)) => l.to_string(),
        (None, None, None) if file.is_some() => DEFAULT_ADMIN_LISTEN.to_string(),
        (None, None, None) => return Ok(None),
    };
    if listen == "off" || listen.is_empty() {
        return Ok(None);
    }
    let addr: SocketAddr = listen.parse().map_err(|e| {
        (
            "admin.listen",
            format!("{listen:?} is not host:port with an IP address: {e}"),
        )
    })?;
    let mut s = AdminSettings::on(addr);
    let Some(f) = file else {
        return Ok(Some(s));
    };
    if let Some(names) = &f.names {
        if names.is_empty() {
            return Err((
                "admin.names",
                "give at least one name (the names clients dial) or leave it out".into(),
            ));
        }
        s.names = names.clone();
    }
    let count = |key: &'static str, v: Option<usize>, default: usize| match v {
        Some(0) => Err((key, "0 would refuse everything: at least 1".to_string())),
        Some(n) => Ok(n),
        None => Ok(default),
    };
    s.max_connections = count(
        "admin.max_connections",
        f.max_connections,
        DEFAULT_MAX_CONNECTIONS,
    )?;
    s.max_connections_per_peer = count(
        "admin.max_connections_per_peer",
        f.max_connections_per_peer,
        DEFAULT_MAX_CONNECTIONS_PER_PEER.min(s.max_connections.saturating_sub(1).max(1)),
    )?;
    if s.max_connections < 2 || s.max_connections_per_peer >= s.max_connections {
        return Err((
            "admin.max_connections_per_peer",
            format!(
                "{} must be below admin.max_connections ({}, itself at least 2), so that one address cannot hold every connection",
                s.max_connections_per_peer, s.max_connections
            ),
        ));
    }
    s.max_concurrent_calls = count(
        "admin.max_concurrent_calls",
        f.max_concurrent_calls,
        DEFAULT_MAX_CONCURRENT_CALLS,
    )?;
    let bytes = |key: &'static str, v: Option<usize>, default: usize| match v {
        Some(n) if !(MIN_REQUEST_BYTES..=MAX_BYTES).contains(&n) => Err((
            key,
            format!("{n} is outside {MIN_REQUEST_BYTES}..={MAX_BYTES} bytes"),
        )),
        Some(n) => Ok(n),
        None => Ok(default),
    };
    s.max_request_bytes = bytes(
        "admin.max_request_bytes",
        f.max_request_bytes,
        DEFAULT_MAX_REQUEST_BYTES,
    )?;
    s.max_reply_bytes = bytes(
        "admin.max_reply_bytes",
        f.max_reply_bytes,
        DEFAULT_MAX_REPLY_BYTES,
    )?;
    if let Some(t) = &f.call_timeout {
        s.call_timeout = parse_duration(t).map_err(|m| ("admin.call_timeout", m))?;
        if s.call_timeout < Duration::from_millis(100) {
            return Err((
                "admin.call_timeout",
                format!("{t:?} is too short: at least \"100ms\""),
            ));
        }
    }
    Ok(Some(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Duration, String> {
        domain::duration::parse_duration(text)
    }

    #[test]
    fn no_table_no_listener_and_the_table_alone_listens_on_the_default() {
        assert_eq!(admin_settings(None, None, None, parse), Ok(None));
        let s = admin_settings(Some(&FileAdmin::default()), None, None, parse)
            .expect("ok")
            .expect("some");
        assert_eq!(
            s,
            AdminSettings::on(DEFAULT_ADMIN_LISTEN.parse().expect("addr"))
        );
        let up = admin_settings(None, Some("127.0.0.1:9999"), None, parse)
            .expect("ok")
            .expect("some");
        assert_eq!(up.listen.port(), 9999);
        assert_eq!(
            admin_settings(None, Some("127.0.0.1:9999"), Some("off".into()), parse),
            Ok(None)
        );
    }

    /// Issue 40, item 7: one address may never hold every connection of the admin listener.
    #[test]
    fn the_per_peer_cap_stays_below_the_global_cap() {
        let s = admin_settings(Some(&FileAdmin::default()), None, None, parse)
            .expect("ok")
            .expect("some");
        assert_eq!(s.max_connections_per_peer, DEFAULT_MAX_CONNECTIONS_PER_PEER);
        assert!(s.max_connections_per_peer < s.max_connections);
        for (global, per_peer) in [(Some(8), Some(8)), (Some(4), Some(9)), (Some(1), None)] {
            let file = FileAdmin {
                max_connections: global,
                max_connections_per_peer: per_peer,
                ..FileAdmin::default()
            };
            let e = admin_settings(Some(&file), None, None, parse).expect_err("refused");
            assert_eq!(e.0, "admin.max_connections_per_peer", "{e:?}");
        }
        // A smaller global cap alone lowers the per-peer default below it.
        let file = FileAdmin {
            max_connections: Some(4),
            ..FileAdmin::default()
        };
        let s = admin_settings(Some(&file), None, None, parse)
            .expect("ok")
            .expect("some");
        assert_eq!((s.max_connections, s.max_connections_per_peer), (4, 3));
    }

    #[test]
    fn limits_are_checked_with_their_keys() {
        let file = FileAdmin {
            max_concurrent_calls: Some(0),
            ..FileAdmin::default()
        };
        let e = admin_settings(Some(&file), None, None, parse).expect_err("refused");
        assert_eq!(e.0, "admin.max_concurrent_calls");
        let file = FileAdmin {
            max_request_bytes: Some(10),
            ..FileAdmin::default()
        };
        let e = admin_settings(Some(&file), None, None, parse).expect_err("refused");
        assert_eq!(
            e,
            (
                "admin.max_request_bytes",
                "10 is outside 4096..=1073741824 bytes".into()
            )
        );
        let file = FileAdmin {
            listen: Some("localhost:1".into()),
            ..FileAdmin::default()
        };
        assert_eq!(
            admin_settings(Some(&file), None, None, parse)
                .expect_err("refused")
                .0,
            "admin.listen"
        );
    }
}

#[cfg(test)]
#[path = "admin_tests.rs"]
mod resolve_tests;
