//! Break-glass SSH (issue 42): issue an OpenSSH user certificate, revoke one, list them, and the
//! revoked serials a KRL lists.
//!
//! Issuing loads the node's row and whether its certificates are all revoked, lets the domain
//! decide and sign ([`domain::ssh::issue::decide_issue`], with a fresh serial and nonce from the
//! runner's entropy), and appends `ssh.user_cert.issued` to `ssh-cert/<serial>` (tenant the
//! node's, a new stream: a repeated serial conflicts and retries with a new draw) with the
//! `ssh_certificates` projection in one transaction. Only after the commit is the certificate
//! handed out, so every certificate that exists has its event. Revoking reads the row, lets the
//! domain decide ([`domain::ssh::issue::decide_revoke`]: an unknown serial is NOT_FOUND, a
//! revoked one appends nothing) and appends at the stream's version read, so two concurrent
//! revocations record one event.
//!
//! The actor of each event is the store's ([`events::store::EventStore::acting_as`]).

use async_trait::async_trait;
use domain::pki::SshCa;
use domain::ssh::issue::{
    decide_issue, decide_revoke, Entropy, IssueRequest, IssuedSsh, NodeSshState, SshCertState,
    SshRefusal, SshRevokeDecision,
};
use events::schema::{ssh_cert_stream, SshUserCertIssued, SshUserCertRevoked};
use events::store::{EventStore, ExpectedVersion, StoreError, StoreTx};
use events::{new_event_id, EventPayload, NewEvent};
use projections::identity::read::{certs_of_node, node_by_id};
use projections::ssh::read::{
    revoked_ssh_serials, ssh_cert, ssh_cert_in_store, ssh_certs_in_store, SshCertRow,
};
use projections::ssh::SshCertificates;
use projections::Projection;
use rand_core::CryptoRngCore;

use crate::clock::Clock;
use crate::run::{append_and_project, decided, run, AsConflict, At, Command, Decided, RunError};

/// The projection the SSH commands apply inline (also in [`crate::every_projection`]).
pub fn projections() -> [&'static dyn Projection; 1] {
    static SSH_CERTIFICATES: SshCertificates = SshCertificates;
    [&SSH_CERTIFICATES]
}

/// What an SSH command can fail with.
#[derive(Debug, thiserror::Error)]
pub enum SshError {
    /// Refused by the domain: nothing written.
    #[error("{0}")]
    Refused(#[from] SshRefusal),
    /// A stored row the command cannot read back.
    #[error("ssh_certificates row {serial}: {why} (rebuild the projections with `bcctl rebuild`)")]
    Corrupt { serial: u64, why: String },
    /// The store.
    #[error("{0}")]
    Run(#[from] RunError),
}

impl From<StoreError> for SshError {
    fn from(e: StoreError) -> Self {
        SshError::Run(RunError::Store(e))
    }
}

impl AsConflict for SshError {
    fn into_conflict(self) -> Result<StoreError, Self> {
        match self {
            SshError::Run(run) => run.into_conflict().map_err(SshError::Run),
            other => Err(other),
        }
    }
}

impl SshError {
    /// Whether this is a bad value (exit 2) rather than a failure (exit 1).
    pub fn is_usage(&self) -> bool {
        matches!(self, SshError::Refused(r) if r.is_usage())
    }
}

/// Issues a break-glass certificate as `request` asks, signed by `ca` (`None`: the bundle has
/// none, refused), and records it (see the module docs).
pub async fn issue_ssh_cert(
    store: &EventStore,
    clock: &dyn Clock,
    request: &IssueRequest<'_>,
    ca: Option<&SshCa>,
) -> Result<IssuedSsh, SshError> {
    run(store, clock, &Issue { request, ca }).await
}

/// What `ssh revoke` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshRevokeOutcome {
    /// The certificate as it now stands.
    pub certificate: SshCertRow,
    /// `false`: it was revoked already and nothing was appended.
    pub recorded: bool,
}

/// Revokes certificate `serial` for `reason`.
pub async fn revoke_ssh_cert(
    store: &EventStore,
    clock: &dyn Clock,
    serial: u64,
    reason: &str,
) -> Result<SshRevokeOutcome, SshError> {
    let recorded = match run(store, clock, &Revoke { serial, reason }).await? {
        SshRevokeDecision::Revoke => true,
        SshRevokeDecision::AlreadyRevoked => false,
    };
    let row = ssh_cert_in_store(store, key(serial)?)
        .await?
        .ok_or_else(|| SshError::Corrupt {
            serial,
            why: "revoked but not found after the commit".into(),
        })?;
    Ok(SshRevokeOutcome {
        certificate: row,
        recorded,
    })
}

/// Every certificate the log records (of `node` when given), revoked ones too, in issue order.
pub async fn list_ssh_certs(
    store: &EventStore,
    node: Option<&str>,
) -> Result<Vec<SshCertRow>, SshError> {
    Ok(ssh_certs_in_store(store, node).await?)
}

/// The revoked serials of certificates not expired at `now_s` (seconds), and the KRL version
/// (the greatest log position among them; 0 when there is none).
pub async fn krl_serials(store: &EventStore, now_s: i64) -> Result<(Vec<u64>, u64), SshError> {
    let (serials, version) = revoked_ssh_serials(store, now_s).await?;
    let serials = serials
        .into_iter()
        .map(|s| u64::try_from(s).unwrap_or(0))
        .collect();
    Ok((serials, u64::try_from(version).unwrap_or(0)))
}

/// A serial as the table's key (the log holds 1 to 2^63 - 1; anything larger is no serial).
fn key(serial: u64) -> Result<i64, SshError> {
    i64::try_from(serial)
        .map_err(|_| SshError::Refused(SshRefusal::UnknownSerial(serial.to_string())))
}

/// A fresh serial in 1 to 2^63 - 1 and a 32-byte nonce.
fn draw(rng: &mut dyn CryptoRngCore) -> Entropy {
    let mut nonce = [0u8; 32];
    rng.fill_bytes(&mut nonce);
    let serial = loop {
        let s = rng.next_u64() >> 1;
        if s != 0 {
            break s;
        }
    };
    Entropy { serial, nonce }
}

struct Issue<'a> {
    request: &'a IssueRequest<'a>,
    ca: Option<&'a SshCa>,
}

/// The node's state and tenant, as the issuance reads them.
struct NodeLoaded {
    state: Option<NodeSshState>,
    tenant_id: String,
}

#[async_trait]
impl Command for Issue<'_> {
    type State = NodeLoaded;
    type Event = SshUserCertIssued;
    type Outcome = IssuedSsh;
    type Answer = IssuedSsh;
    type Error = SshError;

    async fn load(&self, tx: &mut StoreTx, _: &At) -> Result<NodeLoaded, SshError> {
        let Some(row) = node_by_id(tx, self.request.node_id).await? else {
            return Ok(NodeLoaded {
                state: None,
                tenant_id: String::new(),
            });
        };
        let certs = certs_of_node(tx, &row.node_id).await?;
        let identity_revoked = !certs.is_empty() && certs.iter().all(|c| c.revoked_at_us.is_some());
        Ok(NodeLoaded {
            state: Some(NodeSshState {
                status: row.status,
                identity_revoked,
            }),
            tenant_id: row.tenant_id,
        })
    }

    fn decide(&self, loaded: &NodeLoaded, at: &At, rng: &mut dyn CryptoRngCore) -> Decided<Self> {
        decided(decide_issue(
            self.request,
            loaded.state.as_ref(),
            self.ca,
            at.now,
            draw(rng),
        ))
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        loaded: &NodeLoaded,
        events: Vec<SshUserCertIssued>,
        at: &At,
    ) -> Result<(), SshError> {
        for event in &events {
            let stream = ssh_cert_stream(event.serial);
            append_ssh(
                tx,
                &stream,
                &loaded.tenant_id,
                ExpectedVersion::NoStream,
                event,
                at,
            )
            .await?;
        }
        Ok(())
    }

    async fn answer(
        &self,
        _: &mut StoreTx,
        _: NodeLoaded,
        issued: IssuedSsh,
        _: &At,
    ) -> Result<IssuedSsh, SshError> {
        Ok(issued)
    }
}

struct Revoke<'a> {
    serial: u64,
    reason: &'a str,
}

#[async_trait]
impl Command for Revoke<'_> {
    type State = Option<SshCertRow>;
    type Event = SshUserCertRevoked;
    type Outcome = SshRevokeDecision;
    type Answer = SshRevokeDecision;
    type Error = SshError;

    async fn load(&self, tx: &mut StoreTx, _: &At) -> Result<Self::State, SshError> {
        match i64::try_from(self.serial) {
            Ok(serial) => Ok(ssh_cert(tx, serial).await?),
            Err(_) => Ok(None),
        }
    }

    fn decide(&self, row: &Self::State, _: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        let state = row.as_ref().map(|r| SshCertState {
            node_id: r.node_id.clone(),
            revoked: r.revoked,
        });
        decided(decide_revoke(self.serial, state.as_ref(), self.reason))
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        row: &Self::State,
        events: Vec<SshUserCertRevoked>,
        at: &At,
    ) -> Result<(), SshError> {
        let Some(row) = row else {
            return Ok(());
        };
        let version = u64::try_from(row.version).map_err(|_| SshError::Corrupt {
            serial: self.serial,
            why: "a negative stream version".into(),
        })?;
        for event in &events {
            let stream = ssh_cert_stream(event.serial);
            let expected = ExpectedVersion::Exact(version);
            append_ssh(tx, &stream, &row.tenant_id, expected, event, at).await?;
        }
        Ok(())
    }

    async fn answer(
        &self,
        _: &mut StoreTx,
        _: Self::State,
        decision: SshRevokeDecision,
        _: &At,
    ) -> Result<SshRevokeDecision, SshError> {
        Ok(decision)
    }
}

/// Appends one SSH event to `stream` in `tenant`, with the projection.
async fn append_ssh<P: EventPayload>(
    tx: &mut StoreTx,
    stream: &str,
    tenant: &str,
    expected: ExpectedVersion,
    event: &P,
    at: &At,
) -> Result<(), SshError> {
    let events = [NewEvent::from_payload(
        new_event_id(),
        tenant,
        at.now_us,
        event,
    )];
    append_and_project(tx, &projections(), stream, expected, &events).await?;
    Ok(())
}
