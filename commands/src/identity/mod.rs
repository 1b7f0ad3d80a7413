//! Identity command handlers: the JoinService (token joins, renewals) and the operator commands
//! on tokens and nodes. Each runs in one transaction: load the state from the identity
//! projections, let [`domain::identity`] decide, append, apply the projections, commit.
//!
//! Every join or renew refusal reaches the caller as the same [`IdentityError::AccessDenied`];
//! the reason goes into a `security.join.refused` / `security.renew.refused` event (see
//! [`refusals`]), in the token's (or node's) tenant only once its secret (or stored
//! certificate) matched, otherwise in the root tenant.

pub mod maintenance;
mod refusals;
mod store;
pub mod views;

use std::sync::Arc;

use domain::identity::{
    decide_create_token, decide_delete_node, decide_join, decide_renew, decide_retire_node,
    decide_revoke_identity, decide_revoke_token, open_join, prepare_renew, unix_us, AdminRefusal,
    CreateToken, DecideError, ExpectBinding, HardwareClaims, IdentityEvent, JoinCommand,
    JoinContext, JoinInput, JoinRefusal, JoinState, RenewCommand, RenewInput, RenewRefusal,
    RenewState, TokenRole, JOIN_TOKEN_ATTESTOR, RENEW_POP_ATTESTOR,
};
use domain::pki::statement::{sign, JoinResponseStatement};
use domain::pki::{KeySet, NodeId, Serial, TokenSecret, TrustDomain};
use events::schema::{AttestationUseKey, AttestationUsesPruned, JoinRefused, RenewRefused};
use events::store::{
    EventStore, ExpectedVersion, LogStore, LogTx, StoreError, StoreTx, StreamAppend,
};
use events::{new_event_id, NewEvent};
use projections::ProjectionError;
use prost::Message;
use time::Duration;

use crate::run::append_streams_and_project;
use crate::{append_and_project, AsConflict, Clock, RunError};

pub use maintenance::{run_maintenance, MaintenanceReport, MAINTENANCE_INTERVAL, PRUNE_BATCH};
use store::query_as;
pub use views::{CertView, CreatedToken, NodeDetail, NodeView, TokenView};

/// The message every refused join carries.
pub const JOIN_REFUSED: &str = "Join refused";
/// The message every refused renewal carries.
pub const RENEW_REFUSED: &str = "Renew refused";

/// Settings of the identity handlers.
#[derive(Debug, Clone)]
pub struct IdentityConfig {
    /// The deployment's trust domain (must be the key set's).
    pub trust_domain: TrustDomain,
    /// Lifetime asked for node certificates (the CA caps it at 24 h, 2 h for ramdisks).
    pub leaf_lifetime: Duration,
    /// The tenant unauthenticated refusals are attributed to.
    pub root_tenant: String,
    /// Refusal events per (kind, reason) and minute; more are counted, not recorded one by one.
    pub refusals_per_minute: u32,
}

impl IdentityConfig {
    /// 24 h leaves, root tenant `root`, 60 refusals a minute.
    pub fn new(trust_domain: TrustDomain) -> Self {
        IdentityConfig {
            trust_domain,
            leaf_lifetime: Duration::hours(24),
            root_tenant: "root".into(),
            refusals_per_minute: 60,
        }
    }
}

/// What an identity handler can fail with.
#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    /// The join or renewal was refused; the reason is only in the refusal event.
    #[error("ACCESS_DENIED: {0}")]
    AccessDenied(&'static str),
    /// An attestor this control plane does not run.
    #[error("UNSUPPORTED: attestor {0:?} is not registered (this build runs join-token only)")]
    UnsupportedAttestor(String),
    /// An operator command was refused (bad input, unknown id, wrong state).
    #[error(transparent)]
    Admin(#[from] AdminRefusal),
    /// The store or a projection failed, or conflicts did not settle.
    #[error(transparent)]
    Run(#[from] RunError),
    /// A query failed.
    #[error("identity query: {0}")]
    Query(#[from] sqlx::Error),
    /// A projection row that cannot be read back (corruption or a bug).
    #[error("corrupt identity row: {0}")]
    Corrupt(String),
    /// A decision failed for a reason that is not a refusal (the CA cannot sign, randomness).
    #[error("identity decision failed: {0}")]
    Failed(String),
}

impl From<StoreError> for IdentityError {
    fn from(e: StoreError) -> Self {
        IdentityError::Run(RunError::Store(e))
    }
}

impl From<ProjectionError> for IdentityError {
    fn from(e: ProjectionError) -> Self {
        IdentityError::Run(RunError::Projection(e))
    }
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.is_unique_violation())
}

impl AsConflict for IdentityError {
    /// Expected-version conflicts and unique-key violations of the projections (a token use or
    /// a renew proof spent by a concurrent command) are retried from a fresh read.
    fn into_conflict(self) -> Result<StoreError, Self> {
        match self {
            IdentityError::Run(RunError::Store(StoreError::Database(e)))
            | IdentityError::Run(RunError::Projection(ProjectionError::Store(
                StoreError::Database(e),
            ))) if is_unique_violation(&e) => Ok(StoreError::Database(e)),
            IdentityError::Query(e) if is_unique_violation(&e) => Ok(StoreError::Database(e)),
            IdentityError::Run(r) => r.into_conflict().map_err(IdentityError::Run),
            other => Err(other),
        }
    }
}

/// A token to create.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewToken {
    /// Tenant.
    pub tenant_id: String,
    /// Site.
    pub site_id: String,
    /// Pool.
    pub pool_id: String,
    /// Role admitted.
    pub role: TokenRole,
    /// Uses.
    pub uses: u32,
    /// Lifetime from now, seconds.
    pub ttl_seconds: i64,
    /// Expect binding.
    #[serde(default)]
    pub expect: ExpectBinding,
    /// Allow reclaim of a node holding the claimed hardware key.
    #[serde(default)]
    pub allow_reclaim: bool,
}

/// The JoinService and the identity operator commands.
pub struct JoinService {
    store: EventStore,
    keys: Arc<KeySet>,
    clock: Arc<dyn Clock>,
    config: IdentityConfig,
}

enum JoinOutcome {
    Joined {
        node_id: String,
        site_id: String,
        role: String,
        generation: u64,
        der: Vec<u8>,
        not_after_us: i64,
    },
    Refused,
}

enum RenewOutcome {
    Renewed { der: Vec<u8>, not_after_us: i64 },
    Refused,
}

/// Groups decided events by stream, keeping their order, streams in order of first appearance.
fn by_stream(events: Vec<IdentityEvent>) -> Vec<(String, Vec<IdentityEvent>)> {
    let mut out: Vec<(String, Vec<IdentityEvent>)> = Vec::new();
    for e in events {
        let s = e.stream();
        match out.iter_mut().find(|(name, _)| *name == s) {
            Some((_, list)) => list.push(e),
            None => out.push((s, vec![e])),
        }
    }
    out
}

fn to_new_event(e: &IdentityEvent, tenant: &str, now_us: i64) -> NewEvent {
    let id = new_event_id();
    match e {
        IdentityEvent::TokenCreated(p) => NewEvent::from_payload(id, tenant, now_us, p),
        IdentityEvent::TokenRevoked(p) => NewEvent::from_payload(id, tenant, now_us, p),
        IdentityEvent::TokenUsed(p) => NewEvent::from_payload(id, tenant, now_us, p),
        IdentityEvent::NodeJoined(p) => NewEvent::from_payload(id, tenant, now_us, p),
        IdentityEvent::CertificateIssued(p) => NewEvent::from_payload(id, tenant, now_us, p),
        IdentityEvent::RenewProofUsed(p) => NewEvent::from_payload(id, tenant, now_us, p),
        IdentityEvent::IdentityRevoked(p) => NewEvent::from_payload(id, tenant, now_us, p),
        IdentityEvent::NodeDeleted(p) => NewEvent::from_payload(id, tenant, now_us, p),
        IdentityEvent::NodeRetired(p) => NewEvent::from_payload(id, tenant, now_us, p),
    }
}

fn expected(version: Option<i64>) -> ExpectedVersion {
    match version {
        None | Some(0) => ExpectedVersion::NoStream,
        Some(v) => ExpectedVersion::Exact(u64::try_from(v).unwrap_or(0)),
    }
}

/// Appends decided events: each stream at the version its state was read at, all streams in
/// one append ([`crate::run::append_streams_and_project`]).
async fn append_decided(
    tx: &mut StoreTx,
    events: Vec<IdentityEvent>,
    tenant: &str,
    now_us: i64,
    versions: &[(String, Option<i64>)],
) -> Result<(), IdentityError> {
    let grouped: Vec<(String, ExpectedVersion, Vec<NewEvent>)> = by_stream(events)
        .into_iter()
        .map(|(stream, list)| {
            let version = versions
                .iter()
                .find(|(s, _)| *s == stream)
                .and_then(|(_, v)| *v);
            let new = list
                .iter()
                .map(|e| to_new_event(e, tenant, now_us))
                .collect();
            (stream, expected(version), new)
        })
        .collect();
    let appends: Vec<StreamAppend<'_>> = grouped
        .iter()
        .map(|(stream, expected, events)| StreamAppend {
            stream,
            expected: *expected,
            events,
        })
        .collect();
    append_streams_and_project(tx, &projections::identity::all(), &appends).await?;
    Ok(())
}

fn fresh_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::new_v4().simple())
}

fn digest_vec(d: Option<[u8; 32]>) -> Vec<u8> {
    d.map(|d| d.to_vec()).unwrap_or_default()
}

impl JoinService {
    /// A JoinService over `store` with the loaded key set. Refuses a config whose trust domain
    /// is not the key set's.
    pub fn new(
        store: EventStore,
        keys: Arc<KeySet>,
        clock: Arc<dyn Clock>,
        config: IdentityConfig,
    ) -> Result<Self, IdentityError> {
        if keys.trust_domain != config.trust_domain {
            return Err(IdentityError::Failed(format!(
                "INVALID_CONFIG: the configured trust domain {} is not the PKI bundle's {}",
                config.trust_domain, keys.trust_domain
            )));
        }
        Ok(JoinService {
            store,
            keys,
            clock,
            config,
        })
    }

    /// The store.
    pub fn store(&self) -> &EventStore {
        &self.store
    }

    fn ctx(&self) -> JoinContext<'_> {
        JoinContext {
            trust_domain: &self.config.trust_domain,
            node_ca: &self.keys.node_ca,
            join_encryption: &self.keys.join_encryption,
            leaf_lifetime: self.config.leaf_lifetime,
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn record_join_refusal(
        &self,
        tx: &mut StoreTx,
        refusal: JoinRefusal,
        tenant: &str,
        token_id: &str,
        csr_sha256: Option<[u8; 32]>,
        hardware_key: Option<[u8; 32]>,
        now_us: i64,
    ) -> Result<(), IdentityError> {
        let reason = refusal.reason();
        let payload = JoinRefused {
            refusal: reason.clone(),
            attestor: JOIN_TOKEN_ATTESTOR.into(),
            token_id: token_id.into(),
            csr_sha256: digest_vec(csr_sha256),
            hardware_key_sha256: digest_vec(hardware_key),
            window_start_us: refusals::window_start(now_us),
        };
        refusals::record(
            tx,
            "join",
            &reason,
            tenant,
            &payload,
            now_us,
            self.config.refusals_per_minute,
        )
        .await?;
        Ok(())
    }

    /// Join with the `join-token` attestor. Answers a JoinResponse signed by the JoinService
    /// signing key and bound to the CSR's SHA-256, or `ACCESS_DENIED: Join refused`.
    pub async fn join(
        &self,
        request: &proto::JoinRequest,
    ) -> Result<proto::SignedJoinResponse, IdentityError> {
        if !request.attestor.is_empty() && request.attestor != JOIN_TOKEN_ATTESTOR {
            return Err(IdentityError::UnsupportedAttestor(request.attestor.clone()));
        }
        let claims = request.claims.clone().unwrap_or_default();
        let input = JoinInput {
            csr_der: request.csr.clone(),
            sealed_token: request.sealed_token.clone(),
            role: request.role.clone(),
            claims: HardwareClaims {
                product_uuid: (!claims.product_uuid.is_empty()).then_some(claims.product_uuid),
                macs: claims.macs,
                hardware_key: (!claims.hardware_key.is_empty()).then_some(claims.hardware_key),
            },
        };
        let ctx = self.ctx();
        let now = self.clock.now();
        let now_us = unix_us(now);
        let hw_digest = domain::identity::claims_digests(&input.claims).hardware_key;
        let root = self.config.root_tenant.clone();

        let opened = match open_join(&ctx, &input) {
            Ok(o) => o,
            Err((refusal, csr_sha)) => {
                crate::transaction!(&self.store, IdentityError, |tx| {
                    self.record_join_refusal(tx, refusal, &root, "", csr_sha, hw_digest, now_us)
                        .await
                })?;
                return Err(IdentityError::AccessDenied(JOIN_REFUSED));
            }
        };
        let csr_sha = *opened.csr.sha256();
        let hash = opened.secret_hash();

        let outcome = crate::transaction!(&self.store, IdentityError, |tx| {
            let token_row = store::token_by_hash(tx, hash.as_bytes()).await?;
            let token = token_row.as_ref().map(|r| r.state()).transpose()?;
            let holder_row = match opened.digests.hardware_key {
                Some(k) => store::node_by_hardware_key(tx, &k).await?,
                None => None,
            };
            let holder = holder_row.as_ref().map(|r| r.state()).transpose()?;
            let cmd = JoinCommand {
                opened: opened.clone(),
                new_node_id: NodeId::new(&fresh_id("node"))
                    .map_err(|e| IdentityError::Failed(e.to_string()))?,
                serial: Serial::generate().map_err(|e| IdentityError::Failed(e.to_string()))?,
            };
            let state = JoinState {
                token,
                hardware_key_holder: holder,
            };
            match decide_join(&ctx, &cmd, &state, now) {
                Ok(events) => {
                    let Some(token) = &state.token else {
                        return Err(IdentityError::Failed("a join without a token".into()));
                    };
                    let mut joined = None;
                    for e in &events {
                        match e {
                            IdentityEvent::NodeJoined(j) => {
                                joined = Some((
                                    j.node_id.clone(),
                                    j.site_id.clone(),
                                    j.role.clone(),
                                    j.identity_generation,
                                ))
                            }
                            IdentityEvent::CertificateIssued(c) => {
                                if let Some(j) = joined.as_mut() {
                                    j.3 = c.identity_generation;
                                }
                            }
                            _ => {}
                        }
                    }
                    let cert = events.iter().find_map(|e| match e {
                        IdentityEvent::CertificateIssued(c) => {
                            Some((c.der.clone(), c.not_after_us))
                        }
                        _ => None,
                    });
                    let (Some((node_id, site_id, role, generation)), Some((der, not_after_us))) =
                        (joined, cert)
                    else {
                        return Err(IdentityError::Failed(
                            "the join decision lacks node.joined or the certificate".into(),
                        ));
                    };
                    let versions = vec![
                        (
                            format!("token/{}", token.token_id),
                            token_row.as_ref().map(|r| r.version),
                        ),
                        (
                            format!("node/{node_id}"),
                            holder_row
                                .as_ref()
                                .filter(|h| h.node_id == node_id)
                                .map(|h| h.version),
                        ),
                    ];
                    append_decided(tx, events, &token.tenant_id, now_us, &versions).await?;
                    Ok(JoinOutcome::Joined {
                        node_id,
                        site_id,
                        role,
                        generation,
                        der,
                        not_after_us,
                    })
                }
                Err(DecideError::Refused(refusal)) => {
                    let (tenant, token_id) = match (&state.token, refusal.secret_matched()) {
                        (Some(t), true) => (t.tenant_id.clone(), t.token_id.clone()),
                        _ => (root.clone(), String::new()),
                    };
                    self.record_join_refusal(
                        tx,
                        refusal,
                        &tenant,
                        &token_id,
                        Some(csr_sha),
                        opened.digests.hardware_key,
                        now_us,
                    )
                    .await?;
                    Ok(JoinOutcome::Refused)
                }
                Err(DecideError::Failed(why)) => Err(IdentityError::Failed(why)),
            }
        })?;

        match outcome {
            JoinOutcome::Refused => Err(IdentityError::AccessDenied(JOIN_REFUSED)),
            JoinOutcome::Joined {
                node_id,
                site_id,
                role,
                generation,
                der,
                not_after_us,
            } => {
                let body = proto::JoinResponse {
                    csr_sha256: csr_sha.to_vec(),
                    trust_domain: self.config.trust_domain.to_string(),
                    node_id,
                    site_id,
                    role,
                    certificate_chain: vec![der, self.keys.node_ca.cert_der().to_vec()],
                    trust_roots: vec![self.keys.root_ca.cert_der().to_vec()],
                    not_after_ms: not_after_us / 1000,
                    server_time_ms: now_us / 1000,
                    identity_generation: generation,
                }
                .encode_to_vec();
                let signature = sign(
                    &self.keys.join_signing,
                    &JoinResponseStatement {
                        csr_sha256: csr_sha,
                        response: &body,
                    },
                )
                .map_err(|e| IdentityError::Failed(format!("signing the JoinResponse: {e}")))?;
                Ok(proto::SignedJoinResponse {
                    response: body,
                    signature: signature.as_bytes().to_vec(),
                })
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn record_renew_refusal(
        &self,
        tx: &mut StoreTx,
        refusal: RenewRefusal,
        tenant: &str,
        node_id: &str,
        serial: &str,
        csr_sha256: Option<[u8; 32]>,
        now_us: i64,
    ) -> Result<(), IdentityError> {
        let reason = refusal.reason();
        let payload = RenewRefused {
            refusal: reason.clone(),
            node_id: node_id.into(),
            serial: serial.into(),
            csr_sha256: digest_vec(csr_sha256),
            window_start_us: refusals::window_start(now_us),
        };
        refusals::record(
            tx,
            "renew",
            &reason,
            tenant,
            &payload,
            now_us,
            self.config.refusals_per_minute,
        )
        .await?;
        Ok(())
    }

    /// Renew: a proof of possession by the current key over the new CSR. Answers the new chain,
    /// or `ACCESS_DENIED: Renew refused`.
    pub async fn renew(
        &self,
        request: &proto::RenewRequest,
    ) -> Result<proto::RenewResponse, IdentityError> {
        let ctx = self.ctx();
        let now = self.clock.now();
        let now_us = unix_us(now);
        let root = self.config.root_tenant.clone();
        let input = RenewInput {
            csr_der: request.csr.clone(),
            chain: request.chain.clone(),
            client_time_ms: u64::try_from(request.client_time_ms).unwrap_or(0),
            signature: request.signature.clone(),
        };
        let prepared = match prepare_renew(&ctx, &input) {
            Ok(p) => p,
            Err((refusal, ids, csr_sha)) => {
                let (node_id, serial) = ids.unwrap_or_default();
                crate::transaction!(&self.store, IdentityError, |tx| {
                    self.record_renew_refusal(
                        tx, refusal, &root, &node_id, &serial, csr_sha, now_us,
                    )
                    .await
                })?;
                return Err(IdentityError::AccessDenied(RENEW_REFUSED));
            }
        };
        let node_id = prepared.node_id().to_owned();
        let serial = prepared.serial_hex();
        let csr_sha = *prepared.csr.sha256();

        let outcome = crate::transaction!(&self.store, IdentityError, |tx| {
            let node_row = store::node_by_id(tx, &node_id).await?;
            let cert_row = store::cert_by_serial(tx, &serial).await?;
            let state = RenewState {
                node: node_row.as_ref().map(|r| r.state()).transpose()?,
                cert: cert_row.as_ref().map(|r| r.state()).transpose()?,
                proof_used: store::attestation_used(tx, RENEW_POP_ATTESTOR, &prepared.replay_key)
                    .await?,
            };
            let cmd = RenewCommand {
                prepared: prepared.clone(),
                serial: Serial::generate().map_err(|e| IdentityError::Failed(e.to_string()))?,
            };
            match decide_renew(&ctx, &cmd, &state, now) {
                Ok(events) => {
                    let Some(node) = &node_row else {
                        return Err(IdentityError::Failed("a renewal without a node".into()));
                    };
                    let cert = events.iter().find_map(|e| match e {
                        IdentityEvent::CertificateIssued(c) => {
                            Some((c.der.clone(), c.not_after_us))
                        }
                        _ => None,
                    });
                    let Some((der, not_after_us)) = cert else {
                        return Err(IdentityError::Failed(
                            "the renew decision lacks the certificate".into(),
                        ));
                    };
                    let versions = vec![(format!("node/{node_id}"), Some(node.version))];
                    append_decided(tx, events, &node.tenant_id, now_us, &versions).await?;
                    Ok(RenewOutcome::Renewed { der, not_after_us })
                }
                Err(DecideError::Refused(refusal)) => {
                    // The node's tenant only once the presented leaf is its stored certificate.
                    let matched = !matches!(
                        refusal,
                        RenewRefusal::UnknownCertificate | RenewRefusal::CertificateMismatch
                    );
                    let tenant = match (&node_row, matched) {
                        (Some(n), true) => n.tenant_id.clone(),
                        _ => root.clone(),
                    };
                    self.record_renew_refusal(
                        tx,
                        refusal,
                        &tenant,
                        &node_id,
                        &serial,
                        Some(csr_sha),
                        now_us,
                    )
                    .await?;
                    Ok(RenewOutcome::Refused)
                }
                Err(DecideError::Failed(why)) => Err(IdentityError::Failed(why)),
            }
        })?;
        match outcome {
            RenewOutcome::Refused => Err(IdentityError::AccessDenied(RENEW_REFUSED)),
            RenewOutcome::Renewed { der, not_after_us } => Ok(proto::RenewResponse {
                certificate_chain: vec![der, self.keys.node_ca.cert_der().to_vec()],
                trust_roots: vec![self.keys.root_ca.cert_der().to_vec()],
                not_after_ms: not_after_us / 1000,
                server_time_ms: now_us / 1000,
            }),
        }
    }

    /// `token create`: returns the secret, shown once, and the stored token.
    pub async fn create_token(&self, new: &NewToken) -> Result<CreatedToken, IdentityError> {
        let secret = TokenSecret::generate().map_err(|e| IdentityError::Failed(e.to_string()))?;
        let now = self.clock.now();
        let now_us = unix_us(now);
        let cmd = CreateToken {
            token_id: fresh_id("tok"),
            tenant_id: new.tenant_id.clone(),
            site_id: new.site_id.clone(),
            pool_id: new.pool_id.clone(),
            role: new.role,
            uses: new.uses,
            expires_at_us: now_us.saturating_add(new.ttl_seconds.saturating_mul(1_000_000)),
            secret_hash: secret.hash(),
            expect: new.expect.clone(),
            allow_reclaim: new.allow_reclaim,
        };
        let events = decide_create_token(&cmd, now)?;
        let token = crate::transaction!(&self.store, IdentityError, |tx| {
            append_decided(tx, events.clone(), &cmd.tenant_id, now_us, &[]).await?;
            store::token_by_id(tx, &cmd.token_id)
                .await?
                .ok_or_else(|| IdentityError::Corrupt("the created token has no row".into()))
        })?;
        Ok(CreatedToken {
            secret: secret.expose().to_owned(),
            token: TokenView::from(&token),
        })
    }

    /// `token revoke`.
    pub async fn revoke_token(
        &self,
        token_id: &str,
        reason: &str,
    ) -> Result<TokenView, IdentityError> {
        let now_us = self.clock.now_us();
        let row = crate::transaction!(&self.store, IdentityError, |tx| {
            let row = store::token_by_id(tx, token_id).await?;
            let state = row.as_ref().map(|r| r.state()).transpose()?;
            let events = decide_revoke_token(token_id, state.as_ref(), reason)?;
            let Some(row) = row else {
                return Err(AdminRefusal::UnknownToken(token_id.into()).into());
            };
            let versions = vec![(format!("token/{token_id}"), Some(row.version))];
            append_decided(tx, events, &row.tenant_id, now_us, &versions).await?;
            store::token_by_id(tx, token_id)
                .await?
                .ok_or_else(|| IdentityError::Corrupt("the revoked token has no row".into()))
        })?;
        Ok(TokenView::from(&row))
    }

    /// `token list`, of one tenant or all.
    pub async fn list_tokens(&self, tenant: Option<&str>) -> Result<Vec<TokenView>, IdentityError> {
        let mut tx = self.store.begin().await?;
        let sql = format!(
            "SELECT {} FROM join_tokens WHERE ($1 = '' OR tenant_id = $1) ORDER BY token_id",
            store::TOKEN_COLUMNS
        );
        let rows = query_as!(
            &mut tx,
            store::TokenRow,
            fetch_all,
            &sql,
            tenant.unwrap_or("")
        )?;
        tx.rollback().await?;
        Ok(rows.iter().map(TokenView::from).collect())
    }

    async fn node_command(
        &self,
        node_id: &str,
        decide: impl Fn(
            Option<&domain::identity::NodeState>,
        ) -> Result<Vec<IdentityEvent>, AdminRefusal>,
    ) -> Result<NodeView, IdentityError> {
        let now_us = self.clock.now_us();
        let row = crate::transaction!(&self.store, IdentityError, |tx| {
            let row = store::node_by_id(tx, node_id).await?;
            let state = row.as_ref().map(|r| r.state()).transpose()?;
            let events = decide(state.as_ref())?;
            let Some(row) = row else {
                return Err(AdminRefusal::UnknownNode(node_id.into()).into());
            };
            let versions = vec![(format!("node/{node_id}"), Some(row.version))];
            append_decided(tx, events, &row.tenant_id, now_us, &versions).await?;
            store::node_by_id(tx, node_id)
                .await?
                .ok_or_else(|| IdentityError::Corrupt("the node has no row".into()))
        })?;
        Ok(NodeView::from(&row))
    }

    /// `node revoke`: raises the identity generation and revokes every certificate of the node.
    pub async fn revoke_identity(
        &self,
        node_id: &str,
        reason: &str,
    ) -> Result<NodeView, IdentityError> {
        self.node_command(node_id, |n| decide_revoke_identity(node_id, n, reason))
            .await
    }

    /// `node delete`: revokes its certificates and frees its hardware key.
    pub async fn delete_node(
        &self,
        node_id: &str,
        reason: &str,
    ) -> Result<NodeView, IdentityError> {
        self.node_command(node_id, |n| decide_delete_node(node_id, n, reason))
            .await
    }

    /// `node retire`: revokes its certificates; it never renews again.
    pub async fn retire_node(
        &self,
        node_id: &str,
        reason: &str,
    ) -> Result<NodeView, IdentityError> {
        self.node_command(node_id, |n| decide_retire_node(node_id, n, reason))
            .await
    }

    /// `node list`, of one tenant or all.
    pub async fn list_nodes(&self, tenant: Option<&str>) -> Result<Vec<NodeView>, IdentityError> {
        let mut tx = self.store.begin().await?;
        let sql = format!(
            "SELECT {} FROM nodes WHERE ($1 = '' OR tenant_id = $1) ORDER BY node_id",
            store::NODE_COLUMNS
        );
        let rows = query_as!(
            &mut tx,
            store::NodeRow,
            fetch_all,
            &sql,
            tenant.unwrap_or("")
        )?;
        tx.rollback().await?;
        Ok(rows.iter().map(NodeView::from).collect())
    }

    /// `node show`: the node and every certificate it was issued.
    pub async fn show_node(&self, node_id: &str) -> Result<NodeDetail, IdentityError> {
        let mut tx = self.store.begin().await?;
        let node = store::node_by_id(&mut tx, node_id)
            .await?
            .ok_or_else(|| AdminRefusal::UnknownNode(node_id.into()))?;
        let certs = store::certs_of_node(&mut tx, node_id).await?;
        tx.rollback().await?;
        Ok(NodeDetail {
            node: NodeView::from(&node),
            certificates: certs.iter().map(CertView::from).collect(),
        })
    }

    /// Deletes up to `batch` expired `attestation_uses` rows (expired at the clock's now) with
    /// one `attestation.uses.pruned` event naming them. Returns how many were pruned.
    pub async fn prune_attestation_uses(&self, batch: u32) -> Result<u64, IdentityError> {
        #[derive(sqlx::FromRow)]
        struct Key {
            attestor: String,
            subject: Vec<u8>,
        }
        let now_us = self.clock.now_us();
        let root = self.config.root_tenant.clone();
        crate::transaction!(&self.store, IdentityError, |tx| {
            let keys = query_as!(
                tx,
                Key,
                fetch_all,
                "SELECT attestor, subject FROM attestation_uses WHERE expires_at_us IS NOT NULL \
                 AND expires_at_us <= $1 ORDER BY expires_at_us, attestor, subject LIMIT $2",
                now_us,
                i64::from(batch)
            )?;
            if keys.is_empty() {
                return Ok(0);
            }
            let n = keys.len() as u64;
            let payload = AttestationUsesPruned {
                expired_before_us: now_us,
                keys: keys
                    .into_iter()
                    .map(|k| AttestationUseKey {
                        attestor: k.attestor,
                        subject: k.subject,
                    })
                    .collect(),
            };
            let event = NewEvent::from_payload(new_event_id(), root.as_str(), now_us, &payload);
            append_and_project(
                tx,
                &projections::identity::all(),
                &format!("tenant/{root}"),
                ExpectedVersion::Any,
                &[event],
            )
            .await?;
            Ok(n)
        })
    }

    /// Writes the suppressed-refusal counts of every finished minute as
    /// `security.refusals.suppressed` events. Returns how many events were written.
    pub async fn flush_suppressed_refusals(&self) -> Result<u64, IdentityError> {
        let now_us = self.clock.now_us();
        crate::transaction!(&self.store, IdentityError, |tx| {
            refusals::flush_in(tx, None, refusals::window_start(now_us), now_us).await
        })
    }
}
