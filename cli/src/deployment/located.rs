//! Where a deployment is: [`Deployment`] (its bundle and secret file) and [`Located`] (those and
//! its store), as `DeploymentArgs::locate` finds them (`crate::deployment` holds their methods
//! and the rule). Kept apart so the invocation context (`crate::invocation`, which carries the
//! server's `Located` during an admin API call) and `crate::deployment` (which asks the
//! invocation for it) do not import each other.

use std::path::PathBuf;

/// Where a deployment's bundle and secret are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deployment {
    /// The PKI bundle file.
    pub bundle: PathBuf,
    /// The file holding the secret, read when `BC_DEPLOYMENT_SECRET` is unset.
    pub secret_file: Option<PathBuf>,
}

/// Where the deployment is, as `DeploymentArgs::locate` found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// The store's URL, when one was found.
    pub store_url: Option<String>,
    /// The bundle and the secret file.
    pub deployment: Deployment,
    /// The deployment directory, when one was used.
    pub dir: Option<PathBuf>,
    /// The `bcctl serve` configuration file that names the deployment (`--config`, or the
    /// directory's `bcctl.toml`), when there is one: verbs that read serve settings (the quorum,
    /// `listen`) read it from here, so an admin API call reads the server's own.
    pub config: Option<PathBuf>,
}
