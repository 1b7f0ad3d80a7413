//! `[crl]`: the node CA's revocation list the gateway keeps current (issue 41 item 4;
//! docs/decisions/0090), file first, the environment over it.
//!
//! | key | environment | default |
//! | --- | --- | --- |
//! | `listen` | `BC_CRL_LISTEN` (`off` disables) | off: the list is pushed to nodes but not served over HTTP |
//! | `next_update` | `BC_CRL_NEXT_UPDATE` | `1h` (nextUpdate - thisUpdate; more than 0, at most `7d`; the list is signed again at half of it, at least hourly) |
//! | `distribution_point` | `BC_CRL_DISTRIBUTION_POINT` | none: node certificates name no CRL distribution point; else an `http://` URL where relying parties fetch the list (a gateway's `listen`, or a copy of it), named in every node certificate issued from then on |
//!
//! The HTTP listener is plain HTTP (`GET /node-ca.crl`, `application/pkix-crl`), as RFC 5280
//! distribution points are: the list is public and signed. A gateway (roles `all` and `gateway`)
//! serves it; on the `api` role `listen` is refused, `next_update` is the gateways' to say.

use serde::Deserialize;

use domain::duration::parse_duration;

/// `[crl]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileCrl {
    pub listen: Option<String>,
    pub next_update: Option<String>,
    pub distribution_point: Option<String>,
}

/// A key of `[crl]` and what is wrong with it.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Invalid {
    pub key: &'static str,
    pub message: String,
}

/// `[crl]` resolved, with the values of `BC_CRL_LISTEN` and `BC_CRL_NEXT_UPDATE` over the file.
pub(crate) fn crl_settings(
    file: Option<&FileCrl>,
    env_listen: Option<String>,
    env_next_update: Option<String>,
) -> Result<gateway::publish::crl::CrlOptions, Invalid> {
    let listen = env_listen.or_else(|| file.and_then(|f| f.listen.clone()));
    let listen = match listen.as_deref() {
        None | Some("off") | Some("") => None,
        Some(text) => Some(text.parse().map_err(|e| Invalid {
            key: "crl.listen",
            message: format!("{text:?} is not host:port with an IP address: {e}"),
        })?),
    };
    let next_update = match env_next_update.or_else(|| file.and_then(|f| f.next_update.clone())) {
        None => time::Duration::hours(1),
        Some(text) => {
            let d = parse_duration(&text).map_err(|message| Invalid {
                key: "crl.next_update",
                message,
            })?;
            let d = time::Duration::try_from(d).unwrap_or(time::Duration::MAX);
            if d <= time::Duration::ZERO || d > domain::pki::crl::CRL_MAX_NEXT_UPDATE {
                return Err(Invalid {
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

/// `[crl] distribution_point`, `BC_CRL_DISTRIBUTION_POINT` over the file; empty or `off` is
/// none.
pub(crate) fn distribution_point(
    file: Option<&FileCrl>,
    env: Option<String>,
) -> Result<Option<domain::pki::CrlDistributionPoint>, Invalid> {
    match env.or_else(|| file.and_then(|f| f.distribution_point.clone())) {
        None => Ok(None),
        Some(text) if text.is_empty() || text == "off" => Ok(None),
        Some(text) => domain::pki::CrlDistributionPoint::parse(&text)
            .map(Some)
            .map_err(|e| Invalid {
                key: "crl.distribution_point",
                message: e.to_string(),
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(
        listen: Option<&str>,
        next_update: Option<&str>,
    ) -> Result<gateway::publish::crl::CrlOptions, String> {
        let file = FileCrl {
            listen: listen.map(str::to_owned),
            next_update: next_update.map(str::to_owned),
            distribution_point: None,
        };
        crl_settings(Some(&file), None, None)
            .map_err(|e| format!("configuration {}: {}", e.key, e.message))
    }

    #[test]
    fn the_distribution_point_is_an_http_url_and_the_environment_wins() {
        let file = FileCrl {
            distribution_point: Some("http://crl.example.com/node-ca.crl".into()),
            ..FileCrl::default()
        };
        let point = |file: Option<&FileCrl>, env: Option<&str>| {
            distribution_point(file, env.map(str::to_owned))
                .map(|p| p.map(|p| p.to_string()))
                .map_err(|e| format!("configuration {}: {}", e.key, e.message))
        };
        assert_eq!(point(None, None), Ok(None));
        assert_eq!(
            point(Some(&file), None),
            Ok(Some("http://crl.example.com/node-ca.crl".into()))
        );
        assert_eq!(
            point(Some(&file), Some("http://10.0.0.1/c.crl")),
            Ok(Some("http://10.0.0.1/c.crl".into()))
        );
        assert_eq!(point(Some(&file), Some("off")), Ok(None));
        assert_eq!(
            point(None, Some("https://crl.example.com/c.crl")),
            Err("configuration crl.distribution_point: \"https://crl.example.com/c.crl\" is not an http:// URL (a CRL distribution point is plain HTTP: the list is public and signed)".into())
        );
    }

    #[test]
    fn defaults_and_a_listener() {
        let d = with(None, None).expect("defaults");
        assert_eq!((d.listen, d.next_update), (None, time::Duration::hours(1)));
        let s = with(Some("127.0.0.1:8080"), Some("2h")).expect("set");
        assert_eq!(s.listen, Some("127.0.0.1:8080".parse().expect("addr")));
        assert_eq!(s.next_update, time::Duration::hours(2));
        assert_eq!(with(Some("off"), None).expect("off").listen, None);
    }

    #[test]
    fn a_listen_that_is_no_address_is_refused() {
        assert_eq!(
            with(Some("localhost:80"), None).expect_err("refused"),
            "configuration crl.listen: \"localhost:80\" is not host:port with an IP address: invalid socket address syntax"
        );
    }

    #[test]
    fn a_next_update_over_7_days_is_refused() {
        assert_eq!(
            with(None, Some("8d")).expect_err("refused"),
            "configuration crl.next_update: \"8d\": more than 0 and at most 7d"
        );
    }

    #[test]
    fn a_next_update_that_is_no_duration_is_refused() {
        let e = with(None, Some("soon")).expect_err("refused");
        assert!(e.starts_with("configuration crl.next_update: "), "{e}");
    }
}
