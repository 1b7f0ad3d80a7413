//! `[admin]` through the whole serve configuration resolver.

use crate::serve::config::{resolve, ConfigError, ServeArgs};

fn resolved(text: &str) -> Result<crate::serve::config::Settings, ConfigError> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("serve.toml");
    std::fs::write(&path, text).expect("write");
    resolve(&ServeArgs {
        config: Some(path),
        ..ServeArgs::default()
    })
}

#[test]
fn a_gateway_with_an_admin_table_is_refused() {
    if std::env::var_os("BC_ADMIN_LISTEN").is_some() || std::env::var_os("BC_ROLE").is_some() {
        return;
    }
    match resolved("role = \"gateway\"\n[admin]\nlisten = \"127.0.0.1:0\"\n") {
        Err(ConfigError::Invalid { key, message }) => {
            assert_eq!(key, "admin");
            assert!(message.contains("role all or api"), "{message}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let api = resolved("role = \"api\"\nadmin_listen = \"127.0.0.1:0\"\n").expect("api");
    assert_eq!(api.admin.map(|a| a.listen.port()), Some(0));
    let none = resolved("role = \"all\"\n").expect("all");
    assert_eq!(none.admin, None);
    let limits = resolved("[admin]\nmax_concurrent_calls = 2\ncall_timeout = \"5s\"\n")
        .expect("limits")
        .admin
        .expect("admin");
    assert_eq!(limits.max_concurrent_calls, 2);
    assert_eq!(limits.call_timeout, std::time::Duration::from_secs(5));
    assert_eq!(limits.listen.to_string(), "127.0.0.1:8444");
}
