//! `bcd config template`: a commented `config.toml` naming every key bcd reads, each with its
//! default (or, for the keys without one, where the value comes from).
//!
//! Every key is commented out, so the template as printed is a valid configuration of all
//! defaults. The tests parse it with bcd's own parser ([`crate::config::Config::parse`]), parse it
//! again with every key uncommented, and compare its keys with the fields of the parser's own
//! structs (as serde names them), so a key added to the parser and not here, or named here and
//! not read, fails the build's tests.

/// The template `bcd config template` prints.
pub const TEMPLATE: &str = r#"# bcd's configuration: /etc/bcd/config.toml (or --config FILE, or BCD_CONFIG).
# `bcctl node config --out DIR` on the control plane writes the keys marked (node config) for this
# deployment, with join-encryption.jwk and join-signing.jwk beside it. Every other key shows its
# default; uncomment a line to change it.

# The gateway, host:port. No default; BCD_SERVER or --server override it. (node config)
# server = "gateway.example.com:8443"

# Where the identity lives (identity.json, node.key, the PEM files). BCD_DATA_DIR or --data-dir
# override it.
# data_dir = "/var/lib/bcd"

# The three pins, from `bcctl pki show`. No default: a join needs all three. (node config)
# serving_ca_spki_pin = "sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
# join_encryption_key_pin = "sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="
# join_signing_key_pin = "sha256/47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU="

# The only first approver set this node takes (approverSetSha256 from `bcctl pki trust-version`).
# No default: without it the first set offered is taken. (node config, once the quorum exists)
# approver_set_sha256 = "0000000000000000000000000000000000000000000000000000000000000000"

[tpm]
# The TPM's TCTI; BCD_TPM_TCTI overrides it.
# tcti = "device:/dev/tpmrm0"
# PEM files of the EK certificate's issuers, sent with a tpm join.
# ek_intermediates = []

[helper]
# The privilege split (docs/INSTALL.md "The privilege split"): bcd node runs as this user and
# reaches its TPM-held keys only through bcd helper (root), whose socket only this user may use.
# No default: without it bcd node runs as root and opens the TPM itself.
# user = "bcd"
# bcd helper's Unix socket.
# socket = "/run/bcd-helper/helper.sock"

[site]
# `bcd site`'s iPXE boot server, host:port on the network the machines boot from. No default:
# bcd site refuses to start without it. --listen overrides it. (bcctl node install-script
# --site-listen)
# listen = "192.0.2.10:8069"

[cloud]
# `bcd join --attestor cloud-iid`: the metadata service (default http://169.254.169.254; for GCP
# http://metadata.google.internal); BCD_CLOUD_METADATA_URL overrides it.
# metadata_url = "http://169.254.169.254"
# GCP: the audience of the identity token (the control plane's configured one). No default.
# audience = "https://bc.example.com"
# --provider oidc: the file holding the OIDC token. No default.
# token_file = "/run/oidc/token"

[commands]
# How long a destructive kind's hook may run.
# hook_timeout_seconds = 600
# bcd's own log for logs.collect without a unit (default: journalctl -u bcd).
# log_file = "/var/log/bcd.log"

[commands.hooks]
# Each kind's program, an absolute path. None by default.
# "node.reboot" = "/usr/libexec/bcd/reboot"

[files]
# The identity as PEM files for other software (docs/NODE-FILES.md). Relative paths are inside
# data_dir. The chain: the leaf, then the node CA.
# cert = "cert.pem"
# The node key, PKCS#8 (written only when the key is a file; a TPM key never leaves the TPM).
# key = "key.pem"
# The trust anchor of peer nodes: the node CA certificate.
# bundle = "bundle.pem"
# The node CA's revocation list as the gateway pushes it (written only when the node CA signed
# it and its number rises; on_renew runs after it).
# crl = "crl.pem"
# The chain's, the bundle's and the list's mode, and the key's (never readable by others).
# mode = 0o644
# key_mode = 0o600
# Run with sh -c after each renewal and the join, once the files are in place (a failure is
# logged, never fatal). No default.
# on_renew = "systemctl reload nginx"
# on_renew_timeout_seconds = 60
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use serde::de::{self, Deserialize, Visitor};
    use std::collections::BTreeSet;
    use std::path::Path;

    /// A deserializer that only records the field names a struct's `Deserialize` asks for.
    struct Fields(std::cell::RefCell<Vec<&'static str>>);

    #[derive(Debug)]
    struct Stop;
    impl std::fmt::Display for Stop {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("stop")
        }
    }
    impl std::error::Error for Stop {}
    impl de::Error for Stop {
        fn custom<T: std::fmt::Display>(_: T) -> Self {
            Stop
        }
    }

    impl<'de> de::Deserializer<'de> for &Fields {
        type Error = Stop;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
            Err(Stop)
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Stop> {
            self.0.borrow_mut().extend_from_slice(fields);
            Err(Stop)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
            option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
            ignored_any
        }
    }

    fn fields_of<T: for<'de> Deserialize<'de>>(prefix: &str) -> Vec<String> {
        let f = Fields(Default::default());
        let _ = T::deserialize(&f);
        let names = f.0.borrow().clone();
        names.into_iter().map(|n| format!("{prefix}{n}")).collect()
    }

    /// Every `# key = value` line made live.
    fn uncommented() -> String {
        TEMPLATE
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(rest) if rest.contains(" = ") && !rest.contains(": ") => rest.to_owned(),
                _ => l.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The keys of a TOML document as dotted paths (tables themselves not listed).
    fn keys(value: &toml::Value, prefix: &str, out: &mut BTreeSet<String>) {
        if let toml::Value::Table(t) = value {
            for (k, v) in t {
                let path = format!("{prefix}{k}");
                match v {
                    toml::Value::Table(_) if path != "commands.hooks" => {
                        out.insert(path.clone());
                        keys(v, &format!("{path}."), out);
                    }
                    _ => {
                        out.insert(path);
                    }
                }
            }
        }
    }

    #[test]
    fn the_template_as_printed_is_the_defaults() {
        let p = Path::new("/etc/bcd/config.toml");
        assert_eq!(
            Config::parse(p, TEMPLATE).unwrap(),
            Config::parse(p, "").unwrap()
        );
    }

    #[test]
    fn every_key_uncommented_parses_and_shows_the_real_defaults() {
        let p = Path::new("/etc/bcd/config.toml");
        let live = uncommented();
        let cfg = Config::parse(p, &live).unwrap_or_else(|e| panic!("{e}\n{live}"));
        let defaults = Config::parse(p, "").unwrap();
        assert_eq!(cfg.data_dir, defaults.data_dir);
        assert_eq!(cfg.tpm, defaults.tpm);
        assert_eq!(defaults.site.listen_or(None), None);
        assert_eq!(cfg.site.listen_or(None).as_deref(), Some("192.0.2.10:8069"));
        assert_eq!(cfg.commands.hook_timeout, defaults.commands.hook_timeout);
        assert_eq!(cfg.files.cert, defaults.files.cert);
        assert_eq!(cfg.files.key, defaults.files.key);
        assert_eq!(cfg.files.bundle, defaults.files.bundle);
        assert_eq!(cfg.files.mode, defaults.files.mode);
        assert_eq!(cfg.files.key_mode, defaults.files.key_mode);
        assert_eq!(cfg.files.on_renew_timeout, defaults.files.on_renew_timeout);
        assert!(cfg.join_pins().is_ok());
    }

    #[test]
    fn the_template_names_exactly_the_keys_the_parser_reads() {
        let mut parser: BTreeSet<String> = BTreeSet::new();
        parser.extend(fields_of::<crate::config::RawConfig>(""));
        parser.extend(fields_of::<crate::config::RawTpm>("tpm."));
        parser.extend(fields_of::<crate::config::RawSite>("site."));
        parser.extend(fields_of::<crate::config::CloudSettings>("cloud."));
        parser.extend(fields_of::<crate::signed_commands::settings::RawCommands>(
            "commands.",
        ));
        parser.extend(fields_of::<crate::files::pem_files::RawFiles>("files."));
        parser.extend(fields_of::<crate::helper::settings::RawHelper>("helper."));
        assert!(parser.len() > 20, "{parser:?}");
        let live: toml::Value = toml::from_str(&uncommented()).unwrap();
        let mut template = BTreeSet::new();
        keys(&live, "", &mut template);
        assert_eq!(template, parser);
    }
}
