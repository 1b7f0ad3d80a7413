//! The `[attestors.*]` tables of `bcctl serve`'s configuration file: settings of the built-in
//! attestors. Every key is optional; a missing one keeps the attestor's default.
//!
//! | key | environment | default |
//! | --- | --- | --- |
//! | `[attestors.x509pop] grace` | `BC_X509POP_GRACE` | `7d`: how long after its notAfter a certificate may still re-join |

use std::time::Duration;

use serde::Deserialize;

/// How a duration is read (`crate::serve_config::parse_duration`, passed in so that this module
/// needs nothing of `serve_config`: no import circle).
pub type ParseDuration = fn(&str) -> Result<Duration, String>;

/// `[attestors]` as written.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileAttestors {
    pub x509pop: Option<FileX509Pop>,
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
) -> Result<Duration, String> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Duration, String> {
        crate::serve_config::parse_duration(text)
    }

    #[test]
    fn grace_defaults_to_seven_days_and_reads_the_file_then_the_environment() {
        assert_eq!(
            x509pop_grace(&None, None, parse),
            Ok(Duration::from_secs(7 * 86_400))
        );
        let file: FileAttestors = toml::from_str("[x509pop]\ngrace = \"2d\"\n").unwrap();
        let file = Some(file);
        assert_eq!(
            x509pop_grace(&file, None, parse),
            Ok(Duration::from_secs(2 * 86_400))
        );
        assert_eq!(
            x509pop_grace(&file, Some("12h".into()), parse),
            Ok(Duration::from_secs(12 * 3600))
        );
        assert!(x509pop_grace(&file, Some("soon".into()), parse).is_err());
        assert!(toml::from_str::<FileAttestors>("[x509pop]\ngrase = \"2d\"\n").is_err());
    }
}
