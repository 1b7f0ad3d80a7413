//! The tenant commands (issue 45 item 6): `bcctl tenant create | list | show | delete`.
//!
//! Each change is one run of [`crate::run::run`]: load (the tenant's row, whether a token, node
//! or batch names it, and for a deletion everything it holds), decide
//! ([`domain::tenant::decide_create_tenant`], [`domain::tenant::decide_delete_tenant`]), append
//! every stream the decision touches at the version it was read at, apply the identity, quorum
//! and tenant projections, commit. A deletion also cancels the held commands of each batch it
//! cancels (`command.cancelled`), as `batch cancel` does, in the same transaction.
//!
//! Races: a deletion appends to every node, token and batch stream it changes at the version
//! it read, so a join spending one of the tenant's tokens, a node's change or a batch's approval
//! committed in between sends it back to a fresh read. A token created for the tenant opens a
//! new stream no deletion read: both hold the tenant ([`projections::tenants::hold_tenant`],
//! the token shared, the deletion exclusive), so one waits for the other and reads what it
//! wrote.

mod error;
mod view;

use async_trait::async_trait;
use domain::decision::Refused;
use domain::tenant::{
    decide_create_tenant, decide_delete_tenant, CreateTenant, DeleteTenant, TenantDeletion,
    TenantEvent, TenantHoldings, TenantStanding,
};
use events::schema::tenant_stream;
use events::store::{EventStore, ExpectedVersion, StoreTx, StreamAppend};
use events::{new_event_id, NewEvent};
use projections::identity::read::{self, NodeRow, TokenRow};
use projections::quorum::{open_batches_of_tenant, BatchRow};
use projections::tenants::{hold_tenant, tenant_named, tenant_row, TenantHold, TenantRow, Tenants};
use projections::Projection;
use rand_core::CryptoRngCore;

use crate::clock::Clock;
use crate::command_queue::cancel::cancel_held_commands;
use crate::quorum::batch::append::batch_new_event;
use crate::quorum::batch::view::standing as batch_standing;
use crate::quorum::stream::batch_stream;
use crate::run::{append_streams_and_project, decided, run, At, Command, Decided};

pub use error::TenantError;
pub use view::{DeletedTenant, TenantView};

/// The projection the tenant commands apply beside the identity and quorum ones (also in
/// [`crate::every_projection`]).
pub fn projections() -> [&'static dyn Projection; 1] {
    static TENANTS: Tenants = Tenants;
    [&TENANTS]
}

/// The tenant commands, over a store on a clock.
#[derive(Clone)]
pub struct TenantAdmin {
    store: EventStore,
    clock: std::sync::Arc<dyn Clock>,
}

impl TenantAdmin {
    /// The tenant commands over `store`, on `clock`.
    pub fn new(store: EventStore, clock: std::sync::Arc<dyn Clock>) -> Self {
        TenantAdmin { store, clock }
    }

    /// `tenant create`.
    pub async fn create(
        &self,
        tenant_id: &str,
        description: &str,
    ) -> Result<TenantView, TenantError> {
        let cmd = CreateTenant {
            tenant_id: tenant_id.to_owned(),
            description: description.to_owned(),
        };
        run(&self.store, self.clock.as_ref(), &Create(cmd)).await?;
        self.show(tenant_id).await
    }

    /// `tenant delete`: what the deletion did, and the tenant after it.
    pub async fn delete(
        &self,
        tenant_id: &str,
        reason: &str,
        retire_nodes: bool,
    ) -> Result<DeletedTenant, TenantError> {
        let cmd = DeleteTenant {
            tenant_id: tenant_id.to_owned(),
            reason: reason.to_owned(),
            retire_nodes,
        };
        let done = run(&self.store, self.clock.as_ref(), &Delete(cmd)).await?;
        Ok(DeletedTenant::new(done, self.show(tenant_id).await?))
    }

    /// `tenant show`: NOT_FOUND for a tenant nothing names.
    pub async fn show(&self, tenant_id: &str) -> Result<TenantView, TenantError> {
        view::show(&self.store, tenant_id, self.clock.now_us()).await
    }

    /// `tenant list`: every tenant the log names or an operator created, deleted ones with
    /// their status.
    pub async fn list(&self) -> Result<Vec<TenantView>, TenantError> {
        view::list(&self.store, self.clock.now_us()).await
    }
}

/// Reads a tenant's standing (and its row) in `tx`.
async fn standing_of(
    tx: &mut StoreTx,
    tenant: &str,
) -> Result<(Option<TenantRow>, TenantStanding), TenantError> {
    let row = tenant_row(tx, tenant).await?;
    let standing = TenantStanding {
        created: row.as_ref().is_some_and(|r| r.created_at_us.is_some()),
        deleted: row.as_ref().is_some_and(|r| r.deleted_at_us.is_some()),
        named: tenant_named(tx, tenant).await?,
    };
    Ok((row, standing))
}

fn tenant_expected(row: Option<&TenantRow>) -> ExpectedVersion {
    match row.map(|r| r.version) {
        None | Some(0) => ExpectedVersion::NoStream,
        Some(v) => ExpectedVersion::Exact(u64::try_from(v).unwrap_or(0)),
    }
}

fn exact(version: i64) -> ExpectedVersion {
    ExpectedVersion::Exact(u64::try_from(version).unwrap_or(0))
}

/// `tenant create`, as the runner drives it.
struct Create(CreateTenant);

#[async_trait]
impl Command for Create {
    type State = (Option<TenantRow>, TenantStanding);
    type Event = TenantEvent;
    type Outcome = ();
    type Answer = ();
    type Error = TenantError;

    async fn load(&self, tx: &mut StoreTx, _: &At) -> Result<Self::State, TenantError> {
        hold_tenant(tx, &self.0.tenant_id, TenantHold::Exclusive).await?;
        standing_of(tx, &self.0.tenant_id).await
    }

    fn decide(&self, state: &Self::State, _: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        decided(decide_create_tenant(&self.0, &state.1))
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        state: &Self::State,
        events: Vec<TenantEvent>,
        at: &At,
    ) -> Result<(), TenantError> {
        let streams = Streams::new(&self.0.tenant_id, tenant_expected(state.0.as_ref()));
        streams.append(tx, events, at).await
    }

    async fn answer(
        &self,
        _: &mut StoreTx,
        _: Self::State,
        _: (),
        _: &At,
    ) -> Result<(), TenantError> {
        Ok(())
    }
}

/// What a deletion reads.
struct Loaded {
    row: Option<TenantRow>,
    standing: TenantStanding,
    holdings: TenantHoldings,
    nodes: Vec<NodeRow>,
    tokens: Vec<TokenRow>,
    batches: Vec<BatchRow>,
}

/// `tenant delete`, as the runner drives it.
struct Delete(DeleteTenant);

#[async_trait]
impl Command for Delete {
    type State = Loaded;
    type Event = TenantEvent;
    type Outcome = TenantDeletion;
    type Answer = TenantDeletion;
    type Error = TenantError;

    async fn load(&self, tx: &mut StoreTx, _: &At) -> Result<Loaded, TenantError> {
        let tenant = self.0.tenant_id.as_str();
        hold_tenant(tx, tenant, TenantHold::Exclusive).await?;
        let (row, standing) = standing_of(tx, tenant).await?;
        let nodes = read::nodes_of_tenant(tx, Some(tenant)).await?;
        let tokens: Vec<TokenRow> = read::tokens_of_tenant(tx, Some(tenant))
            .await?
            .into_iter()
            .filter(|t| t.revoked_at_us.is_none())
            .collect();
        let batches = open_batches_of_tenant(tx, tenant).await?;
        let holdings = TenantHoldings {
            nodes: nodes
                .iter()
                .map(crate::identity::rows::node_state)
                .collect::<Result<_, _>>()
                .map_err(|e| TenantError::Corrupt(e.to_string()))?,
            live_tokens: tokens.iter().map(|t| t.token_id.clone()).collect(),
            open_batches: batches
                .iter()
                .map(batch_standing)
                .collect::<Result<_, _>>()
                .map_err(|e| TenantError::Corrupt(e.to_string()))?,
        };
        Ok(Loaded {
            row,
            standing,
            holdings,
            nodes,
            tokens,
            batches,
        })
    }

    fn decide(&self, state: &Loaded, _: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        decide_delete_tenant(&self.0, &state.standing, &state.holdings)
            .map_err(|r| Refused::from(TenantError::from(r)))
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        state: &Loaded,
        events: Vec<TenantEvent>,
        at: &At,
    ) -> Result<(), TenantError> {
        let mut streams = Streams::new(&self.0.tenant_id, tenant_expected(state.row.as_ref()));
        for n in &state.nodes {
            streams.expect(format!("node/{}", n.node_id), exact(n.version));
        }
        for t in &state.tokens {
            streams.expect(format!("token/{}", t.token_id), exact(t.version));
        }
        for b in &state.batches {
            streams.expect(
                batch_stream(
                    &batch_standing(b)
                        .map_err(|e| TenantError::Corrupt(e.to_string()))?
                        .batch_id,
                ),
                ExpectedVersion::Exact(b.stream_version),
            );
        }
        let cancelled: Vec<Vec<u8>> = events
            .iter()
            .filter_map(|e| match e {
                TenantEvent::Batch(id, _) => Some(id.as_bytes().to_vec()),
                _ => None,
            })
            .collect();
        streams.append(tx, events, at).await?;
        let why = format!("tenant {} was deleted: {}", self.0.tenant_id, self.0.reason);
        for batch in cancelled {
            cancel_held_commands(tx, &batch, &why, at.now_us).await?;
        }
        Ok(())
    }

    async fn answer(
        &self,
        _: &mut StoreTx,
        _: Loaded,
        done: TenantDeletion,
        _: &At,
    ) -> Result<TenantDeletion, TenantError> {
        Ok(done)
    }
}

/// The streams a tenant decision appends to, each at the version it was read at.
struct Streams {
    tenant: String,
    expected: Vec<(String, ExpectedVersion)>,
}

impl Streams {
    fn new(tenant: &str, tenant_version: ExpectedVersion) -> Self {
        Streams {
            tenant: tenant.to_owned(),
            expected: vec![(tenant_stream(tenant), tenant_version)],
        }
    }

    fn expect(&mut self, stream: String, version: ExpectedVersion) {
        self.expected.push((stream, version));
    }

    /// The stream of one event and the event as the log stores it.
    fn place(&self, event: &TenantEvent, now_us: i64) -> (String, NewEvent) {
        let (tenant, id) = (self.tenant.as_str(), new_event_id());
        match event {
            TenantEvent::Created(p) => (
                tenant_stream(tenant),
                NewEvent::from_payload(id, tenant, now_us, p),
            ),
            TenantEvent::Deleted(p) => (
                tenant_stream(tenant),
                NewEvent::from_payload(id, tenant, now_us, p),
            ),
            TenantEvent::Identity(e) => (e.stream(), e.to_new_event(id, tenant, now_us)),
            TenantEvent::Batch(batch, e) => {
                (batch_stream(batch), batch_new_event(e, tenant, now_us))
            }
        }
    }

    /// Appends `events`, grouped by stream in order of first appearance, in one append, and
    /// applies the identity, quorum and tenant projections.
    async fn append(
        &self,
        tx: &mut StoreTx,
        events: Vec<TenantEvent>,
        at: &At,
    ) -> Result<(), TenantError> {
        let mut grouped: Vec<(String, ExpectedVersion, Vec<NewEvent>)> = Vec::new();
        for e in &events {
            let (stream, new) = self.place(e, at.now_us);
            match grouped.iter_mut().find(|(s, _, _)| *s == stream) {
                Some((_, _, list)) => list.push(new),
                None => {
                    let expected = self
                        .expected
                        .iter()
                        .find(|(s, _)| *s == stream)
                        .map(|(_, v)| *v)
                        .ok_or_else(|| {
                            TenantError::Corrupt(format!("stream {stream} was not read"))
                        })?;
                    grouped.push((stream, expected, vec![new]));
                }
            }
        }
        let appends: Vec<StreamAppend<'_>> = grouped
            .iter()
            .map(|(stream, expected, events)| StreamAppend {
                stream,
                expected: *expected,
                events,
            })
            .collect();
        let mut all: Vec<&dyn Projection> = projections::identity::all().to_vec();
        all.extend(crate::quorum::tables::projections());
        all.extend(projections());
        append_streams_and_project(tx, &all, &appends).await?;
        Ok(())
    }
}
