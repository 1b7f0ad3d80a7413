//! `bcctl serve`'s `[spiffe_bundle]` table: the gateway's SPIFFE bundle endpoint
//! ([`gateway::trust::spiffe_bundle`], `docs/GATEWAY.md`). It runs where a gateway runs (`all`,
//! `gateway`); an `api` given the table is refused (`super::resolve` checks the role).
//!
//! | key | environment | default |
//! | --- | --- | --- |
//! | `listen` | `BC_SPIFFE_BUNDLE_LISTEN` (`off` disables) | `127.0.0.1:8445` when the table is present; no endpoint without the table or the variable |
//! | `refresh_hint` | `BC_SPIFFE_REFRESH_HINT` | `"5m"` (the bundle's `spiffe_refresh_hint`, whole seconds, at least `1s`) |

use std::net::SocketAddr;
use std::time::Duration;

use domain::duration::parse_duration;
use gateway::trust::spiffe_bundle::SpiffeBundleEndpoint;
use serde::Deserialize;

/// `[spiffe_bundle]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSpiffeBundle {
    pub listen: Option<String>,
    pub refresh_hint: Option<String>,
}

/// Where the endpoint listens when only the table is given.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8445";

/// The endpoint, resolved from the table and the two variables' values (`listen_env`,
/// `hint_env`; each over the file): `None` when neither the table nor the variable asks for
/// one, or the address is `off`. An error names its key. The role check is the caller's.
pub fn spiffe_bundle_settings(
    file: Option<&FileSpiffeBundle>,
    listen_env: Option<String>,
    hint_env: Option<String>,
) -> Result<Option<SpiffeBundleEndpoint>, (&'static str, String)> {
    let listen = listen_env
        .or_else(|| file.and_then(|f| f.listen.clone()))
        .or_else(|| file.map(|_| DEFAULT_LISTEN.to_string()));
    let Some(listen) = listen.filter(|l| l != "off") else {
        return Ok(None);
    };
    let listen: SocketAddr = listen.parse().map_err(|e| {
        (
            "spiffe_bundle.listen",
            format!("{listen:?} is not host:port with an IP address: {e}"),
        )
    })?;
    let hint = hint_env
        .or_else(|| file.and_then(|f| f.refresh_hint.clone()))
        .unwrap_or_else(|| "5m".to_string());
    let hint = parse_duration(&hint).map_err(|m| ("spiffe_bundle.refresh_hint", m))?;
    if hint < Duration::from_secs(1) {
        return Err((
            "spiffe_bundle.refresh_hint",
            format!("must be at least 1s; got {} ms", hint.as_millis()),
        ));
    }
    Ok(Some(SpiffeBundleEndpoint {
        listen,
        refresh_hint_secs: hint.as_secs(),
    }))
}

#[cfg(test)]
#[path = "spiffe_bundle_tests.rs"]
mod tests;
