//! The `external` attestor: an attestor that runs outside the control plane, reached over a Unix
//! socket with the `bc.attestor.v1` contract (`proto/proto/bc/attestor/v1/attestor.proto`).
//!
//! [`ExternalAttestor`] implements [`commands::identity::attestors::RemoteAttestor`], so the
//! JoinService calls it before the join's transaction and holds its answer to the same
//! admission step as every built-in (single-use subjects, bindings, reclaim rules, pool
//! policy). It lives here, not in `commands`, because `commands` holds no network client (the
//! dependency rules of DESIGN.md): the server passes it in as `Arc<dyn RemoteAttestor>`.
//!
//! What the attestor answers is validated before it becomes a [`Verdict`]
//! ([`verdict_from_answer`]); anything the contract does not allow is
//! [`RemoteAttestorError::InvalidAnswer`], and anything that is no answer at all (socket missing,
//! a gRPC error status, no answer within [`DEFAULT_CALL_TIMEOUT`]) is
//! [`RemoteAttestorError::Unavailable`]: both fail the join as an error, never as a refusal,
//! and spend nothing. A node-key statement (`Admit.node_key_uri`) is refused
//! `join:node-key-statement`, as the admission step refuses one it cannot prove again.
//!
//! Times and tenants (a single-use record's expiry, a challenge's deadline, a reserved or
//! unknown tenant) are judged by the join shell at the join's time, for every remote attestor
//! (`domain::attest::remote`, issue 40 item 9): this module checks only the answer's form.

use std::path::PathBuf;
use std::time::Duration;

use commands::identity::attestors::{
    RemoteAttestor, RemoteAttestorError, RemoteVerdict, RemoteVerifyRequest,
};
use domain::attest::{
    ApprovalAsk, AttestationResult, AttestorRefusal, Challenge, NodeKeyStatement, SingleUse,
    Verdict,
};
use domain::pki::NodeRole;
use hyper_util::rt::TokioIo;
use proto::attestor::attestor_client::AttestorClient;
use proto::attestor::{self as wire, verify_response};
use tokio::sync::OnceCell;
use tonic::transport::{Channel, Endpoint, Uri};

/// How long one Verify call may take, connecting included, unless configured otherwise.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// At most this many `bind` and this many `single_use` subjects in one answer.
pub const MAX_SUBJECTS: usize = 16;
/// At most this many allowed command kinds.
pub use domain::attest::kinds::MAX_ALLOWED_KINDS;
/// The largest challenge payload.
pub const MAX_CHALLENGE_PAYLOAD: usize = 64 * 1024;
/// The longest refusal reason (and `reason_if_used`).
pub const MAX_REASON_LEN: usize = 64;
/// The longest approval summary.
pub const MAX_SUMMARY_LEN: usize = 200;
/// The ids of the attestors built into the control plane: an external attestor may not take
/// one of them (configuration refuses it), so an operator cannot replace `join-token` by
/// accident with a socket.
pub const BUILT_IN_IDS: &[&str] = commands::attest::BUILTIN_ATTESTORS;

/// Why an external attestor's configuration is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExternalConfigError {
    /// The id is not kebab-case of 1 to 64 characters.
    #[error("attestor id {0:?} must be 1 to 64 of a-z, 0-9 and '-', starting with a letter")]
    BadId(String),
    /// The id is a built-in attestor's.
    #[error("attestor id {0:?} is a built-in attestor's; give the external attestor its own id")]
    BuiltIn(String),
    /// No roles, or one that is not an agent role.
    #[error("attestor {id}: roles must be 1 or more of node, site, ramdisk, node-tenant: {why}")]
    BadRoles {
        /// The attestor id.
        id: String,
        /// What was wrong.
        why: String,
    },
    /// The socket path is empty or relative.
    #[error("attestor {id}: socket {path:?} must be an absolute path")]
    BadSocket {
        /// The attestor id.
        id: String,
        /// The path as configured.
        path: PathBuf,
    },
    /// A zero timeout.
    #[error("attestor {0}: the timeout must be more than zero")]
    BadTimeout(String),
}

/// Whether `id` is a valid attestor id: kebab-case, 1 to 64 characters, starting with a letter.
pub fn valid_id(id: &str) -> bool {
    kebab(id, MAX_REASON_LEN)
}

fn kebab(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.as_bytes()[0].is_ascii_lowercase()
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.ends_with('-')
        && !s.contains("--")
}

/// An id of a tenant, site, pool or node: 1 to 128 of A-Z, a-z, 0-9, '.', '-', '_' (the rule
/// tokens are created with).
fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// One `[[attestors.external]]` entry, validated by [`ExternalAttestorConfig::validate`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalAttestorConfig {
    /// The id agents name in `JoinRequest.attestor`.
    pub id: String,
    /// The roles it may admit.
    pub roles: Vec<NodeRole>,
    /// The Unix socket it listens on.
    pub socket: PathBuf,
    /// How long one Verify call may take.
    pub timeout: Duration,
}

impl ExternalAttestorConfig {
    /// Parses and checks one entry: `roles` as written (`node`, `site`, ...).
    pub fn new(
        id: &str,
        roles: &[String],
        socket: PathBuf,
        timeout: Option<Duration>,
    ) -> Result<Self, ExternalConfigError> {
        let mut parsed = Vec::new();
        for r in roles {
            let role: NodeRole = r.parse().map_err(|_| ExternalConfigError::BadRoles {
                id: id.to_owned(),
                why: format!("{r:?} is not an agent role"),
            })?;
            if !parsed.contains(&role) {
                parsed.push(role);
            }
        }
        let config = ExternalAttestorConfig {
            id: id.to_owned(),
            roles: parsed,
            socket,
            timeout: timeout.unwrap_or(DEFAULT_CALL_TIMEOUT),
        };
        config.validate()?;
        Ok(config)
    }

    /// Checks the id (kebab-case, not a built-in's), the roles (at least one), the socket
    /// (absolute) and the timeout (more than zero).
    pub fn validate(&self) -> Result<(), ExternalConfigError> {
        if !valid_id(&self.id) {
            return Err(ExternalConfigError::BadId(self.id.clone()));
        }
        if BUILT_IN_IDS.contains(&self.id.as_str()) {
            return Err(ExternalConfigError::BuiltIn(self.id.clone()));
        }
        if self.roles.is_empty() {
            return Err(ExternalConfigError::BadRoles {
                id: self.id.clone(),
                why: "none given".into(),
            });
        }
        if !self.socket.is_absolute() {
            return Err(ExternalConfigError::BadSocket {
                id: self.id.clone(),
                path: self.socket.clone(),
            });
        }
        if self.timeout.is_zero() {
            return Err(ExternalConfigError::BadTimeout(self.id.clone()));
        }
        Ok(())
    }
}

/// The client of one external attestor. Connects on the first call (and again after the
/// attestor restarted), so the control plane starts while the attestor is not up yet.
pub struct ExternalAttestor {
    config: ExternalAttestorConfig,
    client: OnceCell<AttestorClient<Channel>>,
}

impl std::fmt::Debug for ExternalAttestor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalAttestor")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl ExternalAttestor {
    /// A client for `config` (checked again here).
    pub fn new(config: ExternalAttestorConfig) -> Result<Self, ExternalConfigError> {
        config.validate()?;
        Ok(ExternalAttestor {
            config,
            client: OnceCell::new(),
        })
    }

    /// Its configuration.
    pub fn config(&self) -> &ExternalAttestorConfig {
        &self.config
    }

    fn unavailable(&self, why: String) -> RemoteAttestorError {
        RemoteAttestorError::Unavailable {
            attestor: self.config.id.clone(),
            endpoint: self.config.socket.display().to_string(),
            why,
        }
    }

    /// The lazily connecting channel (made inside the runtime, on the first call).
    async fn client(&self) -> Result<AttestorClient<Channel>, RemoteAttestorError> {
        self.client
            .get_or_try_init(|| async {
                // The authority is never resolved: the connector dials the socket.
                let endpoint = Endpoint::from_static("http://external-attestor.invalid")
                    .connect_timeout(self.config.timeout)
                    .timeout(self.config.timeout);
                let socket = self.config.socket.clone();
                let channel =
                    endpoint.connect_with_connector_lazy(tower::service_fn(move |_: Uri| {
                        let socket = socket.clone();
                        async move {
                            let stream = tokio::net::UnixStream::connect(&socket).await?;
                            Ok::<_, std::io::Error>(TokioIo::new(stream))
                        }
                    }));
                Ok::<_, RemoteAttestorError>(AttestorClient::new(channel))
            })
            .await
            .cloned()
    }

    async fn call(&self, request: &RemoteVerifyRequest) -> Result<Verdict, RemoteAttestorError> {
        let mut client = self.client().await?;
        let message = wire::VerifyRequest {
            attestor: request.attestor.clone(),
            role: request.role.as_str().to_owned(),
            csr_sha256: request.csr_sha256.to_vec(),
            claims: Some(wire::Claims {
                product_uuid: request.claims.product_uuid.clone().unwrap_or_default(),
                macs: request.claims.macs.clone(),
                hardware_key: request.claims.hardware_key.clone().unwrap_or_default(),
            }),
            evidence: request.evidence.clone(),
        };
        let answer = tokio::time::timeout(self.config.timeout, client.verify(message))
            .await
            .map_err(|_| {
                self.unavailable(format!(
                    "no answer within {} ms",
                    self.config.timeout.as_millis()
                ))
            })?
            .map_err(|status| {
                self.unavailable(format!("{:?}: {}", status.code(), status.message()))
            })?
            .into_inner();
        verdict_from_answer(&self.config.id, &self.config.roles, request.role, answer).map_err(
            |why| RemoteAttestorError::InvalidAnswer {
                attestor: self.config.id.clone(),
                why,
            },
        )
    }
}

impl RemoteAttestor for ExternalAttestor {
    fn id(&self) -> &str {
        &self.config.id
    }

    fn roles(&self) -> &[NodeRole] {
        &self.config.roles
    }

    fn verify<'a>(&'a self, request: &'a RemoteVerifyRequest) -> RemoteVerdict<'a> {
        Box::pin(self.call(request))
    }
}

fn subject(what: &str, bytes: &[u8]) -> Result<[u8; 32], String> {
    bytes
        .try_into()
        .map_err(|_| format!("{what} is {} bytes, not 32", bytes.len()))
}

fn ms_to_us(what: &str, ms: i64) -> Result<i64, String> {
    if ms <= 0 {
        return Err(format!("{what} {ms} is not a time after 1970"));
    }
    ms.checked_mul(1000)
        .ok_or_else(|| format!("{what} {ms} is too far in the future"))
}

fn reason(what: &str, text: &str) -> Result<String, String> {
    if kebab(text, MAX_REASON_LEN) {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "{what} {text:?} is not kebab-case of 1 to {MAX_REASON_LEN} characters"
        ))
    }
}

fn name(what: &str, text: &str) -> Result<String, String> {
    if valid_name(text) {
        Ok(text.to_owned())
    } else {
        Err(format!(
            "{what} {text:?} must be 1 to 128 of A-Z, a-z, 0-9, '.', '-', '_'"
        ))
    }
}

/// Turns an external attestor's answer into a [`Verdict`], or says why the contract does not
/// allow it. `id` and `roles` are the configured ones; `asked` the role the JoinRequest asked
/// for. The result never names a token and never carries a node-key statement (one is refused
/// `join:node-key-statement`).
pub fn verdict_from_answer(
    id: &str,
    roles: &[NodeRole],
    asked: NodeRole,
    answer: wire::VerifyResponse,
) -> Result<Verdict, String> {
    match answer.verdict {
        None => Err("the answer has no verdict".into()),
        Some(verify_response::Verdict::Refuse(r)) => Ok(Verdict::Refuse(AttestorRefusal::new(
            id,
            &reason("the refusal reason", &r.reason)?,
        ))),
        Some(verify_response::Verdict::Challenge(c)) => {
            if c.payload.len() > MAX_CHALLENGE_PAYLOAD {
                return Err(format!(
                    "the challenge payload is {} bytes, more than {MAX_CHALLENGE_PAYLOAD}",
                    c.payload.len()
                ));
            }
            Ok(Verdict::Challenge(Challenge {
                payload: c.payload,
                not_after_us: ms_to_us("the challenge's not_after_ms", c.not_after_ms)?,
            }))
        }
        Some(verify_response::Verdict::Admit(a)) => admit(id, roles, asked, a),
    }
}

fn admit(id: &str, roles: &[NodeRole], asked: NodeRole, a: wire::Admit) -> Result<Verdict, String> {
    let role = if a.role.is_empty() {
        asked
    } else {
        a.role
            .parse::<NodeRole>()
            .map_err(|_| format!("role {:?} is not an agent role", a.role))?
    };
    if !roles.contains(&role) {
        return Err(format!("role {role} is not one this attestor admits"));
    }
    if role != asked {
        return Err(format!("role {role} is not the role asked for ({asked})"));
    }
    let tenant_id = name("tenant_id", &a.tenant_id)?;
    let site_id = name("site_id", &a.site_id)?;
    let pool_id = name("pool_id", &a.pool_id)?;
    let reclaim_node_id = if a.reclaim_node_id.is_empty() {
        None
    } else {
        Some(name("reclaim_node_id", &a.reclaim_node_id)?)
    };
    if a.bind.len() > MAX_SUBJECTS || a.single_use.len() > MAX_SUBJECTS {
        return Err(format!(
            "more than {MAX_SUBJECTS} bind or single_use subjects"
        ));
    }
    let mut bind = Vec::new();
    for b in &a.bind {
        let s = subject("a bind subject", b)?;
        if !bind.contains(&s) {
            bind.push(s);
        }
    }
    let mut single_use: Vec<SingleUse> = Vec::new();
    for u in &a.single_use {
        let s = subject("a single_use subject", &u.subject)?;
        if single_use.iter().any(|x| x.subject == s) {
            return Err("a single_use subject is named twice".into());
        }
        single_use.push(SingleUse {
            attestor: id.to_owned(),
            subject: s,
            expires_at_us: match u.expires_at_ms {
                0 => None,
                ms => Some(ms_to_us("a single_use expires_at_ms", ms)?),
            },
            reason_if_used: reason("a reason_if_used", &u.reason_if_used)?,
        });
    }
    if a.allowed_kinds.len() > MAX_ALLOWED_KINDS {
        return Err(format!("more than {MAX_ALLOWED_KINDS} allowed_kinds"));
    }
    if let Some(k) = a
        .allowed_kinds
        .iter()
        .find(|k| !domain::attest::kinds::valid_kind_pattern(k))
    {
        return Err(format!("allowed kind {k:?} is not a kind name or prefix.*"));
    }
    let approval = match a.approval {
        None => None,
        Some(ask) => {
            let summary = ask.summary;
            if summary.chars().count() > MAX_SUMMARY_LEN || summary.chars().any(char::is_control) {
                return Err(format!(
                    "the approval summary must be at most {MAX_SUMMARY_LEN} characters without \
                     control characters"
                ));
            }
            Some(ApprovalAsk {
                subject: subject("the approval subject", &ask.subject)?,
                summary,
            })
        }
    };
    if !a.node_key_uri.is_empty() {
        // Well formed in every other way, but no renewal could prove the statement again.
        // Recorded in the root tenant: the tenant the answer names is not checked yet.
        return Ok(Verdict::Refuse(AttestorRefusal::new(
            "join",
            "node-key-statement",
        )));
    }
    Ok(Verdict::Admit(Box::new(AttestationResult {
        tenant_id,
        role,
        site_id,
        pool_id,
        reclaim_node_id,
        token: None,
        bind,
        single_use,
        node_key: NodeKeyStatement::Unattested,
        allowed_kinds: a.allowed_kinds,
        approval,
    })))
}

#[cfg(test)]
mod tests;
