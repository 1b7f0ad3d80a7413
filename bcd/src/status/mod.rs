//! `bcd status [--json]` and `bcd doctor`.
//!
//! Both read the identity with [`crate::files::identity::load_read_only_in`], so they never change
//! a file under a running `bcd node`. `status` prints one identity line (or the reason there is
//! none); `doctor` runs checks, each `ok`, `warn` or `fail`, and every problem ends with the way
//! back. The local checks are here; the network ones (gateway reachable, clock skew against the
//! server's time) come through [`NetworkChecks`], which the gRPC client implements.
//!
//! | module | holds |
//! | --- | --- |
//! | this file | `bcd status`, `bcd doctor` and its local checks |
//! | [`expired`] | the advice for an expired certificate: what `bcd node` does about it |
//! | [`tpm_check`] | doctor's `tpm` check under `[helper]`: the node's user cannot open the TPM |
//!
//! Doctor's network half is [`crate::node::NetworkDoctor`].

pub mod expired;
pub mod tpm_check;

use serde::Serialize;
use time::format_description::well_known::Rfc3339;
use time::{Duration, OffsetDateTime};

use crate::config::{Config, PIN_KEYS};
use crate::files::identity::{load_read_only_in, LoadError, LoadedIdentity, NextKeyOutcome};
use crate::files::revoked::{revoked, RevocationRecord, REVOKED_WAY_BACK};
use crate::files::{DataDir, IDENTITY_FILE, JOURNAL_FILE, NEXT_KEY_FILE, NODE_KEY_FILE};
use crate::node_key::{NodeKeyKind, TpmHost};
use crate::renewal::schedule::renew_at;
pub use expired::{expired_advice, Recovery, SigningKey};

/// How far the local clock may be off the server's: the window renewals and x509pop re-joins
/// are judged in (spec 003 and 000: ±60 s). Behind the last signed time by more, doctor fails.
pub const CLOCK_TOLERANCE: Duration = Duration::seconds(60);

fn rfc3339(t: OffsetDateTime) -> String {
    t.format(&Rfc3339).unwrap_or_else(|_| t.to_string())
}

/// A duration as `5h 12m` / `3m 20s` / `40s`.
pub fn human(d: Duration) -> String {
    let secs = d.whole_seconds().max(0);
    let (h, m, s) = (secs / 3600, secs % 3600 / 60, secs % 60);
    if h > 0 {
        format!("{h}h {m}m")
    } else if m > 0 {
        format!("{m}m {s}s")
    } else {
        format!("{s}s")
    }
}

/// `bcd status --json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StatusReport {
    /// `ok`, `not-joined`, `no-config` (not joined, and no config.toml either), `revoked`,
    /// `expired` or `error`.
    pub state: &'static str,
    /// The data directory.
    pub data_dir: String,
    /// The node id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    /// The site id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub site_id: Option<String>,
    /// The role.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// The trust domain.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trust_domain: Option<String>,
    /// The SPIFFE ID.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spiffe_id: Option<String>,
    /// The leaf's serial, hex.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    /// notBefore.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_before: Option<String>,
    /// notAfter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_after: Option<String>,
    /// Seconds until notAfter (negative once expired).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_in_seconds: Option<i64>,
    /// When the renewal is due.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub renew_at: Option<String>,
    /// `tpm` or `file`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_key: Option<&'static str>,
    /// The trust bundle version held.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trust_version: Option<u64>,
    /// The revocation `bcd node` saw for this certificate (`revoked.json`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revocation: Option<RevocationRecord>,
    /// The problem, ending with the way back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// `expired` only: how the identity comes back, as `bcd node` would bring it back:
    /// `x509pop` (bcd node re-joins by itself) or `join` (join again).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery: Option<Recovery>,
}

impl StatusReport {
    /// Exit code: 0 for a working identity, 1 otherwise.
    pub fn exit_code(&self) -> i32 {
        i32::from(self.state != "ok")
    }

    /// The text form.
    pub fn to_text(&self) -> String {
        match (self.state, &self.problem) {
            ("ok", _) => format!(
                "joined as {} (site {}, role {}); {}; certificate valid until {} ({} left, \
                 renewal due {})\n",
                self.node_id.as_deref().unwrap_or("?"),
                self.site_id.as_deref().unwrap_or("?"),
                self.role.as_deref().unwrap_or("?"),
                match self.node_key {
                    Some("tpm") => NodeKeyKind::Tpm.describe(),
                    _ => NodeKeyKind::File.describe(),
                },
                self.not_after.as_deref().unwrap_or("?"),
                human(Duration::seconds(self.expires_in_seconds.unwrap_or(0))),
                self.renew_at.as_deref().unwrap_or("?"),
            ),
            (_, Some(problem)) => format!("{problem}\n"),
            (state, None) => format!("{state}\n"),
        }
    }
}

/// `bcd status` of `dir` at `now`, a TPM key loaded through `tpm`; an expired certificate's
/// advice follows what `bcd node` would do with `signing` ([`expired_advice`]).
pub fn status(
    dir: &DataDir,
    tpm: &TpmHost,
    signing: &SigningKey,
    now: OffsetDateTime,
) -> StatusReport {
    let mut report = StatusReport {
        state: "ok",
        data_dir: dir.root().display().to_string(),
        node_id: None,
        site_id: None,
        role: None,
        trust_domain: None,
        spiffe_id: None,
        serial: None,
        not_before: None,
        not_after: None,
        expires_in_seconds: None,
        renew_at: None,
        node_key: None,
        trust_version: None,
        revocation: None,
        problem: None,
        recovery: None,
    };
    let loaded = match load_read_only_in(dir, tpm) {
        Ok(loaded) => loaded,
        Err(LoadError::NotJoined) => {
            report.state = "not-joined";
            report.problem = Some(LoadError::NotJoined.to_string());
            return report;
        }
        Err(e) => {
            report.state = "error";
            report.problem = Some(e.to_string());
            return report;
        }
    };
    let leaf = &loaded.leaf;
    report.node_id = Some(leaf.spiffe_id.node.to_string());
    report.site_id = Some(leaf.spiffe_id.site.to_string());
    report.role = Some(leaf.role.to_string());
    report.trust_domain = Some(leaf.spiffe_id.trust_domain.to_string());
    report.spiffe_id = Some(leaf.spiffe_id.to_string());
    report.serial = Some(leaf.serial.to_hex());
    report.not_before = Some(rfc3339(leaf.not_before));
    report.not_after = Some(rfc3339(leaf.not_after));
    report.expires_in_seconds = Some((leaf.not_after - now).whole_seconds());
    report.renew_at = Some(rfc3339(renew_at(leaf.not_before, leaf.not_after)));
    report.node_key = Some(loaded.key.kind().label());
    report.trust_version = Some(loaded.stored.trust_version);
    if let Some(record) = revoked(dir, &leaf.serial.to_hex()) {
        report.state = "revoked";
        report.problem = Some(revoked_message(&loaded, &record));
        report.revocation = Some(record);
    } else if now >= leaf.not_after {
        let (recovery, advice) = expired_advice(&loaded, signing, now);
        report.state = "expired";
        report.problem = Some(advice);
        report.recovery = Some(recovery);
    }
    report
}

/// `bcd status` as the command runs it: [`status`], and a node that has not joined on a machine
/// with no config.toml either is `no-config`, naming the file (not "not joined").
pub fn status_of(config: &Config, dir: &DataDir, now: OffsetDateTime) -> StatusReport {
    let mut report = status(dir, &config.key_host(), &SigningKey::of(config), now);
    if report.state == "not-joined" {
        if let Some(e) = config.no_config() {
            report.state = "no-config";
            report.problem = Some(format!("{e}; then bcd join"));
        }
    }
    report
}

fn revoked_message(loaded: &LoadedIdentity, record: &RevocationRecord) -> String {
    format!(
        "{} is revoked: {}; {REVOKED_WAY_BACK}",
        loaded.describe(),
        record.describe()
    )
}

/// A check's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Level {
    /// Fine.
    Ok,
    /// Works, but needs attention.
    Warn,
    /// Broken.
    Fail,
}

impl Level {
    fn label(self) -> &'static str {
        match self {
            Level::Ok => "ok  ",
            Level::Warn => "warn",
            Level::Fail => "FAIL",
        }
    }
}

/// One doctor check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    /// Its name (`identity`, `pins`, ...).
    pub name: &'static str,
    /// Outcome.
    pub level: Level,
    /// What was found; a problem ends with the way back.
    pub detail: String,
}

impl Check {
    /// A check result.
    pub fn new(name: &'static str, level: Level, detail: impl Into<String>) -> Check {
        Check {
            name,
            level,
            detail: detail.into(),
        }
    }
}

/// The checks that need the network; the gRPC client implements them.
pub trait NetworkChecks {
    /// Whether the gateway at `server` answers a TLS handshake pinned to the serving CA and the
    /// gRPC health check.
    fn gateway_reachable(&self, config: &Config) -> Check;
    /// The local clock against the server's time.
    fn clock_skew(&self, config: &Config, now: OffsetDateTime) -> Check;
}

/// Until the network side is wired: both checks say so.
#[derive(Debug, Default)]
pub struct NetworkNotWired;

impl NetworkChecks for NetworkNotWired {
    fn gateway_reachable(&self, _config: &Config) -> Check {
        Check::new(
            "gateway",
            Level::Warn,
            "not checked: this bcd build has no network client yet",
        )
    }
    fn clock_skew(&self, _config: &Config, _now: OffsetDateTime) -> Check {
        Check::new(
            "clock skew",
            Level::Warn,
            "not checked against the server: this bcd build has no network client yet",
        )
    }
}

fn pins_check(config: &Config) -> Check {
    // Malformed pins never get here: bcd stops when it loads the configuration.
    let missing: Vec<&str> = [
        config.pins.serving_ca_spki_pin.is_none(),
        config.pins.join_encryption_key_pin.is_none(),
        config.pins.join_signing_key_pin.is_none(),
    ]
    .iter()
    .zip(PIN_KEYS)
    .filter(|(missing, _)| **missing)
    .map(|(_, key)| key)
    .collect();
    let Some(file) = config.path.as_ref().map(|p| p.display().to_string()) else {
        if let Some(e) = config.no_config() {
            return Check::new("config", Level::Fail, e.to_string());
        }
        return Check::new("pins", Level::Fail, "no config.toml");
    };
    if missing.is_empty() {
        Check::new("pins", Level::Ok, "all three pins set and well formed")
    } else {
        Check::new(
            "pins",
            Level::Fail,
            format!(
                "{file}: {} not set; copy the pins from `bcctl pki show` into it",
                missing.join(", ")
            ),
        )
    }
}

fn server_check(config: &Config) -> Check {
    match &config.server {
        Some(server) => Check::new("server", Level::Ok, server.clone()),
        None if config.path.is_none() => Check::new(
            "server",
            Level::Fail,
            "not set (no config.toml: see config above)",
        ),
        None => Check::new(
            "server",
            Level::Fail,
            "no server address: set `server` in config.toml, or BCD_SERVER",
        ),
    }
}

fn identity_checks(
    dir: &DataDir,
    tpm: &TpmHost,
    signing: &SigningKey,
    now: OffsetDateTime,
) -> (Vec<Check>, Option<LoadedIdentity>) {
    let loaded = match load_read_only_in(dir, tpm) {
        Ok(loaded) => loaded,
        Err(LoadError::NotJoined) => {
            return (
                vec![Check::new(
                    "identity",
                    Level::Warn,
                    LoadError::NotJoined.to_string(),
                )],
                None,
            )
        }
        Err(e) => {
            return (
                vec![Check::new("identity", Level::Fail, e.to_string())],
                None,
            )
        }
    };
    let mut checks = Vec::new();
    let leaf = &loaded.leaf;
    if let Some(record) = revoked(dir, &leaf.serial.to_hex()) {
        checks.push(Check::new(
            "identity",
            Level::Ok,
            format!(
                "{}; certificate serial {} (valid until {})",
                loaded.describe(),
                leaf.serial.to_hex(),
                rfc3339(leaf.not_after)
            ),
        ));
        checks.push(Check::new(
            "revocation",
            Level::Fail,
            revoked_message(&loaded, &record),
        ));
    } else if now >= leaf.not_after {
        checks.push(Check::new(
            "identity",
            Level::Fail,
            expired_advice(&loaded, signing, now).1,
        ));
    } else {
        checks.push(Check::new(
            "identity",
            Level::Ok,
            format!(
                "{}; certificate valid until {} ({} left)",
                loaded.describe(),
                rfc3339(leaf.not_after),
                human(leaf.not_after - now)
            ),
        ));
        let due = renew_at(leaf.not_before, leaf.not_after);
        // A renewal a few minutes late is a retry in progress; a quarter of the lifetime late is not.
        if now > due + (leaf.not_after - leaf.not_before) / 4 {
            checks.push(Check::new(
                "renewal",
                Level::Warn,
                format!(
                    "the renewal was due at {}: is bcd node running? (systemctl status bcd, \
                     journalctl -u bcd)",
                    rfc3339(due)
                ),
            ));
        } else {
            checks.push(Check::new(
                "renewal",
                Level::Ok,
                format!("due at {}", rfc3339(due)),
            ));
        }
    }
    match loaded.next_key {
        NextKeyOutcome::Absent => {}
        NextKeyOutcome::Promoted => checks.push(Check::new(
            "renewal",
            Level::Ok,
            "node.key.next holds the certified key; the next start of bcd promotes it",
        )),
        NextKeyOutcome::Kept => checks.push(Check::new(
            "renewal",
            Level::Ok,
            "node.key.next is an unfinished renewal's key (in progress, or its answer was lost: \
             the next renewal asks for it again)",
        )),
        NextKeyOutcome::Removed => checks.push(Check::new(
            "renewal",
            Level::Warn,
            "node.key.next is not a key (removed at the next start of bcd node)",
        )),
    }
    checks.push(node_key_check(loaded.key.kind(), tpm));
    (checks, Some(loaded))
}

/// The `node key` check: ok in the TPM; ok a file on a host without a TPM; warn a file on a host
/// with one (the next renewal moves it there).
pub fn node_key_check(kind: NodeKeyKind, tpm: &TpmHost) -> Check {
    match kind {
        NodeKeyKind::Tpm => Check::new("node key", Level::Ok, "in the TPM"),
        NodeKeyKind::File => match tpm.open() {
            Ok(_) => Check::new(
                "node key",
                Level::Warn,
                format!(
                    "a file, on a host with a TPM ({}): the next renewal moves it into the TPM",
                    tpm.tcti()
                ),
            ),
            Err(e) => Check::new(
                "node key",
                Level::Ok,
                format!("a file; this host has no TPM ({e})"),
            ),
        },
    }
}

/// The `tpm` check under `[helper]` ([`crate::status::tpm_check`]): the node's user cannot open the
/// TPM. Not shown without `[helper]` (root's `bcd node` opens the TPM itself).
fn tpm_split_check(config: &Config) -> Option<Check> {
    use crate::status::tpm_check::{tpm_check, Finding};
    Some(match tpm_check(config)? {
        Finding::Ok(detail) => Check::new("tpm", Level::Ok, detail),
        Finding::Warn(detail) => Check::new("tpm", Level::Warn, detail),
        Finding::Fail(detail) => Check::new("tpm", Level::Fail, detail),
    })
}

fn mode_check(dir: &DataDir) -> Check {
    let loose: Vec<String> = [IDENTITY_FILE, NODE_KEY_FILE, NEXT_KEY_FILE, JOURNAL_FILE]
        .iter()
        .filter_map(|name| dir.mode(name).map(|mode| (name, mode)))
        .filter(|(_, mode)| mode & 0o077 != 0)
        .map(|(name, mode)| format!("{} is {mode:04o}", dir.file(name).display()))
        .collect();
    if loose.is_empty() {
        Check::new("file modes", Level::Ok, "0600 or stricter")
    } else {
        Check::new(
            "file modes",
            Level::Warn,
            format!(
                "{}; others may read the node's identity: chmod 0600 them",
                loose.join(", ")
            ),
        )
    }
}

/// The local clock against the highest signed time bcd has seen (`serverTime`: a join or
/// renewal answer's server time, a verified command's issue time): the real time is at least
/// that, so a clock behind it by more than the window is wrong, whatever a Welcome says.
fn local_clock_check(loaded: Option<&LoadedIdentity>, now: OffsetDateTime) -> Option<Check> {
    let seen = loaded?.stored.server_time()?;
    let behind = seen - now;
    Some(if behind > CLOCK_TOLERANCE {
        Check::new(
            "local clock",
            Level::Fail,
            format!(
                "the local clock ({}) is at least {:.1} s behind the time the control plane \
                 signed last ({}): renewals and x509pop re-joins are refused past {} s, and \
                 signed commands are judged at the signed time; fix the clock (timedatectl \
                 status; chrony or systemd-timesyncd)",
                rfc3339(now),
                behind.as_seconds_f64(),
                rfc3339(seen),
                CLOCK_TOLERANCE.whole_seconds()
            ),
        )
    } else {
        Check::new(
            "local clock",
            Level::Ok,
            format!(
                "not behind the time the control plane signed last ({})",
                rfc3339(seen)
            ),
        )
    })
}

/// Every doctor check, local then network.
pub fn doctor(
    config: &Config,
    dir: &DataDir,
    network: &dyn NetworkChecks,
    now: OffsetDateTime,
) -> Vec<Check> {
    let mut checks = vec![pins_check(config), server_check(config)];
    let (identity, loaded) = identity_checks(dir, &config.key_host(), &SigningKey::of(config), now);
    checks.extend(identity);
    if let Some(loaded) = &loaded {
        checks.push(
            match crate::files::pem_files::files_check(&config.files, loaded) {
                Ok(message) => Check::new("pem files", Level::Ok, message),
                Err(message) => Check::new("pem files", Level::Warn, message),
            },
        );
    }
    checks.push(mode_check(dir));
    checks.extend(tpm_split_check(config));
    checks.extend(local_clock_check(loaded.as_ref(), now));
    checks.push(network.gateway_reachable(config));
    let revoked_here = loaded
        .as_ref()
        .is_some_and(|l| revoked(dir, &l.leaf.serial.to_hex()).is_some());
    if revoked_here {
        // A session with a revoked certificate is refused: nothing to measure the clock with,
        // and the revocation check above already says what to do.
        checks.push(Check::new(
            "clock skew",
            Level::Warn,
            "not checked: it needs a session, and this certificate is revoked (see revocation)",
        ));
    } else {
        checks.push(network.clock_skew(config, now));
    }
    checks
}

/// The doctor's text: one line per check.
pub fn doctor_text(checks: &[Check]) -> String {
    checks
        .iter()
        .map(|c| format!("{} {}: {}\n", c.level.label(), c.name, c.detail))
        .collect()
}

/// 1 when any check failed, else 0.
pub fn doctor_exit_code(checks: &[Check]) -> i32 {
    i32::from(checks.iter().any(|c| c.level == Level::Fail))
}
