//! The OIDC issuer's commands (issue 43 items 1 and 2; `docs/WORKLOAD-IDENTITY.md`): `bcctl
//! oidc keys list | add | promote KID | retire KID`, the published documents (discovery and JWK
//! Set), and minting a token with the promoted key ([`issuer::OidcIssuer`]).
//!
//! Each key change is one run of [`crate::run::run`]: load every key (`oidc_keys`), decide
//! ([`domain::oidc::decide_add_key`], [`domain::oidc::decide_promote_key`],
//! [`domain::oidc::decide_retire_key`]), append to the `oidc-issuer` stream at the version read
//! (two operators racing collide there and the loser re-reads), apply `oidc_keys`, commit. A key
//! is generated and sealed under the deployment secret before the transaction (the Argon2id run
//! is not held inside it).

mod error;
pub mod issuer;
mod view;

use async_trait::async_trait;
use domain::oidc::{
    decide_add_key, decide_promote_key, decide_retire_key, AddKey, IssuerKey, OidcKeyEvent,
    OidcSigningKey,
};
use domain::pki::{Argon2idParams, DeploymentSecret};
use events::schema::OIDC_ISSUER_STREAM;
use events::store::{EventStore, ExpectedVersion, LogStore, LogTx, StoreTx};
use events::{new_event_id, NewEvent};
use projections::oidc_keys::{oidc_key_rows, OidcKeys};
use projections::Projection;
use rand_core::CryptoRngCore;

use crate::clock::Clock;
use crate::quorum::DEPLOYMENT_TENANT;
use crate::run::{append_and_project, decided, run, At, Command, Decided};

pub use error::OidcError;
pub use issuer::{jwks, publication, MintedToken, OidcIssuer, OidcSettings};
use view::issuer_key;
pub use view::OidcKeyView;

/// The projection the OIDC commands apply (also in [`crate::every_projection`]).
pub fn projections() -> [&'static dyn Projection; 1] {
    static OIDC_KEYS: OidcKeys = OidcKeys;
    [&OIDC_KEYS]
}

/// The key commands, over a store on a clock.
#[derive(Clone)]
pub struct OidcKeyAdmin {
    store: EventStore,
    clock: std::sync::Arc<dyn Clock>,
}

impl OidcKeyAdmin {
    /// The key commands over `store`, on `clock`.
    pub fn new(store: EventStore, clock: std::sync::Arc<dyn Clock>) -> Self {
        OidcKeyAdmin { store, clock }
    }

    /// `oidc keys add`: a new key, sealed under `secret` at the bundle's Argon2id cost.
    pub async fn add(&self, secret: &DeploymentSecret) -> Result<OidcKeyView, OidcError> {
        self.add_with(secret, &Argon2idParams::DEFAULT).await
    }

    /// [`OidcKeyAdmin::add`] at another Argon2id cost (tests).
    pub async fn add_with(
        &self,
        secret: &DeploymentSecret,
        params: &Argon2idParams,
    ) -> Result<OidcKeyView, OidcError> {
        let key = OidcSigningKey::generate()?;
        let cmd = AddKey {
            kid: key.kid().to_owned(),
            public_key_spki: key.public_key_spki().to_vec(),
            sealed_private_key: key.seal(secret, params)?,
        };
        run(&self.store, self.clock.as_ref(), &Change::Add(cmd)).await?;
        self.show(key.kid()).await
    }

    /// `oidc keys promote KID`.
    pub async fn promote(&self, kid: &str) -> Result<OidcKeyView, OidcError> {
        run(
            &self.store,
            self.clock.as_ref(),
            &Change::Promote(kid.to_owned()),
        )
        .await?;
        self.show(kid).await
    }

    /// `oidc keys retire KID`.
    pub async fn retire(&self, kid: &str) -> Result<OidcKeyView, OidcError> {
        run(
            &self.store,
            self.clock.as_ref(),
            &Change::Retire(kid.to_owned()),
        )
        .await?;
        self.show(kid).await
    }

    /// `oidc keys list`: every key, in the order added, retired ones included.
    pub async fn list(&self) -> Result<Vec<OidcKeyView>, OidcError> {
        let mut tx = self.store.begin().await?;
        let rows = oidc_key_rows(&mut tx).await?;
        tx.rollback().await?;
        rows.iter().map(OidcKeyView::of).collect()
    }

    async fn show(&self, kid: &str) -> Result<OidcKeyView, OidcError> {
        self.list()
            .await?
            .into_iter()
            .find(|k| k.kid == kid)
            .ok_or_else(|| OidcError::Corrupt(format!("key {kid} has no row after its change")))
    }
}

/// One key change, as the runner drives it.
enum Change {
    Add(AddKey),
    Promote(String),
    Retire(String),
}

#[async_trait]
impl Command for Change {
    type State = (Vec<IssuerKey>, ExpectedVersion);
    type Event = OidcKeyEvent;
    type Outcome = ();
    type Answer = ();
    type Error = OidcError;

    async fn load(&self, tx: &mut StoreTx, _: &At) -> Result<Self::State, OidcError> {
        let rows = oidc_key_rows(tx).await?;
        let expected = match rows.iter().map(|r| r.version).max() {
            None => ExpectedVersion::NoStream,
            Some(v) => ExpectedVersion::Exact(u64::try_from(v).unwrap_or(0)),
        };
        let keys = rows.iter().map(issuer_key).collect::<Result<_, _>>()?;
        Ok((keys, expected))
    }

    fn decide(&self, state: &Self::State, at: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        let keys = &state.0;
        decided(match self {
            Change::Add(cmd) => decide_add_key(cmd, keys),
            Change::Promote(kid) => decide_promote_key(kid, keys),
            Change::Retire(kid) => decide_retire_key(kid, keys, at.now_us),
        })
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        state: &Self::State,
        events: Vec<OidcKeyEvent>,
        at: &At,
    ) -> Result<(), OidcError> {
        let new: Vec<NewEvent> = events
            .iter()
            .map(|e| {
                let (id, t, now) = (new_event_id(), DEPLOYMENT_TENANT, at.now_us);
                match e {
                    OidcKeyEvent::Added(p) => NewEvent::from_payload(id, t, now, p),
                    OidcKeyEvent::Promoted(p) => NewEvent::from_payload(id, t, now, p),
                    OidcKeyEvent::Retired(p) => NewEvent::from_payload(id, t, now, p),
                }
            })
            .collect();
        append_and_project(tx, &projections(), OIDC_ISSUER_STREAM, state.1, &new).await?;
        Ok(())
    }

    async fn answer(
        &self,
        _: &mut StoreTx,
        _: Self::State,
        _: (),
        _: &At,
    ) -> Result<(), OidcError> {
        Ok(())
    }
}
