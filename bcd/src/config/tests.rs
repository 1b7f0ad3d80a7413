//! The unit tests of `config/mod.rs` (kept apart so that the parser reads in one screen).

use super::*;

const PIN: &str = "sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=";

#[test]
fn parses_pins_and_overrides() {
    let text = format!(
        "server = \"gw:8443\"\ndata_dir = \"/tmp/x\"\nserving_ca_spki_pin = \"{PIN}\"\n\
         join_encryption_key_pin = \"{PIN}\"\njoin_signing_key_pin = \"{PIN}\"\n\
         [helper]\nuser = \"bcd\"\n"
    );
    let cfg = Config::parse(Path::new("c.toml"), &text).unwrap();
    assert_eq!(cfg.server.as_deref(), Some("gw:8443"));
    assert!(cfg.join_pins().is_ok());
    let raw = Config::parse_raw(Path::new("c.toml"), &text).unwrap();
    let env = Environment {
        config: None,
        server: Some("env:1".into()),
        data_dir: Some("/env".into()),
        tpm_tcti: None,
    };
    let cfg = Config::from_raw(None, raw, &env, &Overrides::default()).unwrap();
    assert_eq!(cfg.server.as_deref(), Some("env:1"));
    assert_eq!(cfg.data_dir, PathBuf::from("/env"));
    assert_eq!(cfg.tpm.tcti, DEFAULT_TCTI);
}

#[test]
fn tpm_tcti_from_the_file_then_the_environment() {
    let text =
        "[tpm]\ntcti = \"swtpm:host=127.0.0.1,port=2321\"\nek_intermediates = [\"/e.pem\"]\n";
    let cfg = Config::parse(Path::new("c.toml"), text).unwrap();
    assert_eq!(cfg.tpm.tcti, "swtpm:host=127.0.0.1,port=2321");
    assert_eq!(cfg.tpm.ek_intermediates, vec![PathBuf::from("/e.pem")]);
    let raw = Config::parse_raw(Path::new("c.toml"), text).unwrap();
    let env = Environment {
        tpm_tcti: Some("swtpm:host=127.0.0.1,port=9".into()),
        ..Environment::default()
    };
    let cfg = Config::from_raw(None, raw, &env, &Overrides::default()).unwrap();
    assert_eq!(cfg.tpm.tcti, "swtpm:host=127.0.0.1,port=9");
}

#[test]
fn site_listen_from_the_flag_then_the_file_and_no_default() {
    let cfg = Config::parse(Path::new("c.toml"), "[site]\nlisten = \"10.0.0.1:80\"\n").unwrap();
    assert_eq!(cfg.site.listen_or(None).as_deref(), Some("10.0.0.1:80"));
    assert_eq!(
        cfg.site.listen_or(Some("127.0.0.1:9")).as_deref(),
        Some("127.0.0.1:9")
    );
    // Issue 40 item 6: no 0.0.0.0 by default; nothing at all, and bcd site says what to set.
    let cfg = Config::parse(Path::new("c.toml"), "").unwrap();
    assert_eq!(cfg.site.listen_or(None), None);
    let cfg = Config::parse(Path::new("c.toml"), "[site]\nlisten = \" \"\n").unwrap();
    assert_eq!(cfg.site.listen_or(None), None);
    assert!(NO_SITE_LISTEN.contains("set `[site] listen = \"HOST:PORT\"`"));
    assert!(NO_SITE_LISTEN.contains("--listen HOST:PORT"));
}

#[test]
fn malformed_pin_names_the_key() {
    let text = "join_signing_key_pin = \"sha256/AAAA\"\n";
    let err = Config::parse(Path::new("c.toml"), text).unwrap_err();
    assert!(matches!(
        err,
        ConfigError::MalformedPin {
            key: "join_signing_key_pin",
            ..
        }
    ));
    assert!(err.to_string().contains("join_signing_key_pin"));
}

#[test]
fn no_configuration_file_is_named_as_such() {
    let cfg = Config::load(
        Some(Path::new("/nonexistent/bcd.toml")),
        &Environment::default(),
        &Overrides::default(),
    )
    .unwrap_err();
    assert!(cfg
        .to_string()
        .starts_with("/nonexistent/bcd.toml: no such configuration file"));
    let raw = RawConfig::default();
    let cfg = Config::from_raw(None, raw, &Environment::default(), &Overrides::default()).unwrap();
    let e = cfg.join_pins().unwrap_err();
    assert!(
        e.to_string()
            .starts_with("no configuration at /etc/bcd/config.toml: bcd needs its config.toml"),
        "{e}"
    );
    assert!(e.to_string().contains("bcctl node config --out DIR"));
    assert!(matches!(
        cfg.require_server(),
        Err(ConfigError::NoConfig { .. })
    ));
}

#[test]
fn missing_pin_is_refused_only_when_needed() {
    let cfg = Config::parse(Path::new("c.toml"), "").unwrap();
    let err = cfg.join_pins().unwrap_err();
    assert!(err.to_string().contains("serving_ca_spki_pin is not set"));
}
