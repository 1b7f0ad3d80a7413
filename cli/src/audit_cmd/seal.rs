//! `bcctl audit seal`: sequence what is new, then sign a checkpoint for a tenant or every grown
//! tenant with the audit key of the PKI bundle.

use std::path::PathBuf;
use std::sync::Arc;

use commands::audit::{SealOutcome, Sealer, SealerOptions, Sequencer};
use domain::audit::AuditSigner;
use events::store::EventStore;

use crate::deployment::Deployment;

use super::args::SealArgs;
use super::error::{pki_usage, AuditCmdError};

pub(super) fn load_signer(path: &PathBuf) -> Result<(AuditSigner, String), AuditCmdError> {
    let keys = Deployment::new(path).keys().map_err(pki_usage)?;
    let rng = ring::rand::SystemRandom::new();
    let signer = AuditSigner::from_pkcs8(keys.audit_signing.pkcs8_der(), &rng)
        .map_err(|e| AuditCmdError::Usage(format!("--pki: audit signing key: {e}")))?;
    Ok((signer, keys.trust_domain.as_str().to_string()))
}

pub(super) async fn seal(args: SealArgs) -> Result<(), AuditCmdError> {
    let (signer, trust_domain) = load_signer(&args.pki)?;
    let store = EventStore::connect(&args.db.database_url).await?;
    let mut sequencer = Sequencer::new(store.clone(), Default::default());
    let sequenced = sequencer.catch_up().await?;
    let sealer = Sealer::new(
        store,
        Arc::new(signer),
        Arc::new(commands::SystemClock),
        SealerOptions::new(trust_domain),
    );
    let results = match &args.tenant {
        Some(t) => vec![sealer.seal_tenant(t).await],
        None => sealer.seal_all().await?,
    };
    let mut failed = None;
    let mut lines = Vec::new();
    for r in results {
        match r {
            Ok(SealOutcome::Sealed {
                tenant,
                seq,
                size,
                root,
                position,
            }) => lines.push(serde_json::json!({
                "tenant": tenant, "sealed": true, "checkpoint": seq, "tree_size": size,
                "root_hash": hex::encode(root), "position": position,
            })),
            Ok(SealOutcome::Unchanged { tenant, size }) => lines.push(serde_json::json!({
                "tenant": tenant, "sealed": false, "tree_size": size,
            })),
            Err(e) => {
                eprintln!("bcctl: {e}");
                failed = Some(e);
            }
        }
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({"sequenced": sequenced, "tenants": lines})
        );
    } else {
        println!("sequenced {sequenced} new events");
        for l in &lines {
            println!("{l}");
        }
    }
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}
