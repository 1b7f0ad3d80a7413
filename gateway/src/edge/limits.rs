//! Limits at the edge of both gRPC endpoints (the public node endpoint and the api's internal
//! one): how large a message may be, how many HTTP/2 streams a connection may hold, how many
//! connections may be open in all and per peer address, and how long a connection may take to
//! handshake, stay idle or live. One typed [`EdgeLimits`] holds them with their defaults
//! ([`EdgeLimits::public`], [`EdgeLimits::internal`]) and checks them ([`EdgeLimits::validate`]).
//!
//! Every one of them bounds what a client can make the server hold before it has proved
//! anything: a connection without a client certificate costs at most
//! `max_streams_per_connection × max_message_bytes` of buffered requests plus the HTTP/2
//! connection window, and no more than `max_connections_per_peer` such connections come from
//! one address. [`ConnectionCaps`] counts the connections; [`PeerKey`] is what "one address"
//! means (an IPv4 address, an IPv6 /64).

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The limits of one endpoint. Field names are the keys of `bcctl serve`'s `[limits]` and
/// `[api_limits]` tables.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EdgeLimits {
    /// The largest gRPC message decoded or encoded, in bytes. A Join is the largest request a
    /// node sends (a CSR, a sealed token, attestation evidence).
    pub max_message_bytes: usize,
    /// HTTP/2 `SETTINGS_MAX_CONCURRENT_STREAMS`: streams one connection may have open; more are
    /// refused (`REFUSED_STREAM`).
    pub max_streams_per_connection: u32,
    /// Connections open at once, handshakes included; more are closed at accept.
    pub max_connections: usize,
    /// Connections open at once from one peer address ([`PeerKey`]); always below
    /// `max_connections`, so one address cannot lock every other client out before anything
    /// is authenticated.
    pub max_connections_per_peer: usize,
    /// From the TCP accept to a finished TLS handshake and the client's HTTP/2 preface.
    pub handshake_timeout: Duration,
    /// A connection with no open stream for this long is closed (HTTP/2 GOAWAY).
    pub idle_timeout: Duration,
    /// A connection is asked to close (GOAWAY) after this long, less up to a tenth at random so
    /// connections opened together do not all reconnect together.
    pub max_connection_age: Duration,
    /// How long streams still open after that GOAWAY may finish before the connection is dropped.
    pub connection_age_grace: Duration,
}

/// A Join with a CSR (about 250 bytes), a sealed token (about 200) and the attestation evidence:
/// TPM evidence (an EK certificate, an AK, a quote and its signature, PCR values) is a few KiB,
/// a measured-boot event log tens of KiB. 64 KiB leaves room for those and is still small
/// enough that the buffered requests of a full connection stay about a MiB.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 64 * 1024;

/// The api's internal endpoint relays the public endpoint's requests with a little more around
/// them (a relayed Renew carries the presented leaf besides the request).
pub const INTERNAL_MAX_MESSAGE_BYTES: usize = DEFAULT_MAX_MESSAGE_BYTES + 32 * 1024;

/// The smallest `max_message_bytes` accepted: below it a real Join does not fit.
pub const MIN_MESSAGE_BYTES: usize = 4 * 1024;
/// The largest `max_message_bytes` accepted (tonic's own default).
pub const MAX_MESSAGE_BYTES: usize = 4 * 1024 * 1024;

impl EdgeLimits {
    /// The public node endpoint's defaults. A node holds one connection (its Session, and a
    /// Renew now and then on the same connection); a machine that joins, one for its Join.
    pub fn public() -> Self {
        EdgeLimits {
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            max_streams_per_connection: 16,
            max_connections: 8192,
            max_connections_per_peer: 256,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(120),
            max_connection_age: Duration::from_secs(3600),
            connection_age_grace: Duration::from_secs(30),
        }
    }

    /// The api's internal endpoint's defaults: few peers (gateways), each multiplexing the Joins
    /// and Renews of all its nodes on one connection.
    pub fn internal() -> Self {
        EdgeLimits {
            max_message_bytes: INTERNAL_MAX_MESSAGE_BYTES,
            max_streams_per_connection: 256,
            max_connections: 512,
            max_connections_per_peer: 64,
            handshake_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(600),
            max_connection_age: Duration::from_secs(3600),
            connection_age_grace: Duration::from_secs(30),
        }
    }

    /// Checks every limit; `table` names the configuration table in the messages (`limits`,
    /// `api_limits`).
    pub fn validate(&self, table: &'static str) -> Result<(), LimitsError> {
        let invalid = |key: &'static str, message: String| LimitsError {
            table,
            key,
            message,
        };
        if !(MIN_MESSAGE_BYTES..=MAX_MESSAGE_BYTES).contains(&self.max_message_bytes) {
            return Err(invalid(
                "max_message_bytes",
                format!(
                    "{} is outside {MIN_MESSAGE_BYTES}..={MAX_MESSAGE_BYTES}: it must hold the largest Join (CSR, sealed token, attestation evidence); the default is {DEFAULT_MAX_MESSAGE_BYTES}",
                    self.max_message_bytes
                ),
            ));
        }
        if !(1..=10_000).contains(&self.max_streams_per_connection) {
            return Err(invalid(
                "max_streams_per_connection",
                format!(
                    "{} is outside 1..=10000 (a node needs 2: its Session and a Renew)",
                    self.max_streams_per_connection
                ),
            ));
        }
        if self.max_connections == 0 {
            return Err(invalid(
                "max_connections",
                "0 would refuse every connection; give at least the number of nodes this endpoint serves".into(),
            ));
        }
        if self.max_connections < 2 {
            return Err(invalid(
                "max_connections",
                format!(
                    "{} leaves no room beside one peer: at least 2, so that one address can never hold every connection",
                    self.max_connections
                ),
            ));
        }
        // One address holding every connection locks everyone else out before anything is
        // authenticated (issue 40): the per-peer cap stays below the global one.
        if self.max_connections_per_peer == 0
            || self.max_connections_per_peer >= self.max_connections
        {
            return Err(invalid(
                "max_connections_per_peer",
                format!(
                    "{} must be at least 1 and below max_connections ({}), so that one address cannot hold every connection; set it to the most nodes behind one address (NAT)",
                    self.max_connections_per_peer, self.max_connections
                ),
            ));
        }
        let at_least = |key: &'static str, value: Duration, min: Duration| {
            if value < min {
                Err(invalid(
                    key,
                    format!(
                        "{} ms is below the minimum of {} ms",
                        value.as_millis(),
                        min.as_millis()
                    ),
                ))
            } else {
                Ok(())
            }
        };
        at_least(
            "handshake_timeout",
            self.handshake_timeout,
            Duration::from_millis(100),
        )?;
        at_least(
            "idle_timeout",
            self.idle_timeout,
            Duration::from_millis(100),
        )?;
        at_least(
            "max_connection_age",
            self.max_connection_age,
            Duration::from_secs(1),
        )?;
        Ok(())
    }
}

impl Default for EdgeLimits {
    fn default() -> Self {
        EdgeLimits::public()
    }
}

/// A limit that cannot be used, with the configuration table and key it came from.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{table}.{key}: {message}")]
pub struct LimitsError {
    pub table: &'static str,
    pub key: &'static str,
    pub message: String,
}

/// What "one peer" is for the per-peer limits: an IPv4 address (an IPv4-mapped IPv6 address
/// counts as its IPv4 address), or the /64 of an IPv6 address, since one host is given a whole
/// /64 and can pick any address in it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerKey(IpAddr);

impl PeerKey {
    pub fn of(ip: IpAddr) -> Self {
        match ip {
            IpAddr::V4(v4) => PeerKey(IpAddr::V4(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => PeerKey(IpAddr::V4(v4)),
                None => {
                    let bits = u128::from(v6) & !((1u128 << 64) - 1);
                    PeerKey(IpAddr::V6(Ipv6Addr::from(bits)))
                }
            },
        }
    }
}

impl fmt::Display for PeerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            IpAddr::V4(v4) => write!(f, "{v4}"),
            IpAddr::V6(v6) => write!(f, "{v6}/64"),
        }
    }
}

/// Why a connection was closed at accept.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CapRefusal {
    #[error("{max} connections are open (max_connections)")]
    Global { max: usize },
    #[error("{max} connections are open from {peer} (max_connections_per_peer)")]
    Peer { peer: PeerKey, max: usize },
}

#[derive(Debug, Default)]
struct CapState {
    total: usize,
    by_peer: HashMap<PeerKey, usize>,
}

/// Counts open connections, in all and per peer; a [`ConnPermit`] is one of them.
#[derive(Debug)]
pub struct ConnectionCaps {
    max: usize,
    per_peer: usize,
    state: Mutex<CapState>,
}

impl ConnectionCaps {
    pub fn new(limits: &EdgeLimits) -> Arc<Self> {
        Arc::new(ConnectionCaps {
            max: limits.max_connections,
            per_peer: limits.max_connections_per_peer,
            state: Mutex::new(CapState::default()),
        })
    }

    /// A permit for one more connection from `ip`, unless a cap is reached.
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<ConnPermit, CapRefusal> {
        let peer = PeerKey::of(ip);
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.total >= self.max {
            return Err(CapRefusal::Global { max: self.max });
        }
        let n = s.by_peer.entry(peer).or_default();
        if *n >= self.per_peer {
            return Err(CapRefusal::Peer {
                peer,
                max: self.per_peer,
            });
        }
        *n += 1;
        s.total += 1;
        Ok(ConnPermit {
            caps: self.clone(),
            peer,
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.state.lock().map(|s| s.total).unwrap_or_default()
    }

    fn release(&self, peer: PeerKey) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.total = s.total.saturating_sub(1);
        if let Some(n) = s.by_peer.get_mut(&peer) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                s.by_peer.remove(&peer);
            }
        }
    }
}

/// One open connection, counted until it is dropped.
#[derive(Debug)]
pub struct ConnPermit {
    caps: Arc<ConnectionCaps>,
    peer: PeerKey,
}

impl Drop for ConnPermit {
    fn drop(&mut self) {
        self.caps.release(self.peer);
    }
}

/// What the limits did, counted by reason (for tests and metrics).
#[derive(Debug, Default)]
pub struct EdgeCounters {
    /// Closed at accept: `max_connections` reached.
    pub refused_global: AtomicU64,
    /// Closed at accept: `max_connections_per_peer` reached.
    pub refused_peer: AtomicU64,
    /// No finished TLS handshake and HTTP/2 preface within `handshake_timeout`.
    pub handshake_timeouts: AtomicU64,
    /// The TLS handshake failed (the client verifier counts certificate refusals by reason).
    pub handshake_failures: AtomicU64,
    /// The first bytes after the handshake were not the HTTP/2 preface.
    pub bad_prefaces: AtomicU64,
    /// Closed after `idle_timeout` without an open stream.
    pub idle_closed: AtomicU64,
    /// Asked to close at `max_connection_age`.
    pub aged_out: AtomicU64,
    /// Session-wire connections ended for a frame a node may not send
    /// ([`crate::session::session_wire`]).
    pub bad_session_frames: AtomicU64,
    /// Session-wire connections dropped for no answer to a ping.
    pub keepalive_timeouts: AtomicU64,
}

impl EdgeCounters {
    pub(crate) fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts as (reason, count), in a fixed order.
    pub fn snapshot(&self) -> [(&'static str, u64); 9] {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        [
            ("max-connections", g(&self.refused_global)),
            ("max-connections-per-peer", g(&self.refused_peer)),
            ("handshake-timeout", g(&self.handshake_timeouts)),
            ("handshake-failed", g(&self.handshake_failures)),
            ("bad-preface", g(&self.bad_prefaces)),
            ("idle", g(&self.idle_closed)),
            ("max-age", g(&self.aged_out)),
            ("bad-session-frame", g(&self.bad_session_frames)),
            ("keepalive-timeout", g(&self.keepalive_timeouts)),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_valid() {
        assert_eq!(EdgeLimits::public().validate("limits"), Ok(()));
        assert_eq!(EdgeLimits::internal().validate("api_limits"), Ok(()));
    }

    #[test]
    fn each_bad_limit_names_its_key() {
        let bad = |f: fn(&mut EdgeLimits)| {
            let mut l = EdgeLimits::public();
            f(&mut l);
            let e = l.validate("limits").unwrap_err();
            format!("{}.{}", e.table, e.key)
        };
        assert_eq!(
            bad(|l| l.max_message_bytes = 100),
            "limits.max_message_bytes"
        );
        assert_eq!(
            bad(|l| l.max_streams_per_connection = 0),
            "limits.max_streams_per_connection"
        );
        assert_eq!(bad(|l| l.max_connections = 0), "limits.max_connections");
        assert_eq!(
            bad(|l| l.max_connections_per_peer = l.max_connections + 1),
            "limits.max_connections_per_peer"
        );
        assert_eq!(bad(|l| l.max_connections = 1), "limits.max_connections");
        assert_eq!(
            bad(|l| l.handshake_timeout = Duration::ZERO),
            "limits.handshake_timeout"
        );
        assert_eq!(
            bad(|l| l.idle_timeout = Duration::ZERO),
            "limits.idle_timeout"
        );
        assert_eq!(
            bad(|l| l.max_connection_age = Duration::from_millis(10)),
            "limits.max_connection_age"
        );
    }

    /// Issue 40, item 7: a per-peer cap equal to the global cap let one address hold every
    /// connection; it must stay below it, on every endpoint.
    #[test]
    fn a_per_peer_cap_equal_to_the_global_cap_is_refused() {
        let mut l = EdgeLimits::public();
        l.max_connections = 64;
        l.max_connections_per_peer = 64;
        assert_eq!(
            l.validate("limits").map_err(|e| e.to_string()),
            Err("limits.max_connections_per_peer: 64 must be at least 1 and below max_connections (64), so that one address cannot hold every connection; set it to the most nodes behind one address (NAT)".to_string())
        );
        l.max_connections_per_peer = 63;
        assert_eq!(l.validate("limits"), Ok(()));
        for defaults in [EdgeLimits::public(), EdgeLimits::internal()] {
            assert!(defaults.max_connections_per_peer < defaults.max_connections);
        }
    }

    #[test]
    fn an_ipv6_peer_is_its_slash_64_and_a_mapped_ipv4_its_address() {
        let a: IpAddr = "2001:db8:1:2:aaaa::1".parse().unwrap();
        let b: IpAddr = "2001:db8:1:2:bbbb::2".parse().unwrap();
        let c: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(PeerKey::of(a), PeerKey::of(b));
        assert_ne!(PeerKey::of(a), PeerKey::of(c));
        assert_eq!(PeerKey::of(a).to_string(), "2001:db8:1:2::/64");
        let mapped: IpAddr = "::ffff:192.0.2.7".parse().unwrap();
        assert_eq!(PeerKey::of(mapped).to_string(), "192.0.2.7");
    }

    #[test]
    fn caps_count_in_all_and_per_peer_and_release_on_drop() {
        let mut limits = EdgeLimits::public();
        limits.max_connections = 3;
        limits.max_connections_per_peer = 2;
        let caps = ConnectionCaps::new(&limits);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let p1 = caps.admit(a).unwrap();
        let _p2 = caps.admit(a).unwrap();
        assert_eq!(
            caps.admit(a).unwrap_err(),
            CapRefusal::Peer {
                peer: PeerKey::of(a),
                max: 2
            }
        );
        let _p3 = caps.admit(b).unwrap();
        assert_eq!(caps.admit(b).unwrap_err(), CapRefusal::Global { max: 3 });
        drop(p1);
        assert_eq!(caps.open(), 2);
        let _p4 = caps.admit(a).unwrap();
    }
}
