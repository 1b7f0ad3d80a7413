//! What the site agent's tasks share ([`SiteShared`]): the lease as last answered, and the
//! agent's current identity with a connection presenting it ([`SiteAgent`]).
//!
//! The identity is read with [`load_read_only_in`] (it changes no file, so it never races the
//! renewal `bcd node`'s loop runs beside it); a new leaf (a renewal) makes a new connection
//! with it, so boot tokens and assertions always go out under the current certificate.

use std::sync::{Arc, Mutex, MutexGuard};

use domain::pki::{sign_with, NodeId, NodeRole};
use domain::site::{SiteCall, SiteCallStatement};

use super::cache::BootTokenCache;
use super::limit::ClientLimiter;
use super::view::{LeaseChange, LeaseView};
use crate::client::{connect, ClientIdentity, NodeClient};
use crate::files::identity::{load_read_only_in, LoadedIdentity};
use crate::files::DataDir;
use crate::node::NodeOptions;
use crate::node_key::NodeKey;

/// The site agent's identity and a connection presenting it.
#[derive(Debug, Clone)]
pub struct SiteAgent {
    /// A NodeService client over mTLS with this identity.
    pub client: NodeClient,
    /// The leaf, DER (an assertion's `signer_certificate`).
    pub leaf_der: Vec<u8>,
    /// The node key (signs assertions).
    pub key: NodeKey,
    /// This node's id.
    pub node_id: String,
    /// Its site.
    pub site_id: String,
    /// The leaf's serial, hex.
    pub serial: String,
}

impl SiteAgent {
    /// This agent's proof of `call` at its own clock: (client time, signature), for a
    /// SiteLease's or BootToken's `client_time_ms` and `signature`.
    pub fn prove(&self, call: SiteCall) -> Result<(i64, Vec<u8>), String> {
        let client_time_ms = crate::clock::now_ms();
        let node_id = NodeId::new(&self.node_id).map_err(|e| e.to_string())?;
        let statement = SiteCallStatement {
            node_id,
            call,
            client_time_ms: u64::try_from(client_time_ms).unwrap_or(0),
        };
        let signature = sign_with(&self.key, &statement)
            .map_err(|e| format!("signing the call's proof failed: {e}"))?;
        Ok((client_time_ms, signature.as_bytes().to_vec()))
    }
}

/// Why the agent's identity could not be used.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The identity does not load.
    #[error("{0}")]
    Load(#[from] crate::files::identity::LoadError),
    /// The identity is not a site agent's.
    #[error(
        "this node joined as {0}, not as a site agent: bcd site runs on a node joined with a site \
         token (bcd join --reset --yes, then bcd join --role site)"
    )]
    NotSite(String),
    /// No connection.
    #[error("{0}")]
    Connect(#[from] crate::client::ClientError),
}

/// Reads the identity read-only and checks it is a site agent's.
pub fn load_site_identity(
    dir: &DataDir,
    options: &NodeOptions,
) -> Result<LoadedIdentity, AgentError> {
    let loaded = load_read_only_in(dir, &options.tpm)?;
    if loaded.leaf.role != NodeRole::Site {
        return Err(AgentError::NotSite(loaded.describe()));
    }
    Ok(loaded)
}

/// The state the lease task and the boot server share (and the boot server's own: its
/// cached tokens and its rate bound).
#[derive(Debug, Default)]
pub struct SiteShared {
    lease: Mutex<LeaseView>,
    agent: Mutex<Option<Arc<SiteAgent>>>,
    /// The boot tokens held, by (MAC, epoch).
    pub boot_tokens: BootTokenCache,
    /// The rate bound per client of `/boot.ipxe`.
    pub limiter: ClientLimiter,
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave the plain data inconsistent.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl SiteShared {
    /// The lease as last answered.
    pub fn view(&self) -> LeaseView {
        locked(&self.lease).clone()
    }

    /// Applies a lease answer sent at `sent_local_ms`.
    pub fn apply(
        &self,
        answer: &proto::SiteLeaseResponse,
        sent_local_ms: i64,
    ) -> Option<LeaseChange> {
        locked(&self.lease).apply(answer, sent_local_ms)
    }

    /// Stops vouching (the lease is not held any more, or the agent is stopping).
    pub fn drop_holding(&self) {
        locked(&self.lease).drop_holding();
    }

    /// Stops vouching for `epoch` when that is the epoch held (a refused boot token).
    pub fn drop_epoch(&self, epoch: u64) {
        let mut view = locked(&self.lease);
        if view.epoch == epoch {
            view.drop_holding();
        }
    }

    /// The agent as last connected, if any.
    pub fn current_agent(&self) -> Option<Arc<SiteAgent>> {
        locked(&self.agent).clone()
    }

    /// Drops the connection (after a failed call): the next use reconnects.
    pub fn forget_agent(&self) {
        *locked(&self.agent) = None;
    }

    /// The agent for the identity on disk now: the current one when its leaf is still the
    /// stored one, else a new connection with the new leaf.
    pub async fn agent_for(
        &self,
        dir: &DataDir,
        options: &NodeOptions,
    ) -> Result<Arc<SiteAgent>, AgentError> {
        let loaded = load_site_identity(dir, options)?;
        let serial = loaded.leaf.serial.to_hex();
        if let Some(current) = self.current_agent() {
            if current.serial == serial {
                return Ok(current);
            }
        }
        let identity = ClientIdentity::new(&loaded.stored.chain, &loaded.key);
        let client = connect(&options.server, options.serving_ca, Some(&identity)).await?;
        let agent = Arc::new(SiteAgent {
            client,
            leaf_der: loaded.stored.chain.first().cloned().unwrap_or_default(),
            key: loaded.key.clone(),
            node_id: loaded.leaf.spiffe_id.node.to_string(),
            site_id: loaded.leaf.spiffe_id.site.to_string(),
            serial,
        });
        *locked(&self.agent) = Some(agent.clone());
        Ok(agent)
    }
}
