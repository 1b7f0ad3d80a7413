//! The PKI checks of `bcctl doctor`: the bundle file (`pki.unreadable`, `pki.unseal`), its CA
//! certificates' expiry (`pki.ca-expired`, `pki.ca-expiring`), and what the deployment published
//! from it (`pki.rotation`, `pki.quorum-unsigned`, `pki.quorum-change`, `pki.quorum-lag`).

use commands::quorum::{published_bundle, PublishedBundle};
use commands::{Clock, SystemClock};
use domain::pki::{open_bundle, BundleError, Protection, PublicBundle};
use domain::quorum::{check_set_change, TrustDomain};
use events::store::EventStore;
use time::OffsetDateTime;

use super::finding::{human, Finding, Level};
use crate::deployment::Deployment;
use crate::serve::config::Settings;

/// A CA within this of its notAfter is `pki.ca-expiring`.
pub const CA_EXPIRING: time::Duration = time::Duration::days(30);

/// How many lagging nodes `pki.quorum-lag` names.
const SAMPLE: usize = 5;

/// Reads and opens the bundle; answers its public half when it parses.
pub fn check_bundle(deployment: &Deployment, findings: &mut Vec<Finding>) -> Option<PublicBundle> {
    let path = deployment.bundle.display().to_string();
    let bytes = match std::fs::read(&deployment.bundle) {
        Ok(b) => b,
        Err(e) => {
            findings.push(
                Finding::new(
                    "pki.unreadable",
                    Level::Error,
                    format!("cannot read the PKI bundle {path}: {e}"),
                )
                .fix(format!(
                    "point --pki (or --dir/--config) at the deployment's bundle, or restore {path} from a backup"
                )),
            );
            return None;
        }
    };
    let public = match open_bundle(&bytes, None) {
        Ok(l) => l,
        Err(e) => {
            findings.push(
                Finding::new(
                    "pki.unreadable",
                    Level::Error,
                    format!("PKI bundle {path}: {e}"),
                )
                .fix(format!("restore {path} from a backup (it does not parse)")),
            );
            return None;
        }
    };
    check_seal(deployment, &bytes, public.protection, &path, findings);
    check_cas(&public.public, findings);
    Some(public.public)
}

/// `pki.unseal`: the bundle opens with this deployment's secret.
fn check_seal(
    deployment: &Deployment,
    bytes: &[u8],
    protection: Protection,
    path: &str,
    findings: &mut Vec<Finding>,
) {
    let secret = match deployment.secret() {
        Ok(s) => s,
        Err(e) => {
            findings.push(
                Finding::new("pki.unseal", Level::Error, format!("the deployment secret: {e}"))
                    .fix("set BC_DEPLOYMENT_SECRET (or BC_DEPLOYMENT_SECRET_FILE) to this deployment's secret"),
            );
            return;
        }
    };
    match (protection, secret) {
        (Protection::Plaintext, _) => findings.push(Finding::new(
            "pki.unseal",
            Level::Info,
            format!("{path} is a PLAINTEXT bundle: its keys are unsealed (development only)"),
        )),
        (Protection::Sealed, None) => findings.push(
            Finding::new(
                "pki.unseal",
                Level::Info,
                format!("{path} is sealed and no deployment secret is given: not checked whether it opens"),
            )
            .fix("set BC_DEPLOYMENT_SECRET (or BC_DEPLOYMENT_SECRET_FILE) and run bcctl doctor again"),
        ),
        (Protection::Sealed, Some(secret)) => match open_bundle(bytes, Some(&secret)) {
            Ok(_) => findings.push(Finding::new(
                "pki.unseal",
                Level::Ok,
                format!("{path} opens with this deployment's secret"),
            )),
            Err(e) => findings.push(
                Finding::new("pki.unseal", Level::Error, format!("PKI bundle {path}: {e}"))
                    .fix(unseal_fix(&e, path)),
            ),
        },
    }
}

fn unseal_fix(e: &BundleError, path: &str) -> String {
    match e {
        BundleError::WrongSecret => format!(
            "set BC_DEPLOYMENT_SECRET (or BC_DEPLOYMENT_SECRET_FILE) to the secret {path} was sealed with; `bcctl serve` refuses to start with this one"
        ),
        _ => format!("restore {path} from a backup"),
    }
}

/// The notAfter of a DER certificate, when it parses.
fn not_after(der: &[u8]) -> Option<OffsetDateTime> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    OffsetDateTime::from_unix_timestamp(cert.validity().not_after.timestamp()).ok()
}

/// `pki.ca-expired` / `pki.ca-expiring` for each CA certificate of the bundle.
fn check_cas(public: &PublicBundle, findings: &mut Vec<Finding>) {
    let now = OffsetDateTime::now_utc();
    let mut cas: Vec<(&str, &[u8], String)> = vec![
        (
            "root CA",
            &public.root_ca_der,
            "the root CA cannot be renewed in place: before it expires, create a new deployment (bcctl pki init) and re-join the nodes".into(),
        ),
        ("node CA", &public.node_ca_der, "bcctl pki renew-ca --ca node".into()),
        (
            "serving CA",
            &public.serving_ca_der,
            "bcctl pki renew-ca --ca serving".into(),
        ),
        (
            "command-signing root",
            &public.command_signing_root_der,
            "bcctl pki rotate-command-root --stage add (then --stage switch and --stage drop)".into(),
        ),
    ];
    if let Some(operator) = &public.operator_ca_der {
        cas.push((
            "operator CA",
            operator,
            "bcctl pki renew-ca --ca operator".into(),
        ));
    }
    for (name, der, fix) in cas {
        let Some(end) = not_after(der) else {
            findings.push(
                Finding::new(
                    "pki.unreadable",
                    Level::Error,
                    format!("the bundle's {name} certificate does not parse"),
                )
                .fix("restore the bundle from a backup"),
            );
            continue;
        };
        let at = crate::output::rfc3339(end);
        if end <= now {
            findings.push(
                Finding::new(
                    "pki.ca-expired",
                    Level::Error,
                    format!("the {name} expired at {at}"),
                )
                .fix(fix),
            );
        } else if end - now <= CA_EXPIRING {
            let left = std::time::Duration::try_from(end - now).unwrap_or_default();
            findings.push(
                Finding::new(
                    "pki.ca-expiring",
                    Level::Warning,
                    format!("the {name} expires at {at}, in {}", human(left)),
                )
                .fix(fix),
            );
        } else {
            findings.push(Finding::new(
                "pki.ca-expiring",
                Level::Ok,
                format!("the {name} is valid until {at}"),
            ));
        }
    }
}

/// The checks of what the deployment published: a half-done rotation and the quorum.
pub async fn check_published(
    store: &EventStore,
    public: &PublicBundle,
    settings: Option<&Settings>,
    findings: &mut Vec<Finding>,
) {
    let published = match published_bundle(store).await {
        Ok(Some(p)) => p,
        Ok(None) => {
            findings.push(
                Finding::new(
                    "pki.rotation",
                    Level::Info,
                    "no trust bundle is published yet (bcctl serve publishes one at start)",
                )
                .fix("bcctl serve (or bcctl up)"),
            );
            return;
        }
        Err(e) => {
            findings.push(Finding::new(
                "pki.rotation",
                Level::Error,
                format!("cannot read the published trust bundle: {e}"),
            ));
            return;
        }
    };
    let connected = crate::verbs::pki::trust::connected(store).await.ok();
    check_rotation(&published, connected.as_deref(), findings);
    let Ok(trust_domain) = TrustDomain::new(public.trust_domain.as_str()) else {
        return;
    };
    check_quorum(store, public, &published, &trust_domain, settings, findings).await;
}

/// `pki.rotation` (info): a command-signing root rotation left half done.
fn check_rotation(
    published: &PublishedBundle,
    connected: Option<&[(String, u64)]>,
    findings: &mut Vec<Finding>,
) {
    let have = connected.map(|c| {
        let holding = c.iter().filter(|(_, v)| *v >= published.version).count();
        format!(
            "; {holding} of {} connected node(s) have trust version {}",
            c.len(),
            published.version
        )
    });
    let have = have.unwrap_or_default();
    match published.rotation_stage.as_str() {
        "added" => findings.push(
            Finding::new(
                "pki.rotation",
                Level::Info,
                format!(
                    "a command-signing root rotation is half done: a new root is published but workers do not sign under it yet{have}"
                ),
            )
            .fix("bcctl pki rotate-command-root --stage switch (once every daemon has the trust version)"),
        ),
        "switched" => findings.push(
            Finding::new(
                "pki.rotation",
                Level::Info,
                format!(
                    "a command-signing root rotation is half done: workers sign under the new root, the former root is still trusted{have}"
                ),
            )
            .fix("bcctl pki rotate-command-root --stage drop (at least 24 hours after the switch)"),
        ),
        _ => findings.push(Finding::new(
            "pki.rotation",
            Level::Ok,
            format!(
                "no command-signing root rotation in progress (trust version {})",
                published.version
            ),
        )),
    }
}

/// `pki.quorum-unsigned`, `pki.quorum-change`, `pki.quorum-lag`.
async fn check_quorum(
    store: &EventStore,
    public: &PublicBundle,
    published: &PublishedBundle,
    trust_domain: &TrustDomain,
    settings: Option<&Settings>,
    findings: &mut Vec<Finding>,
) {
    let quorum = settings.and_then(|s| s.quorum.as_ref());
    let floor = settings.map_or(0, |s| s.trust_version_floor);
    let config = match crate::serve::trust::configured_bundle(
        trust_domain,
        &public.command_signing_root_der,
        Some(published),
        quorum,
        floor,
    ) {
        Ok(c) => c,
        Err(e) => {
            findings.push(
                Finding::new(
                    "pki.quorum-unsigned",
                    Level::Warning,
                    format!("the configured [quorum] does not load: {e}"),
                )
                .fix("correct the [quorum] table of the serve configuration"),
            );
            return;
        }
    };
    let next = published.held.epoch.saturating_add(1);
    if config.approvers.set != published.held.set {
        match check_set_change(&config.approvers, &published.held, None, trust_domain) {
            Ok(_) => findings.push(Finding::new(
                "pki.quorum-change",
                Level::Info,
                format!(
                    "the configured approver set differs from the published one (epoch {}) and is signed for epoch {}: the next bcctl serve start publishes it",
                    published.held.epoch, config.approvers.epoch
                ),
            ).fix("restart bcctl serve on every api host with this configuration")),
            Err(refusal) => findings.push(
                Finding::new(
                    "pki.quorum-unsigned",
                    Level::Warning,
                    format!(
                        "the configured approver set differs from the published one (epoch {}) and its current approvers have not signed it for a higher epoch: {refusal}; daemons holding approver keys keep the old quorum",
                        published.held.epoch
                    ),
                )
                .fix(format!(
                    "bcctl batch sign-approvers --epoch {next} (by the current approvers), then set quorum.epoch = {next} and quorum.set_signatures"
                )),
            ),
        }
    } else {
        findings.push(Finding::new(
            "pki.quorum-change",
            Level::Ok,
            format!(
                "the configured approver set is the published one (epoch {})",
                published.held.epoch
            ),
        ));
    }
    if published.held.set.is_empty() {
        return;
    }
    let sets =
        match commands::quorum::bundle::read::connected_approver_sets(store, SystemClock.now_us())
            .await
        {
            Ok(s) => s,
            Err(e) => {
                findings.push(Finding::new(
                    "pki.quorum-lag",
                    Level::Info,
                    format!("not checked: the connected nodes' approver sets do not read: {e}"),
                ));
                return;
            }
        };
    let lagging = crate::verbs::pki::trust::lagging_approver_sets(&sets, published);
    if lagging.is_empty() {
        findings.push(Finding::new(
            "pki.quorum-lag",
            Level::Ok,
            format!(
                "every connected node ({}) enforces the published approver set (epoch {})",
                sets.len(),
                published.held.epoch
            ),
        ));
        return;
    }
    let sample: Vec<String> = lagging
        .iter()
        .take(SAMPLE)
        .map(|n| format!("{} at epoch {}", n.node_id, n.epoch))
        .collect();
    findings.push(
        Finding::new(
            "pki.quorum-lag",
            Level::Warning,
            format!(
                "{} of {} connected node(s) enforce another approver set than the published one (epoch {}): {}",
                lagging.len(),
                sets.len(),
                published.held.epoch,
                sample.join(", ")
            ),
        )
        .fix("bcctl pki trust-version --json (approverSetSample); check the set's signatures, or re-pin nodes that missed several changes"),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use domain::quorum::HeldApproverSet;

    fn published(stage: &str) -> PublishedBundle {
        PublishedBundle {
            version: 3,
            digest: vec![],
            command_signing_roots: vec![],
            active_root_sha256: vec![],
            rotation_stage: stage.into(),
            held: HeldApproverSet::initial(),
            set_signatures: vec![],
            floor: 0,
            history: vec![],
        }
    }

    fn rotation(stage: &str, connected: Option<&[(String, u64)]>) -> Finding {
        let mut findings = Vec::new();
        check_rotation(&published(stage), connected, &mut findings);
        assert_eq!(findings.len(), 1, "{findings:?}");
        findings.remove(0)
    }

    /// `pki.rotation`: each stage of a command-signing root rotation names the step due, with
    /// how many connected nodes hold the trust version; the drop is reminded once switched.
    #[test]
    fn a_half_done_rotation_names_the_step_due() {
        let connected = [("node-a".to_string(), 3), ("node-b".to_string(), 2)];
        let added = rotation("added", Some(&connected));
        assert_eq!((added.id, added.level), ("pki.rotation", Level::Info));
        assert_eq!(
            added.message,
            "a command-signing root rotation is half done: a new root is published but workers \
             do not sign under it yet; 1 of 2 connected node(s) have trust version 3"
        );
        assert_eq!(
            added.fix.as_deref(),
            Some("bcctl pki rotate-command-root --stage switch (once every daemon has the trust version)")
        );
        let switched = rotation("switched", None);
        assert_eq!(switched.level, Level::Info);
        assert_eq!(
            switched.message,
            "a command-signing root rotation is half done: workers sign under the new root, the \
             former root is still trusted"
        );
        assert_eq!(
            switched.fix.as_deref(),
            Some("bcctl pki rotate-command-root --stage drop (at least 24 hours after the switch)")
        );
        let none = rotation("none", Some(&connected));
        assert_eq!(
            (none.level, none.message.as_str(), none.fix),
            (
                Level::Ok,
                "no command-signing root rotation in progress (trust version 3)",
                None
            )
        );
    }
}
