//! Token joins: open the sealed token and check the CSR, load the token, the holder of the
//! claimed hardware key and whether the CSR's key already joined, decide, append `node.joined` + `node.certificate.issued` +
//! `token.used` with the inline projections, and answer the admitted node and its chain (the
//! edge encodes and signs the JoinResponse); or record the refusal.

use std::sync::Arc;

use domain::identity::{
    decide_join, join_refusal_attribution, open_join, unix_us, DecideError, Decision, JoinCommand,
    JoinRefusal, JoinState, JOIN_TOKEN_ATTESTOR,
};
use domain::pki::{KeySet, NodeId, Serial};
use events::schema::{JoinRefused, JOIN_KEY_ATTESTOR};
use events::store::{EventStore, StoreTx};
use projections::identity::read;

use super::{
    append_decided, check_trust_domain, context, digest_vec, fresh_id, refusals, rows,
    IdentityConfig, IdentityError, JoinAnswer, JoinRequest, JOIN_REFUSED, SUPPORTED_ATTESTORS,
};
use crate::Clock;

/// Joins: the JoinService's admission of new nodes. Holds the key set (the node CA signs the
/// certificate, the encryption key opens the sealed token).
#[derive(Clone)]
pub struct Joins {
    store: EventStore,
    keys: Arc<KeySet>,
    clock: Arc<dyn Clock>,
    config: IdentityConfig,
}

impl Joins {
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
            window_start_us: domain::identity::window_start(now_us),
            ..Default::default()
        };
        refusals::record(tx, "join", &reason, tenant, &payload, now_us, &self.config).await?;
        Ok(())
    }

    /// A join service over `store` with the loaded key set. Refuses a config whose trust
    /// domain is not the key set's.
    pub fn new(
        store: EventStore,
        keys: Arc<KeySet>,
        clock: Arc<dyn Clock>,
        config: IdentityConfig,
    ) -> Result<Self, IdentityError> {
        check_trust_domain(&keys, &config)?;
        Ok(Joins {
            store,
            keys,
            clock,
            config,
        })
    }

    /// Suppressed refusals this process holds, not written yet (the maintenance flush writes
    /// them once their minute is over).
    pub fn suppressed_in_memory(&self) -> u64 {
        self.config.refusal_budget.held()
    }

    /// The key set (the edge signs the JoinResponse with its JoinService signing key).
    pub fn keys(&self) -> &Arc<KeySet> {
        &self.keys
    }

    /// Join with the `join-token` attestor. Answers the admitted node and its chain, bound to
    /// the CSR's SHA-256 (the edge encodes and signs it), or `ACCESS_DENIED: Join refused`.
    pub async fn join(&self, request: &JoinRequest) -> Result<JoinAnswer, IdentityError> {
        if !request.attestor.is_empty() && !SUPPORTED_ATTESTORS.contains(&request.attestor.as_str())
        {
            return Err(IdentityError::UnsupportedAttestor(request.attestor.clone()));
        }
        let input = &request.input;
        let ctx = context(&self.keys, &self.config);
        let now = self.clock.now();
        let now_us = unix_us(now);
        let hw_digest = domain::identity::claims_digests(&input.claims).hardware_key;
        let root = self.config.root_tenant.clone();

        let opened = match open_join(&ctx, input) {
            Ok(o) => o,
            Err((refusal, csr_sha)) => {
                // Over the bound and known so: counted without opening a transaction.
                if !refusals::suppressed_without_store(
                    &self.config,
                    "join",
                    &refusal.reason(),
                    &root,
                    now_us,
                ) {
                    crate::transaction!(&self.store, IdentityError, |tx| {
                        self.record_join_refusal(tx, refusal, &root, "", csr_sha, hw_digest, now_us)
                            .await
                    })?;
                }
                return Err(IdentityError::AccessDenied(JOIN_REFUSED));
            }
        };
        let csr_sha = *opened.csr.sha256();
        let hash = opened.secret_hash();

        let outcome = crate::transaction!(&self.store, IdentityError, |tx| {
            let token_row = read::token_by_hash(tx, hash.as_bytes()).await?;
            let token = token_row.as_ref().map(rows::token_state).transpose()?;
            let holder_row = match opened.digests.hardware_key {
                Some(k) => read::node_by_hardware_key(tx, &k).await?,
                None => None,
            };
            let holder = holder_row.as_ref().map(rows::node_state).transpose()?;
            let holder_serials = match &holder_row {
                Some(h) => read::unrevoked_serials_of_node(tx, &h.node_id).await?,
                None => Vec::new(),
            };
            // A concurrent join of the same key that commits first makes this one's insert
            // into `attestation_uses` a unique violation: the transaction retries and reads
            // the use here.
            let csr_key_used =
                read::attestation_used(tx, JOIN_KEY_ATTESTOR, &opened.csr_key_sha256()).await?;
            let cmd = JoinCommand {
                opened: opened.clone(),
                new_node_id: NodeId::new(&fresh_id("node"))
                    .map_err(|e| IdentityError::Failed(e.to_string()))?,
                serial: Serial::generate().map_err(|e| IdentityError::Failed(e.to_string()))?,
            };
            let state = JoinState {
                token,
                hardware_key_holder: holder,
                hardware_key_holder_unrevoked_serials: holder_serials,
                csr_key_used,
            };
            match decide_join(&ctx, &cmd, &state, now) {
                Ok(Decision { events, outcome }) => {
                    let versions = vec![
                        (
                            format!("token/{}", outcome.token_id),
                            token_row.as_ref().map(|r| r.version),
                        ),
                        (
                            format!("node/{}", outcome.node_id),
                            holder_row
                                .as_ref()
                                .filter(|h| h.node_id == outcome.node_id)
                                .map(|h| h.version),
                        ),
                    ];
                    append_decided(tx, events, &outcome.tenant_id, now_us, &versions).await?;
                    Ok(Some(outcome))
                }
                Err(DecideError::Refused(refusal)) => {
                    let (tenant, token_id) =
                        match join_refusal_attribution(refusal, state.token.as_ref()) {
                            Some((tenant, token)) => (tenant.to_owned(), token.to_owned()),
                            None => (root.clone(), String::new()),
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
                    Ok(None)
                }
                Err(DecideError::Failed(why)) => Err(IdentityError::Failed(why)),
            }
        })?;

        match outcome {
            None => Err(IdentityError::AccessDenied(JOIN_REFUSED)),
            Some(joined) => Ok(JoinAnswer {
                csr_sha256: joined.csr_sha256,
                trust_domain: self.config.trust_domain.to_string(),
                node_id: joined.node_id,
                site_id: joined.site_id,
                role: joined.role,
                identity_generation: joined.identity_generation,
                certificate_chain: vec![
                    joined.certificate_der,
                    self.keys.node_ca.cert_der().to_vec(),
                ],
                trust_roots: vec![self.keys.root_ca.cert_der().to_vec()],
                not_after_us: joined.not_after_us,
                server_time_us: now_us,
            }),
        }
    }
}
