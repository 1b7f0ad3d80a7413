//! What every role's `/metrics` page says about the process itself (issue 44, "every role
//! watchable"): when it started and which role it runs, when each CA certificate of the
//! deployment ends (so an alert fires weeks before a CA expires), and, where the audit sequencer
//! and sealer run (`api` and `all`), how far behind they are.
//!
//! The audit figures are read from the store by the process that serves the page (`bcctl
//! serve`, through the projections) every few seconds and handed here ([`Watch::set_audit`]):
//! this crate holds no SQL. The page never reads the store while it renders.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::metrics_http::family;

/// The audit trail's state at one reading.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AuditReading {
    /// Events not yet given an audit leaf.
    pub sequencer_behind: i64,
    /// Age of the oldest such event, seconds (0 when none).
    pub sequencer_lag_seconds: f64,
    /// Audit leaves no checkpoint covers yet (checkpoint events aside).
    pub unsealed_leaves: i64,
    /// Age of the oldest such leaf, seconds (0 when none): how long the oldest fact has waited
    /// for a signed checkpoint.
    pub unsealed_age_seconds: f64,
    /// When the newest checkpoint was sealed, seconds since the epoch (`None`: none yet).
    pub last_seal_unix: Option<f64>,
}

/// The process's own gauges: start, role, CA ends, the audit readings.
#[derive(Debug)]
pub struct Watch {
    role: &'static str,
    started_unix: f64,
    /// (CA name, its notAfter in seconds since the epoch), in the order given.
    cas: Vec<(String, i64)>,
    audit: Mutex<Option<AuditReading>>,
    audit_read_failures: AtomicU64,
}

/// A certificate's notAfter in seconds since the epoch (`None`: it does not parse).
pub fn not_after_unix(der: &[u8]) -> Option<i64> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    Some(cert.validity().not_after.timestamp())
}

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

impl Watch {
    /// The gauges of a process running `role` (`all`, `api`, `gateway`), started now, with the
    /// deployment's CA certificates as (name, DER): `root`, `node`, `serving`, `operator`. A
    /// certificate that does not parse is left off the page (and logged).
    pub fn new(role: &'static str, cas: &[(&str, &[u8])]) -> Watch {
        let cas = cas
            .iter()
            .filter_map(|(name, der)| match not_after_unix(der) {
                Some(t) => Some(((*name).to_string(), t)),
                None => {
                    tracing::warn!(
                        ca = name,
                        "the CA certificate does not parse: its end is not on /metrics"
                    );
                    None
                }
            })
            .collect();
        Watch {
            role,
            started_unix: now_unix(),
            cas,
            audit: Mutex::new(None),
            audit_read_failures: AtomicU64::new(0),
        }
    }

    /// The newest audit reading.
    pub fn set_audit(&self, reading: AuditReading) {
        if let Ok(mut a) = self.audit.lock() {
            *a = Some(reading);
        }
    }

    /// A reading of the audit state failed (the store did not answer).
    pub fn audit_read_failed(&self) {
        self.audit_read_failures.fetch_add(1, Ordering::Relaxed);
    }

    /// The newest audit reading, if any.
    pub fn audit(&self) -> Option<AuditReading> {
        self.audit.lock().ok().and_then(|a| a.clone())
    }

    /// Appends the process, CA and audit families.
    pub fn render(&self, out: &mut String) {
        family(
            out,
            "process_start_time_seconds",
            "When this process started, seconds since the epoch.",
            "gauge",
        );
        let _ = writeln!(out, "process_start_time_seconds {:.3}", self.started_unix);
        family(
            out,
            "bc_build_info",
            "1, labelled with the role this process serves and its version.",
            "gauge",
        );
        let _ = writeln!(
            out,
            "bc_build_info{{role=\"{}\",version=\"{}\"}} 1",
            self.role,
            env!("CARGO_PKG_VERSION")
        );
        family(
            out,
            "bc_ca_certificate_not_after_seconds",
            "When each CA certificate of the deployment ends (notAfter), seconds since the epoch.",
            "gauge",
        );
        for (ca, t) in &self.cas {
            let _ = writeln!(
                out,
                "bc_ca_certificate_not_after_seconds{{ca=\"{ca}\"}} {t}"
            );
        }
        self.render_audit(out);
    }

    fn render_audit(&self, out: &mut String) {
        let failures = self.audit_read_failures.load(Ordering::Relaxed);
        let Some(a) = self.audit() else {
            if failures > 0 {
                render_failures(out, failures);
            }
            return;
        };
        let gauges: [(&str, &str, String); 4] = [
            (
                "bc_audit_sequencer_behind_events",
                "Events not yet given an audit leaf (deployment-wide).",
                a.sequencer_behind.to_string(),
            ),
            (
                "bc_audit_sequencer_lag_seconds",
                "Age of the oldest event not yet given an audit leaf (0 when none).",
                format!("{:.3}", a.sequencer_lag_seconds),
            ),
            (
                "bc_audit_unsealed_leaves",
                "Audit leaves no signed checkpoint covers yet.",
                a.unsealed_leaves.to_string(),
            ),
            (
                "bc_audit_unsealed_age_seconds",
                "Age of the oldest audit leaf waiting for a signed checkpoint (0 when none): the audit seal age.",
                format!("{:.3}", a.unsealed_age_seconds),
            ),
        ];
        for (name, help, value) in gauges {
            family(out, name, help, "gauge");
            let _ = writeln!(out, "{name} {value}");
        }
        if let Some(t) = a.last_seal_unix {
            family(
                out,
                "bc_audit_last_seal_timestamp_seconds",
                "When the newest audit checkpoint was sealed, seconds since the epoch.",
                "gauge",
            );
            let _ = writeln!(out, "bc_audit_last_seal_timestamp_seconds {t:.3}");
        }
        render_failures(out, failures);
    }
}

fn render_failures(out: &mut String, failures: u64) {
    family(
        out,
        "bc_audit_read_failures_total",
        "Readings of the audit state that failed (the store did not answer); the figures above are the last good reading.",
        "counter",
    );
    let _ = writeln!(out, "bc_audit_read_failures_total {failures}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_names_each_ca_end_and_the_audit_state() {
        let watch = Watch::new("api", &[("root", b"not a certificate")]);
        let mut out = String::new();
        watch.render(&mut out);
        assert!(out.contains("bc_build_info{role=\"api\","), "{out}");
        assert!(
            !out.contains("bc_ca_certificate_not_after_seconds{"),
            "{out}"
        );
        assert!(!out.contains("bc_audit_"), "no reading yet: {out}");
        watch.set_audit(AuditReading {
            sequencer_behind: 2,
            sequencer_lag_seconds: 1.5,
            unsealed_leaves: 7,
            unsealed_age_seconds: 30.0,
            last_seal_unix: None,
        });
        watch.audit_read_failed();
        let mut out = String::new();
        watch.render(&mut out);
        for line in [
            "bc_audit_sequencer_behind_events 2\n",
            "bc_audit_sequencer_lag_seconds 1.500\n",
            "bc_audit_unsealed_leaves 7\n",
            "bc_audit_unsealed_age_seconds 30.000\n",
            "bc_audit_read_failures_total 1\n",
        ] {
            assert!(out.contains(line), "{line:?} in {out}");
        }
        assert!(
            !out.contains("bc_audit_last_seal_timestamp_seconds"),
            "{out}"
        );
    }
}
