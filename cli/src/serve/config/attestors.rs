//! The `[attestors]` tables of `bcctl serve`'s configuration, handed to the attestors.
//!
//! Each `[attestors.<id>]` is the table of one built-in attestor, read by the attestor itself
//! (decision 0078): this file only turns the TOML into the serde value its factory takes
//! ([`attestor_tables`]), with one environment override merged in first:
//!
//! | key | environment |
//! | --- | --- |
//! | `[attestors.x509pop] grace` | `BC_X509POP_GRACE` |
//!
//! The tables' keys are the attestors' own: `domain::attest::x509pop::X509PopConfig`,
//! `domain::attest::tpm::config`, `domain::attest::discovery::config`,
//! `domain::attest::cloud_iid::config`, and `docs/ATTESTORS.md`. A table of an id no built-in
//! has is refused (`domain::attest::configure`).
//!
//! `[[attestors.external]]`: out-of-process attestors (`bc.attestor.v1` over a Unix socket),
//! file only:
//!
//! ```toml
//! [[attestors.external]]
//! id = "acme-asset"          # what agents name in JoinRequest.attestor (kebab-case)
//! roles = ["node"]           # the agent roles it may admit
//! socket = "/run/acme.sock"  # absolute path of its Unix socket
//! timeout = "5s"             # optional: one Verify call, connecting included (default 5s)
//! ```
//!
//! Each entry is checked by [`gateway::join::external_attestor::ExternalAttestorConfig`] (id
//! format, not a built-in attestor's id, at least one role, absolute socket); two entries with
//! one id are refused too.

use std::collections::BTreeMap;
use std::path::PathBuf;

use domain::attest::{AttestorTables, ConfigTable};
use gateway::external_attestor::ExternalAttestorConfig;
use serde::Deserialize;

/// `[attestors]` as written: the out-of-process entries, and every other key a built-in
/// attestor's table.
#[derive(Debug, Default, Deserialize)]
pub struct FileAttestors {
    #[serde(default)]
    pub external: Vec<FileExternalAttestor>,
    /// `[attestors.<id>]`, by id.
    #[serde(flatten)]
    pub tables: BTreeMap<String, toml::Value>,
}

/// The built-in attestors' tables as their factories take them, `grace_env`
/// (`BC_X509POP_GRACE`) over `[attestors.x509pop] grace`. The error names the table's key.
pub fn attestor_tables(
    file: &Option<FileAttestors>,
    grace_env: Option<String>,
) -> Result<AttestorTables, String> {
    let mut tables = AttestorTables::new();
    for (id, table) in file.iter().flat_map(|f| f.tables.iter()) {
        let value = serde_json::to_value(table)
            .map_err(|e| format!("attestors.{id}: not a table of settings: {e}"))?;
        tables.insert(id.clone(), value);
    }
    if let Some(grace) = grace_env {
        let x509pop = tables
            .entry(domain::attest::ids::X509POP.to_owned())
            .or_insert_with(|| ConfigTable::Object(Default::default()));
        if let Some(table) = x509pop.as_object_mut() {
            table.insert("grace".into(), ConfigTable::String(grace));
        }
    }
    Ok(tables)
}

/// One `[[attestors.external]]` as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileExternalAttestor {
    pub id: String,
    pub roles: Vec<String>,
    pub socket: PathBuf,
    pub timeout: Option<String>,
}

/// The external attestors, checked.
/// Refusals are the message of the `attestors.external` key.
pub fn external_attestors(
    file: &Option<FileAttestors>,
    parse_duration: impl Fn(&str) -> Result<std::time::Duration, String>,
) -> Result<Vec<ExternalAttestorConfig>, String> {
    let mut out: Vec<ExternalAttestorConfig> = Vec::new();
    for entry in file.iter().flat_map(|f| f.external.iter()) {
        let timeout = match &entry.timeout {
            None => None,
            Some(t) => Some(parse_duration(t).map_err(|m| format!("{}: {m}", entry.id))?),
        };
        let config =
            ExternalAttestorConfig::new(&entry.id, &entry.roles, entry.socket.clone(), timeout)
                .map_err(|e| e.to_string())?;
        if out.iter().any(|c| c.id == config.id) {
            return Err(format!("attestor id {:?} is configured twice", config.id));
        }
        out.push(config);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use domain::attest::X509PopConfig;
    use domain::duration::parse_duration;

    use super::*;

    fn parse(text: &str) -> Result<Vec<ExternalAttestorConfig>, String> {
        #[derive(Deserialize)]
        struct File {
            attestors: Option<FileAttestors>,
        }
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        external_attestors(&file.attestors, parse_duration)
    }

    #[test]
    fn entries_are_read_and_checked() {
        let ok = parse(
            "[[attestors.external]]\nid = \"acme\"\nroles = [\"node\"]\nsocket = \"/run/a.sock\"\n\
             [[attestors.external]]\nid = \"acme-2\"\nroles = [\"node\", \"site\"]\n\
             socket = \"/run/b.sock\"\ntimeout = \"250ms\"\n",
        )
        .unwrap();
        assert_eq!(ok.len(), 2);
        assert_eq!(ok[1].timeout, std::time::Duration::from_millis(250));
        assert!(parse("").unwrap().is_empty());
        for bad in [
            "[[attestors.external]]\nid = \"x509pop\"\nroles = [\"node\"]\nsocket = \"/s\"\n",
            "[[attestors.external]]\nid = \"Acme\"\nroles = [\"node\"]\nsocket = \"/s\"\n",
            "[[attestors.external]]\nid = \"acme\"\nroles = []\nsocket = \"/s\"\n",
            "[[attestors.external]]\nid = \"acme\"\nroles = [\"node\"]\nsocket = \"s\"\n",
            "[[attestors.external]]\nid = \"acme\"\nroles = [\"node\"]\nsocket = \"/s\"\n\
             timeout = \"5\"\n",
            "[[attestors.external]]\nid = \"acme\"\nroles = [\"node\"]\nsocket = \"/s\"\nport = 1\n",
            "[[attestors.external]]\nid = \"acme\"\nroles = [\"node\"]\nsocket = \"/s\"\n\
             [[attestors.external]]\nid = \"acme\"\nroles = [\"node\"]\nsocket = \"/t\"\n",
        ] {
            assert!(parse(bad).is_err(), "accepted:\n{bad}");
        }
    }

    /// The x509pop grace the tables give: `env` over the file's.
    fn x509pop_grace(
        file: &Option<FileAttestors>,
        env: Option<String>,
    ) -> Result<Duration, String> {
        let tables = attestor_tables(file, env)?;
        X509PopConfig::from_table(tables.get("x509pop")).map(|c| c.grace)
    }

    #[test]
    fn grace_defaults_to_seven_days_and_reads_the_file_then_the_environment() {
        assert_eq!(
            x509pop_grace(&None, None),
            Ok(Duration::from_secs(7 * 86_400))
        );
        let file: FileAttestors = toml::from_str("[x509pop]\ngrace = \"2d\"\n").unwrap();
        let file = Some(file);
        assert_eq!(
            x509pop_grace(&file, None),
            Ok(Duration::from_secs(2 * 86_400))
        );
        assert_eq!(
            x509pop_grace(&file, Some("12h".into())),
            Ok(Duration::from_secs(12 * 3600))
        );
        assert!(x509pop_grace(&file, Some("soon".into())).is_err());
        let grase: FileAttestors = toml::from_str("[x509pop]\ngrase = \"2d\"\n").unwrap();
        assert!(x509pop_grace(&Some(grase), None).is_err());
        assert_eq!(
            x509pop_grace(&None, Some("1h".into())),
            Ok(Duration::from_secs(3600))
        );
    }

    #[test]
    fn every_other_key_is_an_attestors_table_handed_over_as_written() {
        let file: FileAttestors = toml::from_str(
            "[tpm]\nek_roots = [\"/r.pem\"]\n[tpm.enrollment]\ntenant = \"t\"\n\
             [[external]]\nid = \"a\"\nroles = [\"node\"]\nsocket = \"/s\"\n",
        )
        .unwrap();
        assert_eq!(file.external.len(), 1);
        let tables = attestor_tables(&Some(file), None).unwrap();
        assert_eq!(
            tables.get("tpm"),
            Some(&serde_json::json!({
                "ek_roots": ["/r.pem"],
                "enrollment": { "tenant": "t" },
            }))
        );
        assert_eq!(tables.len(), 1);
    }
}
