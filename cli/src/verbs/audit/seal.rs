//! `bcctl audit seal`: sequence what is new, then sign a checkpoint for a tenant or every grown
//! tenant with the audit key of the PKI bundle.

use std::sync::Arc;

use crate::deployment::{Deployment, DeploymentError};
use commands::audit::{SealOutcome, Sealer, SealerOptions, Sequencer};
use domain::audit::AuditSigner;
use domain::pki::{SecretError, DEPLOYMENT_SECRET_ENV};

use super::args::SealArgs;
use super::error::{pki_usage, AuditCmdError};

pub(super) fn load_signer(deployment: &Deployment) -> Result<(AuditSigner, String), AuditCmdError> {
    let keys = deployment.keys().map_err(|e| match e {
        DeploymentError::Sealed { .. } | DeploymentError::Secret(SecretError::Missing) => {
            AuditCmdError::Other(no_secret(deployment))
        }
        other => pki_usage(other),
    })?;
    let rng = ring::rand::SystemRandom::new();
    let signer = AuditSigner::from_pkcs8(keys.audit_signing.pkcs8_der(), &rng)
        .map_err(|e| AuditCmdError::Usage(format!("--pki: audit signing key: {e}")))?;
    Ok((signer, keys.trust_domain.as_str().to_string()))
}

/// Why a sealed bundle did not open: no secret where the rule looked (docs/CLI.md).
fn no_secret(deployment: &Deployment) -> String {
    let looked = match &deployment.secret_file {
        Some(file) => format!(
            "{DEPLOYMENT_SECRET_ENV} is not set and the secret file {} gave none",
            file.display()
        ),
        None => format!(
            "{DEPLOYMENT_SECRET_ENV} is not set and no secret file was found (BC_DEPLOYMENT_SECRET_FILE, deployment_secret_file in --config, or DIR/deployment-secret of --dir)"
        ),
    };
    format!(
        "the PKI bundle {} is sealed and signing a checkpoint needs its audit key, but {looked}. On a `bcctl up` deployment the secret is in .bcctl/deployment-secret: run from the directory holding .bcctl, or pass --dir DIR; elsewhere set {DEPLOYMENT_SECRET_ENV} (or BC_DEPLOYMENT_SECRET_FILE) to the secret the bundle was sealed with",
        deployment.bundle.display()
    )
}

pub(super) async fn seal(args: SealArgs) -> Result<(), AuditCmdError> {
    let located = args
        .db
        .deployment
        .locate()
        .map_err(|e| AuditCmdError::Other(e.to_string()))?;
    let (signer, trust_domain) = load_signer(&located.deployment)?;
    let store = args.db.deployment.connect_store().await?;
    let mut sequencer = Sequencer::new(store.clone(), Default::default());
    let sequenced = sequencer.catch_up().await?;
    let sealer = Sealer::new(
        store,
        Arc::new(signer),
        Arc::new(commands::DatabaseClock::system()),
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
                "tenant": tenant, "sealed": true, "checkpoint": seq, "treeSize": size,
                "rootHash": hex::encode(root), "position": position,
            })),
            Ok(SealOutcome::Unchanged { tenant, size }) => lines.push(serde_json::json!({
                "tenant": tenant, "sealed": false, "treeSize": size,
            })),
            Err(e) => {
                crate::errln!("bcctl: {e}");
                failed = Some(e);
            }
        }
    }
    if args.json {
        crate::outln!(
            "{}",
            serde_json::json!({"sequenced": sequenced, "tenants": lines})
        );
    } else {
        crate::outln!("sequenced {sequenced} new events");
        for l in &lines {
            let tenant = l["tenant"].as_str().unwrap_or("?");
            let size = &l["treeSize"];
            if l["sealed"] == true {
                crate::outln!(
                    "tenant {tenant}: sealed checkpoint {} over {size} leaves, root {} (log position {})",
                    l["checkpoint"],
                    l["rootHash"].as_str().unwrap_or(""),
                    l["position"]
                );
            } else {
                crate::outln!("tenant {tenant}: unchanged at {size} leaves, nothing to seal");
            }
        }
    }
    match failed {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}
