//! `bcctl serve`'s `[spiffe_bundle]` table: the gateway's SPIFFE bundle endpoint
//! ([`gateway::trust::spiffe_bundle`], `docs/GATEWAY.md`). It runs where a gateway runs (`all`,
//! `gateway`); an `api` given the table is refused.
//!
//! | key | environment | default |
//! | --- | --- | --- |
//! | `listen` | `BC_SPIFFE_BUNDLE_LISTEN` (`off` disables) | `127.0.0.1:8445` when the table is present; no endpoint without the table or the variable |
//! | `refresh_hint` | `BC_SPIFFE_REFRESH_HINT` | `"5m"` (the bundle's `spiffe_refresh_hint`, whole seconds, at least `1s`) |

use std::net::SocketAddr;
use std::time::Duration;

use gateway::trust::spiffe_bundle::SpiffeBundleEndpoint;
use serde::Deserialize;

use super::{env, parse_duration, socket, ConfigError, Role};

/// `[spiffe_bundle]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSpiffeBundle {
    pub listen: Option<String>,
    pub refresh_hint: Option<String>,
}

/// Where the endpoint listens when only the table is given.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8445";

/// The endpoint, resolved: `None` when neither the table nor `BC_SPIFFE_BUNDLE_LISTEN` asks for
/// one, or the address is `off`.
pub fn spiffe_bundle_settings(
    file: Option<&FileSpiffeBundle>,
    role: Role,
) -> Result<Option<SpiffeBundleEndpoint>, ConfigError> {
    let listen = env("BC_SPIFFE_BUNDLE_LISTEN")
        .or_else(|| file.and_then(|f| f.listen.clone()))
        .or_else(|| file.map(|_| DEFAULT_LISTEN.to_string()));
    let Some(listen) = listen.filter(|l| l != "off") else {
        return Ok(None);
    };
    if role == Role::Api {
        return Err(ConfigError::Invalid {
            key: "spiffe_bundle",
            message: "the SPIFFE bundle endpoint runs on a gateway (role all or gateway), not on an api: leave [spiffe_bundle] and BC_SPIFFE_BUNDLE_LISTEN out".into(),
        });
    }
    let listen: SocketAddr = socket("spiffe_bundle.listen", &listen)?;
    let hint = env("BC_SPIFFE_REFRESH_HINT")
        .or_else(|| file.and_then(|f| f.refresh_hint.clone()))
        .unwrap_or_else(|| "5m".to_string());
    let hint = parse_duration(&hint).map_err(|message| ConfigError::Invalid {
        key: "spiffe_bundle.refresh_hint",
        message,
    })?;
    if hint < Duration::from_secs(1) {
        return Err(ConfigError::Invalid {
            key: "spiffe_bundle.refresh_hint",
            message: format!("must be at least 1s; got {} ms", hint.as_millis()),
        });
    }
    Ok(Some(SpiffeBundleEndpoint {
        listen,
        refresh_hint_secs: hint.as_secs(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(listen: Option<&str>, hint: Option<&str>) -> FileSpiffeBundle {
        FileSpiffeBundle {
            listen: listen.map(str::to_owned),
            refresh_hint: hint.map(str::to_owned),
        }
    }

    #[test]
    fn no_table_is_no_endpoint_and_a_bare_table_takes_the_defaults() {
        assert_eq!(spiffe_bundle_settings(None, Role::All).unwrap(), None);
        assert_eq!(
            spiffe_bundle_settings(Some(&table(None, None)), Role::Gateway).unwrap(),
            Some(SpiffeBundleEndpoint {
                listen: DEFAULT_LISTEN.parse().unwrap(),
                refresh_hint_secs: 300,
            })
        );
        assert_eq!(
            spiffe_bundle_settings(Some(&table(Some("off"), None)), Role::All).unwrap(),
            None
        );
    }

    #[test]
    fn the_hint_is_whole_seconds_of_at_least_one() {
        let got = spiffe_bundle_settings(Some(&table(Some("127.0.0.1:0"), Some("90s"))), Role::All);
        assert_eq!(got.unwrap().map(|e| e.refresh_hint_secs), Some(90));
        let err = spiffe_bundle_settings(Some(&table(None, Some("500ms"))), Role::All).unwrap_err();
        assert_eq!(
            err.to_string(),
            "configuration spiffe_bundle.refresh_hint: must be at least 1s; got 500 ms"
        );
    }

    #[test]
    fn an_api_is_refused_the_endpoint() {
        let err = spiffe_bundle_settings(Some(&table(None, None)), Role::Api).unwrap_err();
        assert!(
            err.to_string().starts_with(
                "configuration spiffe_bundle: the SPIFFE bundle endpoint runs on a gateway"
            ),
            "{err}"
        );
    }
}
