//! [`JoinService`]: the four identity services of a serving process together ([`Joins`],
//! [`Renewals`], [`NodeAdmin`], [`IdentityMaintenance`]), and the site agent's calls
//! ([`SiteAgent`]), over one store, key set and clock.
//! Its methods delegate; code that needs one job takes that job's type (an operator command
//! builds a [`NodeAdmin`] from the store alone, without the key set).

use std::sync::Arc;

use domain::identity::RenewInput;
use domain::pki::KeySet;
use events::store::EventStore;

use super::{
    CreatedToken, IdentityConfig, IdentityError, IdentityMaintenance, JoinAnswer, JoinOutcome,
    JoinRequest, Joins, MaintenanceReport, NewToken, NodeAdmin, NodeDetail, NodeView, RenewAnswer,
    Renewals, TokenView,
};
use crate::site::{SiteAgent, SiteSettings};
use crate::Clock;

/// Joins, renewals, the operator commands and maintenance over one store and key set.
#[derive(Clone)]
pub struct JoinService {
    store: EventStore,
    joins: Joins,
    renewals: Renewals,
    admin: NodeAdmin,
    maintenance: IdentityMaintenance,
    site_agent: SiteAgent,
}

impl JoinService {
    /// The four services over `store` with the loaded key set. Refuses a config whose trust
    /// domain is not the key set's.
    pub fn new(
        store: EventStore,
        keys: Arc<KeySet>,
        clock: Arc<dyn Clock>,
        config: IdentityConfig,
    ) -> Result<Self, IdentityError> {
        let maintenance =
            IdentityMaintenance::new(store.clone(), clock.clone(), config.root_tenant.clone())
                .with_refusal_budget(config.refusal_budget.clone());
        let site_agent = SiteAgent::new(
            store.clone(),
            clock.clone(),
            config.trust_domain.clone(),
            SiteSettings::default(),
        );
        Ok(JoinService {
            site_agent,
            joins: Joins::new(store.clone(), keys.clone(), clock.clone(), config.clone())?,
            renewals: Renewals::new(store.clone(), keys, clock.clone(), config)?,
            admin: NodeAdmin::new(store.clone(), clock),
            maintenance,
            store,
        })
    }

    /// Records the renewals an edge in this process refuses at the handshake, counting in
    /// this service's refusal budget (flushed with it).
    pub fn edge_refusals(&self) -> super::EdgeRefusals {
        self.renewals.edge_refusals()
    }

    /// The store.
    pub fn store(&self) -> &EventStore {
        &self.store
    }

    /// Joins.
    pub fn joins(&self) -> &Joins {
        &self.joins
    }

    /// Renewals.
    pub fn renewals(&self) -> &Renewals {
        &self.renewals
    }

    /// The operator commands on tokens and nodes.
    pub fn admin(&self) -> &NodeAdmin {
        &self.admin
    }

    /// Maintenance.
    pub fn maintenance(&self) -> &IdentityMaintenance {
        &self.maintenance
    }

    /// The site agent's calls (SiteLease, BootToken).
    pub fn site_agent(&self) -> &SiteAgent {
        &self.site_agent
    }

    /// The same service with the serving configuration's `[sites]` settings.
    pub fn with_site_settings(mut self, settings: SiteSettings) -> Self {
        self.site_agent = self.site_agent.with_settings(settings);
        self
    }

    /// The same service joining through `attestors` ([`Joins::with_attestors`]).
    pub fn with_attestors(mut self, attestors: super::AttestorRegistry) -> Self {
        self.joins = self.joins.with_attestors(attestors);
        self
    }

    /// [`Joins::attest`]: a join answered as admitted or deferred.
    pub async fn attest(&self, request: &JoinRequest) -> Result<JoinOutcome, IdentityError> {
        self.joins.attest(request).await
    }

    /// [`Joins::join`].
    pub async fn join(&self, request: &JoinRequest) -> Result<JoinAnswer, IdentityError> {
        self.joins.join(request).await
    }

    /// [`Renewals::renew`].
    pub async fn renew(&self, input: &RenewInput) -> Result<RenewAnswer, IdentityError> {
        self.renewals.renew(input).await
    }

    /// [`NodeAdmin::create_token`].
    pub async fn create_token(&self, new: &NewToken) -> Result<CreatedToken, IdentityError> {
        self.admin.create_token(new).await
    }

    /// [`NodeAdmin::revoke_token`].
    pub async fn revoke_token(
        &self,
        token_id: &str,
        reason: &str,
    ) -> Result<TokenView, IdentityError> {
        self.admin.revoke_token(token_id, reason).await
    }

    /// [`NodeAdmin::list_tokens`].
    pub async fn list_tokens(&self, tenant: Option<&str>) -> Result<Vec<TokenView>, IdentityError> {
        self.admin.list_tokens(tenant).await
    }

    /// [`NodeAdmin::revoke_identity`].
    pub async fn revoke_identity(
        &self,
        node_id: &str,
        reason: &str,
    ) -> Result<NodeView, IdentityError> {
        self.admin.revoke_identity(node_id, reason).await
    }

    /// [`NodeAdmin::delete_node`].
    pub async fn delete_node(
        &self,
        node_id: &str,
        reason: &str,
    ) -> Result<NodeView, IdentityError> {
        self.admin.delete_node(node_id, reason).await
    }

    /// [`NodeAdmin::retire_node`].
    pub async fn retire_node(
        &self,
        node_id: &str,
        reason: &str,
    ) -> Result<NodeView, IdentityError> {
        self.admin.retire_node(node_id, reason).await
    }

    /// [`NodeAdmin::list_nodes`].
    pub async fn list_nodes(&self, tenant: Option<&str>) -> Result<Vec<NodeView>, IdentityError> {
        self.admin.list_nodes(tenant).await
    }

    /// [`NodeAdmin::show_node`].
    pub async fn show_node(&self, node_id: &str) -> Result<NodeDetail, IdentityError> {
        self.admin.show_node(node_id).await
    }

    /// [`IdentityMaintenance::prune_attestation_uses`].
    pub async fn prune_attestation_uses(&self, batch: u32) -> Result<u64, IdentityError> {
        self.maintenance.prune_attestation_uses(batch).await
    }

    /// [`IdentityMaintenance::flush_suppressed_refusals`].
    pub async fn flush_suppressed_refusals(&self) -> Result<u64, IdentityError> {
        self.maintenance.flush_suppressed_refusals().await
    }

    /// [`IdentityMaintenance::maintain`].
    pub async fn maintain(&self) -> Result<MaintenanceReport, IdentityError> {
        self.maintenance.maintain().await
    }

    /// [`IdentityMaintenance::maintain_in_batches`].
    pub async fn maintain_in_batches(
        &self,
        batch: u32,
    ) -> Result<MaintenanceReport, IdentityError> {
        self.maintenance.maintain_in_batches(batch).await
    }
}
