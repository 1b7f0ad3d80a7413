//! The failover end to end's agents: in-test clients built from `bcd`'s own library (the
//! node key and CSR, the token sealed to the pinned JoinService key, the pinned TLS 1.3
//! client, the signed answer's verification, `identity.json` in a data directory of its own,
//! and `bcd node`'s renewal with the next key kept across a retry). Each joins through one
//! gateway, then renews over mTLS with the certificate it holds, retrying a failed call
//! (UNAVAILABLE, a transport error) with backoff until a deadline, and records everything:
//! each certificate it held, each error it saw, each call's start and end.
//!
//! A join whose answer was lost after the api committed it (the api killed between its commit
//! and its answer) spent the single-use token and the CSR's key; its retry, the same request,
//! gets the identity the lost answer carried (issue 40). Should a retry still be refused
//! (ACCESS_DENIED, `join-token:csr-key-used`), the agent does what its operator would: a new
//! token and a new key, recorded as a lost join so the log check can find the orphaned node the
//! first answer named.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bcd::client::{connect, decode_join_body, ClientError, ClientIdentity, CALL_TIMEOUT};
use bcd::files::DataDir;
use bcd::hardware::HardwareClaims;
use bcd::identity_store::{load_in, store_joined};
use bcd::join::{prepare_join, PreparedJoin};
use bcd::node::{renew_retrying, RenewError};
use bcd::node_key::TpmHost;
use bcd::renewal::PendingRenewal;
use bcd::verify_join::{verify_join_response, JoinExpectation, SignedJoinResponse};
use commands::identity::{NewToken, NodeAdmin};
use domain::identity::{ExpectBinding, TokenRole};
use domain::pki::{NodeRole, Pin, PublicKey, TokenSecret, TrustDomain};

/// Which call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Call {
    Join,
    Renew,
}

/// The status codes a failed call is retried on (bcd's own `classify`); a transport error
/// (no answer from the gateway at all) is retried too.
const RETRYABLE: [&str; 6] = [
    "Unavailable",
    "ResourceExhausted",
    "DeadlineExceeded",
    "Aborted",
    "Cancelled",
    "Unknown",
];

/// An error an agent saw: the call, the gRPC code's name (`transport` when no status came
/// back, `local` for the agent's own failure) and the message.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct SeenError {
    pub call: Call,
    pub code: String,
    pub message: String,
    /// A join refused because its first answer was lost ([`LostJoin`]).
    pub lost_answer: bool,
}

impl SeenError {
    fn status(call: Call, s: &tonic::Status) -> SeenError {
        SeenError::new(call, &format!("{:?}", s.code()), s.message())
    }

    fn transport(call: Call, e: &ClientError) -> SeenError {
        SeenError::new(call, "transport", &e.to_string())
    }

    fn new(call: Call, code: &str, message: &str) -> SeenError {
        SeenError {
            call,
            code: code.to_owned(),
            message: message.to_owned(),
            lost_answer: false,
        }
    }

    /// `bcd node`'s renewal error: the call's failure keeps bcd's `<Code>: <message>` form
    /// (ACCESS_DENIED its own sentence); everything else is the agent's own.
    fn renewal(e: &RenewError) -> SeenError {
        match e {
            RenewError::Connect(c) => SeenError::transport(Call::Renew, c),
            RenewError::Call(message, _) if message.starts_with("ACCESS_DENIED") => {
                SeenError::new(Call::Renew, "PermissionDenied", message)
            }
            RenewError::Call(message, _) => match message.split_once(": ") {
                Some((code, rest)) => SeenError::new(Call::Renew, code, rest),
                None => SeenError::new(Call::Renew, "unknown", message),
            },
            other => SeenError::new(Call::Renew, "local", &other.to_string()),
        }
    }

    fn retryable(&self) -> bool {
        self.code == "transport" || RETRYABLE.contains(&self.code.as_str())
    }
}

/// A certificate an agent held.
#[derive(Debug, Clone)]
pub struct Held {
    pub call: Call,
    /// Lower-case hex of the serial's minimal big-endian bytes (as `node.certificate.issued`).
    pub serial: String,
    pub der: Vec<u8>,
}

/// A join whose answer was lost: the CSR it sent and the key that CSR carried.
#[derive(Debug, Clone)]
pub struct LostJoin {
    pub csr_sha256: [u8; 32],
    pub key_spki_der: Vec<u8>,
}

/// One call as sent: through which gateway, when, and whether it was answered with success.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub gateway: usize,
    pub call: Call,
    pub start: Instant,
    pub end: Instant,
    pub ok: bool,
}

/// What one agent ended with.
#[derive(Debug)]
pub struct AgentOutcome {
    pub index: usize,
    pub gateway: usize,
    pub node_id: Option<String>,
    /// Every certificate it held, the join's first.
    pub held: Vec<Held>,
    /// The chain it holds at the end, leaf first.
    pub chain: Vec<Vec<u8>>,
    pub errors: Vec<SeenError>,
    pub retries: usize,
    pub lost_joins: Vec<LostJoin>,
    pub renewals: usize,
    /// Why it stopped short, when it did (a call not retried, the deadline).
    pub failed: Option<String>,
}

/// What every agent shares: the deployment's pins and keys, the gateways, the operator's
/// token service, the deadline and the counters the test paces the kill by.
pub struct Fleet {
    pub serving_ca: Pin,
    pub join_signing_pin: Pin,
    pub join_signing: PublicKey,
    pub join_encryption: PublicKey,
    pub trust_domain: TrustDomain,
    pub gateways: Vec<String>,
    pub admin: NodeAdmin,
    pub deadline: Instant,
    pub renewals: usize,
    pub attempts: Mutex<Vec<Attempt>>,
    pub joined: AtomicUsize,
    pub renewed: AtomicUsize,
}

impl Fleet {
    fn record(&self, gateway: usize, call: Call, start: Instant, ok: bool) {
        let attempt = Attempt {
            gateway,
            call,
            start,
            end: Instant::now(),
            ok,
        };
        self.attempts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(attempt);
    }

    fn before_deadline(&self, what: &str, last: Option<&SeenError>) -> Result<(), String> {
        if Instant::now() < self.deadline {
            return Ok(());
        }
        Err(format!("{what}: the deadline passed; last error {last:?}"))
    }

    /// A new single-use join token for tenant `default`, site `site-1` (what `bcctl token
    /// create` makes), through the commands API.
    pub async fn new_token(&self) -> Result<TokenSecret, String> {
        let role = TokenRole::parse("node").ok_or("no node token role")?;
        let created = self
            .admin
            .create_token(&NewToken {
                tenant_id: "default".into(),
                site_id: "site-1".into(),
                pool_id: "default".into(),
                role,
                uses: 1,
                ttl_seconds: 3600,
                expect: ExpectBinding::default(),
                allow_reclaim: false,
                reclaim_node_id: None,
                for_node_id: None,
                require_approval: false,
            })
            .await
            .map_err(|e| format!("creating a token: {e}"))?;
        TokenSecret::parse(&created.secret).map_err(|e| format!("the token's secret: {e}"))
    }
}

/// Waits before retry `n` (1 for the first): 100 ms doubling to 1 s, spread by agent.
fn backoff(n: u32, index: usize) -> Duration {
    let base = 100u64 << n.saturating_sub(1).min(4);
    Duration::from_millis(base.min(1000) + (index % 7) as u64 * 13)
}

/// The serial of a DER certificate as `node.certificate.issued` writes it.
pub fn serial_of(der: &[u8]) -> String {
    match x509_parser::parse_x509_certificate(der) {
        Ok((_, cert)) => {
            let raw = cert.tbs_certificate.raw_serial();
            let first = raw.iter().position(|b| *b != 0).unwrap_or(raw.len());
            hex::encode(&raw[first..])
        }
        Err(e) => format!("unparsable certificate: {e}"),
    }
}

fn held(call: Call, chain: &[Vec<u8>]) -> Held {
    let der = chain.first().cloned().unwrap_or_default();
    Held {
        call,
        serial: serial_of(&der),
        der,
    }
}

/// One Join over a new connection to `addr`.
async fn join_once(
    fleet: &Fleet,
    addr: &str,
    prepared: &PreparedJoin,
) -> Result<SignedJoinResponse, SeenError> {
    let mut client = connect(addr, fleet.serving_ca, None)
        .await
        .map_err(|e| SeenError::transport(Call::Join, &e))?;
    let r = &prepared.request;
    let wire = proto::JoinRequest {
        csr: r.csr_der.clone(),
        attestor: r.attestor.clone(),
        sealed_token: r
            .sealed_token
            .as_ref()
            .map(|t| t.as_bytes().to_vec())
            .unwrap_or_default(),
        role: r.role.to_string(),
        claims: Some(proto::HardwareClaims::default()),
        attestation: Vec::new(),
        agent_version: String::new(),
    };
    let mut call = tonic::Request::new(wire);
    call.set_timeout(CALL_TIMEOUT);
    let answer = client
        .join(call)
        .await
        .map_err(|s| SeenError::status(Call::Join, &s))?
        .into_inner();
    Ok(SignedJoinResponse {
        body: answer.response,
        signature: answer.signature,
        signer_spki_der: fleet.join_signing.spki_der().to_vec(),
    })
}

fn prepare(fleet: &Fleet, token: &TokenSecret) -> Result<PreparedJoin, String> {
    prepare_join(
        &fleet.join_encryption,
        token,
        NodeRole::Node,
        HardwareClaims::default(),
    )
    .map_err(|e| format!("preparing the join: {e}"))
}

/// Joins (one key and CSR for every retry of one token), verifies the signed answer and
/// stores the identity in `dir`.
async fn join(
    fleet: &Fleet,
    me: &mut AgentOutcome,
    dir: &DataDir,
    token: TokenSecret,
) -> Result<(), String> {
    let addr = fleet.gateways[me.gateway].clone();
    let mut prepared = prepare(fleet, &token)?;
    let mut failures = 0u32;
    loop {
        fleet.before_deadline("join", me.errors.last())?;
        let start = Instant::now();
        let result = join_once(fleet, &addr, &prepared).await;
        fleet.record(me.gateway, Call::Join, start, result.is_ok());
        let mut error = match result {
            Ok(signed) => {
                let expect = JoinExpectation {
                    join_signing_pin: fleet.join_signing_pin,
                    csr_sha256: prepared.request.csr_sha256,
                    node_key: prepared.key.public_key(),
                    role: NodeRole::Node,
                    trust_domain: Some(&fleet.trust_domain),
                    node_id: None,
                };
                let verified = verify_join_response(&signed, decode_join_body, &expect)
                    .map_err(|e| format!("the join's answer: {e}"))?;
                store_joined(
                    dir,
                    &prepared.key,
                    &verified.stored_identity(),
                    time::OffsetDateTime::now_utc(),
                )
                .map_err(|e| format!("storing the join: {e}"))?;
                me.node_id = Some(verified.leaf.spiffe_id.node.to_string());
                me.held.push(held(Call::Join, &verified.chain));
                me.chain = verified.chain;
                return Ok(());
            }
            Err(e) => e,
        };
        if error.retryable() {
            me.errors.push(error);
            failures += 1;
            me.retries += 1;
            tokio::time::sleep(backoff(failures, me.index)).await;
            continue;
        }
        if error.code == "PermissionDenied" && failures > 0 {
            // The api committed an earlier send, its answer was lost and the retry was not
            // answered again: the token and the key are spent. A new token, a new key.
            error.lost_answer = true;
            me.errors.push(error);
            me.lost_joins.push(LostJoin {
                csr_sha256: prepared.request.csr_sha256,
                key_spki_der: prepared.key.public_key().spki_der().to_vec(),
            });
            prepared = prepare(fleet, &fleet.new_token().await?)?;
            failures = 0;
            me.retries += 1;
            continue;
        }
        let message = format!("join: {} {}", error.code, error.message);
        me.errors.push(error);
        return Err(message);
    }
}

/// Renews once (retrying), as `bcd node` does: the identity loaded from `dir`, presented over
/// mTLS, the next key kept for a retry from the same leaf.
async fn renew(fleet: &Fleet, me: &mut AgentOutcome, dir: &DataDir) -> Result<(), String> {
    let addr = fleet.gateways[me.gateway].clone();
    let mut pending = PendingRenewal::default();
    let mut failures = 0u32;
    loop {
        fleet.before_deadline("renewal", me.errors.last())?;
        let current = load_in(dir, &TpmHost::none()).map_err(|e| format!("loading: {e}"))?;
        let identity = ClientIdentity::new(&current.stored.chain, &current.key);
        let start = Instant::now();
        let result = match connect(&addr, fleet.serving_ca, Some(&identity)).await {
            Ok(mut client) => renew_retrying(
                &mut client,
                dir,
                &current,
                Some(&fleet.join_signing),
                &mut pending,
            )
            .await
            .map_err(|e| SeenError::renewal(&e)),
            Err(e) => Err(SeenError::transport(Call::Renew, &e)),
        };
        fleet.record(me.gateway, Call::Renew, start, result.is_ok());
        match result {
            Ok(renewed) => {
                me.held.push(held(Call::Renew, &renewed.stored.chain));
                me.chain = renewed.stored.chain.clone();
                me.renewals += 1;
                return Ok(());
            }
            Err(e) if e.retryable() => {
                me.errors.push(e);
                failures += 1;
                me.retries += 1;
                tokio::time::sleep(backoff(failures, me.index)).await;
            }
            Err(e) => {
                let message = format!("renewal: {} {}", e.code, e.message);
                me.errors.push(e);
                return Err(message);
            }
        }
    }
}

async fn run(
    fleet: &Fleet,
    me: &mut AgentOutcome,
    dir: &DataDir,
    token: TokenSecret,
) -> Result<(), String> {
    join(fleet, me, dir, token).await?;
    fleet.joined.fetch_add(1, Ordering::SeqCst);
    for _ in 0..fleet.renewals {
        renew(fleet, me, dir).await?;
        fleet.renewed.fetch_add(1, Ordering::SeqCst);
    }
    Ok(())
}

/// Agent `index`: joins through gateway `gateway` with `token`, keeping its files in `dir`,
/// then renews [`Fleet::renewals`] times.
pub async fn run_agent(
    fleet: Arc<Fleet>,
    index: usize,
    gateway: usize,
    token: TokenSecret,
    dir: &Path,
) -> AgentOutcome {
    let mut me = AgentOutcome {
        index,
        gateway,
        node_id: None,
        held: Vec::new(),
        chain: Vec::new(),
        errors: Vec::new(),
        retries: 0,
        lost_joins: Vec::new(),
        renewals: 0,
        failed: None,
    };
    let dir = DataDir::new(dir);
    if let Err(e) = run(&fleet, &mut me, &dir, token).await {
        me.failed = Some(e);
    }
    me
}
