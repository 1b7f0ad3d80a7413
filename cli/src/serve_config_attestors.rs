//! The `[attestors]` tables of `bcctl serve`'s configuration file.
//!
//! Settings of the built-in attestors, file first, the environment over it; every key is
//! optional and a missing one keeps the attestor's default:
//!
//! | key | environment | default |
//! | --- | --- | --- |
//! | `[attestors.x509pop] grace` | `BC_X509POP_GRACE` | `7d`: how long after its notAfter a certificate may still re-join |
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
//! Each entry is checked by [`gateway::external_attestor::ExternalAttestorConfig`] (id format,
//! not a built-in attestor's id, at least one role, absolute socket); two entries with one id
//! are refused too.

use std::path::PathBuf;

use gateway::external_attestor::ExternalAttestorConfig;
use serde::Deserialize;

/// How a duration is read (`crate::serve_config::parse_duration`, passed in).
pub type ParseDuration = fn(&str) -> Result<std::time::Duration, String>;

/// `[attestors]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileAttestors {
    pub x509pop: Option<FileX509Pop>,
    #[serde(default)]
    pub external: Vec<FileExternalAttestor>,
}

/// `[attestors.x509pop]` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileX509Pop {
    pub grace: Option<String>,
}

/// The x509pop grace period: `BC_X509POP_GRACE`, else the file's, else 7 days. Refuses one
/// that does not parse, with the message of `parse`.
pub fn x509pop_grace(
    file: &Option<FileAttestors>,
    env: Option<String>,
    parse: ParseDuration,
) -> Result<std::time::Duration, String> {
    let text = env.or_else(|| {
        file.as_ref()
            .and_then(|a| a.x509pop.as_ref())
            .and_then(|x| x.grace.clone())
    });
    match text {
        None => Ok(domain::attest::x509pop::DEFAULT_GRACE),
        Some(t) => parse(&t),
    }
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

    use super::*;
    use crate::duration::parse_duration;

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

    #[test]
    fn grace_defaults_to_seven_days_and_reads_the_file_then_the_environment() {
        assert_eq!(
            x509pop_grace(&None, None, parse_duration),
            Ok(Duration::from_secs(7 * 86_400))
        );
        let file: FileAttestors = toml::from_str("[x509pop]\ngrace = \"2d\"\n").unwrap();
        let file = Some(file);
        assert_eq!(
            x509pop_grace(&file, None, parse_duration),
            Ok(Duration::from_secs(2 * 86_400))
        );
        assert_eq!(
            x509pop_grace(&file, Some("12h".into()), parse_duration),
            Ok(Duration::from_secs(12 * 3600))
        );
        assert!(x509pop_grace(&file, Some("soon".into()), parse_duration).is_err());
        assert!(toml::from_str::<FileAttestors>("[x509pop]\ngrase = \"2d\"\n").is_err());
    }
}
