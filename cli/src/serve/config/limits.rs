//! The `[limits]` (agent-facing endpoint) and `[api_limits]` (the api's internal endpoint)
//! tables of `bcctl serve`'s configuration file: the edge limits of [`gateway::edge::limits`]
//! and the per-peer limit on refused joins of [`gateway::join::refusal_limits`]. Every key is
//! optional; a missing one keeps the endpoint's default.
//!
//! | key | `[limits]` default | `[api_limits]` default |
//! | --- | --- | --- |
//! | `max_message_bytes` | 65536 | 98304 |
//! | `max_streams_per_connection` | 16 | 256 |
//! | `max_connections` | 8192 | 512 |
//! | `max_connections_per_peer` | 256 | 64 |
//! | `handshake_timeout` | `10s` | `10s` |
//! | `idle_timeout` | `2m` | `10m` |
//! | `max_connection_age` | `1h` | `1h` |
//! | `connection_age_grace` | `30s` | `30s` |
//! | `join_refusals_per_peer` | 20 (0: no limit) | not allowed |
//! | `join_refusal_window` | `1m` | not allowed |

use gateway::limits::{EdgeLimits, LimitsError};
use gateway::limits_join::JoinRefusalLimits;
use serde::Deserialize;

/// How a duration is read (`crate::serve::config::parse_duration`, passed in so that this module
/// needs nothing of `serve::config`: no import circle).
pub type ParseDuration = fn(&str) -> Result<std::time::Duration, String>;

/// One limits table as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileLimits {
    pub max_message_bytes: Option<usize>,
    pub max_streams_per_connection: Option<u32>,
    pub max_connections: Option<usize>,
    pub max_connections_per_peer: Option<usize>,
    pub handshake_timeout: Option<String>,
    pub idle_timeout: Option<String>,
    pub max_connection_age: Option<String>,
    pub connection_age_grace: Option<String>,
    pub join_refusals_per_peer: Option<u32>,
    pub join_refusal_window: Option<String>,
}

fn invalid(table: &'static str, key: &'static str, message: String) -> LimitsError {
    LimitsError {
        table,
        key,
        message,
    }
}

fn duration(
    parse: ParseDuration,
    table: &'static str,
    key: &'static str,
    text: &Option<String>,
    default: std::time::Duration,
) -> Result<std::time::Duration, LimitsError> {
    match text {
        None => Ok(default),
        Some(t) => parse(t).map_err(|m| invalid(table, key, m)),
    }
}

/// `[limits]`: the agent-facing endpoint's limits and the per-peer join refusal limit.
pub fn public_limits(
    file: &Option<FileLimits>,
    parse: ParseDuration,
) -> Result<(EdgeLimits, JoinRefusalLimits), LimitsError> {
    let table = "limits";
    let f = file.clone().unwrap_or_default();
    let limits = edge(parse, table, &f, EdgeLimits::public())?;
    let defaults = JoinRefusalLimits::default();
    let join = JoinRefusalLimits {
        max_refusals: f.join_refusals_per_peer.unwrap_or(defaults.max_refusals),
        window: duration(
            parse,
            table,
            "join_refusal_window",
            &f.join_refusal_window,
            defaults.window,
        )?,
        max_peers: defaults.max_peers,
    };
    if join.window < std::time::Duration::from_secs(1) {
        return Err(invalid(
            table,
            "join_refusal_window",
            format!("{} ms is below the minimum of 1 s", join.window.as_millis()),
        ));
    }
    Ok((limits, join))
}

/// `[api_limits]`: the internal endpoint's limits. Its peers are gateways relaying every node's
/// joins, so it has no per-peer join limit (the gateways apply it).
pub fn api_limits(
    file: &Option<FileLimits>,
    parse: ParseDuration,
) -> Result<EdgeLimits, LimitsError> {
    let table = "api_limits";
    let f = file.clone().unwrap_or_default();
    for (key, set) in [
        ("join_refusals_per_peer", f.join_refusals_per_peer.is_some()),
        ("join_refusal_window", f.join_refusal_window.is_some()),
    ] {
        if set {
            return Err(invalid(
                table,
                key,
                "the internal endpoint's peers are gateways, which apply the per-peer join limit themselves; set it in [limits] of each gateway".into(),
            ));
        }
    }
    edge(parse, table, &f, EdgeLimits::internal())
}

fn edge(
    parse: ParseDuration,
    table: &'static str,
    f: &FileLimits,
    defaults: EdgeLimits,
) -> Result<EdgeLimits, LimitsError> {
    let limits = EdgeLimits {
        max_message_bytes: f.max_message_bytes.unwrap_or(defaults.max_message_bytes),
        max_streams_per_connection: f
            .max_streams_per_connection
            .unwrap_or(defaults.max_streams_per_connection),
        max_connections: f.max_connections.unwrap_or(defaults.max_connections),
        max_connections_per_peer: f
            .max_connections_per_peer
            .unwrap_or(defaults.max_connections_per_peer),
        handshake_timeout: duration(
            parse,
            table,
            "handshake_timeout",
            &f.handshake_timeout,
            defaults.handshake_timeout,
        )?,
        idle_timeout: duration(
            parse,
            table,
            "idle_timeout",
            &f.idle_timeout,
            defaults.idle_timeout,
        )?,
        max_connection_age: duration(
            parse,
            table,
            "max_connection_age",
            &f.max_connection_age,
            defaults.max_connection_age,
        )?,
        connection_age_grace: duration(
            parse,
            table,
            "connection_age_grace",
            &f.connection_age_grace,
            defaults.connection_age_grace,
        )?,
    };
    limits.validate(table)?;
    Ok(limits)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seconds only: enough for these tests (the real parser is `serve::config`'s).
    fn parse_duration(t: &str) -> Result<std::time::Duration, String> {
        t.strip_suffix('s')
            .and_then(|n| n.parse().ok())
            .map(std::time::Duration::from_secs)
            .ok_or_else(|| format!("{t:?} is not a duration"))
    }

    #[test]
    fn missing_tables_are_the_defaults() {
        let (l, j) = public_limits(&None, parse_duration).unwrap();
        assert_eq!(l, EdgeLimits::public());
        assert_eq!(j, JoinRefusalLimits::default());
        assert_eq!(
            api_limits(&None, parse_duration).unwrap(),
            EdgeLimits::internal()
        );
    }

    #[test]
    fn a_bad_value_names_its_table_and_key() {
        let f = FileLimits {
            idle_timeout: Some("soon".into()),
            ..FileLimits::default()
        };
        let e = public_limits(&Some(f), parse_duration).unwrap_err();
        assert_eq!((e.table, e.key), ("limits", "idle_timeout"));
        let f = FileLimits {
            max_connections: Some(10),
            max_connections_per_peer: Some(11),
            ..FileLimits::default()
        };
        let e = api_limits(&Some(f), parse_duration).unwrap_err();
        assert_eq!(
            e.to_string(),
            "api_limits.max_connections_per_peer: 11 must be at least 1 and below max_connections (10), so that one address cannot hold every connection; set it to the most nodes behind one address (NAT)"
        );
        let f = FileLimits {
            join_refusals_per_peer: Some(5),
            ..FileLimits::default()
        };
        let e = api_limits(&Some(f), parse_duration).unwrap_err();
        assert_eq!((e.table, e.key), ("api_limits", "join_refusals_per_peer"));
    }
}
