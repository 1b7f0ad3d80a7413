//! Workload identity's issuer keys (issue 43; decision 0096): `oidc.no-signing-key` (a warning
//! when `[oidc]` is configured or a key exists, and no key signs: tokens cannot be minted) and
//! `oidc.overdue` (a warning for each stopped key that could have been retired more than a day
//! ago: it signs nothing, but it is one more key kept and published).

use commands::oidc::{OidcKeyAdmin, OidcKeyView};
use commands::SystemClock;
use domain::oidc::keys::OVERDUE_AFTER_US;
use events::store::EventStore;

use super::finding::{human, Finding, Level};

/// Adds the issuer's findings; `configured`: `[oidc]` is in the serve configuration.
pub async fn check_oidc(store: &EventStore, configured: bool, findings: &mut Vec<Finding>) {
    let keys = match OidcKeyAdmin::new(store.clone(), std::sync::Arc::new(SystemClock))
        .list()
        .await
    {
        Ok(k) => k,
        Err(e) => {
            findings.push(Finding::new(
                "oidc.no-signing-key",
                Level::Error,
                e.to_string(),
            ));
            return;
        }
    };
    if keys.is_empty() && !configured {
        return;
    }
    findings.push(signing(&keys));
    let now_us = commands::Clock::now_us(&SystemClock);
    for k in &keys {
        if let Some(at) = k.retirable_at_us.filter(|_| k.state == "stopped") {
            if now_us >= at.saturating_add(OVERDUE_AFTER_US) {
                let late =
                    std::time::Duration::from_micros(u64::try_from(now_us - at).unwrap_or(0));
                findings.push(
                    Finding::new(
                        "oidc.overdue",
                        Level::Warning,
                        format!("OIDC key {} stopped signing and could have been retired {} ago; it is still published", k.kid, human(late)),
                    )
                    .fix(format!("bcctl oidc keys retire {}", k.kid)),
                );
            }
        }
    }
}

fn signing(keys: &[OidcKeyView]) -> Finding {
    match keys.iter().find(|k| k.signs()) {
        Some(k) => Finding::new(
            "oidc.no-signing-key",
            Level::Ok,
            format!(
                "OIDC key {} signs; {} key(s) published",
                k.kid,
                keys.iter().filter(|k| k.published).count()
            ),
        ),
        None => Finding::new(
            "oidc.no-signing-key",
            Level::Warning,
            "no OIDC key signs: no workload token can be minted",
        )
        .fix("bcctl oidc keys add, then bcctl oidc keys promote KID"),
    }
}
