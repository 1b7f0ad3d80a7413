//! Instruction counts of one operation (issue 16, part 9), for `benchmarks/callgrind.sh`.
//!
//! `cost <operation> [count]` prepares everything the operation needs, runs it once to warm up,
//! then runs it `count` times (default 1) between two marker functions, [`measure_begin`] and
//! [`measure_end`]. Under `valgrind --tool=callgrind --dump-before=*measure_begin*
//! --dump-before=*measure_end*` the second dump holds the instructions of exactly those runs,
//! in every thread of the process (the SQLite worker thread included), and none of the setup.
//! The last line printed is `units=<n>`: what the count is divided by.
//!
//! Our operations, all in this process and with no database unless said:
//!
//! | operation | what runs |
//! | --- | --- |
//! | `join` | what `JoinService::join` does besides SQL: open the sealed token (ECDH, HKDF, AES-GCM), verify the CSR, draw the node id and serial, decide (issue and sign the certificate), encode the events as the append does (protobuf, SHA-256), build and sign the JoinResponse |
//! | `renew` | the same for `JoinService::renew`: parse the leaf, verify the new CSR, decide (verify the renew-pop proof, issue and sign the certificate), encode the events, build the RenewResponse |
//! | `service-join` | one token join through the real `JoinService::join` on SQLite in this process (the SQL and the SQLite engine included), then the JoinResponse encoded and signed as the gateway does (`cost/whole_join.rs`) |
//! | `rebuild` | a rebuild of every projection (`commands::every_projection`, as `bcctl rebuild`) from a SQLite log in a temporary directory; `units` is the log's event count |
//!
//! Their references, the same libraries the code uses, doing only the crypto:
//!
//! | operation | what runs |
//! | --- | --- |
//! | `csr-verify` | ring's ECDSA P-256 (ASN.1) verify of a real CSR's signature over its `CertificationRequestInfo` |
//! | `ecdh-open` | `JoinEncryptionKey::open`, the token unsealing: RustCrypto `p256` ECDH, ring HKDF-SHA-256 and AES-256-GCM |
//! | `cert-sign` | ring's ECDSA P-256 (ASN.1) signature over a real leaf's `TBSCertificate`, by the node CA key (what rcgen calls) |
//! | `response-sign` | ring's ECDSA P-256 (fixed) signature over a real JoinResponse statement, by the JoinService signing key |
//! | `pop-verify` | ring's ECDSA P-256 (fixed) verify of a renew-pop proof |
//! | `read` | a raw read of the same SQLite log (`EventStore::read_all`), the rebuild's reference |
//!
//! With no operation (as `cargo bench -p commands --bench cost` runs it) every operation runs
//! natively and its wall time is printed: a smoke test, not the figure.

use std::error::Error;
use std::time::Instant;

use domain::identity::{
    decide_create_token, decide_renew, evolve_node, evolve_token, open_join, prepare_renew,
    unix_us, CertState, CreateToken, ExpectBinding, HardwareClaims, IdentityEvent, JoinCommand,
    JoinContext, JoinInput, JoinState, NodeState, RenewCommand, RenewInput, RenewState, TokenRole,
    TokenTargets,
};
use domain::pki::statement::{sign, JoinResponseStatement, RenewPop, RenewResponseStatement};
use domain::pki::{
    build_csr, seal_token, KeyRole, KeySet, KeySetLifetimes, NodeId, PrivateKey, SealedToken,
    Serial, Statement, TokenSecret, TrustDomain, VerifiedCsr,
};
use events::schema::{JoinRefused, NodeCertificateIssued};
use events::store::testkit::TestDb;
use events::store::{EventStore, ExpectedVersion, LogStore, LogTx};
use events::{new_event_id, NewEvent};
use prost::Message;
use ring::rand::SystemRandom;
use ring::signature::{self as sig, EcdsaKeyPair, KeyPair, UnparsedPublicKey};
use time::OffsetDateTime;

#[path = "support/token_join.rs"]
mod token_join;
use token_join::token_join;

#[path = "cost/whole_join.rs"]
mod whole_join;

type Fallible<T> = Result<T, Box<dyn Error>>;

const TENANT: &str = "bench";
/// Nodes in the rebuild's log; each adds 8 events (see [`fill_log`]).
const LOG_NODES: usize = 128;
/// Events per page, as `bcctl rebuild` reads them.
const REBUILD_BATCH: u32 = 10_000;

/// Callgrind dumps (and so zeroes) its counters on entering this function (`--dump-before`).
#[inline(never)]
fn measure_begin() {
    std::hint::black_box(0x6265_6769u32);
}

/// Callgrind dumps the counters on entering this function (`--dump-before`).
#[inline(never)]
fn measure_end() {
    std::hint::black_box(0x656e_6421u32);
}

/// Runs `work` between the markers and prints its wall time and `units`.
fn measured(units: u64, work: impl FnOnce() -> Fallible<()>) -> Fallible<()> {
    let start = Instant::now();
    measure_begin();
    work()?;
    measure_end();
    let us = start.elapsed().as_secs_f64() * 1e6;
    println!("wall_us_per_unit={:.1}", us / units as f64);
    println!("units={units}");
    Ok(())
}

/// A node agent: its key and the CSR it sends.
struct Agent {
    key: PrivateKey,
    csr: Vec<u8>,
}

impl Agent {
    fn new() -> Fallible<Agent> {
        let key = PrivateKey::generate(KeyRole::Node)?;
        let csr = build_csr(&key)?;
        Ok(Agent { key, csr })
    }
}

/// The control plane's keys, one token and the token's secret.
struct Fixture {
    keys: KeySet,
    secret: TokenSecret,
    token_events: Vec<IdentityEvent>,
    now: OffsetDateTime,
}

impl Fixture {
    fn new() -> Fallible<Fixture> {
        let now = OffsetDateTime::now_utc();
        let td = TrustDomain::new("bench.example.com")?;
        let keys = KeySet::generate(td, now, KeySetLifetimes::default())?;
        let secret = TokenSecret::generate()?;
        let token_events = decide_create_token(
            &CreateToken {
                token_id: "tok_cost".into(),
                tenant_id: TENANT.into(),
                site_id: "site-1".into(),
                pool_id: "pool-1".into(),
                role: TokenRole::Node,
                uses: 1_000_000,
                expires_at_us: unix_us(now) + 86_400_000_000,
                secret_hash: secret.hash(),
                expect: ExpectBinding::default(),
                reclaim_node_id: None,
                for_node_id: None,
                require_approval: false,
                boot_entry_id: None,
            },
            &TokenTargets::default(),
            now,
        )?
        .events;
        Ok(Fixture {
            keys,
            secret,
            token_events,
            now,
        })
    }

    fn ctx(&self) -> JoinContext<'_> {
        JoinContext {
            trust_domain: &self.keys.trust_domain,
            node_ca: &self.keys.node_ca,
            join_encryption: &self.keys.join_encryption,
            leaf_lifetime: time::Duration::hours(24),
            ramdisk_lifetime: time::Duration::hours(2),
        }
    }

    fn join_state(&self) -> JoinState {
        JoinState {
            token: self.token_events.iter().fold(None, evolve_token),
            csr_key_used: false,
            ..JoinState::default()
        }
    }

    /// A join request of a fresh agent, its token sealed to the JoinService for its CSR.
    fn join_input(&self) -> Fallible<(Agent, JoinInput)> {
        let agent = Agent::new()?;
        let csr_sha256 = domain::identity::sha256(&agent.csr);
        let recipient = self.keys.join_encryption.public_key();
        let sealed = seal_token(recipient, &self.secret, &csr_sha256)?;
        let input = JoinInput {
            csr_der: agent.csr.clone(),
            sealed_token: sealed.as_bytes().to_vec(),
            role: "node".into(),
            claims: HardwareClaims::default(),
            attestation: Vec::new(),
            report: Default::default(),
        };
        Ok((agent, input))
    }

    /// A renew request of `agent` holding `leaf`, for a fresh key.
    fn renew_input(
        &self,
        agent: &Agent,
        leaf: &NodeCertificateIssued,
    ) -> Fallible<(Agent, RenewInput)> {
        let next = Agent::new()?;
        let client_time_ms = u64::try_from(unix_us(self.now) / 1000)?;
        let pop = RenewPop {
            csr_sha256: domain::identity::sha256(&next.csr),
            node_id: NodeId::new(&leaf.node_id)?,
            client_time_ms,
        };
        let signature = sign(&agent.key, &pop)?;
        let input = RenewInput {
            csr_der: next.csr.clone(),
            chain: vec![leaf.der.clone()],
            client_time_ms,
            signature: signature.as_bytes().to_vec(),
            key_attestation: None,
        };
        Ok((next, input))
    }
}

/// Decided events as the append writes them: protobuf-encoded and hashed, grouped by stream.
fn encode_for_append(
    events: &[IdentityEvent],
    tenant: &str,
    now_us: i64,
) -> Vec<(String, Vec<NewEvent>)> {
    let mut out: Vec<(String, Vec<NewEvent>)> = Vec::new();
    for e in events {
        let new = e.to_new_event(new_event_id(), tenant, now_us);
        let stream = e.stream();
        match out.iter_mut().find(|(s, _)| *s == stream) {
            Some((_, list)) => list.push(new),
            None => out.push((stream, vec![new])),
        }
    }
    out
}

/// The certificate a decision issued.
fn issued(events: &[IdentityEvent]) -> Fallible<&NodeCertificateIssued> {
    events
        .iter()
        .find_map(|e| match e {
            IdentityEvent::CertificateIssued(c) => Some(c),
            _ => None,
        })
        .ok_or_else(|| "the decision issued no certificate".into())
}

/// Keeps `value` from being optimised away.
fn keep<T>(value: T) {
    std::hint::black_box(value);
}

/// What a join decided and what it answers.
struct Joined {
    events: Vec<IdentityEvent>,
    appends: Vec<(String, Vec<NewEvent>)>,
    response: proto::SignedJoinResponse,
}

/// One join, all of its CPU but the SQL.
fn join(fx: &Fixture, state: &JoinState, input: &JoinInput) -> Fallible<Joined> {
    let ctx = fx.ctx();
    let now_us = unix_us(fx.now);
    let opened = open_join(&ctx, input).map_err(|e| format!("the join was refused: {e:?}"))?;
    let csr_sha256 = *opened.csr.sha256();
    let cmd = JoinCommand {
        opened,
        new_node_id: NodeId::new(&format!("node_{}", uuid::Uuid::new_v4().simple()))?,
        serial: Serial::generate()?,
    };
    let events = token_join(&ctx, &cmd, state, fx.now)?.events;
    let appends = encode_for_append(&events, TENANT, now_us);
    let cert = issued(&events)?;
    let body = proto::JoinResponse {
        csr_sha256: csr_sha256.to_vec(),
        trust_domain: fx.keys.trust_domain.to_string(),
        node_id: cert.node_id.clone(),
        site_id: "site-1".into(),
        role: "node".into(),
        certificate_chain: vec![cert.der.clone(), fx.keys.node_ca.cert_der().to_vec()],
        not_after_ms: cert.not_after_us / 1000,
        server_time_ms: now_us / 1000,
        identity_generation: cert.identity_generation,
        deferral: None,
        ..Default::default()
    }
    .encode_to_vec();
    let signature = sign(
        &fx.keys.join_signing,
        &JoinResponseStatement {
            csr_sha256,
            response: &body,
        },
    )?;
    let response = proto::SignedJoinResponse {
        response: body,
        signature: signature.as_bytes().to_vec(),
    };
    Ok(Joined {
        events,
        appends,
        response,
    })
}

/// What a renewal decided and what it answers.
struct Renewed {
    events: Vec<IdentityEvent>,
    appends: Vec<(String, Vec<NewEvent>)>,
    response: proto::SignedRenewResponse,
}

/// One renewal, all of its CPU but the SQL.
fn renew(fx: &Fixture, state: &RenewState, input: &RenewInput) -> Fallible<Renewed> {
    let ctx = fx.ctx();
    let now_us = unix_us(fx.now);
    let prepared =
        prepare_renew(&ctx, input).map_err(|e| format!("the renewal was refused: {e:?}"))?;
    let cmd = RenewCommand {
        prepared,
        serial: Serial::generate()?,
    };
    let events = decide_renew(&ctx, &cmd, state, fx.now)?.events;
    let appends = encode_for_append(&events, TENANT, now_us);
    let cert = issued(&events)?;
    let csr_sha256 = *cmd.prepared.csr.sha256();
    let body = proto::RenewResponse {
        certificate_chain: vec![cert.der.clone(), fx.keys.node_ca.cert_der().to_vec()],
        trust_roots: vec![fx.keys.root_ca.cert_der().to_vec()],
        not_after_ms: cert.not_after_us / 1000,
        server_time_ms: now_us / 1000,
        csr_sha256: csr_sha256.to_vec(),
        trust_domain: fx.keys.trust_domain.to_string(),
        node_id: cert.node_id.clone(),
        site_id: "site-1".into(),
        role: "node".into(),
        identity_generation: cert.identity_generation,
        allowed_kinds: Vec::new(),
    }
    .encode_to_vec();
    let signature = sign(
        &fx.keys.join_signing,
        &RenewResponseStatement {
            csr_sha256,
            response: &body,
        },
    )?;
    let response = proto::SignedRenewResponse {
        response: body,
        signature: signature.as_bytes().to_vec(),
    };
    Ok(Renewed {
        events,
        appends,
        response,
    })
}

/// The state a renewal of the certificate `events` issued reads.
fn renew_state(node: Option<NodeState>, events: &[IdentityEvent]) -> Fallible<RenewState> {
    let cert = issued(events)?;
    Ok(RenewState {
        node: events.iter().fold(node, evolve_node),
        cert: Some(CertState {
            serial: cert.serial.clone(),
            node_id: cert.node_id.clone(),
            identity_generation: cert.identity_generation,
            der: cert.der.clone(),
            not_after_us: cert.not_after_us,
            revoked: false,
            allowed_kinds: cert.allowed_kinds.clone(),
        }),
        proof_used: false,
        successor: None,
        recent_renewals_us: Vec::new(),
        unrevoked_serials: Vec::new(),
    })
}

/// The first element inside a DER SEQUENCE (the signed part of a CSR or a certificate), and
/// the content of the BIT STRING after it and its algorithm (the signature).
fn der_signed_parts(der: &[u8]) -> Option<(&[u8], &[u8])> {
    let outer = Tlv::parse(der)?;
    let signed = Tlv::parse(outer.content)?;
    let algorithm = Tlv::parse(signed.rest)?;
    let bits = Tlv::parse(algorithm.rest)?;
    (bits.tag == 0x03)
        .then(|| bits.content.get(1..))
        .flatten()
        .map(|s| (signed.whole, s))
}

/// One DER element: its tag, its content, the whole element, and what follows it.
struct Tlv<'a> {
    tag: u8,
    content: &'a [u8],
    whole: &'a [u8],
    rest: &'a [u8],
}

impl<'a> Tlv<'a> {
    fn parse(input: &'a [u8]) -> Option<Tlv<'a>> {
        let (&tag, after_tag) = input.split_first()?;
        let (&first, after_len) = after_tag.split_first()?;
        let (len, body) = if first < 0x80 {
            (usize::from(first), after_len)
        } else {
            let n = usize::from(first & 0x7f);
            let bytes = after_len.get(..n)?;
            let len = bytes.iter().fold(0usize, |a, b| (a << 8) | usize::from(*b));
            (len, after_len.get(n..)?)
        };
        let header = input.len() - body.len();
        Some(Tlv {
            tag,
            content: body.get(..len)?,
            whole: input.get(..header + len)?,
            rest: body.get(len..)?,
        })
    }
}

/// Appends a log of [`LOG_NODES`] joined nodes, each renewed twice and refused once, with the
/// events the decisions above produce. Returns the log's event count.
async fn fill_log(fx: &Fixture, store: &EventStore) -> Fallible<u64> {
    let now_us = unix_us(fx.now);
    let mut batches = vec![encode_for_append(&fx.token_events, TENANT, now_us)];
    let mut state = fx.join_state();
    for _ in 0..LOG_NODES {
        let (mut agent, input) = fx.join_input()?;
        let joined = join(fx, &state, &input)?;
        state.token = joined.events.iter().fold(state.token, evolve_token);
        let mut renewal = renew_state(None, &joined.events)?;
        let mut events = joined.events;
        batches.push(joined.appends);
        for _ in 0..2 {
            let cert = issued(&events)?;
            let (next, input) = fx.renew_input(&agent, cert)?;
            let renewed = renew(fx, &renewal, &input)?;
            renewal = renew_state(renewal.node.take(), &renewed.events)?;
            batches.push(renewed.appends);
            (agent, events) = (next, renewed.events);
        }
        let refused = JoinRefused {
            refusal: "join-token:unknown-token".into(),
            attestor: "join-token".into(),
            window_start_us: now_us - now_us.rem_euclid(60_000_000),
            csr_sha256: domain::identity::sha256(&input.csr_der).to_vec(),
            ..Default::default()
        };
        let event = NewEvent::from_payload(new_event_id(), "root", now_us, &refused);
        batches.push(vec![("tenant/root".into(), vec![event])]);
    }
    let mut tx = store.begin().await?;
    let mut count = 0u64;
    for (stream, events) in batches.into_iter().flatten() {
        tx.append(&stream, ExpectedVersion::Any, &events).await?;
        count += u64::try_from(events.len())?;
    }
    tx.commit().await?;
    Ok(count)
}

/// A P-256 signing key of ring for `key`'s PKCS#8, with the given encoding of signatures.
fn ring_key(key: &PrivateKey, alg: &'static sig::EcdsaSigningAlgorithm) -> Fallible<EcdsaKeyPair> {
    EcdsaKeyPair::from_pkcs8(alg, key.pkcs8_der(), &SystemRandom::new())
        .map_err(|e| format!("ring refused the key: {e}").into())
}

/// `count + 1` inputs made by `make`: one to warm up, `count` to measure.
fn prepare<T>(count: usize, make: impl FnMut() -> Fallible<T>) -> Fallible<Vec<T>> {
    std::iter::repeat_with(make).take(count + 1).collect()
}

/// Runs `op` on the first input to warm up, then on the others between the markers.
fn warm_then_measure<T>(inputs: &[T], op: impl Fn(&T) -> Fallible<()>) -> Fallible<()> {
    let (first, rest) = inputs.split_first().ok_or("nothing to measure")?;
    op(first)?;
    measured(u64::try_from(rest.len())?, || rest.iter().try_for_each(&op))
}

fn run(op: &str, count: usize) -> Fallible<()> {
    let fx = Fixture::new()?;
    let state = fx.join_state();
    match op {
        "join" => {
            let inputs = prepare(count, || Ok(fx.join_input()?.1))?;
            warm_then_measure(&inputs, |i| join(&fx, &state, i).map(|j| keep(j.response)))
        }
        "renew" | "pop-verify" => {
            let (agent, input) = fx.join_input()?;
            let joined = join(&fx, &state, &input)?;
            let cert = issued(&joined.events)?;
            let renewal = renew_state(None, &joined.events)?;
            let inputs = prepare(count, || Ok(fx.renew_input(&agent, cert)?.1))?;
            if op == "renew" {
                return warm_then_measure(&inputs, |i| {
                    renew(&fx, &renewal, i).map(|r| keep(r.response))
                });
            }
            let node_id = NodeId::new(&cert.node_id)?;
            let proofs = inputs
                .iter()
                .map(|i| {
                    let pop = RenewPop {
                        csr_sha256: domain::identity::sha256(&i.csr_der),
                        node_id: node_id.clone(),
                        client_time_ms: i.client_time_ms,
                    };
                    (pop.signed_input(), i.signature.clone())
                })
                .collect::<Vec<_>>();
            let point = agent.key.public_key().uncompressed_point();
            let key = UnparsedPublicKey::new(&sig::ECDSA_P256_SHA256_FIXED, point);
            warm_then_measure(&proofs, |(message, signature)| {
                let verified = key.verify(message, signature);
                verified.map_err(|_| "the proof does not verify".into())
            })
        }
        "csr-verify" => {
            let csrs = prepare(count, || {
                let csr = Agent::new()?.csr;
                let point = VerifiedCsr::verify(&csr)?
                    .public_key()
                    .uncompressed_point()
                    .to_vec();
                let (info, signature) =
                    der_signed_parts(&csr).ok_or("the CSR's DER does not parse")?;
                Ok((point, info.to_vec(), signature.to_vec()))
            })?;
            warm_then_measure(&csrs, |(point, info, signature)| {
                let key = UnparsedPublicKey::new(&sig::ECDSA_P256_SHA256_ASN1, point);
                let verified = key.verify(info, signature);
                verified.map_err(|_| "the CSR does not verify".into())
            })
        }
        "ecdh-open" => {
            let sealed = prepare(count, || {
                let (_, input) = fx.join_input()?;
                let csr_sha256 = domain::identity::sha256(&input.csr_der);
                Ok((SealedToken::from_bytes(&input.sealed_token)?, csr_sha256))
            })?;
            warm_then_measure(&sealed, |(token, csr_sha256)| {
                keep(fx.keys.join_encryption.open(token, csr_sha256)?);
                Ok(())
            })
        }
        "cert-sign" | "response-sign" => {
            let (_, input) = fx.join_input()?;
            let joined = join(&fx, &state, &input)?;
            let (key, message) = if op == "cert-sign" {
                let leaf = &issued(&joined.events)?.der;
                let (tbs, _) = der_signed_parts(leaf).ok_or("the leaf's DER does not parse")?;
                let ca = fx.keys.node_ca.private_key();
                (
                    ring_key(ca, &sig::ECDSA_P256_SHA256_ASN1_SIGNING)?,
                    tbs.to_vec(),
                )
            } else {
                let statement = JoinResponseStatement {
                    csr_sha256: domain::identity::sha256(&input.csr_der),
                    response: &joined.response.response,
                };
                let signer = &fx.keys.join_signing;
                let key = ring_key(signer, &sig::ECDSA_P256_SHA256_FIXED_SIGNING)?;
                (key, statement.signed_input())
            };
            keep(key.public_key());
            let rng = SystemRandom::new();
            warm_then_measure(&vec![(); count + 1], |()| {
                let signature = key.sign(&rng, &message);
                signature
                    .map(keep)
                    .map_err(|_| "ring could not sign".into())
            })
        }
        "service-join" => whole_join::run(count),
        "rebuild" | "read" => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?;
            let db = TestDb::sqlite()?;
            let store = rt.block_on(db.store())?;
            let events = rt.block_on(fill_log(&fx, &store))?;
            let all = commands::every_projection();
            let pass = || -> Fallible<u64> {
                rt.block_on(async {
                    if op == "rebuild" {
                        Ok(projections::rebuild(&store, &all, None, REBUILD_BATCH, |_| {}).await?)
                    } else {
                        let mut pages = store.read_all(0, REBUILD_BATCH);
                        let (mut n, mut bytes) = (0u64, 0usize);
                        while let Some(page) = pages.next_batch().await? {
                            n += u64::try_from(page.len())?;
                            bytes += page.iter().map(|e| e.payload.len()).sum::<usize>();
                        }
                        keep(bytes);
                        Ok(n)
                    }
                })
            };
            // The warm-up pass, which also checks that every event is seen.
            if pass()? != events {
                return Err(format!("the {op} did not see the log's {events} events").into());
            }
            measured(events, || pass().map(keep))
        }
        other => Err(format!("unknown operation {other:?}; see the doc comment of cost.rs").into()),
    }
}

/// The allocator bcctl runs with, so that the counts are those of `bcctl serve` and `rebuild`.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Every operation, in the order the smoke test runs them.
const OPERATIONS: &str =
    "join service-join renew rebuild csr-verify ecdh-open cert-sign response-sign pop-verify read";

fn main() -> Fallible<()> {
    // `cargo bench` passes `--bench`; anything else is the operation and the count.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let count = match args.get(1) {
        Some(n) => n.parse().map_err(|_| format!("bad count {n:?}"))?,
        None => 1,
    };
    match args.first() {
        Some(op) => run(op, count),
        None => OPERATIONS.split(' ').try_for_each(|op| {
            println!("{op}:");
            run(op, 20)
        }),
    }
}
