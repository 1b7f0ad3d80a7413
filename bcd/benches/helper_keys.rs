//! What the privilege split costs the node (issue 24): the node key's operations through `bcd
//! helper` (a Unix socket, the helper's server, every answer checked by the node) next to the
//! same operations on a TPM connection of the node's own, in the same run on the same swtpm.
//!
//! | operation | what it is |
//! | --- | --- |
//! | `sign_es256` | one signature by the node key (each TLS handshake, each proof) |
//! | `renewal` | the TPM half of a renewal: the AK, a new node key, the AK's certification of it |
//!
//! swtpm serves one connection at a time, so each round runs the direct operations on a
//! `bcd::tpm::Tpm`, closes it, then starts the helper's server (in this process, on its own
//! thread and runtime, serving root, which the bench runs as) on a new connection and runs the
//! same operations through a `HelperTpm`. Three rounds; medians. `HELPER_KEYS_ITERS` (default
//! 20) sets the runs per operation per round.

use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bcd::helper::keys::HelperTpm;
use bcd::helper::privilege::SystemUser;
use bcd::tpm::Tpm;
use domain::pki::NodeSigner;
use swtpm_fixture::swtpm::Swtpm;

const ROUNDS: usize = 3;
const OPS: [&str; 2] = ["sign_es256", "renewal"];

/// The helper's server on `dir/helper.sock` until dropped.
struct Helper {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    socket: PathBuf,
}

impl Helper {
    fn start(dir: &Path, tpm: Tpm) -> Helper {
        let socket = dir.join("helper.sock");
        let _ = std::fs::remove_file(&socket);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (ready, is_ready) = std::sync::mpsc::channel();
        let path = socket.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            rt.block_on(async move {
                let listener = tokio::net::UnixListener::bind(&path).expect("bind");
                let _ = ready.send(());
                let root = SystemUser::by_name("root").expect("root");
                let _ = bcd::helper::server::serve(listener, root, tpm, async {
                    let _ = stopped.await;
                })
                .await;
            });
        });
        let _ = is_ready.recv();
        Helper {
            stop: Some(stop),
            thread: Some(thread),
            socket,
        }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Milliseconds per run of `f`, over `iters` runs.
fn time_ms(iters: usize, mut f: impl FnMut()) -> f64 {
    let started = Instant::now();
    for _ in 0..iters {
        f();
    }
    started.elapsed().as_secs_f64() * 1000.0 / iters as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// One round's direct figures, on a connection of this process's own.
fn direct(tcti: &str, iters: usize) -> [f64; 2] {
    let tpm = Tpm::open(tcti).expect("the TPM opens");
    let key = tpm.create_node_key().expect("a node key");
    let _ = key.sign_es256(b"warm").expect("a signature");
    let sign = time_ms(iters, || {
        let s = key
            .sign_es256(b"a TLS 1.3 CertificateVerify's content")
            .expect("sign");
        std::hint::black_box(s);
    });
    let renewal = time_ms(iters, || {
        let ak = tpm.attestation_key().expect("the AK");
        let next = tpm.create_node_key().expect("the next key");
        let certified = tpm.certify(&next, &[7u8; 32]).expect("certify");
        std::hint::black_box((ak, certified));
    });
    [sign, renewal]
}

/// The same through the helper's server on its own connection.
fn through_helper(tcti: &str, dir: &Path, iters: usize) -> [f64; 2] {
    let helper = Helper::start(dir, Tpm::open(tcti).expect("the TPM opens"));
    let keys = HelperTpm::new(&helper.socket);
    let key = keys.create_node_key().expect("a node key");
    let _ = key.sign_es256(b"warm").expect("a signature");
    let sign = time_ms(iters, || {
        let s = key
            .sign_es256(b"a TLS 1.3 CertificateVerify's content")
            .expect("sign");
        std::hint::black_box(s);
    });
    let renewal = time_ms(iters, || {
        let ak = keys.attestation_key().expect("the AK");
        let next = keys.create_node_key().expect("the next key");
        let certified = keys.certify(&ak, &next, &[7u8; 32]).expect("certify");
        keys.release(next.unique()).expect("release");
        std::hint::black_box(certified);
    });
    drop(helper);
    [sign, renewal]
}

fn main() {
    let iters: usize = std::env::var("HELPER_KEYS_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20);
    let swtpm = Swtpm::start();
    let tcti = swtpm.tcti();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mut direct_ms = vec![Vec::new(); OPS.len()];
    let mut helper_ms = vec![Vec::new(); OPS.len()];
    for round in 0..ROUNDS {
        let d = direct(&tcti, iters);
        let h = through_helper(&tcti, dir.path(), iters);
        for i in 0..OPS.len() {
            direct_ms[i].push(d[i]);
            helper_ms[i].push(h[i]);
        }
        eprintln!(
            "round {}: direct {:.2?} ms, helper {:.2?} ms",
            round + 1,
            d,
            h
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    println!("helper_keys: {iters} runs per operation per round, {ROUNDS} rounds, medians");
    println!("| operation | direct ms | through bcd helper ms | ratio |");
    println!("| --- | --- | --- | --- |");
    for (i, op) in OPS.iter().enumerate() {
        let (d, h) = (median(direct_ms[i].clone()), median(helper_ms[i].clone()));
        println!("| {op} | {d:.2} | {h:.2} | {:.2} |", h / d);
    }
}
