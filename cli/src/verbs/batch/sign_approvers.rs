//! `batch sign-approvers`: sign an approver set for an epoch (purpose approver-set).

use domain::quorum::{approver_set_signing_input, ApproverKey, ApproverSet, Tier, TrustDomain};
use serde_json::json;

use super::args::SignApproversArgs;
use super::error::BatchCmdError;
use super::keys::{load_key, read_pem, sign};

/// `batch sign-approvers`.
pub(crate) fn sign_approvers(args: SignApproversArgs) -> Result<(), BatchCmdError> {
    let trust_domain = TrustDomain::new(args.trust_domain.clone())
        .map_err(|e| BatchCmdError::Input(format!("--trust-domain: {e}")))?;
    let (pair, signer) = load_key(&args.key)?;
    let mut keys = Vec::new();
    for path in &args.approvers {
        let spki = read_pem(path, "PUBLIC KEY")?;
        keys.push(
            ApproverKey::from_spki(&spki)
                .map_err(|e| BatchCmdError::Input(format!("{}: {e}", path.display())))?,
        );
    }
    let mut tiers = Vec::new();
    for tier in &args.tiers {
        let parsed = tier
            .split_once(':')
            .and_then(|(m, t)| Some((m.parse().ok()?, t.parse().ok()?)));
        let Some((max_scope_size, threshold)) = parsed else {
            return Err(BatchCmdError::Input(format!(
                "--tiers {tier:?}: expected MAX:THRESHOLD"
            )));
        };
        tiers.push(Tier {
            max_scope_size,
            threshold,
        });
    }
    let set = ApproverSet::new(keys, args.threshold, tiers, args.unbatched)
        .map_err(|e| BatchCmdError::Input(e.to_string()))?;
    if args.epoch == 0 {
        return Err(BatchCmdError::Input("--epoch must be 1 or more".into()));
    }
    let message = approver_set_signing_input(args.epoch, &set.digest(), &trust_domain);
    let sig = sign(&pair, &message)?;
    let out = json!({
        "kid": signer.kid().to_hex(),
        "sig": hex::encode(&sig),
        "epoch": args.epoch,
        "approverSetSha256": set.digest().to_hex(),
    });
    if args.json {
        crate::outln!("{out}");
    } else {
        crate::outln!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    }
    Ok(())
}
