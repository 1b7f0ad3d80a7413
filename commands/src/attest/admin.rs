//! The operator commands on pools (`bcctl pool …`) and join requests (`bcctl join-request …`),
//! and the expiry of join requests that identity maintenance runs. Each command is one
//! transaction: read the row, let [`domain::attest`] decide, append at the stream's version,
//! apply the projections, read the row back.

use std::sync::Arc;

use domain::attest::{
    decide_approve, decide_create_pool, decide_expire, decide_reject, decide_update_pool,
    AttestAdminRefusal, AttestorPolicy, CreatePool, UpdatePool,
};
use domain::identity::Decision;
use events::store::{EventStore, LogStore, LogTx, StoreError, StoreTx};
use projections::attest::read;

use super::error::AttestError;
use super::rows;
use super::views::{JoinRequestView, PoolView};
use crate::identity::{append_decided, IdentityError};
use crate::Clock;

/// `pool create`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPool {
    /// Pool id.
    pub pool_id: String,
    /// Owning tenant.
    pub tenant_id: String,
    /// Free text.
    pub description: String,
    /// Its attestor policy.
    pub join_attestors: AttestorPolicy,
}

/// The operator commands on pools. The attestor ids a policy may name are the ones the control
/// plane runs, given at construction (the built-ins, [`super::BUILTIN_ATTESTORS`], and the
/// external attestors of the serving configuration).
#[derive(Clone)]
pub struct Pools {
    store: EventStore,
    clock: Arc<dyn Clock>,
    known: Vec<String>,
}

impl Pools {
    /// Pools over `store`, on `clock`; `known`: the attestor ids a policy may name.
    pub fn new(store: EventStore, clock: Arc<dyn Clock>, known: Vec<String>) -> Self {
        Pools {
            store,
            clock,
            known,
        }
    }

    fn known(&self) -> Vec<&str> {
        self.known.iter().map(String::as_str).collect()
    }

    /// `pool create`.
    pub async fn create(&self, new: &NewPool) -> Result<PoolView, AttestError> {
        let now_us = self.clock.now_us();
        let cmd = CreatePool {
            pool_id: new.pool_id.clone(),
            tenant_id: new.tenant_id.clone(),
            description: new.description.clone(),
            join_attestors: new.join_attestors.clone(),
        };
        let known = self.known();
        let row = crate::transaction!(&self.store, AttestError, |tx| {
            let existing = read::pool(tx, &cmd.pool_id).await?;
            let state = existing.as_ref().map(rows::pool_state);
            let events = decide_create_pool(&cmd, state.as_ref(), &known)?.events;
            let versions = vec![(format!("pool/{}", cmd.pool_id), None)];
            append_decided(tx, events, &cmd.tenant_id, now_us, &versions).await?;
            pool_back(tx, &cmd.pool_id).await
        })?;
        Ok(PoolView::from(&row))
    }

    /// `pool update`: replaces the description and policy it names.
    pub async fn update(&self, cmd: &UpdatePool) -> Result<PoolView, AttestError> {
        let now_us = self.clock.now_us();
        let known = self.known();
        let row = crate::transaction!(&self.store, AttestError, |tx| {
            let row = read::pool(tx, &cmd.pool_id).await?;
            let state = row.as_ref().map(rows::pool_state);
            let events = decide_update_pool(cmd, state.as_ref(), &known)?.events;
            let Some(row) = row else {
                return Err(AttestAdminRefusal::UnknownPool(cmd.pool_id.clone()).into());
            };
            let versions = vec![(format!("pool/{}", cmd.pool_id), Some(row.version))];
            append_decided(tx, events, &row.tenant_id, now_us, &versions).await?;
            pool_back(tx, &cmd.pool_id).await
        })?;
        Ok(PoolView::from(&row))
    }

    /// `pool show`.
    pub async fn show(&self, pool_id: &str) -> Result<PoolView, AttestError> {
        let mut tx = self.store.begin().await?;
        let row = read::pool(&mut tx, pool_id).await?;
        tx.rollback().await?;
        let row = row.ok_or_else(|| AttestAdminRefusal::UnknownPool(pool_id.into()))?;
        Ok(PoolView::from(&row))
    }

    /// `pool list`, of one tenant or all.
    pub async fn list(&self, tenant: Option<&str>) -> Result<Vec<PoolView>, AttestError> {
        let rows = read::pools_in_store(&self.store, tenant).await?;
        Ok(rows.iter().map(PoolView::from).collect())
    }
}

async fn pool_back(tx: &mut StoreTx, pool_id: &str) -> Result<read::PoolRow, AttestError> {
    read::pool(tx, pool_id)
        .await?
        .ok_or_else(|| IdentityError::Corrupt(format!("pool {pool_id} has no row")).into())
}

async fn request_back(
    tx: &mut StoreTx,
    request_id: &str,
) -> Result<read::JoinRequestRow, AttestError> {
    read::join_request(tx, request_id).await?.ok_or_else(|| {
        IdentityError::Corrupt(format!("join request {request_id} has no row")).into()
    })
}

/// The operator commands on join requests.
#[derive(Clone)]
pub struct JoinRequests {
    store: EventStore,
    clock: Arc<dyn Clock>,
}

/// Which decision [`JoinRequests::decide`] makes.
#[derive(Clone, Copy)]
enum Verdict {
    Approve,
    Reject,
}

impl JoinRequests {
    /// Join requests over `store`, on `clock`.
    pub fn new(store: EventStore, clock: Arc<dyn Clock>) -> Self {
        JoinRequests { store, clock }
    }

    /// `join-request list`: of one tenant or all, with one status or all, oldest first.
    pub async fn list(
        &self,
        tenant: Option<&str>,
        status: Option<&str>,
    ) -> Result<Vec<JoinRequestView>, AttestError> {
        if let Some(s) = status {
            if domain::attest::JoinRequestStatus::parse(s).is_none() {
                return Err(AttestAdminRefusal::Invalid(format!(
                    "status {s:?} is none of pending, approved, rejected, consumed, expired"
                ))
                .into());
            }
        }
        let rows = read::join_requests_in_store(&self.store, tenant, status).await?;
        Ok(rows.iter().map(JoinRequestView::from).collect())
    }

    /// `join-request show`.
    pub async fn show(&self, request_id: &str) -> Result<JoinRequestView, AttestError> {
        let mut tx = self.store.begin().await?;
        let row = read::join_request(&mut tx, request_id).await?;
        tx.rollback().await?;
        let row = row.ok_or_else(|| AttestAdminRefusal::UnknownJoinRequest(request_id.into()))?;
        Ok(JoinRequestView::from(&row))
    }

    /// `join-request approve`: the agent's next retry joins.
    pub async fn approve(
        &self,
        request_id: &str,
        actor: &str,
        reason: &str,
    ) -> Result<JoinRequestView, AttestError> {
        self.decide(request_id, actor, reason, Verdict::Approve)
            .await
    }

    /// `join-request reject`: retries with it are refused.
    pub async fn reject(
        &self,
        request_id: &str,
        actor: &str,
        reason: &str,
    ) -> Result<JoinRequestView, AttestError> {
        self.decide(request_id, actor, reason, Verdict::Reject)
            .await
    }

    async fn decide(
        &self,
        request_id: &str,
        actor: &str,
        reason: &str,
        verdict: Verdict,
    ) -> Result<JoinRequestView, AttestError> {
        let now = self.clock.now();
        let now_us = domain::identity::unix_us(now);
        let row = crate::transaction!(&self.store, AttestError, |tx| {
            let row = read::join_request(tx, request_id).await?;
            let state = row.as_ref().map(rows::join_request_state).transpose()?;
            let decision: Decision<()> = match verdict {
                Verdict::Approve => decide_approve(request_id, state.as_ref(), actor, reason, now)?,
                Verdict::Reject => decide_reject(request_id, state.as_ref(), actor, reason)?,
            };
            let Some(row) = row else {
                return Err(AttestAdminRefusal::UnknownJoinRequest(request_id.into()).into());
            };
            let versions = vec![(format!("join-request/{request_id}"), Some(row.version))];
            append_decided(tx, decision.events, &row.tenant_id, now_us, &versions).await?;
            request_back(tx, request_id).await
        })?;
        Ok(JoinRequestView::from(&row))
    }

    /// Expires up to `batch` open requests past their expiry at the clock's now, in one
    /// transaction (each its own stream, at the version read). Returns how many.
    pub async fn expire_due(&self, batch: u32) -> Result<u64, AttestError> {
        expire_due(&self.store, self.clock.as_ref(), batch)
            .await
            .map_err(AttestError::from)
    }
}

/// [`JoinRequests::expire_due`], for identity maintenance (which has the store and clock).
pub(crate) async fn expire_due(
    store: &EventStore,
    clock: &dyn Clock,
    batch: u32,
) -> Result<u64, IdentityError> {
    let now = clock.now();
    let now_us = domain::identity::unix_us(now);
    crate::transaction!(store, IdentityError, |tx| {
        let due = read::expired_join_requests(tx, now_us, batch).await?;
        let mut expired = 0u64;
        for row in &due {
            let state = rows::join_request_state(row)?;
            let events = decide_expire(&state, now).events;
            if events.is_empty() {
                continue;
            }
            let versions = vec![(
                format!("join-request/{}", row.request_id),
                Some(row.version),
            )];
            append_decided(tx, events, &row.tenant_id, now_us, &versions).await?;
            expired += 1;
        }
        Ok::<u64, IdentityError>(expired)
    })
}

impl From<StoreError> for AttestError {
    fn from(e: StoreError) -> Self {
        AttestError::Identity(IdentityError::from(e))
    }
}
