//! What the admin listener counts: calls denied by verb and role, calls refused as invalid by
//! verb, calls run by verb, handshakes refused (a revoked operator certificate, a certificate
//! from another CA) and calls over the concurrency or time limits.
//!
//! The gateway's Prometheus registry belongs to the gateway crate and renders only its own
//! sources, so these counters live here: every refusal is logged with the running total
//! (`denied_total`), and [`AdminCounters::render`] gives them in the Prometheus text format
//! (served by nothing yet; docs/ADMIN-API.md, "Counters").

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use domain::operator::OperatorRole;

/// The admin listener's counters (shared by its calls and its TLS verifier).
#[derive(Debug, Default)]
pub struct AdminCounters {
    denied: Mutex<BTreeMap<(String, &'static str), u64>>,
    invalid: Mutex<BTreeMap<String, u64>>,
    ran: Mutex<BTreeMap<String, u64>>,
    /// Handshakes refused because the operator certificate is revoked.
    pub revoked_handshakes: AtomicU64,
    /// Calls refused because `max_concurrent_calls` were running.
    pub busy: AtomicU64,
    /// Calls stopped at `call_timeout`.
    pub timed_out: AtomicU64,
}

fn bump<K: Ord>(map: &Mutex<BTreeMap<K, u64>>, key: K) -> u64 {
    let mut m = map.lock().unwrap_or_else(|p| p.into_inner());
    let n = m.entry(key).or_insert(0);
    *n += 1;
    *n
}

impl AdminCounters {
    /// Counts a call `role` may not make; returns the count for that verb and role.
    pub fn denied(&self, verb: &str, role: OperatorRole) -> u64 {
        bump(&self.denied, (verb.to_string(), role.as_str()))
    }

    /// Counts a call refused as INVALID_ARGUMENT after parsing.
    pub fn invalid(&self, verb: &str) -> u64 {
        bump(&self.invalid, verb.to_string())
    }

    /// Counts a call that ran.
    pub fn ran(&self, verb: &str) -> u64 {
        bump(&self.ran, verb.to_string())
    }

    /// The denied count of `verb` for `role`.
    #[cfg(test)]
    pub fn denied_count(&self, verb: &str, role: OperatorRole) -> u64 {
        let m = self.denied.lock().unwrap_or_else(|p| p.into_inner());
        m.get(&(verb.to_string(), role.as_str()))
            .copied()
            .unwrap_or(0)
    }

    /// Every denied call so far.
    pub fn denied_total(&self) -> u64 {
        let m = self.denied.lock().unwrap_or_else(|p| p.into_inner());
        m.values().sum()
    }

    /// The counters in the Prometheus text exposition format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# TYPE bc_admin_calls_denied_total counter");
        for ((verb, role), n) in self.denied.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(
                out,
                "bc_admin_calls_denied_total{{verb=\"{verb}\",role=\"{role}\"}} {n}"
            );
        }
        let _ = writeln!(out, "# TYPE bc_admin_calls_invalid_total counter");
        for (verb, n) in self
            .invalid
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
        {
            let _ = writeln!(out, "bc_admin_calls_invalid_total{{verb=\"{verb}\"}} {n}");
        }
        let _ = writeln!(out, "# TYPE bc_admin_calls_total counter");
        for (verb, n) in self.ran.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            let _ = writeln!(out, "bc_admin_calls_total{{verb=\"{verb}\"}} {n}");
        }
        for (name, v) in [
            (
                "bc_admin_handshakes_revoked_total",
                &self.revoked_handshakes,
            ),
            ("bc_admin_calls_busy_total", &self.busy),
            ("bc_admin_calls_timed_out_total", &self.timed_out),
        ] {
            let _ = writeln!(
                out,
                "# TYPE {name} counter\n{name} {}",
                v.load(Ordering::Relaxed)
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn denied_calls_are_counted_by_verb_and_role() {
        let c = AdminCounters::default();
        assert_eq!(c.denied("token create", OperatorRole::Auditor), 1);
        assert_eq!(c.denied("token create", OperatorRole::Auditor), 2);
        c.denied("audit seal", OperatorRole::Operator);
        assert_eq!(c.denied_count("token create", OperatorRole::Auditor), 2);
        assert_eq!(c.denied_total(), 3);
        assert!(c
            .render()
            .contains("bc_admin_calls_denied_total{verb=\"token create\",role=\"auditor\"} 2"));
    }
}
