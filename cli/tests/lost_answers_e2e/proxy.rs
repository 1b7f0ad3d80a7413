//! A TCP proxy between bcd and the gateway that loses the server's answer of a call the control
//! plane committed. It cannot read the TLS it forwards, so it asks the store instead: a
//! connection accepted while the proxy is armed takes a reading of the armed probe (a count the
//! call's commit raises: the node's certificates, the nodes), and from the first chunk of the
//! server's bytes that arrives once the count rose, the answer is lost. Whatever the server
//! sends before the commit (the handshake, HTTP/2 settings) passes, and the server writes its
//! answer only after its commit, so none of the answer reaches bcd.
//!
//! [`Lose::Close`] cuts the connection there and disarms the proxy (the client's retry passes);
//! [`Lose::Hold`] keeps the connection open and swallows everything the server sends on it
//! until the test disarms (the client waits for an answer that never comes).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How the answer is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lose {
    /// The connection is cut at the answer's first byte; the proxy disarms.
    Close,
    /// The connection stays open, the answer and all after it swallowed, until disarmed.
    Hold,
}

/// A count the commit of the call whose answer is lost raises.
pub type Probe = Arc<dyn Fn() -> usize + Send + Sync>;

struct Armed {
    probe: Probe,
    lose: Lose,
}

/// The proxy: listens on 127.0.0.1, forwards to the gateway.
pub struct Proxy {
    addr: String,
    armed: Arc<Mutex<Option<Arc<Armed>>>>,
    lost: Arc<AtomicUsize>,
}

impl Proxy {
    /// Listens on a free port of 127.0.0.1 and forwards every connection to `upstream`.
    pub fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let addr = listener.local_addr().expect("proxy address").to_string();
        let armed: Arc<Mutex<Option<Arc<Armed>>>> = Arc::default();
        let lost = Arc::new(AtomicUsize::new(0));
        let upstream = upstream.to_owned();
        let (state, count) = (armed.clone(), lost.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let armed = state.lock().unwrap_or_else(|e| e.into_inner()).clone();
                // The reading the commit must raise, taken before the client sends anything.
                let watch = armed.map(|a| {
                    let baseline = (a.probe)();
                    (a, baseline)
                });
                let (state, count) = (state.clone(), count.clone());
                std::thread::spawn(move || relay(client, server, watch, state, count));
            }
        });
        Proxy { addr, armed, lost }
    }

    /// `host:port` for bcd's `server`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Loses the answer of the next committed call on connections accepted from now on.
    pub fn arm(&self, lose: Lose, probe: Probe) {
        *self.armed.lock().unwrap_or_else(|e| e.into_inner()) =
            Some(Arc::new(Armed { probe, lose }));
    }

    /// Forwards everything again on new connections (held ones keep swallowing).
    pub fn disarm(&self) {
        *self.armed.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// How many answers were lost so far.
    pub fn lost(&self) -> usize {
        self.lost.load(Ordering::SeqCst)
    }

    /// Waits until more than `before` answers were lost; false after `within`.
    pub fn wait_lost(&self, before: usize, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while self.lost() <= before {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        true
    }
}

/// Forwards one connection both ways; the server's side as [`Proxy`] says.
fn relay(
    client: TcpStream,
    server: TcpStream,
    watch: Option<(Arc<Armed>, usize)>,
    state: Arc<Mutex<Option<Arc<Armed>>>>,
    lost: Arc<AtomicUsize>,
) {
    let (Ok(mut from_client), Ok(mut to_server)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut from_client, &mut to_server);
        let _ = to_server.shutdown(Shutdown::Both);
        let _ = from_client.shutdown(Shutdown::Both);
    });
    let (mut from_server, mut to_client) = (server, client);
    let mut buf = vec![0u8; 64 * 1024];
    let mut losing = false;
    loop {
        let n = match from_server.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if !losing {
            if let Some((armed, baseline)) = &watch {
                if (armed.probe)() > *baseline {
                    losing = true;
                    lost.fetch_add(1, Ordering::SeqCst);
                    if armed.lose == Lose::Close {
                        let mut current = state.lock().unwrap_or_else(|e| e.into_inner());
                        if current.as_ref().is_some_and(|c| Arc::ptr_eq(c, armed)) {
                            *current = None;
                        }
                        drop(current);
                        let _ = to_client.shutdown(Shutdown::Both);
                        let _ = from_server.shutdown(Shutdown::Both);
                        return;
                    }
                }
            }
        }
        if losing {
            continue; // Hold: swallowed.
        }
        if to_client.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to_client.shutdown(Shutdown::Both);
}
