//! The database checks of `bcctl doctor`: reachable and migrated (`store.unreachable`,
//! `store.unmigrated`), this host's clock against the database's (`clock.skew`), the audit
//! sequencer and sealer (`audit.lag`, `audit.seal-lag`), and node certificates that expire
//! without a renewal (`cert.expiry`).

use std::time::Duration;

use commands::{Clock, SystemClock};
use events::store::{Backend, EventStore, LogStore};
use projections::doctor as read;

use super::finding::{human, Finding, Level};
use crate::deployment::Located;

/// A clock further off than this is a warning (certificates are backdated a little, renewals
/// carry the node's clock).
pub const SKEW_WARNING: Duration = Duration::from_secs(5);
/// Further off than this is an error: renewal's proof of possession has a ±60 s window.
pub const SKEW_ERROR: Duration = Duration::from_secs(60);
/// Events older than this and still not in an audit tree: the sequencer is not running.
pub const SEQUENCER_STALE: Duration = Duration::from_secs(60);
/// How many nodes `cert.expiry` names.
const SAMPLE: usize = 5;

fn redacted(url: &str) -> String {
    match (url.find("://"), url.find('@')) {
        (Some(s), Some(at)) if at > s => match url[s + 3..at].split_once(':') {
            Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
            None => url.to_string(),
        },
        _ => url.to_string(),
    }
}

fn since(now_us: i64, then_us: i64) -> Duration {
    Duration::from_micros(u64::try_from(now_us.saturating_sub(then_us)).unwrap_or(0))
}

/// `store.unreachable` and `store.unmigrated`; answers the store when it can be read.
pub async fn check_store(located: &Located, findings: &mut Vec<Finding>) -> Option<EventStore> {
    let url = match located.existing_store_url() {
        Ok(u) => u.to_string(),
        Err(e) => {
            findings.push(
                Finding::new("store.unreachable", Level::Error, e.to_string())
                    .fix("bcctl doctor --database-url URL (or --dir, --config)"),
            );
            return None;
        }
    };
    let shown = redacted(&url);
    let store = match EventStore::connect(&url).await {
        Ok(s) => s,
        Err(e) => {
            findings.push(
                Finding::new(
                    "store.unreachable",
                    Level::Error,
                    format!("cannot connect to {shown}: {e}"),
                )
                .fix("start the database or correct database_url (bcctl status --database-url URL shows the same)"),
            );
            return None;
        }
    };
    let latest = match store.backend() {
        Backend::Postgres => &migrations::POSTGRES,
        Backend::Sqlite => &migrations::SQLITE,
    }
    .iter()
    .map(|m| m.version)
    .max()
    .unwrap_or(0);
    let migrate = format!("bcctl migrate --database-url '{shown}'");
    match store.status().await {
        Err(e) if e.is_missing_table() => {
            findings.push(
                Finding::new(
                    "store.unmigrated",
                    Level::Error,
                    format!("{shown} has no schema (this bcctl has {latest} migrations)"),
                )
                .fix(migrate),
            );
            None
        }
        Err(e) => {
            findings.push(
                Finding::new("store.unreachable", Level::Error, format!("{shown}: {e}"))
                    .fix("check the database's log and bcctl status"),
            );
            None
        }
        Ok(status) if status.schema_version < latest => {
            findings.push(
                Finding::new(
                    "store.unmigrated",
                    Level::Error,
                    format!(
                        "{shown} is at schema version {}, behind this bcctl's {latest}",
                        status.schema_version
                    ),
                )
                .fix(migrate),
            );
            None
        }
        Ok(status) if status.schema_version > latest => {
            findings.push(
                Finding::new(
                    "store.unmigrated",
                    Level::Warning,
                    format!(
                        "{shown} is at schema version {}, newer than this bcctl's {latest}: some checks may misread it",
                        status.schema_version
                    ),
                )
                .fix("run the doctor of the bcctl version that serves this deployment"),
            );
            Some(store)
        }
        Ok(status) => {
            findings.push(Finding::new(
                "store.unmigrated",
                Level::Ok,
                format!(
                    "{shown}: schema version {}, {} event(s), head position {}",
                    status.schema_version, status.events, status.head_position
                ),
            ));
            Some(store)
        }
    }
}

/// `clock.skew`: this host's clock against the database's, at the middle of the round trip.
pub async fn check_clock(store: &EventStore, findings: &mut Vec<Finding>) {
    let before = SystemClock.now_us();
    let db = read::database_now_us(store).await;
    let after = SystemClock.now_us();
    let db = match db {
        Ok(Some(db)) => db,
        Ok(None) => {
            findings.push(Finding::new(
                "clock.skew",
                Level::Info,
                "skipped: SQLite has no clock of its own (the store is on this host)",
            ));
            return;
        }
        Err(e) => {
            findings.push(Finding::new(
                "clock.skew",
                Level::Warning,
                format!("cannot read the database's clock: {e}"),
            ));
            return;
        }
    };
    let here = before + (after - before) / 2;
    let skew_us = here - db;
    let skew = Duration::from_micros(skew_us.unsigned_abs());
    let direction = if skew_us >= 0 { "ahead of" } else { "behind" };
    let message = format!(
        "this host's clock is {} ms {direction} the database's",
        skew.as_millis()
    );
    let level = if skew > SKEW_ERROR {
        Level::Error
    } else if skew > SKEW_WARNING {
        Level::Warning
    } else {
        Level::Ok
    };
    let finding = Finding::new("clock.skew", level, message);
    findings.push(if level == Level::Ok {
        finding
    } else {
        finding.fix("synchronise the clocks with NTP (timedatectl set-ntp true; chronyc tracking shows the offset)")
    });
}

/// `audit.lag` and `audit.seal-lag`.
pub async fn check_audit(store: &EventStore, interval: Duration, findings: &mut Vec<Finding>) {
    let now = SystemClock.now_us();
    match read::sequencer_lag(store).await {
        Err(e) => findings.push(Finding::new(
            "audit.lag",
            Level::Warning,
            format!("cannot read the audit sequencer's position: {e}"),
        )),
        Ok(lag) => {
            let age = lag.oldest_us.map(|t| since(now, t)).unwrap_or_default();
            let message = format!(
                "the audit sequencer is at position {}, {} event(s) behind the head{}",
                lag.sequenced_position,
                lag.behind,
                if lag.behind > 0 {
                    format!(" (the oldest from {} ago)", human(age))
                } else {
                    String::new()
                }
            );
            // Events in flight (younger than SEQUENCER_STALE) are normal.
            findings.push(if lag.behind > 0 && age > SEQUENCER_STALE {
                Finding::new("audit.lag", Level::Warning, message)
                    .fix("bcctl serve sequences the audit trail while it runs: start it, or run bcctl audit seal once")
            } else {
                Finding::new("audit.lag", Level::Ok, message)
            });
        }
    }
    let unsealed = match read::unsealed_tenants(store).await {
        Ok(u) => u,
        Err(e) => {
            findings.push(Finding::new(
                "audit.seal-lag",
                Level::Warning,
                format!("cannot read the audit checkpoints: {e}"),
            ));
            return;
        }
    };
    let last = read::last_seal_us(store).await.ok().flatten();
    let last_text = last.map_or("no checkpoint yet".to_string(), |t| {
        format!("the last checkpoint at {}", crate::output::rfc3339_us(t))
    });
    let Some(oldest) = unsealed.first() else {
        findings.push(Finding::new(
            "audit.seal-lag",
            Level::Ok,
            format!("every audit leaf is sealed ({last_text})"),
        ));
        return;
    };
    let age = since(now, oldest.oldest_us);
    let leaves: i64 = unsealed.iter().map(|t| t.leaves).sum();
    let message = format!(
        "{leaves} audit leaf(s) of {} tenant(s) wait for a checkpoint, the oldest for {} (tenant {}); the seal interval is {}, {last_text}",
        unsealed.len(),
        human(age),
        oldest.tenant_id,
        human(interval)
    );
    findings.push(if age > interval.saturating_mul(2) {
        Finding::new("audit.seal-lag", Level::Warning, message)
            .fix("bcctl audit seal (and check that bcctl serve runs with the audit key: its log names sealing errors)")
    } else {
        Finding::new("audit.seal-lag", Level::Ok, message)
    });
}

/// `cert.expiry`: active nodes whose newest certificate expires within `horizon` (a renewal
/// is overdue: nodes renew at about 60% of a 24 h lifetime), and those whose newest one expired.
pub async fn check_certs(store: &EventStore, horizon: Duration, findings: &mut Vec<Finding>) {
    let now = SystemClock.now_us();
    let before = now.saturating_add(i64::try_from(horizon.as_micros()).unwrap_or(i64::MAX));
    let rows = match read::nodes_expiring_before(store, before).await {
        Ok(r) => r,
        Err(e) => {
            findings.push(Finding::new(
                "cert.expiry",
                Level::Warning,
                format!("cannot read the node certificates: {e}"),
            ));
            return;
        }
    };
    let (expired, expiring): (Vec<_>, Vec<_>) = rows.iter().partition(|r| r.not_after_us <= now);
    let names = |v: &[&read::ExpiringNode]| {
        v.iter()
            .take(SAMPLE)
            .map(|r| {
                format!(
                    "{} ({})",
                    r.node_id,
                    crate::output::rfc3339_us(r.not_after_us)
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !expiring.is_empty() {
        findings.push(
            Finding::new(
                "cert.expiry",
                Level::Warning,
                format!(
                    "{} active node(s) have no certificate valid beyond {} from now (a renewal is overdue): {}",
                    expiring.len(),
                    human(horizon),
                    names(&expiring)
                ),
            )
            .fix("on each node: bcd status and bcd doctor (its log names the renewal error)"),
        );
    }
    if !expired.is_empty() {
        findings.push(
            Finding::new(
                "cert.expiry",
                Level::Info,
                format!(
                    "{} active node(s) hold only expired certificates (offline?): {}",
                    expired.len(),
                    names(&expired)
                ),
            )
            .fix("a node that comes back re-joins with x509pop within 7 days of its expiry, else with a new token (bcctl token create)"),
        );
    }
    if rows.is_empty() {
        findings.push(Finding::new(
            "cert.expiry",
            Level::Ok,
            format!(
                "every active node's certificate is valid for more than {}",
                human(horizon)
            ),
        ));
    }
}
