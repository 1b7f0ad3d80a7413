//! `bcctl config template serve`: a commented `bcctl serve` configuration with every top-level
//! key (and `[sites]`) at its default, the keys without a default commented out.
//!
//! It cannot drift from [`crate::serve::config`]: the tests parse it with the real parser
//! (`deny_unknown_fields` refuses a key that does not exist), resolve it and compare the result
//! with the defaults resolved from no file, and check that every key of `serve/config/mod.rs`'s key
//! table is in it.

use clap::Subcommand;

use crate::output::print_json;

#[derive(Subcommand)]
pub enum ConfigCommand {
    /// Print a configuration template.
    #[command(subcommand)]
    Template(TemplateCommand),
}

#[derive(Subcommand)]
pub enum TemplateCommand {
    /// A `bcctl serve --config` file: every key, its default, what it does.
    Serve {
        /// Print {"template": "..."} instead of the file.
        #[arg(long)]
        json: bool,
    },
}

/// The serve configuration template.
pub const SERVE_TEMPLATE: &str = r#"# bcctl serve configuration (bcctl serve --config FILE). Every key is shown at its default;
# the environment variable named beside a key overrides the file, a flag overrides both.
# Durations are <number><unit>, unit ms, s, m, h or d.

# Where agents connect (BC_LISTEN).
listen = "127.0.0.1:8443"
# postgres://USER@HOST:PORT/DB or sqlite://PATH (DATABASE_URL).
database_url = "sqlite://.bcctl/events.db"
# The PKI bundle from `bcctl pki init` (BC_PKI_BUNDLE).
pki_bundle = ".bcctl/pki.json"
# A file holding the deployment secret (BC_DEPLOYMENT_SECRET_FILE; BC_DEPLOYMENT_SECRET wins).
# deployment_secret_file = "/etc/bc/deployment-secret"
# all, api or gateway (BC_ROLE).
role = "all"
# Names in the gateway's serving certificate (BC_SERVING_NAMES, comma-separated).
serving_names = ["localhost", "127.0.0.1"]
# Prometheus metrics; "off" disables (BC_METRICS_LISTEN). Unset: 127.0.0.1:9464, and
# 127.0.0.1:9465 in the api role (so an api and a gateway on one host both serve).
metrics_listen = "127.0.0.1:9464"
# Node certificate lifetime (BC_LEAF_LIFETIME).
leaf_lifetime = "24h"
# Gateway serving certificate lifetime (BC_SERVING_LIFETIME).
serving_lifetime = "30d"
# How far the revocation feed may lag before the gateway refuses sessions (BC_FEED_MAX_LAG).
feed_max_lag = "5s"
# The log hub's safety poll (BC_FEED_POLL_INTERVAL); unset: 5s on Postgres, where commits are
# notified, 20ms on SQLite.
# feed_poll_interval = "5s"
# Most connections to database_url (BC_DATABASE_POOL_SIZE); docs/SCALING.md adds them up.
database_pool_size = 32
# role gateway: a Postgres streaming replica the revocation feed reads (BC_READ_DATABASE_URL).
# read_database_url = "postgres://bc@replica.internal/bc"
# Most connections to read_database_url (BC_READ_POOL_SIZE).
read_pool_size = 8
# How often the audit sealer signs a checkpoint of every tenant whose tree grew (BC_AUDIT_SEAL_INTERVAL).
audit_seal_interval = "1h"
# The tenant of deployment-wide events (BC_ROOT_TENANT).
root_tenant = "root"
# Record each node's reported trust version and session (BC_RECORD_TRUST_REPORTS).
record_trust_reports = true
# text or json logs on standard error (BC_LOG_FORMAT).
log_format = "text"
# Serve a plaintext bundle while a deployment secret is set: development only (BC_ALLOW_PLAINTEXT).
allow_plaintext = false
# The published trust bundle version is never below this (BC_TRUST_VERSION_FLOOR).
trust_version_floor = 0
# role api: where gateways connect (BC_API_INTERNAL_LISTEN).
api_internal_listen = "127.0.0.1:9443"
# role api: grpc.health.v1.Health alone, TLS with the internal certificate, no client certificate
# asked (`bcctl healthcheck --role api`); "off" disables (BC_API_HEALTH_LISTEN).
api_health_listen = "127.0.0.1:9444"
# role api: names of its internal certificate (BC_API_INTERNAL_NAMES, comma-separated).
api_internal_names = ["localhost", "127.0.0.1"]
# role gateway: host:port of the api's internal endpoint (BC_API_INTERNAL_URL). Required there.
# api_internal_url = "api.internal:9443"
# role gateway: its internal client certificate chain, PEM, from `bcctl pki issue-internal` (BC_INTERNAL_CERT).
# internal_cert = "/etc/bc/internal.pem"
# role gateway: its internal client key, PKCS#8 PEM, mode 0600 (BC_INTERNAL_KEY).
# internal_key = "/etc/bc/internal.key"
# role gateway: how often internal_cert and internal_key are looked at; a changed, valid pair is
# presented to the api from then on, without a restart (BC_INTERNAL_RELOAD_INTERVAL).
internal_reload_interval = "60s"
# How often pending batches past their end are expired (BC_BATCH_EXPIRY_INTERVAL).
batch_expiry_interval = "60s"
# How often a gateway looks for nodes with newly runnable commands besides when the log hub
# hands out a command.enqueued or batch.approved event (BC_COMMAND_POLL_INTERVAL).
command_poll_interval = "5s"

# Further tables, file only, described in docs/INSTALL.md and the serve_config sources:
# [limits] and [api_limits] (edge limits), [attestors.<id>] and [[attestors.external]],
# [quorum] (the approver quorum to publish), [spiffe_bundle] (the SPIFFE bundle endpoint,
# docs/GATEWAY.md), [oidc] (workload identity's issuer, docs/WORKLOAD-IDENTITY.md).

[sites]
# How long a site agent's boot lease lasts unless renewed (BC_SITES_BOOT_LEASE_TTL).
boot_lease_ttl = "60s"

[crl]
# The node CA's revocation list: its nextUpdate - thisUpdate, at most 7d; signed again at half
# of it (at most hourly) and on every revocation (BC_CRL_NEXT_UPDATE).
next_update = "1h"
# roles all and gateway: where it is served over plain HTTP, GET /node-ca.crl; "off" or unset:
# not served, still pushed to nodes (BC_CRL_LISTEN).
# listen = "0.0.0.0:8080"
# roles all and api: the http:// URL node certificates name as their CRL distribution point,
# where relying parties fetch the list (BC_CRL_DISTRIBUTION_POINT); unset: none.
# distribution_point = "http://crl.fleet.example.com:8080/node-ca.crl"
"#;

pub fn run(cmd: ConfigCommand) {
    let ConfigCommand::Template(TemplateCommand::Serve { json }) = cmd;
    if json {
        print_json(&serde_json::json!({ "template": SERVE_TEMPLATE }));
    } else {
        crate::out!("{SERVE_TEMPLATE}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::serve::config::{resolve, FileConfig, ServeArgs};

    /// The template with its commented `# key = value` lines made live.
    fn uncommented() -> String {
        SERVE_TEMPLATE
            .lines()
            .map(|l| match l.strip_prefix("# ") {
                Some(rest)
                    if rest.split_once(" = ").is_some_and(|(k, _)| {
                        k.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                    }) =>
                {
                    rest.to_string()
                }
                _ => l.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    #[test]
    fn the_template_and_its_commented_keys_parse_with_the_real_parser() {
        toml::from_str::<FileConfig>(SERVE_TEMPLATE).expect("the template parses");
        toml::from_str::<FileConfig>(&uncommented()).expect("its commented keys parse too");
    }

    #[test]
    fn the_template_resolves_to_the_defaults() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("serve.toml");
        std::fs::write(&path, SERVE_TEMPLATE).expect("write");
        let mut from_template = resolve(&ServeArgs {
            config: Some(path.clone()),
            ..ServeArgs::default()
        })
        .expect("the template resolves");
        // The settings remember which file they came from; everything else must be the defaults.
        assert_eq!(from_template.config_file.take(), Some(path));
        let defaults = resolve(&ServeArgs::default()).expect("the defaults resolve");
        assert_eq!(format!("{from_template:?}"), format!("{defaults:?}"));
    }

    #[test]
    fn every_key_of_the_serve_config_table_is_in_the_template() {
        let source = include_str!("../serve/config/mod.rs");
        let keys: Vec<&str> = source
            .lines()
            .filter_map(|l| l.strip_prefix("//! | `"))
            .filter_map(|l| l.split('`').next())
            .collect();
        assert!(keys.len() > 20, "the key table was not found: {keys:?}");
        let live = uncommented();
        for key in keys {
            assert!(
                live.lines().any(|l| l.starts_with(&format!("{key} = "))),
                "{key} is missing from the template"
            );
        }
    }
}
