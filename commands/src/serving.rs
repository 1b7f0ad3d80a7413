//! Serving certificates for split gateways (the api's `IssueServingCertificate`): read the
//! gateway's grant from its internal client certificate and let the domain plan the request
//! ([`domain::pki::serving_grant`]), issue from the serving CA, append
//! `gateway.serving.issued` (`domain::pki::decide_serving_issued`) and commit; only then is the certificate answered. A request naming
//! anything the grant does not list is refused and writes nothing; a lifetime above 7 days is
//! clamped.

use domain::pki::{
    decide_serving_issued, issue_serving_certificate, plan_gateway_serving, read_grant,
    GatewayGrant, GrantError, IssueError, IssuedCertificate, KeyError, PublicKey, Serial,
    ServingCa, ServingCertificateRequest, ServingRefusal,
};
use events::schema::GatewayServingIssued;
use events::store::{ExpectedVersion, StoreError, StoreTx};
use events::{new_event_id, NewEvent};
use rand_core::CryptoRngCore;
use sha2::{Digest, Sha256};
use time::Duration;

use crate::clock::Clock;
use crate::quorum::stream::DEPLOYMENT_TENANT;
use crate::run::{append_and_project, AsConflict, At, Command, Decided, RunError};

/// The stream of one gateway's serving certificates.
pub fn gateway_stream(gateway_name: &str) -> String {
    format!("gateway/{gateway_name}")
}

/// What a gateway asks for.
#[derive(Debug, Clone)]
pub struct ServingAsk<'a> {
    /// The internal client certificate the gateway's connection proved (DER).
    pub internal_leaf_der: &'a [u8],
    /// The key to certify (the gateway's own).
    pub public_key: &'a PublicKey,
    /// The names asked for (DNS names or IP addresses).
    pub names: &'a [String],
    /// The lifetime asked for.
    pub lifetime: Duration,
}

/// What issuing a gateway serving certificate can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ServingError {
    /// The request is refused (names outside the grant, no names, no lifetime): nothing written.
    #[error("{0}")]
    Refused(#[from] ServingRefusal),
    /// The connection's certificate gives no grant.
    #[error("{0}")]
    Grant(#[from] GrantError),
    /// The serving CA could not issue (a bad name in the grant itself, an expired CA).
    #[error("the serving CA cannot issue: {0}")]
    Issue(#[from] IssueError),
    /// No randomness for the serial.
    #[error("cannot draw a serial: {0}")]
    Serial(#[from] KeyError),
    /// Recording the event failed: no certificate is answered.
    #[error("recording the serving certificate failed: {0}")]
    Run(#[from] RunError),
}

impl From<StoreError> for ServingError {
    fn from(e: StoreError) -> Self {
        ServingError::Run(RunError::Store(e))
    }
}

impl AsConflict for ServingError {
    fn into_conflict(self) -> Result<StoreError, Self> {
        match self {
            ServingError::Run(run) => run.into_conflict().map_err(ServingError::Run),
            other => Err(other),
        }
    }
}

/// An issued gateway serving certificate and the gateway it went to.
#[derive(Debug, Clone)]
pub struct ServingIssued {
    pub certificate: IssuedCertificate,
    pub gateway_name: String,
    /// The names it carries, DNS names then IP addresses.
    pub names: Vec<String>,
}

/// Issues a gateway's serving certificate and records it (see the module docs).
pub async fn issue_gateway_serving(
    store: &events::store::EventStore,
    serving_ca: &ServingCa,
    clock: &dyn Clock,
    ask: &ServingAsk<'_>,
) -> Result<ServingIssued, ServingError> {
    let grant = read_grant(ask.internal_leaf_der)?;
    let request = plan_gateway_serving(&grant, ask.names, ask.lifetime, Serial::generate()?)?;
    let certificate = issue_serving_certificate(
        serving_ca,
        ask.public_key,
        &request,
        // issue_serving_certificate backdates it (domain::pki::BACKDATE).
        clock.now(),
    )?;
    let record = RecordServing {
        grant: &grant,
        internal_sha256: Sha256::digest(ask.internal_leaf_der).into(),
        request: &request,
        certificate: &certificate,
        lifetime: ask.lifetime,
    };
    let names = crate::run::run(store, clock, &record).await?;
    Ok(ServingIssued {
        certificate,
        gateway_name: grant.gateway_name,
        names,
    })
}

/// Recording an issued serving certificate, as the runner drives it.
struct RecordServing<'a> {
    grant: &'a GatewayGrant,
    internal_sha256: [u8; 32],
    request: &'a ServingCertificateRequest,
    certificate: &'a IssuedCertificate,
    lifetime: Duration,
}

#[async_trait::async_trait]
impl Command for RecordServing<'_> {
    type State = ();
    type Event = GatewayServingIssued;
    type Outcome = Vec<String>;
    type Answer = Vec<String>;
    type Error = ServingError;

    async fn load(&self, _: &mut StoreTx, _: &At) -> Result<(), ServingError> {
        Ok(())
    }

    fn decide(&self, _: &(), _: &At, _: &mut dyn CryptoRngCore) -> Decided<Self> {
        decide_serving_issued(
            self.grant,
            self.internal_sha256,
            self.request,
            self.certificate,
            self.lifetime,
        )
        .map_err(|never| match never {})
    }

    async fn append(
        &self,
        tx: &mut StoreTx,
        _: &(),
        events: Vec<GatewayServingIssued>,
        at: &At,
    ) -> Result<(), ServingError> {
        let events: Vec<NewEvent> = events
            .iter()
            .map(|e| NewEvent::from_payload(new_event_id(), DEPLOYMENT_TENANT, at.now_us, e))
            .collect();
        let stream = gateway_stream(&self.grant.gateway_name);
        append_and_project(tx, &[], &stream, ExpectedVersion::Any, &events).await?;
        Ok(())
    }

    async fn answer(
        &self,
        _: &mut StoreTx,
        _: (),
        names: Vec<String>,
        _: &At,
    ) -> Result<Vec<String>, ServingError> {
        Ok(names)
    }
}
