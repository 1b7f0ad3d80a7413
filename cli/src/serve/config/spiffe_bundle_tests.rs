//! `[spiffe_bundle]` on its own and through the whole serve configuration resolver.

use super::*;
use crate::serve::config::{resolve, ConfigError, ServeArgs};

fn resolved(text: &str) -> Result<crate::serve::config::Settings, ConfigError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("serve.toml");
    std::fs::write(&path, text).expect("serve.toml");
    resolve(&ServeArgs {
        config: Some(path),
        ..ServeArgs::default()
    })
}

#[test]
fn an_api_with_the_table_is_refused_and_all_and_gateway_take_it() {
    let err = resolved("role = \"api\"\n[spiffe_bundle]\n")
        .map(|_| ())
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "configuration spiffe_bundle: the SPIFFE bundle endpoint runs on a gateway (role all or gateway), not on an api: leave [spiffe_bundle] and BC_SPIFFE_BUNDLE_LISTEN out"
    );
    let all = resolved("[spiffe_bundle]\nlisten = \"127.0.0.1:0\"\n").expect("all");
    assert_eq!(
        all.spiffe_bundle.map(|e| e.listen.to_string()),
        Some("127.0.0.1:0".to_string())
    );
    assert_eq!(resolved("").expect("none").spiffe_bundle, None);
}

fn table(listen: Option<&str>, hint: Option<&str>) -> FileSpiffeBundle {
    FileSpiffeBundle {
        listen: listen.map(str::to_owned),
        refresh_hint: hint.map(str::to_owned),
    }
}

#[test]
fn no_table_is_no_endpoint_and_a_bare_table_takes_the_defaults() {
    assert_eq!(spiffe_bundle_settings(None, None, None).unwrap(), None);
    assert_eq!(
        spiffe_bundle_settings(Some(&table(None, None)), None, None).unwrap(),
        Some(SpiffeBundleEndpoint {
            listen: DEFAULT_LISTEN.parse().unwrap(),
            refresh_hint_secs: 300,
        })
    );
    let off = spiffe_bundle_settings(
        Some(&table(Some("127.0.0.1:1"), None)),
        Some("off".into()),
        None,
    );
    assert_eq!(off.unwrap(), None);
}

#[test]
fn the_hint_is_whole_seconds_of_at_least_one() {
    let got = spiffe_bundle_settings(Some(&table(Some("127.0.0.1:0"), Some("90s"))), None, None);
    assert_eq!(got.unwrap().map(|e| e.refresh_hint_secs), Some(90));
    let env = spiffe_bundle_settings(Some(&table(None, Some("90s"))), None, Some("2m".into()));
    assert_eq!(env.unwrap().map(|e| e.refresh_hint_secs), Some(120));
    assert_eq!(
        spiffe_bundle_settings(Some(&table(None, Some("500ms"))), None, None),
        Err((
            "spiffe_bundle.refresh_hint",
            "must be at least 1s; got 500 ms".to_string()
        ))
    );
}

#[test]
fn a_listen_that_is_no_socket_address_is_refused() {
    let err =
        spiffe_bundle_settings(Some(&table(Some("localhost:8445"), None)), None, None).unwrap_err();
    assert_eq!(err.0, "spiffe_bundle.listen");
    assert!(
        err.1.starts_with("\"localhost:8445\" is not host:port"),
        "{err:?}"
    );
}
