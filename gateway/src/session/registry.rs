//! Live node sessions, so a revocation can reach the session it ends and the command poller can
//! wake the sessions of nodes with new commands.
//!
//! Each session registers under its node id and certificate serial and gets a receiver for its
//! [`SessionEnd`] and a wake signal; the revocation feed calls [`Sessions::revoke_node`] and every
//! live session of that node is told why and closes; the command poller calls
//! [`Sessions::wake_nodes`] and every live session of those nodes fetches its pending commands
//! (wakes coalesce: a session woken twice before it looks fetches once). A session deregisters
//! when its guard drops.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{oneshot, Notify};

/// Why the gateway ends a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionEnd {
    /// The node's certificate was revoked: send a RevocationNotice, then close.
    Revoked { serial: String, reason: String },
    /// The gateway is shutting down: the node should reconnect (to another gateway).
    Shutdown,
    /// The revocation feed stopped for good (the reason): new sessions are refused until the
    /// gateway restarts, so the node is told to wait before it reconnects.
    FeedHalted(String),
    /// The revocation feed fell behind and reloaded the revoked set: the node reconnects, to
    /// be checked against it, at a time spread at random.
    FeedReloaded,
}

struct Entry {
    node_id: String,
    serial: String,
    end: oneshot::Sender<SessionEnd>,
    wake: Arc<Notify>,
}

/// What a registered session holds: its guard, its end and its wake signal.
pub struct Registered {
    /// Dropping it deregisters the session.
    pub guard: SessionGuard,
    /// Why the gateway ends the session.
    pub end: oneshot::Receiver<SessionEnd>,
    /// Notified when the node has newly runnable commands.
    pub wake: Arc<Notify>,
}

/// The registry of live sessions.
#[derive(Default)]
pub struct Sessions {
    next_id: AtomicU64,
    live: Mutex<HashMap<u64, Entry>>,
}

/// Held by a session for as long as it lives; dropping it deregisters.
pub struct SessionGuard {
    id: u64,
    sessions: Arc<Sessions>,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if let Ok(mut live) = self.sessions.live.lock() {
            live.remove(&self.id);
        }
    }
}

/// Which of a node's certificates a revocation covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Revoked<'a> {
    /// Every certificate of the node (it was deleted or retired, or an old event said so).
    Every,
    /// Exactly these serials (hex): the node's other certificates, say the one a reclaim just
    /// issued, keep their sessions.
    Serials(&'a [String]),
}

impl Revoked<'_> {
    /// Whether the certificate with hex serial `serial` is revoked.
    pub fn covers(&self, serial: &str) -> bool {
        match self {
            Revoked::Every => true,
            Revoked::Serials(serials) => serials.iter().any(|s| s.eq_ignore_ascii_case(serial)),
        }
    }
}

impl Sessions {
    pub fn new() -> Arc<Self> {
        Arc::new(Sessions::default())
    }

    /// Registers a session of `node_id` holding certificate `serial` (hex).
    pub fn register(self: &Arc<Self>, node_id: &str, serial: &str) -> Registered {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let wake = Arc::new(Notify::new());
        if let Ok(mut live) = self.live.lock() {
            live.insert(
                id,
                Entry {
                    node_id: node_id.to_string(),
                    serial: serial.to_string(),
                    end: tx,
                    wake: wake.clone(),
                },
            );
        }
        Registered {
            guard: SessionGuard {
                id,
                sessions: self.clone(),
            },
            end: rx,
            wake,
        }
    }

    /// Wakes every live session of the nodes in `node_ids` (the command poller). Returns how
    /// many sessions were woken.
    pub fn wake_nodes(&self, node_ids: &[String]) -> usize {
        if node_ids.is_empty() {
            return 0;
        }
        let wanted: std::collections::HashSet<&str> = node_ids.iter().map(String::as_str).collect();
        let Ok(live) = self.live.lock() else {
            return 0;
        };
        let mut woken = 0;
        for e in live
            .values()
            .filter(|e| wanted.contains(e.node_id.as_str()))
        {
            e.wake.notify_one();
            woken += 1;
        }
        woken
    }

    /// Ends every live session of `node_id` holding a certificate `revoked` names (hex serials,
    /// in any case). Returns how many were told.
    pub fn revoke_node(&self, node_id: &str, revoked: Revoked<'_>, reason: &str) -> usize {
        let ended: Vec<Entry> = match self.live.lock() {
            Ok(mut live) => {
                let ids: Vec<u64> = live
                    .iter()
                    .filter(|(_, e)| e.node_id == node_id && revoked.covers(&e.serial))
                    .map(|(id, _)| *id)
                    .collect();
                ids.into_iter().filter_map(|id| live.remove(&id)).collect()
            }
            Err(_) => Vec::new(),
        };
        let n = ended.len();
        for e in ended {
            let _ = e.end.send(SessionEnd::Revoked {
                serial: e.serial,
                reason: reason.to_string(),
            });
        }
        n
    }

    /// Ends every live session, each told `why` (the gateway is stopping, or the revocation
    /// feed can no longer vouch for them). Returns how many were told.
    pub fn end_all(&self, why: SessionEnd) -> usize {
        let ended: Vec<Entry> = match self.live.lock() {
            Ok(mut live) => live.drain().map(|(_, e)| e).collect(),
            Err(_) => Vec::new(),
        };
        let n = ended.len();
        for e in ended {
            let _ = e.end.send(why.clone());
        }
        n
    }

    /// Live sessions now.
    pub fn len(&self) -> usize {
        self.live.lock().map_or(0, |l| l.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn revoking_a_node_ends_only_its_sessions_and_guards_deregister() {
        let sessions = Sessions::new();
        let Registered {
            guard: _a,
            end: mut a_end,
            ..
        } = sessions.register("n1", "aa");
        let Registered {
            guard: _b,
            end: mut b_end,
            ..
        } = sessions.register("n2", "bb");
        let c = sessions.register("n1", "cc");
        assert_eq!(sessions.len(), 3);
        drop(c);
        assert_eq!(sessions.len(), 2);
        assert_eq!(sessions.revoke_node("n1", Revoked::Every, "compromised"), 1);
        assert_eq!(
            a_end.try_recv().unwrap(),
            SessionEnd::Revoked {
                serial: "aa".into(),
                reason: "compromised".into()
            }
        );
        assert!(b_end.try_recv().is_err());
        assert_eq!(sessions.len(), 1);
        // A serial filter spares the node's other certificates.
        let Registered {
            guard: _d,
            end: mut d_end,
            ..
        } = sessions.register("n2", "dd");
        assert_eq!(
            sessions.revoke_node("n2", Revoked::Serials(&["DD".into()]), "r"),
            1
        );
        // A revocation naming none of the node's live certificates ends nothing.
        assert_eq!(sessions.revoke_node("n2", Revoked::Serials(&[]), "r"), 0);
        assert!(d_end.try_recv().is_ok());
        assert!(b_end.try_recv().is_err());
    }

    #[tokio::test]
    async fn waking_nodes_notifies_only_their_live_sessions_once_per_wake() {
        let sessions = Sessions::new();
        let a = sessions.register("n1", "aa");
        let b = sessions.register("n2", "bb");
        let c = sessions.register("n1", "cc");
        assert_eq!(
            sessions.wake_nodes(&["n1".to_string(), "n9".to_string()]),
            2
        );
        assert_eq!(sessions.wake_nodes(&[]), 0);
        // Two wakes before the session looks coalesce into one.
        assert_eq!(sessions.wake_nodes(&["n1".to_string()]), 2);
        let soon = std::time::Duration::from_millis(50);
        assert!(tokio::time::timeout(soon, a.wake.notified()).await.is_ok());
        assert!(tokio::time::timeout(soon, a.wake.notified()).await.is_err());
        assert!(tokio::time::timeout(soon, c.wake.notified()).await.is_ok());
        assert!(tokio::time::timeout(soon, b.wake.notified()).await.is_err());
        drop(c);
        assert_eq!(sessions.wake_nodes(&["n1".to_string()]), 1);
    }
}
