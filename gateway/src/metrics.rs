//! Prometheus text metrics, served on a separate (loopback) port by a tiny HTTP/1.1 responder.
//!
//! No refusal reason is ever on this page (spec 001: reasons stay server-side, in the refusal
//! events and the logs). Join and renew refusals are counted by attestor only (the part of
//! `<attestor>:<reason>` before the colon, [`RefusalCounts`]); handshake refusals are one total
//! (their reasons are in the gateway's log and in [`RefusalCounters::by_reason`] for tests).
//!
//! The responder, its connection caps and the api process's page are
//! [`crate::metrics_http`] and [`crate::watch`].

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::TcpListener;

use crate::edge::tls::RefusalCounters;
use crate::metrics_http::{family, labeled};
use crate::revocation::feed_health::FeedHealth;
use crate::revocation::revoked::RevokedSerials;
use crate::session::registry::Sessions;
use crate::trust::reports::ReportCounters;

/// A counter family keyed by one label value.
#[derive(Debug, Default)]
pub struct Labeled(Mutex<BTreeMap<String, u64>>);

impl Labeled {
    pub fn add(&self, label: &str, n: u64) {
        if let Ok(mut m) = self.0.lock() {
            *m.entry(label.to_string()).or_default() += n;
        }
    }

    pub fn inc(&self, label: &str) {
        self.add(label, 1);
    }

    pub fn get(&self, label: &str) -> u64 {
        self.0
            .lock()
            .map(|m| m.get(label).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    pub(crate) fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0.lock().map(|m| m.clone()).unwrap_or_default()
    }
}

/// Most distinct attestor labels a [`RefusalCounts`] keeps; refusals of any further attestor
/// are counted under `other`.
pub const MAX_ATTESTOR_LABELS: usize = 64;

/// Refusals counted by attestor only: the reason of `<attestor>:<reason>` is dropped on the way
/// in, so it cannot reach `/metrics`.
#[derive(Debug, Default)]
pub struct RefusalCounts(Labeled);

impl RefusalCounts {
    /// The attestor of a refusal string (`unknown` when it names none).
    pub fn attestor_of(refusal: &str) -> &str {
        match refusal.split_once(':') {
            Some((attestor, _)) if !attestor.is_empty() => attestor,
            _ => "unknown",
        }
    }

    /// Counts `n` refusals `<attestor>:<reason>` under their attestor.
    pub fn add(&self, refusal: &str, n: u64) {
        let attestor = Self::attestor_of(refusal);
        let known = self
            .0
             .0
            .lock()
            .map(|m| m.contains_key(attestor) || m.len() < MAX_ATTESTOR_LABELS)
            .unwrap_or(false);
        self.0.add(if known { attestor } else { "other" }, n);
    }

    /// Counts one refusal.
    pub fn inc(&self, refusal: &str) {
        self.add(refusal, 1);
    }

    /// The count of one attestor.
    pub fn get(&self, attestor: &str) -> u64 {
        self.0.get(attestor)
    }

    fn snapshot(&self) -> BTreeMap<String, u64> {
        self.0.snapshot()
    }
}

/// The upper bounds (seconds) of [`Verifications`]' duration histogram.
pub const VERIFY_BUCKETS: [f64; 10] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];

/// The outcomes a verification is counted under (spec 001 "Registering": admitted,
/// deferred-<kind>, refused).
pub const VERIFY_OUTCOMES: [&str; 4] = [
    "admitted",
    "deferred-approval",
    "deferred-challenge",
    "refused",
];

#[derive(Debug, Default, Clone)]
struct Histogram {
    buckets: [u64; VERIFY_BUCKETS.len()],
    count: u64,
    sum: f64,
}

#[derive(Debug, Default)]
struct VerificationState {
    counts: BTreeMap<(String, &'static str), u64>,
    durations: BTreeMap<String, Histogram>,
}

/// Join verifications answered here, by attestor id and outcome, with a duration histogram by
/// attestor. Labelled by attestor id only (never a reason); at most [`MAX_ATTESTOR_LABELS`]
/// distinct ids, any further under `other`.
#[derive(Debug, Default)]
pub struct Verifications(Mutex<VerificationState>);

impl Verifications {
    /// Counts one verification of `attestor` (empty: `join-token`) that ended in `outcome`
    /// (one of [`VERIFY_OUTCOMES`]) after `elapsed`.
    pub fn record(&self, attestor: &str, outcome: &'static str, elapsed: std::time::Duration) {
        let attestor = if attestor.is_empty() {
            domain::attest::ids::JOIN_TOKEN
        } else {
            attestor
        };
        let Ok(mut state) = self.0.lock() else {
            return;
        };
        let label = if state.durations.contains_key(attestor)
            || state.durations.len() < MAX_ATTESTOR_LABELS
        {
            attestor.to_owned()
        } else {
            "other".to_owned()
        };
        *state.counts.entry((label.clone(), outcome)).or_default() += 1;
        let h = state.durations.entry(label).or_default();
        let secs = elapsed.as_secs_f64();
        for (i, le) in VERIFY_BUCKETS.iter().enumerate() {
            if secs <= *le {
                h.buckets[i] += 1;
            }
        }
        h.count += 1;
        h.sum += secs;
    }

    /// The count of (attestor, outcome).
    pub fn get(&self, attestor: &str, outcome: &str) -> u64 {
        self.0
            .lock()
            .map(|s| {
                s.counts
                    .iter()
                    .filter(|((a, o), _)| a == attestor && *o == outcome)
                    .map(|(_, n)| *n)
                    .sum()
            })
            .unwrap_or(0)
    }

    pub(crate) fn render(&self, out: &mut String) {
        let state = match self.0.lock() {
            Ok(s) => VerificationState {
                counts: s.counts.clone(),
                durations: s.durations.clone(),
            },
            Err(_) => VerificationState::default(),
        };
        let esc = |k: &str| k.replace('\\', "\\\\").replace('"', "\\\"");
        family(
            out,
            "bc_attestor_verifications_total",
            "Join verifications answered by this gateway, by attestor and outcome (admitted, deferred-approval, deferred-challenge, refused).",
            "counter",
        );
        for ((attestor, outcome), n) in &state.counts {
            let _ = writeln!(
                out,
                "bc_attestor_verifications_total{{attestor=\"{}\",outcome=\"{outcome}\"}} {n}",
                esc(attestor)
            );
        }
        family(
            out,
            "bc_attestor_verification_seconds",
            "Time to answer a join, by attestor.",
            "histogram",
        );
        for (attestor, h) in &state.durations {
            let a = esc(attestor);
            for (i, le) in VERIFY_BUCKETS.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "bc_attestor_verification_seconds_bucket{{attestor=\"{a}\",le=\"{le}\"}} {}",
                    h.buckets[i]
                );
            }
            let _ = writeln!(
                out,
                "bc_attestor_verification_seconds_bucket{{attestor=\"{a}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                out,
                "bc_attestor_verification_seconds_sum{{attestor=\"{a}\"}} {:.6}",
                h.sum
            );
            let _ = writeln!(
                out,
                "bc_attestor_verification_seconds_count{{attestor=\"{a}\"}} {}",
                h.count
            );
        }
    }
}

/// Every counter the gateway keeps.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Join calls answered here, by outcome: joined, deferred (pending approval or a
    /// challenge), refused, unsupported (an attestor this control plane does not run), limited,
    /// error.
    pub join_requests: Labeled,
    /// Join verifications by attestor and outcome, and their durations.
    pub verifications: Verifications,
    /// Join refusals by attestor, deployment-wide, from the `security.join.refused` events the
    /// feed reads (suppressed ones counted once summarized).
    pub join_refusals: RefusalCounts,
    /// Renew calls answered here, by outcome: renewed, refused, unauthenticated, error.
    pub renewals: Labeled,
    /// Renew refusals by attestor (`renew`), deployment-wide, from `security.renew.refused`
    /// events.
    pub renew_refusals: RefusalCounts,
    /// Session opens refused, by outcome: no-certificate, expired, not-yet-valid, feed-stale,
    /// revoked (each is what the node itself is told).
    pub sessions_refused: Labeled,
    /// Trust reports of node sessions: recorded, skipped, dropped.
    pub trust_reports: ReportCounters,
    /// Sessions opened.
    pub sessions_opened: AtomicU64,
    /// Of those, opened on the session wire (ALPN `bc-session/1`).
    pub wire_sessions_opened: AtomicU64,
    /// RevocationNotices sent.
    pub revocation_notices: AtomicU64,
    /// Commands sent over sessions, node results by outcome, poller failures.
    pub commands: Arc<crate::node_commands::counters::CommandCounters>,
    /// Renewals refused at the TLS handshake, by what became of their event.
    pub edge_renew_refusals: Arc<crate::renew::edge_refusals::EdgeRefusalCounters>,
    /// Split gateways only: whether the api answered the last probe (`API_UNKNOWN` in the
    /// `all` role, where there is no api to reach).
    pub api_state: AtomicU8,
    /// Split gateways only: the internal client certificate in use and its reloads.
    pub internal_cert: Arc<crate::split::internal_files::InternalCertMetrics>,
}

/// [`Metrics::api_state`]: not a split gateway.
pub const API_UNKNOWN: u8 = 0;
/// [`Metrics::api_state`]: the api answered the last probe.
pub const API_UP: u8 = 1;
/// [`Metrics::api_state`]: the api did not answer the last probe.
pub const API_DOWN: u8 = 2;

/// What the metrics page reads besides [`Metrics`].
#[derive(Clone)]
pub struct MetricSources {
    pub metrics: Arc<Metrics>,
    pub sessions: Arc<Sessions>,
    pub handshake_refusals: Arc<RefusalCounters>,
    pub feed: Arc<FeedHealth>,
    pub revoked: Arc<RevokedSerials>,
    /// The process's own gauges (start, role, CA ends, audit), when the process keeps them.
    pub watch: Option<Arc<crate::watch::Watch>>,
}

impl MetricSources {
    /// The Prometheus text exposition (format 0.0.4).
    pub fn render(&self) -> String {
        let mut out = String::new();
        self.render_joins_and_renewals(&mut out);
        self.render_sessions(&mut out);
        self.render_trust_reports(&mut out);
        self.metrics.commands.render(&mut out);
        self.render_revocation(&mut out);
        self.metrics.edge_renew_refusals.render(&mut out);
        self.metrics.internal_cert.render(&mut out);
        let api = self.metrics.api_state.load(Ordering::Relaxed);
        if api != API_UNKNOWN {
            family(
                &mut out,
                "bc_api_up",
                "Split gateway: 1 when the api answered the last probe (Join and Renew need it).",
                "gauge",
            );
            let _ = writeln!(out, "bc_api_up {}", u8::from(api == API_UP));
        }
        if let Some(watch) = &self.watch {
            watch.render(&mut out);
        }
        out
    }

    /// Join and Renew calls by outcome, their refusals by attestor, and the verifications.
    fn render_joins_and_renewals(&self, out: &mut String) {
        let m = &self.metrics;
        family(
            out,
            "bc_join_requests_total",
            "Join calls answered by this gateway, by outcome.",
            "counter",
        );
        labeled(
            out,
            "bc_join_requests_total",
            "outcome",
            &m.join_requests.snapshot(),
        );
        family(
            out,
            "bc_join_refusals_total",
            "Join refusals by attestor (from the event log, deployment-wide; reasons stay in the events).",
            "counter",
        );
        labeled(
            out,
            "bc_join_refusals_total",
            "attestor",
            &m.join_refusals.snapshot(),
        );
        m.verifications.render(out);
        family(
            out,
            "bc_renewals_total",
            "Renew calls answered by this gateway, by outcome.",
            "counter",
        );
        labeled(out, "bc_renewals_total", "outcome", &m.renewals.snapshot());
        family(
            out,
            "bc_renew_refusals_total",
            "Renew refusals (from the event log, deployment-wide; reasons stay in the events).",
            "counter",
        );
        labeled(
            out,
            "bc_renew_refusals_total",
            "attestor",
            &m.renew_refusals.snapshot(),
        );
    }

    /// Node sessions: live, opened (on the session wire too), refused, and the revocation
    /// notices sent to them.
    fn render_sessions(&self, out: &mut String) {
        let m = &self.metrics;
        family(out, "bc_live_sessions", "Node sessions open now.", "gauge");
        let _ = writeln!(out, "bc_live_sessions {}", self.sessions.len());
        family(
            out,
            "bc_sessions_opened_total",
            "Node sessions opened.",
            "counter",
        );
        let _ = writeln!(
            out,
            "bc_sessions_opened_total {}",
            m.sessions_opened.load(Ordering::Relaxed)
        );
        family(
            out,
            "bc_wire_sessions_opened_total",
            "Node sessions opened on the session wire (ALPN bc-session/1); the others were gRPC streams.",
            "counter",
        );
        let _ = writeln!(
            out,
            "bc_wire_sessions_opened_total {}",
            m.wire_sessions_opened.load(Ordering::Relaxed)
        );
        family(
            out,
            "bc_sessions_refused_total",
            "Node session opens refused, by outcome (what the node is told).",
            "counter",
        );
        labeled(
            out,
            "bc_sessions_refused_total",
            "outcome",
            &m.sessions_refused.snapshot(),
        );
        family(
            out,
            "bc_revocation_notices_total",
            "RevocationNotices sent to live sessions.",
            "counter",
        );
        let _ = writeln!(
            out,
            "bc_revocation_notices_total {}",
            m.revocation_notices.load(Ordering::Relaxed)
        );
    }

    /// Revocation: handshake refusals, the feed's lag and state, the revoked serials.
    fn render_revocation(&self, out: &mut String) {
        family(
            out,
            "bc_handshake_refusals_total",
            "Client certificates refused at the TLS handshake (reasons are in the gateway's log).",
            "counter",
        );
        let _ = writeln!(
            out,
            "bc_handshake_refusals_total {}",
            self.handshake_refusals.total()
        );
        family(
            out,
            "bc_revocation_feed_lag_seconds",
            "Time since the revocation feed was last caught up.",
            "gauge",
        );
        let _ = writeln!(
            out,
            "bc_revocation_feed_lag_seconds {:.3}",
            self.feed.lag().as_secs_f64()
        );
        family(
            out,
            "bc_revocation_feed_stale",
            "1 while the feed is behind by more than its limit (new sessions are refused).",
            "gauge",
        );
        let _ = writeln!(
            out,
            "bc_revocation_feed_stale {}",
            u8::from(self.feed.is_stale())
        );
        family(
            out,
            "bc_revocation_feed_halted",
            "1 once the feed stopped at a revocation it cannot read (every session is refused until a restart).",
            "gauge",
        );
        let _ = writeln!(
            out,
            "bc_revocation_feed_halted {}",
            u8::from(self.feed.halted().is_some())
        );
        family(
            out,
            "bc_revoked_serials",
            "Revoked, unexpired certificate serials the verifier refuses.",
            "gauge",
        );
        let _ = writeln!(out, "bc_revoked_serials {}", self.revoked.len());
    }
}

impl MetricSources {
    fn render_trust_reports(&self, out: &mut String) {
        let t = &self.metrics.trust_reports;
        family(
            out,
            "bc_trust_reports_total",
            "Node trust reports, by outcome: queued (to be recorded), unchanged and over-bound (not recorded), dropped (queue full).",
            "counter",
        );
        for (outcome, counter) in [
            ("queued", &t.queued),
            ("unchanged", &t.unchanged),
            ("over-bound", &t.over_bound),
            ("dropped", &t.dropped),
        ] {
            let _ = writeln!(
                out,
                "bc_trust_reports_total{{outcome=\"{outcome}\"}} {}",
                counter.load(Ordering::Relaxed)
            );
        }
        family(
            out,
            "bc_trust_report_queue_warnings_total",
            "\"trust report queue full\" WARN lines written (one per 10 s at most).",
            "counter",
        );
        let _ = writeln!(
            out,
            "bc_trust_report_queue_warnings_total {}",
            t.warn_lines.load(Ordering::Relaxed)
        );
    }
}

/// Serves the gateway's page (`GET`, any path) on `listener` until the task is dropped
/// ([`crate::metrics_http::serve_page`]).
pub async fn serve_metrics(listener: TcpListener, sources: MetricSources) {
    crate::metrics_http::serve_page(listener, Arc::new(move || sources.render())).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn verifications_count_by_attestor_and_outcome_with_a_histogram() {
        let v = Verifications::default();
        v.record("", "admitted", Duration::from_millis(3));
        v.record("x509pop", "refused", Duration::from_millis(30));
        v.record("x509pop", "deferred-approval", Duration::from_secs(9));
        assert_eq!(v.get("join-token", "admitted"), 1);
        assert_eq!(v.get("x509pop", "refused"), 1);
        let mut out = String::new();
        v.render(&mut out);
        assert!(out.contains(
            "bc_attestor_verifications_total{attestor=\"x509pop\",outcome=\"deferred-approval\"} 1"
        ));
        assert!(out.contains(
            "bc_attestor_verification_seconds_bucket{attestor=\"x509pop\",le=\"0.05\"} 1"
        ));
        assert!(out.contains(
            "bc_attestor_verification_seconds_bucket{attestor=\"x509pop\",le=\"+Inf\"} 2"
        ));
        assert!(out.contains("bc_attestor_verification_seconds_count{attestor=\"join-token\"} 1"));
        // The attestor labels are bounded.
        for i in 0..(MAX_ATTESTOR_LABELS + 5) {
            v.record(&format!("a{i}"), "refused", Duration::ZERO);
        }
        assert!(v.get("other", "refused") >= 5);
    }
}
