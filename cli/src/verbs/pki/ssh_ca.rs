//! `bcctl pki add-ssh-ca` (issue 42): gives a bundle made before issue 42 its SSH CA (a fresh
//! Ed25519 key of its own that signs OpenSSH certificates only), written back like `pki
//! add-operator-ca` (authenticated bundles only, replaced atomically; an offline root stays
//! offline and is not needed: the SSH CA is certified by nothing). A bundle that has one is
//! refused (INVALID_STATE). Prints the CA's public key.

use clap::Args;
use domain::pki::LoadedBundle;
use serde_json::json;

use crate::deployment::DeploymentArgs;
use crate::output::print_json;
use crate::verbs::pki::common::PkiCmdError;
use crate::verbs::pki::lifecycle::writable;

#[derive(Args)]
pub struct AddSshCaArgs {
    #[command(flatten)]
    pub deployment: DeploymentArgs,
    /// Print JSON instead of text (docs/CLI.md).
    #[arg(long)]
    pub json: bool,
}

pub fn add_ssh_ca(args: AddSshCaArgs) -> Result<(), PkiCmdError> {
    let deployment = args
        .deployment
        .locate()
        .map_err(|e| PkiCmdError::Internal(e.to_string()))?
        .deployment;
    let path = deployment.bundle.clone();
    let secret = deployment.secret()?;
    let loaded = deployment.open()?;
    let write = writable(&path, &loaded, secret)?;
    let LoadedBundle {
        keys,
        next_command_signing_root: next,
        kdf,
        ..
    } = loaded;
    let mut keys = keys.ok_or_else(|| {
        PkiCmdError::Deployment(crate::deployment::DeploymentError::Sealed { path: path.clone() })
    })?;
    keys.add_ssh_ca()
        .map_err(|e| PkiCmdError::InvalidState(format!("pki add-ssh-ca: {e}")))?;
    let offline = keys.root_ca.is_offline();
    let keys = write.write(&path, keys, offline, next.as_ref(), kdf)?;
    let line = keys
        .ssh_ca
        .as_ref()
        .map(|ca| ca.public_key_line())
        .ok_or_else(|| PkiCmdError::Internal("the SSH CA was just added".into()))?;
    if args.json {
        print_json(&json!({
            "file": path.display().to_string(),
            "sshCaPublicKey": line,
        }));
    } else {
        crate::outln!("added an SSH CA to {}: {line}", path.display());
        crate::outln!("roll the bundle out to every bcctl serve and restart them; `bcctl ssh ca --trusted-user-ca` prints the line nodes' sshd trusts");
    }
    Ok(())
}
