//! The admin API client: `bcctl <verb> --server HOST:PORT --profile FILE` (and the approver's
//! `batch approve` composite) reach `bc.admin.v1.AdminService` over mutual TLS, presenting the
//! profile's operator certificate and trusting only the profile's serving CA.
//!
//! Usage from a verb that needs several calls (e.g. `batch approve --server`):
//!
//! ```ignore
//! if let Some(remote) = crate::admin::client::Remote::from_args(&args.deployment.remote)? {
//!     let mut api = remote.connect().await?;
//!     let shown = api.run_json(&["batch", "show", "--batch", id]).await?;   // exit 0 or Err
//!     let reply = api.run(&["batch", "submit-approval", ..], Vec::new()).await?;  // any exit
//! }
//! ```
//!
//! One TLS connection carries every call of a client (HTTP/2). A refusal the server makes
//! (PERMISSION_DENIED, INVALID_ARGUMENT, …) is [`ClientError::Status`], whose text is the
//! server's message as it came.

// Parts of this API serve the admin server (files) and `batch approve --server` (client).
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use proto::admin::admin_service_client::AdminServiceClient;
use proto::admin::{InputFile, RunReply, RunRequest, WhoAmIReply, WhoAmIRequest};
use rustls::pki_types::ServerName;
use tonic::transport::{Channel, Endpoint, Uri};

use super::profile::{self, Profile, ProfileError};
use crate::deployment::RemoteArgs;

/// How long connecting and the TLS handshake may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one call may take (the server's own call timeout is shorter by default).
const CALL_TIMEOUT: Duration = Duration::from_secs(600);

/// The largest reply accepted (the server's `max_reply_bytes` bounds it first).
const MAX_REPLY_BYTES: usize = 1 << 30;

/// Why an admin API call did not produce a reply.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{0}")]
    Profile(#[from] ProfileError),
    #[error("no admin API server: pass --server HOST:PORT or put server = \"host:port\" in the profile {0}")]
    NoServer(PathBuf),
    #[error("--server {0:?}: give HOST:PORT (the admin listener, [admin] listen of bcctl serve)")]
    BadServer(String),
    #[error("admin API {server}: refused: {source} (is bcctl serve running there with an [admin] listen?)")]
    Refused {
        server: String,
        source: std::io::Error,
    },
    #[error("admin API {server}: cannot connect: {source}")]
    Connect {
        server: String,
        source: std::io::Error,
    },
    #[error("admin API {server}: timeout: no answer within {secs} s")]
    Timeout { server: String, secs: u64 },
    #[error("admin API {server}: TLS: {why} (is it this deployment's admin listener, with the profile's serving CA? a revoked or expired operator certificate is refused at the handshake too)")]
    Tls { server: String, why: String },
    #[error("admin API {server}: the call failed: {why}")]
    Transport { server: String, why: String },
    /// The server's refusal, its message as it came (e.g. `permission denied: token create
    /// needs the operator role; spiffe://…/operator/x is approver`).
    #[error("{message}")]
    Status { code: tonic::Code, message: String },
    /// [`AdminClient::run_json`]: the verb ran and failed.
    #[error("{}", failed_text(.stderr))]
    Failed { exit_code: u32, stderr: String },
    #[error("admin API: `{verb}` printed no JSON document: {why}")]
    NotJson { verb: String, why: String },
}

/// The causes under a transport status, innermost last (`received fatal alert: …`), deduplicated.
fn source_chain(s: &tonic::Status) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = std::error::Error::source(s);
    while let Some(e) = next {
        let text = e.to_string();
        if !parts.contains(&text) {
            parts.push(text);
        }
        next = e.source();
    }
    parts.join(": ")
}

/// The message of a failed verb's standard error (its `bcctl: …` or JSON error line).
fn failed_text(stderr: &str) -> String {
    let line = stderr
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
        if let Some(m) = v.pointer("/error/message").and_then(|m| m.as_str()) {
            return m.to_string();
        }
    }
    let text = line.strip_prefix("bcctl: ").unwrap_or(line);
    if text.is_empty() {
        "the verb failed over the admin API".to_string()
    } else {
        text.to_string()
    }
}

impl ClientError {
    /// The exit code `bcctl` gives this error: a failed verb's own code, else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            ClientError::Failed { exit_code, .. } => u8::try_from(*exit_code).unwrap_or(1),
            ClientError::BadServer(_) => crate::output::EXIT_USAGE,
            _ => crate::output::EXIT_FAILED,
        }
    }
}

/// The server `HOST:PORT` split, or `None` when it is not of that form.
pub fn split_server(server: &str) -> Option<(String, u16)> {
    let (host, port) = server.rsplit_once(':')?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = port.parse().ok()?;
    (!host.is_empty()).then(|| (host.to_string(), port))
}

/// Where to call and as whom: the server address and the loaded profile.
#[derive(Debug)]
pub struct Remote {
    /// `HOST:PORT` of the admin listener.
    pub server: String,
    pub profile: Profile,
}

impl Remote {
    /// The remote these flags ask for: `None` when neither `--server` nor `--profile` is given
    /// (the verb runs directly against the store; `BCCTL_PROFILE` alone never makes a call
    /// remote). `--server` without `--profile` loads `BCCTL_PROFILE`, else `./profile.toml`;
    /// `--profile` without `--server` calls the profile's `server`.
    pub fn from_args(args: &RemoteArgs) -> Result<Option<Remote>, ClientError> {
        if !args.is_remote() {
            return Ok(None);
        }
        let path = profile::profile_path(args.profile.as_deref());
        let profile = profile::load(&path)?;
        let server = match args.server.clone().or_else(|| profile.server.clone()) {
            Some(s) => s,
            None => return Err(ClientError::NoServer(path)),
        };
        if split_server(&server).is_none() {
            return Err(ClientError::BadServer(server));
        }
        Ok(Some(Remote { server, profile }))
    }

    /// Connects and handshakes: the operator certificate presented, the serving CA the only
    /// trust anchor.
    pub async fn connect(&self) -> Result<AdminClient, ClientError> {
        let server = self.server.clone();
        let (host, port) =
            split_server(&server).ok_or_else(|| ClientError::BadServer(server.clone()))?;
        let timeout = || ClientError::Timeout {
            server: server.clone(),
            secs: CONNECT_TIMEOUT.as_secs(),
        };
        let tls_err = |why: String| ClientError::Tls {
            server: server.clone(),
            why,
        };
        let mut roots = rustls::RootCertStore::empty();
        for ca in &self.profile.serving_ca {
            roots
                .add(ca.clone())
                .map_err(|e| tls_err(format!("the profile's serving CA: {e}")))?;
        }
        let mut config = rustls::ClientConfig::builder_with_provider(gateway::tls::provider())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| tls_err(e.to_string()))?
            .with_root_certificates(roots)
            .with_client_auth_cert(self.profile.chain.clone(), self.profile.key())
            .map_err(|e| tls_err(format!("the profile's operator certificate: {e}")))?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        let name = ServerName::try_from(host.clone())
            .map_err(|e| tls_err(format!("server name {host:?}: {e}")))?;
        let tcp = tokio::time::timeout(
            CONNECT_TIMEOUT,
            tokio::net::TcpStream::connect((host.as_str(), port)),
        )
        .await
        .map_err(|_| timeout())?
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::ConnectionRefused => ClientError::Refused {
                server: server.clone(),
                source,
            },
            _ => ClientError::Connect {
                server: server.clone(),
                source,
            },
        })?;
        let tls = tokio::time::timeout(
            CONNECT_TIMEOUT,
            tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp),
        )
        .await
        .map_err(|_| timeout())?
        .map_err(|e| tls_err(e.to_string()))?;
        // The connection is made and verified: tonic gets it once, and every call of this
        // client rides it.
        let conn = Arc::new(Mutex::new(Some(tls)));
        let channel = Endpoint::from_static("http://admin.invalid")
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let taken = conn.lock().ok().and_then(|mut c| c.take());
                async move {
                    taken
                        .map(TokioIo::new)
                        .ok_or_else(|| std::io::Error::other("the admin API connection was closed"))
                }
            }))
            .await
            .map_err(|e| ClientError::Transport {
                server: server.clone(),
                why: e.to_string(),
            })?;
        let inner = AdminServiceClient::new(channel)
            .max_decoding_message_size(MAX_REPLY_BYTES)
            .max_encoding_message_size(MAX_REPLY_BYTES);
        Ok(AdminClient { server, inner })
    }
}

/// A connected admin API client.
pub struct AdminClient {
    server: String,
    inner: AdminServiceClient<Channel>,
}

impl AdminClient {
    /// The server this client talks to.
    pub fn server(&self) -> &str {
        &self.server
    }

    fn status(&self, s: tonic::Status) -> ClientError {
        let chain = source_chain(&s);
        match s.code() {
            // Transport trouble tonic reports as a status: name the server, and say what the
            // TLS layer said. Under TLS 1.3 the server checks the client certificate after the
            // client's side of the handshake is done, so its refusal (a revoked operator, a
            // certificate from another CA) arrives here, on the first call.
            // hyper reports a connection closed before the request went out as Cancelled
            // ("operation was canceled"): the same refusal, raced differently.
            tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
                if s.message().is_empty()
                    || s.message().contains("transport error")
                    || s.message().contains("connection was closed")
                    || s.message().contains("operation was canceled") =>
            {
                let why = if chain.is_empty() {
                    format!("{} ({:?})", s.message(), s.code())
                } else {
                    format!("{}: {chain}", s.message())
                };
                ClientError::Transport {
                    server: self.server.clone(),
                    why: format!(
                        "{why}; the server closed the connection after the TLS handshake, which is how it refuses an operator certificate that is revoked, expired or not from this deployment's operator CA"
                    ),
                }
            }
            code => ClientError::Status {
                code,
                message: s.message().to_string(),
            },
        }
    }

    /// Runs one verb (`argv` without the program name and without `--server`/`--profile`),
    /// sending `inputs` (the caller's files the verb reads, by the path argv names them with).
    /// Any exit code is a reply; only a refusal or a transport failure is an error.
    pub async fn run<S: AsRef<str>>(
        &mut self,
        argv: &[S],
        inputs: Vec<(PathBuf, Vec<u8>)>,
    ) -> Result<RunReply, ClientError> {
        let request = RunRequest {
            argv: argv.iter().map(|a| a.as_ref().to_string()).collect(),
            inputs: inputs
                .into_iter()
                .map(|(path, contents)| InputFile {
                    path: path.to_string_lossy().into_owned(),
                    contents,
                })
                .collect(),
        };
        let answer = tokio::time::timeout(CALL_TIMEOUT, self.inner.run(request))
            .await
            .map_err(|_| ClientError::Timeout {
                server: self.server.clone(),
                secs: CALL_TIMEOUT.as_secs(),
            })?;
        answer.map(|r| r.into_inner()).map_err(|s| self.status(s))
    }

    /// Runs a read verb with `--json` added (when absent) and returns its JSON document; an
    /// exit code other than 0 is [`ClientError::Failed`] with the verb's message.
    pub async fn run_json<S: AsRef<str>>(
        &mut self,
        argv: &[S],
    ) -> Result<serde_json::Value, ClientError> {
        let mut args: Vec<String> = argv.iter().map(|a| a.as_ref().to_string()).collect();
        if !args.iter().any(|a| a == "--json") {
            args.push("--json".into());
        }
        let reply = self.run(&args, Vec::new()).await?;
        if reply.exit_code != 0 {
            return Err(ClientError::Failed {
                exit_code: reply.exit_code,
                stderr: String::from_utf8_lossy(&reply.stderr).into_owned(),
            });
        }
        let verb = args
            .iter()
            .take_while(|a| !a.starts_with('-'))
            .cloned()
            .collect::<Vec<_>>()
            .join(" ");
        serde_json::from_slice(&reply.stdout).map_err(|e| ClientError::NotJson {
            verb,
            why: e.to_string(),
        })
    }

    /// Who the server takes this caller for.
    pub async fn who_am_i(&mut self) -> Result<WhoAmIReply, ClientError> {
        let answer = tokio::time::timeout(CALL_TIMEOUT, self.inner.who_am_i(WhoAmIRequest {}))
            .await
            .map_err(|_| ClientError::Timeout {
                server: self.server.clone(),
                secs: CALL_TIMEOUT.as_secs(),
            })?;
        answer.map(|r| r.into_inner()).map_err(|s| self.status(s))
    }
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
