//! The node CA's current revocation list (issue 41 item 4; docs/decisions/0090): signed at
//! start, again within moments of every revocation the log hub hands out
//! (`node.identity.revoked`, `node.deleted`, `node.retired`), and at least hourly (at half the
//! `nextUpdate` interval when that is shorter), its CRL number only rising.
//!
//! Who signs: whoever holds the node CA key. The gateway of the `all` role signs itself
//! ([`CrlSigner::Local`], `commands::crl::sign_current`); a split gateway asks the api
//! (`ApiService.RevocationList`, [`CrlSigner::Api`]) and never holds the key. Either way the
//! list is checked before it is taken: the node CA certificate's key verifies it
//! (`domain::pki::verify_crl`) and its number is above the last one taken, which is also passed
//! as the signer's floor. A list that fails the check is logged and dropped; the previous one
//! stays current.
//!
//! The current list is a [`CrlWatch`]: the HTTP endpoint ([`crate::publish::crl_http`]) serves
//! it and every welcomed node session pushes each new one as a `RevocationList` message.

use std::sync::Arc;
use std::time::Duration;

use domain::pki::{verify_crl, CrlNumber, KeySet};
use events::store::hub::{HubRecv, HubWake};
use events::store::{EventStore, HubReceiver};
use time::OffsetDateTime;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::split::relay::ApiClient;

/// The longest time between two signings, whatever `nextUpdate` is.
pub const MAX_RESIGN_EVERY: Duration = Duration::from_secs(3600);

/// The largest list pushed over a node session: under bcd's frame limit (4 MiB) with room for
/// the message around it. A larger list is served over HTTP only (and logged).
pub const MAX_PUSH_BYTES: usize = 4 * 1024 * 1024 - 1024;

/// The event types after which the list is signed again.
const REVOKING: [&str; 3] = ["node.identity.revoked", "node.deleted", "node.retired"];

/// Settings of the list (`[crl]` of `bcctl serve`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrlOptions {
    /// nextUpdate - thisUpdate (more than 0, at most 7 days).
    pub next_update: time::Duration,
    /// Where the list is served over plain HTTP (`None`: not served; still pushed to nodes).
    pub listen: Option<std::net::SocketAddr>,
}

impl Default for CrlOptions {
    fn default() -> Self {
        CrlOptions {
            next_update: time::Duration::hours(1),
            listen: None,
        }
    }
}

impl CrlOptions {
    /// How often the list is signed when nothing is revoked: half the `nextUpdate` interval,
    /// at most [`MAX_RESIGN_EVERY`], at least a second.
    pub fn resign_every(&self) -> Duration {
        let half = Duration::try_from(self.next_update / 2).unwrap_or(MAX_RESIGN_EVERY);
        half.clamp(Duration::from_secs(1), MAX_RESIGN_EVERY)
    }
}

/// A list taken as current.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishedCrl {
    /// The CertificateList, DER.
    pub der: Vec<u8>,
    /// Its cRLNumber.
    pub number: CrlNumber,
    /// thisUpdate.
    pub this_update: OffsetDateTime,
    /// How many certificates it lists.
    pub revoked: usize,
}

/// The current list, once there is one.
pub type CrlWatch = watch::Receiver<Option<Arc<PublishedCrl>>>;

/// Where the lists come from.
#[derive(Clone)]
pub enum CrlSigner {
    /// This process holds the node CA key (the `all` role).
    Local {
        store: EventStore,
        keys: Arc<KeySet>,
    },
    /// The api signs (a split gateway).
    Api(ApiClient),
}

impl CrlSigner {
    /// A list signed now, its number above `floor`; `Err` is the line to log.
    async fn sign(
        &self,
        floor: Option<CrlNumber>,
        options: &CrlOptions,
    ) -> Result<Vec<u8>, String> {
        match self {
            CrlSigner::Local { store, keys } => commands::crl::sign_current(
                store,
                &keys.node_ca,
                floor,
                options.next_update,
                OffsetDateTime::now_utc(),
            )
            .await
            .map(|current| current.signed.der)
            .map_err(|e| e.to_string()),
            CrlSigner::Api(api) => api
                .revocation_list(floor, options.next_update)
                .await
                .map_err(|s| format!("the api: {:?}: {}", s.code(), s.message())),
        }
    }
}

/// Why a list was not taken.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TakeError {
    /// The node CA did not sign it (or it is no list).
    #[error("refused a revocation list: {0}")]
    Check(#[from] domain::pki::CrlCheckError),
    /// Its number is not above the current list's.
    #[error("refused a revocation list numbered {got}: not above the current list's {held}")]
    NotRising { got: CrlNumber, held: CrlNumber },
}

/// Checks `der` against the node CA certificate and the number held: what is taken as current.
pub fn take(
    node_ca_der: &[u8],
    der: Vec<u8>,
    held: Option<CrlNumber>,
) -> Result<PublishedCrl, TakeError> {
    let facts = verify_crl(node_ca_der, &der)?;
    if let Some(held) = held {
        if facts.number <= held {
            return Err(TakeError::NotRising {
                got: facts.number,
                held,
            });
        }
    }
    Ok(PublishedCrl {
        der,
        number: facts.number,
        this_update: facts.this_update,
        revoked: facts.revoked,
    })
}

/// Starts keeping the list current: signs at once, then on every revocation `subscription`
/// hands out, and every [`CrlOptions::resign_every`]; a failed signing is retried after 1 s,
/// doubling to 30 s. Subscribe before serving, so no revocation committed meanwhile is missed.
pub fn start(
    signer: CrlSigner,
    node_ca_der: Vec<u8>,
    subscription: HubReceiver,
    options: CrlOptions,
) -> (CrlWatch, JoinHandle<()>) {
    let (tx, rx) = watch::channel(None);
    let task = tokio::spawn(keep_current(signer, node_ca_der, subscription, options, tx));
    (rx, task)
}

async fn keep_current(
    signer: CrlSigner,
    node_ca_der: Vec<u8>,
    mut subscription: HubReceiver,
    options: CrlOptions,
    tx: watch::Sender<Option<Arc<PublishedCrl>>>,
) {
    let mut held: Option<CrlNumber> = None;
    let mut due = tokio::time::Instant::now();
    let mut backoff = Duration::from_secs(1);
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(due) => {}
            wake = subscription.recv_or_state() => match wake {
                None => return,
                Some(HubWake::Recv(HubRecv::Events(batch))) => {
                    if !batch.iter().any(|e| REVOKING.contains(&e.event_type.as_str())) {
                        continue;
                    }
                }
                // Batches lost: whatever they held, a list signed now holds it.
                Some(HubWake::Recv(HubRecv::Missed(_))) => {}
                Some(HubWake::State) => continue,
            },
        }
        let started = std::time::Instant::now();
        let taken = signer
            .sign(held, &options)
            .await
            .and_then(|der| take(&node_ca_der, der, held).map_err(|e| e.to_string()));
        match taken {
            Ok(list) => {
                tracing::info!(crl_number = %list.number, revoked = list.revoked, bytes = list.der.len(), took_ms = started.elapsed().as_millis() as u64, "node CA revocation list signed");
                if list.der.len() > MAX_PUSH_BYTES {
                    tracing::warn!(bytes = list.der.len(), max = MAX_PUSH_BYTES, "the revocation list is too large to push over node sessions; it is served over HTTP only");
                }
                held = Some(list.number);
                tx.send_replace(Some(Arc::new(list)));
                due = tokio::time::Instant::now() + options.resign_every();
                backoff = Duration::from_secs(1);
            }
            Err(why) => {
                tracing::error!(error = %why, retry_in_s = backoff.as_secs(), "the node CA revocation list was not renewed; the previous one stays current");
                due = tokio::time::Instant::now() + backoff;
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resigned_at_half_next_update_and_at_least_hourly() {
        let every = |next| {
            CrlOptions {
                next_update: next,
                listen: None,
            }
            .resign_every()
        };
        assert_eq!(every(time::Duration::hours(1)), Duration::from_secs(1800));
        assert_eq!(every(time::Duration::days(7)), Duration::from_secs(3600));
        assert_eq!(every(time::Duration::seconds(1)), Duration::from_secs(1));
    }
}
