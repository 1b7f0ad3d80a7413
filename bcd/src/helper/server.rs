//! `bcd helper` (spec 002 "Through bcd helper"): root's process that holds the TPM for the
//! unprivileged `bcd node`. It listens on `[helper] socket` (the file owned by the `[helper]
//! user`, mode 0600, so the kernel refuses other users at connect), checks every connection's
//! peer credentials (only that user's uid is served; anyone else, root included, gets one
//! `refused` line and the connection closes), and serves the five `tpm.*` operations by
//! building every TPM command itself through [`Tpm`]. Bounds: [`MAX_LINE`] per line,
//! [`MAX_CONNECTIONS`] at once, each answer within [`ANSWER_TIMEOUT`]. SIGTERM or SIGINT ends it
//! and removes the socket. Every connection and refusal is logged on standard error.

use std::collections::HashMap;
use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::Semaphore;

use super::protocol::{to_line, Answer, Blob, Request, ANSWER_TIMEOUT, MAX_LINE};
use super::settings::HelperSettings;
use crate::config::Config;
use crate::helper::privilege::{is_root, user_name, SystemUser};
use crate::tpm::{Tpm, TpmNodeKey};

/// The most connections served at once (the node keeps one; the rest are `bcd status` and the
/// like).
pub const MAX_CONNECTIONS: usize = 8;
/// The most node keys kept derived (a node has its key and, during a renewal, the next one).
const MAX_KEYS: usize = 8;

/// What `bcd helper` as another user than root prints.
pub const NOT_ROOT: &str =
    "bcd helper: run it as root (it holds the TPM for the unprivileged bcd node)";

fn log(message: impl std::fmt::Display) {
    eprintln!(
        "{} bcd helper: {message}",
        crate::node::log::rfc3339(crate::clock::now())
    );
}

/// Runs `bcd helper` until SIGTERM or SIGINT: `Err` is the line to print (exit 1).
pub fn run_helper(config: &Config) -> Result<(), String> {
    if !is_root() {
        return Err(NOT_ROOT.to_owned());
    }
    let shown = config
        .path
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| "config.toml".to_owned());
    let Some(settings) = config.helper.clone() else {
        return Err(format!(
            "bcd helper: {shown} has no [helper] section: set [helper] user = \"bcd\" (the user \
             bcd node runs as) to split the node's privileges"
        ));
    };
    let user = SystemUser::by_name(&settings.user)
        .map_err(|e| format!("bcd helper: [helper] user: {e}"))?;
    let host = config.tpm_host();
    if !host.present() && !node_key_in_tpm(&config.data_dir) {
        // A host without a TPM: the join kept the node key in a file (or has not run), which
        // bcd node reads itself. Nothing to hold, so nothing fails (bcd.service requires this
        // unit). A node key in the TPM with the device absent is the error below, and the
        // unit's restart waits for a driver that loads late.
        log(format_args!(
            "no TPM on this host ({} is absent): bcd node keeps its node key in a file and \
             needs no helper; nothing to serve",
            host.tcti()
        ));
        return Ok(());
    }
    let tpm = host.open().map_err(|e| format!("bcd helper: {e}"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("bcd helper: cannot start an async runtime: {e}"))?;
    runtime.block_on(async move {
        let listener = bind(&settings, &user)?;
        log(format_args!(
            "listening on {} for {} (uid {}), TPM {}",
            settings.socket.display(),
            user.name,
            user.uid,
            tpm.tcti()
        ));
        let served = match stop_signals() {
            Ok(stop) => serve(listener, user, tpm, stop).await,
            Err(e) => Err(e),
        };
        let _ = std::fs::remove_file(&settings.socket);
        log(format_args!(
            "stopped; removed {}",
            settings.socket.display()
        ));
        served
    })
}

/// Whether the identity in `data_dir` keeps its node key in the TPM (`node.key` a TPM record).
/// No identity, a file key, or a `node.key` that is not a regular file bcd wrote: no. Read with
/// a bound: the file belongs to the unprivileged user.
fn node_key_in_tpm(data_dir: &std::path::Path) -> bool {
    use std::io::Read as _;
    let path = data_dir.join(crate::files::NODE_KEY_FILE);
    let regular = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_file());
    let mut bytes = Vec::new();
    regular
        && std::fs::File::open(&path)
            .and_then(|f| f.take(64 * 1024).read_to_end(&mut bytes))
            .is_ok()
        && matches!(
            crate::node_key::parse_key_file(&bytes),
            Ok(crate::node_key::KeyRecord::Tpm(_))
        )
}

/// The socket at `[helper] socket`: its directory made (0755) when missing, a stale socket
/// removed (a live helper's is refused), owned by `user` with mode 0600.
fn bind(settings: &HelperSettings, user: &SystemUser) -> Result<UnixListener, String> {
    let socket = &settings.socket;
    let shown = socket.display();
    if let Some(parent) = socket.parent() {
        if !parent.exists() {
            std::fs::create_dir_all(parent)
                .and_then(|()| {
                    std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755))
                })
                .map_err(|e| format!("bcd helper: cannot make {}: {e}", parent.display()))?;
        }
    }
    match std::fs::symlink_metadata(socket) {
        Ok(meta) if meta.file_type().is_socket() => {
            if std::os::unix::net::UnixStream::connect(socket).is_ok() {
                return Err(format!(
                    "bcd helper: another helper is listening on {shown}: stop it first \
                     (systemctl stop bcd-helper)"
                ));
            }
            std::fs::remove_file(socket)
                .map_err(|e| format!("bcd helper: cannot remove the stale {shown}: {e}"))?;
        }
        Ok(_) => {
            return Err(format!(
                "bcd helper: {shown} exists and is not a socket: remove it or set another \
                 [helper] socket"
            ))
        }
        Err(_) => {}
    }
    let listener = UnixListener::bind(socket)
        .map_err(|e| format!("bcd helper: cannot listen on {shown}: {e}"))?;
    // Mode first, then owner: between the two only root can connect.
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
        .and_then(|()| std::os::unix::fs::chown(socket, Some(user.uid), Some(user.gid)))
        .map_err(|e| {
            let _ = std::fs::remove_file(socket);
            format!("bcd helper: cannot give {shown} to {}: {e}", user.name)
        })?;
    Ok(listener)
}

/// The keys derived so far, by unique.
type Keys = Arc<Mutex<HashMap<[u8; 32], TpmNodeKey>>>;

/// Serves `user` on `listener` with `tpm` until `stop` completes (what `bcd helper` runs, with
/// SIGTERM and SIGINT as `stop`; tests give their own).
pub async fn serve(
    listener: UnixListener,
    user: SystemUser,
    tpm: Tpm,
    stop: impl std::future::Future<Output = ()>,
) -> Result<(), String> {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let keys: Keys = Arc::default();
    let user = Arc::new(user);
    tokio::pin!(stop);
    loop {
        let accepted = tokio::select! {
            () = &mut stop => return Ok(()),
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                log(format_args!("accept failed: {e}"));
                continue;
            }
        };
        let (slots, keys, user, tpm) = (slots.clone(), keys.clone(), user.clone(), tpm.clone());
        tokio::spawn(async move {
            let Ok(slot) = slots.try_acquire_owned() else {
                log(format_args!(
                    "refused a connection: {MAX_CONNECTIONS} are already open"
                ));
                refuse(
                    stream,
                    format!("bcd helper serves at most {MAX_CONNECTIONS} connections at once"),
                )
                .await;
                return;
            };
            connection(stream, &user, &tpm, &keys).await;
            drop(slot);
        });
    }
}

/// SIGTERM or SIGINT.
fn stop_signals() -> Result<impl std::future::Future<Output = ()>, String> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term =
        signal(SignalKind::terminate()).map_err(|e| format!("bcd helper: SIGTERM: {e}"))?;
    let mut int =
        signal(SignalKind::interrupt()).map_err(|e| format!("bcd helper: SIGINT: {e}"))?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
    })
}

async fn refuse(mut stream: UnixStream, error: String) {
    let _ = stream.write_all(&to_line(&Answer::Refused { error })).await;
    let _ = stream.shutdown().await;
    drain(&mut stream).await;
}

/// Reads (for at most a second, at most [`MAX_LINE`] bytes) what the peer sent before it saw
/// the refusal: a socket closed with unread data resets the connection, and the peer could
/// lose the refusal's line.
async fn drain(stream: &mut (impl tokio::io::AsyncRead + Unpin)) {
    let limit = u64::try_from(MAX_LINE).unwrap_or(u64::MAX);
    let mut sink = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(1),
        stream.take(limit).read_to_end(&mut sink),
    )
    .await;
}

/// One connection: the peer checked, then its requests in turn until it closes.
async fn connection(stream: UnixStream, user: &SystemUser, tpm: &Tpm, keys: &Keys) {
    let peer = match stream.peer_cred() {
        Ok(cred) => cred.uid(),
        Err(e) => {
            log(format_args!(
                "refused a connection: no peer credentials: {e}"
            ));
            refuse(stream, format!("bcd helper cannot tell who you are: {e}")).await;
            return;
        }
    };
    let name = user_name(peer);
    if peer != user.uid {
        log(format_args!(
            "refused a connection from {name} (uid {peer}): only {} (uid {}) may use the helper",
            user.name, user.uid
        ));
        let error = format!(
            "bcd helper serves only {} (uid {}); this connection is {name} (uid {peer})",
            user.name, user.uid
        );
        refuse(stream, error).await;
        return;
    }
    log(format_args!("connection from {name} (uid {peer})"));
    let (read, mut write) = stream.into_split();
    let mut read = BufReader::new(read);
    let limit = u64::try_from(MAX_LINE).unwrap_or(u64::MAX) + 1;
    loop {
        let mut line = Vec::new();
        match (&mut read).take(limit).read_until(b'\n', &mut line).await {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                log(format_args!("connection from {name}: {e}"));
                break;
            }
        }
        if line.last() != Some(&b'\n') {
            if line.len() > MAX_LINE {
                log(format_args!(
                    "connection from {name}: a line over {MAX_LINE} bytes"
                ));
                let error = format!("a request longer than {MAX_LINE} bytes");
                let _ = write.write_all(&to_line(&Answer::Refused { error })).await;
                let _ = write.shutdown().await;
                drain(&mut read).await;
            }
            break;
        }
        let answer = match serde_json::from_slice::<Request>(&line[..line.len() - 1]) {
            Ok(request) => answer(request, tpm, keys).await,
            Err(e) => Answer::Refused {
                error: format!("not a helper request: {e}"),
            },
        };
        if let Answer::Refused { error } = &answer {
            log(format_args!("refused to {name}: {error}"));
        }
        if write.write_all(&to_line(&answer)).await.is_err() {
            break;
        }
    }
    log(format_args!("connection from {name} closed"));
}

/// Serves one request on the TPM thread, within [`ANSWER_TIMEOUT`].
async fn answer(request: Request, tpm: &Tpm, keys: &Keys) -> Answer {
    let op = request.op();
    let (tpm, keys) = (tpm.clone(), keys.clone());
    let job = tokio::task::spawn_blocking(move || serve_request(request, &tpm, &keys));
    match tokio::time::timeout(ANSWER_TIMEOUT, job).await {
        Ok(Ok(Ok(answer))) => answer,
        Ok(Ok(Err(error))) => Answer::Refused { error },
        Ok(Err(e)) => Answer::Refused {
            error: format!("{op} failed in the helper: {e}"),
        },
        Err(_) => Answer::Refused {
            error: format!(
                "the TPM did not answer {op} within {} s",
                ANSWER_TIMEOUT.as_secs()
            ),
        },
    }
}

/// The key of `unique`: derived before, or now.
fn key_of(unique: &[u8; 32], tpm: &Tpm, keys: &Keys) -> Result<TpmNodeKey, String> {
    if let Some(key) = keys.lock().unwrap_or_else(|p| p.into_inner()).get(unique) {
        return Ok(key.clone());
    }
    derive(unique, tpm, keys)
}

fn derive(unique: &[u8; 32], tpm: &Tpm, keys: &Keys) -> Result<TpmNodeKey, String> {
    let key = tpm.load_node_key(unique).map_err(|e| e.to_string())?;
    let mut keys = keys.lock().unwrap_or_else(|p| p.into_inner());
    if keys.len() >= MAX_KEYS && !keys.contains_key(unique) {
        keys.clear();
    }
    keys.insert(*unique, key.clone());
    Ok(key)
}

fn serve_request(request: Request, tpm: &Tpm, keys: &Keys) -> Result<Answer, String> {
    match request {
        Request::NodeKey { unique } => {
            let key = derive(&unique.0, tpm, keys)?;
            Ok(Answer::NodeKey {
                public_area: Blob(key.public_area().to_vec()),
            })
        }
        Request::Sign { unique, digest } => {
            let key = key_of(&unique.0, tpm, keys)?;
            let signature = key.sign_digest(&digest.0).map_err(|e| e.to_string())?;
            Ok(Answer::Signature {
                signature: Blob(signature.to_vec()),
            })
        }
        Request::Ak {} => {
            let ak = tpm.attestation_key().map_err(|e| e.to_string())?;
            Ok(Answer::Ak {
                public_area: Blob(ak.public_area),
            })
        }
        Request::Certify { unique, qualifying } => {
            let key = key_of(&unique.0, tpm, keys)?;
            let certified = tpm
                .certify(&key, &qualifying.0)
                .map_err(|e| e.to_string())?;
            Ok(Answer::Certification {
                attest: Blob(certified.certify_info),
                signature: Blob(certified.signature),
            })
        }
        Request::Release { unique } => {
            keys.lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&unique.0);
            tpm.release(&unique.0).map_err(|e| e.to_string())?;
            Ok(Answer::Released)
        }
    }
}
