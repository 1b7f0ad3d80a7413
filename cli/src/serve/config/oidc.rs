//! `bcctl serve`'s `[oidc]` table: workload identity's OIDC issuer (issue 43;
//! `docs/WORKLOAD-IDENTITY.md`). The issuer URL and default audience are what an api mints
//! tokens with ([`commands::oidc::OidcSettings`]); a gateway (`all`, `gateway`) also serves the
//! discovery document and JWK Set on `listen` ([`gateway::publish::oidc`]); an api given a
//! `listen` is refused.
//!
//! | key | environment | default |
//! | --- | --- | --- |
//! | `issuer` | `BC_OIDC_ISSUER` | none: required with the table (`https://host[:port][/path]`, no query, no trailing `/`) |
//! | `default_audience` | `BC_OIDC_DEFAULT_AUDIENCE` | none: required with the table |
//! | `listen` | `BC_OIDC_LISTEN` (`off` disables) | `127.0.0.1:8446` on `all` and `gateway`; none on `api` |

use std::net::SocketAddr;

use commands::oidc::OidcSettings;
use domain::oidc::IssuerUrl;
use gateway::publish::oidc::OidcPublication;
use serde::Deserialize;

/// `[oidc]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileOidc {
    pub issuer: Option<String>,
    pub default_audience: Option<String>,
    pub listen: Option<String>,
}

/// Where the documents are served when the table names no `listen`.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8446";

/// The issuer as resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OidcConfig {
    /// What tokens are minted with.
    pub settings: OidcSettings,
    /// Where a gateway serves the documents; `None` on an api, or `listen = "off"`.
    pub publication: Option<OidcPublication>,
}

/// A setting that cannot be used: its key and why (the caller makes it a configuration error).
type Invalid = (&'static str, String);

fn invalid(key: &'static str, message: String) -> Invalid {
    (key, message)
}

/// An environment variable's value, `None` when unset or empty.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// `[oidc]` resolved (`api`: the role is an api, which serves no documents), the variables over
/// the file: `None` when neither the table nor `BC_OIDC_ISSUER` is given.
pub fn oidc_settings(file: Option<&FileOidc>, api: bool) -> Result<Option<OidcConfig>, Invalid> {
    let issuer = env("BC_OIDC_ISSUER").or_else(|| file.and_then(|f| f.issuer.clone()));
    let listen = env("BC_OIDC_LISTEN").or_else(|| file.and_then(|f| f.listen.clone()));
    let Some(issuer) = issuer else {
        if file.is_some() || listen.is_some() {
            return Err(invalid(
                "oidc.issuer",
                "the issuer URL is required (https://host[:port][/path], every token's iss)".into(),
            ));
        }
        return Ok(None);
    };
    let issuer = IssuerUrl::parse(&issuer).map_err(|m| invalid("oidc.issuer", m))?;
    let default_audience = env("BC_OIDC_DEFAULT_AUDIENCE")
        .or_else(|| file.and_then(|f| f.default_audience.clone()))
        .filter(|a| !a.trim().is_empty())
        .ok_or_else(|| {
            invalid(
                "oidc.default_audience",
                "the default audience is required (the aud of a token whose request names none, e.g. sts.amazonaws.com)".into(),
            )
        })?;
    if api && listen.as_deref().is_some_and(|l| l != "off") {
        return Err(invalid(
            "oidc.listen",
            "a gateway serves the discovery document and JWK Set (role all or gateway), not the api: leave [oidc] listen and BC_OIDC_LISTEN out".into(),
        ));
    }
    let listen = match (api, listen) {
        (true, _) => None,
        (_, Some(l)) if l == "off" => None,
        (_, l) => Some(l.unwrap_or_else(|| DEFAULT_LISTEN.to_string())),
    };
    let publication = listen
        .map(|l| {
            l.parse::<SocketAddr>()
                .map(|listen| OidcPublication {
                    listen,
                    issuer: issuer.clone(),
                })
                .map_err(|e| {
                    invalid(
                        "oidc.listen",
                        format!("{l:?} is not host:port with an IP address: {e}"),
                    )
                })
        })
        .transpose()?;
    Ok(Some(OidcConfig {
        settings: OidcSettings {
            issuer,
            default_audience,
        },
        publication,
    }))
}

#[cfg(test)]
mod tests {
    use crate::serve::config::{resolve, ConfigError, ServeArgs, Settings};

    fn resolved(text: &str) -> Result<Settings, ConfigError> {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("serve.toml");
        std::fs::write(&path, text).expect("serve.toml");
        resolve(&ServeArgs {
            config: Some(path),
            ..ServeArgs::default()
        })
    }

    const TABLE: &str =
        "[oidc]\nissuer = \"https://id.example.com/wl\"\ndefault_audience = \"sts.amazonaws.com\"\n";

    #[test]
    fn all_serves_the_documents_on_the_default_listener() {
        let oidc = resolved(TABLE).expect("all").oidc.expect("oidc");
        assert_eq!(oidc.settings.issuer.as_str(), "https://id.example.com/wl");
        assert_eq!(oidc.settings.default_audience, "sts.amazonaws.com");
        let p = oidc.publication.expect("served");
        assert_eq!(p.listen.to_string(), super::DEFAULT_LISTEN);
        assert_eq!(resolved("").expect("none").oidc, None);
    }

    #[test]
    fn an_api_mints_but_does_not_serve_and_refuses_a_listener() {
        let api = resolved(&format!("role = \"api\"\n{TABLE}")).expect("api");
        assert_eq!(api.oidc.expect("oidc").publication, None);
        let err = resolved(&format!(
            "role = \"api\"\n{TABLE}listen = \"127.0.0.1:0\"\n"
        ))
        .map(|_| ())
        .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("configuration oidc.listen: a gateway serves"),
            "{err}"
        );
    }

    #[test]
    fn the_issuer_and_the_audience_are_required_and_checked() {
        for (text, key) in [
            ("[oidc]\ndefault_audience = \"a\"\n", "oidc.issuer"),
            ("[oidc]\nissuer = \"https://h\"\n", "oidc.default_audience"),
            (
                "[oidc]\nissuer = \"http://h\"\ndefault_audience = \"a\"\n",
                "oidc.issuer",
            ),
            (
                "[oidc]\nissuer = \"https://h/\"\ndefault_audience = \"a\"\n",
                "oidc.issuer",
            ),
        ] {
            let err = resolved(text).map(|_| ()).unwrap_err();
            assert!(
                err.to_string()
                    .starts_with(&format!("configuration {key}:")),
                "{text}: {err}"
            );
        }
        let off = resolved(&format!("{TABLE}listen = \"off\"\n")).expect("off");
        assert_eq!(off.oidc.expect("oidc").publication, None);
    }
}
