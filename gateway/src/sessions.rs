//! Live node sessions, so a revocation can reach the session it ends.
//!
//! Each session registers under its node id and certificate serial and gets a receiver for its
//! [`SessionEnd`]; the revocation feed calls [`Sessions::revoke_node`] and every live session of
//! that node is told why and closes. A session deregisters when its guard drops.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// Why the gateway ends a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionEnd {
    /// The node's certificate was revoked: send a RevocationNotice, then close.
    Revoked { serial: String, reason: String },
    /// The gateway is shutting down: the node should reconnect (to another gateway).
    Shutdown,
}

struct Entry {
    node_id: String,
    serial: String,
    end: oneshot::Sender<SessionEnd>,
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

impl Sessions {
    pub fn new() -> Arc<Self> {
        Arc::new(Sessions::default())
    }

    /// Registers a session of `node_id` holding certificate `serial` (hex).
    pub fn register(
        self: &Arc<Self>,
        node_id: &str,
        serial: &str,
    ) -> (SessionGuard, oneshot::Receiver<SessionEnd>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        if let Ok(mut live) = self.live.lock() {
            live.insert(
                id,
                Entry {
                    node_id: node_id.to_string(),
                    serial: serial.to_string(),
                    end: tx,
                },
            );
        }
        (
            SessionGuard {
                id,
                sessions: self.clone(),
            },
            rx,
        )
    }

    /// Ends every live session of `node_id` whose serial is in `serials` (all of the node's
    /// sessions when `serials` is empty). Returns how many were told.
    pub fn revoke_node(&self, node_id: &str, serials: &[String], reason: &str) -> usize {
        let ended: Vec<Entry> = match self.live.lock() {
            Ok(mut live) => {
                let ids: Vec<u64> = live
                    .iter()
                    .filter(|(_, e)| {
                        e.node_id == node_id && (serials.is_empty() || serials.contains(&e.serial))
                    })
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

    /// Ends every live session (the gateway is stopping). Returns how many were told.
    pub fn end_all(&self) -> usize {
        let ended: Vec<Entry> = match self.live.lock() {
            Ok(mut live) => live.drain().map(|(_, e)| e).collect(),
            Err(_) => Vec::new(),
        };
        let n = ended.len();
        for e in ended {
            let _ = e.end.send(SessionEnd::Shutdown);
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
        let (_a, mut a_end) = sessions.register("n1", "aa");
        let (_b, mut b_end) = sessions.register("n2", "bb");
        let (c, _c_end) = sessions.register("n1", "cc");
        assert_eq!(sessions.len(), 3);
        drop(c);
        assert_eq!(sessions.len(), 2);
        assert_eq!(sessions.revoke_node("n1", &[], "compromised"), 1);
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
        let (_d, mut d_end) = sessions.register("n2", "dd");
        assert_eq!(sessions.revoke_node("n2", &["dd".to_string()], "r"), 1);
        assert!(d_end.try_recv().is_ok());
        assert!(b_end.try_recv().is_err());
    }
}
