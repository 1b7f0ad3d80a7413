//! `[crl]`: the node CA's revocation list the gateway keeps current (issue 41 item 4;
//! docs/decisions/0090), file first, the environment over it.
//!
//! | key | environment | default |
//! | --- | --- | --- |
//! | `listen` | `BC_CRL_LISTEN` (`off` disables) | off: the list is pushed to nodes but not served over HTTP |
//! | `next_update` | `BC_CRL_NEXT_UPDATE` | `1h` (nextUpdate - thisUpdate; more than 0, at most `7d`; the list is signed again at half of it, at least hourly) |
//!
//! The HTTP listener is plain HTTP (`GET /node-ca.crl`, `application/pkix-crl`), as RFC 5280
//! distribution points are: the list is public and signed. A gateway (roles `all` and `gateway`)
//! serves it; on the `api` role `listen` is refused, `next_update` is the gateways' to say.

use serde::Deserialize;

use crate::serve::config::{env, parse_duration, ConfigError};

/// `[crl]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileCrl {
    pub listen: Option<String>,
    pub next_update: Option<String>,
}

/// `[crl]` resolved.
pub(crate) fn crl_settings(
    file: Option<&FileCrl>,
) -> Result<gateway::publish::crl::CrlOptions, ConfigError> {
    let listen = env("BC_CRL_LISTEN").or_else(|| file.and_then(|f| f.listen.clone()));
    let listen = match listen.as_deref() {
        None | Some("off") | Some("") => None,
        Some(text) => Some(text.parse().map_err(|e| ConfigError::Invalid {
            key: "crl.listen",
            message: format!("{text:?} is not host:port with an IP address: {e}"),
        })?),
    };
    let next_update =
        match env("BC_CRL_NEXT_UPDATE").or_else(|| file.and_then(|f| f.next_update.clone())) {
            None => time::Duration::hours(1),
            Some(text) => {
                let d = parse_duration(&text).map_err(|message| ConfigError::Invalid {
                    key: "crl.next_update",
                    message,
                })?;
                let d = time::Duration::try_from(d).unwrap_or(time::Duration::MAX);
                if d <= time::Duration::ZERO || d > domain::pki::crl::CRL_MAX_NEXT_UPDATE {
                    return Err(ConfigError::Invalid {
                        key: "crl.next_update",
                        message: format!("{text:?}: more than 0 and at most 7d"),
                    });
                }
                d
            }
        };
    Ok(gateway::publish::crl::CrlOptions {
        next_update,
        listen,
    })
}
