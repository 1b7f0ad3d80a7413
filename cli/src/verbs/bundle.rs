//! `bcctl bundle show [--format pem|json|spiffe]`: the deployment's X.509 roots and its published
//! trust bundle, what a SPIFFE or step user looks for to verify a peer.
//!
//! The certificates come from the PKI bundle's public half (no secret is read): the root CA, the
//! node CA (it issues node certificates, so a peer verifies a node with node CA + root), the
//! serving CA (it issues the gateway's serving certificates and the split gateway's internal
//! client certificates) and the command-signing root. When the store is at hand the published
//! trust bundle adds its version, its command roots and its approver set. `pem` prints every CA
//! certificate as PEM, each after a `#` line naming it (openssl and the TLS libraries skip it).
//! `spiffe` prints the SPIFFE bundle the gateway's bundle endpoint serves
//! (`domain::trust_bundle::spiffe`): the root CA as an `x509-svid` key, `spiffe_sequence` the
//! published trust bundle's version (so it needs the store), `spiffe_refresh_hint`
//! `--refresh-hint`.

use clap::{Args, ValueEnum};
use serde_json::{json, Value};

use crate::deployment::node_setup::pem;
use crate::output::print_json;
use crate::verbs::token::{IdentityArgs, IdentityCmdError};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Pem,
    Json,
    Spiffe,
}

#[derive(clap::Subcommand)]
pub enum BundleCommand {
    /// Print the X.509 roots (root, node, serving CA, command-signing roots) and the published
    /// trust bundle.
    Show(ShowArgs),
}

#[derive(Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub common: IdentityArgs,
    /// pem: the CA certificates as PEM; json: everything as one JSON document (also --json);
    /// spiffe: the SPIFFE bundle (JWK Set) the gateway's bundle endpoint serves.
    #[arg(long, value_enum, default_value = "pem")]
    pub format: Format,
    /// With --format spiffe: the bundle's spiffe_refresh_hint in seconds (the gateway's
    /// spiffe_refresh_hint setting; default 300).
    #[arg(long, value_name = "SECONDS", default_value_t = domain::trust_bundle::DEFAULT_REFRESH_HINT_SECS)]
    pub refresh_hint: u64,
}

fn cert_json(role: &str, der: &[u8], pin: &str) -> Value {
    json!({
        "role": role,
        "sha256": hex::encode(domain::identity::sha256(der)),
        "spkiPin": pin,
        "pem": pem("CERTIFICATE", der),
    })
}

pub async fn run(cmd: BundleCommand) -> Result<(), IdentityCmdError> {
    let BundleCommand::Show(args) = cmd;
    let located = args.common.deployment.locate()?;
    let public = located.deployment.public_half()?.public;
    let pins = public
        .pins()
        .map_err(|e| IdentityCmdError::Setup(format!("the PKI bundle's public half: {e}")))?;
    let certs = [
        ("rootCa", &public.root_ca_der, pins.root_ca.to_string()),
        ("nodeCa", &public.node_ca_der, pins.node_ca.to_string()),
        (
            "servingCa",
            &public.serving_ca_der,
            pins.serving_ca.to_string(),
        ),
        (
            "commandSigningRoot",
            &public.command_signing_root_der,
            pins.command_signing_root.to_string(),
        ),
    ];
    if args.format == Format::Spiffe {
        return spiffe(&located, &public.root_ca_der, args.refresh_hint).await;
    }
    let published = match located.existing_store_url() {
        Ok(url) => published(url).await,
        Err(_) => None,
    };
    if args.format == Format::Json || args.common.json {
        let out = json!({
            "trustDomain": public.trust_domain.to_string(),
            "certificates": certs.iter().map(|(r, d, p)| cert_json(r, d, p)).collect::<Vec<_>>(),
            "nodeChain": [pem("CERTIFICATE", &public.node_ca_der), pem("CERTIFICATE", &public.root_ca_der)],
            "trustBundle": published,
        });
        print_json(&out);
        return Ok(());
    }
    let mut text = String::new();
    let labels = [
        "root CA (the trust anchor of every chain)",
        "node CA (issues node certificates; verify a peer node with it and the root)",
        "serving CA (issues the gateway's serving and internal certificates)",
        "command-signing root",
    ];
    for ((role, der, _), label) in certs.iter().zip(labels) {
        text.push_str(&format!(
            "# {role}: {label}; {} sha256 {}\n",
            public.trust_domain,
            hex::encode(domain::identity::sha256(der))
        ));
        text.push_str(&pem("CERTIFICATE", der));
    }
    if let Some(p) = published.as_ref() {
        if let Some(roots) = p["commandSigningRoots"].as_array() {
            for r in roots {
                if let Some(der) = r["der"].as_str().and_then(|h| hex::decode(h).ok()) {
                    if der != *public.command_signing_root_der {
                        text.push_str(&format!(
                            "# command-signing root of the published trust bundle (version {})\n",
                            p["version"]
                        ));
                        text.push_str(&pem("CERTIFICATE", &der));
                    }
                }
            }
        }
    }
    crate::out!("{text}");
    Ok(())
}

/// The published trust bundle: version, command roots, approver set; `None` when the store
/// cannot be read or nothing is published yet.
async fn published(url: &str) -> Option<Value> {
    let store = crate::deployment::connect_at(url).await.ok()?;
    let p = commands::quorum::bundle::read::published_bundle(&store)
        .await
        .ok()??;
    let set = &p.held.set;
    Some(json!({
        "version": p.version,
        "digest": hex::encode(&p.digest),
        "commandSigningRoots": p.command_signing_roots.iter().map(|der| json!({
            "sha256": hex::encode(domain::identity::sha256(der)),
            "der": hex::encode(der),
        })).collect::<Vec<_>>(),
        "activeRootSha256": hex::encode(&p.active_root_sha256),
        "rotationStage": p.rotation_stage,
        "approverSetEpoch": p.held.epoch,
        "approverThreshold": set.threshold(),
        "approverKids": set.keys().iter().map(|k| k.kid().to_string()).collect::<Vec<_>>(),
        "approverSetSha256": (!set.is_empty()).then(|| set.digest().to_hex()),
    }))
}

/// `--format spiffe`: the SPIFFE bundle at the published trust bundle's version (0 when none is
/// published yet, as the gateway serves it).
async fn spiffe(
    located: &crate::deployment::Located,
    root_ca_der: &[u8],
    refresh_hint: u64,
) -> Result<(), IdentityCmdError> {
    use domain::trust_bundle::{render_spiffe_bundle, x509_authorities};
    if refresh_hint == 0 {
        return Err(IdentityCmdError::Invalid(
            "--refresh-hint must be at least 1 second".into(),
        ));
    }
    let url = located.existing_store_url().map_err(|e| {
        IdentityCmdError::Setup(format!(
            "--format spiffe needs the store (its spiffe_sequence is the published trust bundle's version): {e}"
        ))
    })?;
    let store = crate::deployment::connect_at(url).await?;
    let version = commands::quorum::read_published_content(&store)
        .await
        .map_err(|e| IdentityCmdError::Setup(format!("the published trust bundle: {e}")))?
        .map_or(0, |row| row.version);
    let text = render_spiffe_bundle(&x509_authorities(root_ca_der), version, refresh_hint)
        .map_err(|e| IdentityCmdError::Setup(format!("the SPIFFE bundle: {e}")))?;
    crate::out!("{text}");
    Ok(())
}
