//! The names a node may serve (issue 41 item 1), `bcctl node names set|add|remove|show`: one
//! transaction per change (load the node, what it holds and who else in its tenant holds the
//! names asked for; `domain::identity::decide_node_names`; append `node.names.set` on the node's
//! stream; project `node_names`; commit), and the read of a node's names.
//!
//! Two changes of names in one tenant take turns (`hold_tenant_names`, taken before the other
//! holders are read), so of two concurrent `add`s of one name to two nodes exactly one wins and
//! the other is refused as held by the first.

use async_trait::async_trait;
use domain::identity::{
    decide_node_names, identity_revoked, requested_names, ChangeNames, IdentityEvent, NameHolder,
    NameKind, NamesFacts, NamesOutcome, NamesRefusal, NewestCert, NodeNames,
};
use events::store::{EventStore, LogStore, LogTx, StoreTx};
use projections::identity::names::{
    hold_tenant_names, holders_in_tenant, names_of_node, NodeNameRow,
};
use projections::identity::operator::latest_cert_of;
use projections::identity::read::{self, NodeRow};
use rand_core::CryptoRngCore;

use super::append::append_decided;
use super::error::IdentityError;
use super::rows;
use crate::run::{decided, run, At, Command, Decided};
use crate::Clock;

/// A node's names as the operator commands answer them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeNamesView {
    /// The node.
    pub node_id: String,
    /// Its tenant.
    pub tenant_id: String,
    /// The DNS names it holds, sorted.
    pub dns: Vec<String>,
    /// The IP addresses it holds, sorted by their text.
    pub ips: Vec<String>,
    /// False when the change found the set already as asked (nothing appended); true for a
    /// read.
    pub changed: bool,
}

impl NodeNamesView {
    fn of(node_id: &str, tenant_id: &str, names: &NodeNames, changed: bool) -> Self {
        NodeNamesView {
            node_id: node_id.to_owned(),
            tenant_id: tenant_id.to_owned(),
            dns: names.dns.iter().cloned().collect(),
            ips: names.ips.iter().cloned().collect(),
            changed,
        }
    }
}

/// Stored rows into a set of names (a row of an unknown kind is corrupt).
pub(crate) fn names_of_rows(rows: &[NodeNameRow]) -> Result<NodeNames, IdentityError> {
    let mut names = NodeNames::default();
    for r in rows {
        match NameKind::parse(&r.kind) {
            Some(NameKind::Dns) => names.dns.insert(r.name.clone()),
            Some(NameKind::Ip) => names.ips.insert(r.name.clone()),
            None => {
                return Err(IdentityError::Corrupt(format!(
                    "node_names {}: kind {:?}",
                    r.node_id, r.kind
                )))
            }
        };
    }
    Ok(names)
}

/// Changes a node's names (`set`, `add`, `remove`), on `clock`, in one transaction.
pub async fn change_names(
    store: &EventStore,
    clock: &dyn Clock,
    cmd: &ChangeNames,
) -> Result<NodeNamesView, IdentityError> {
    let (tenant, outcome) = run(store, clock, &NamesCommand { cmd }).await?;
    Ok(NodeNamesView::of(
        &cmd.node_id,
        &tenant,
        &outcome.names,
        outcome.changed,
    ))
}

/// The names `node_id` holds (NOT_FOUND for no such node).
pub async fn names_of(store: &EventStore, node_id: &str) -> Result<NodeNamesView, IdentityError> {
    let mut tx = store.begin().await?;
    let node = read::node_by_id(&mut tx, node_id).await?;
    let held = names_of_node(&mut tx, node_id).await?;
    tx.rollback().await?;
    let node = node.ok_or_else(|| NamesRefusal::UnknownNode(node_id.into()))?;
    Ok(NodeNamesView::of(
        node_id,
        &node.tenant_id,
        &names_of_rows(&held)?,
        true,
    ))
}

/// One change, as the runner drives it.
struct NamesCommand<'a> {
    cmd: &'a ChangeNames,
}

/// What a change reads: the node's row (for its stream's version) and the decision's facts.
struct NamesLoad {
    row: Option<NodeRow>,
    facts: NamesFacts,
}

async fn holders(
    tx: &mut StoreTx,
    row: &NodeRow,
    asked: &NodeNames,
) -> Result<Vec<NameHolder>, IdentityError> {
    let mut out = Vec::new();
    for (kind, names) in [(NameKind::Dns, &asked.dns), (NameKind::Ip, &asked.ips)] {
        let names: Vec<String> = names.iter().cloned().collect();
        let found =
            holders_in_tenant(tx, &row.tenant_id, &row.node_id, kind.as_str(), &names).await?;
        out.extend(found.into_iter().map(|r| NameHolder {
            kind,
            name: r.name,
            node_id: r.node_id,
        }));
    }
    Ok(out)
}

#[async_trait]
impl Command for NamesCommand<'_> {
    type State = NamesLoad;
    type Event = IdentityEvent;
    type Outcome = NamesOutcome;
    type Answer = (String, NamesOutcome);
    type Error = IdentityError;

    async fn load(&self, tx: &mut StoreTx, _: &At) -> Result<NamesLoad, IdentityError> {
        let node_id = self.cmd.node_id.as_str();
        let Some(row) = read::node_by_id(tx, node_id).await? else {
            return Ok(NamesLoad {
                row: None,
                facts: NamesFacts::default(),
            });
        };
        // Before the other holders are read: a concurrent change in the tenant commits first.
        hold_tenant_names(tx, &row.tenant_id).await?;
        let state = rows::node_state(&row)?;
        let newest = latest_cert_of(tx, node_id).await?.map(|c| NewestCert {
            revoked: c.revoked_at_us.is_some(),
            identity_generation: u64::try_from(c.identity_generation).unwrap_or(0),
        });
        let revoked = newest
            .as_ref()
            .is_some_and(|c| identity_revoked(state.identity_generation, c));
        let held = names_of_rows(&names_of_node(tx, node_id).await?)?;
        // Names that do not parse are refused by the decision; nobody holds them.
        let holders = match requested_names(self.cmd) {
            Ok(asked) => holders(tx, &row, &asked).await?,
            Err(_) => Vec::new(),
        };
        Ok(NamesLoad {
            row: Some(row),
            facts: NamesFacts {
                node: Some(state),
                identity_revoked: revoked,
                held,
                holders,
            },
        })
    }

    fn decide(&self, load: &NamesLoad, _: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        decided(decide_node_names(self.cmd, &load.facts))
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        load: &NamesLoad,
        events: Vec<IdentityEvent>,
        at: &At,
    ) -> Result<(), IdentityError> {
        let row = load
            .row
            .as_ref()
            .ok_or_else(|| NamesRefusal::UnknownNode(self.cmd.node_id.clone()))?;
        let versions = vec![(format!("node/{}", row.node_id), Some(row.version))];
        append_decided(tx, events, &row.tenant_id, at.now_us, &versions).await
    }

    async fn answer(
        &self,
        _: &mut StoreTx,
        load: NamesLoad,
        outcome: NamesOutcome,
        _: &At,
    ) -> Result<(String, NamesOutcome), IdentityError> {
        let tenant = load.row.map(|r| r.tenant_id).unwrap_or_default();
        Ok((tenant, outcome))
    }
}
