//! The failover end to end's checks of what is stored against what the agents hold: the event
//! log read position by position (positions strictly increasing, no event id twice, every
//! stream's versions 1..n in position order), the certificates the log issued (each one an
//! agent holds issued by exactly one event, and each one no agent holds the answer of a join
//! that was lost at the kill), and each held chain verified by webpki under the node CA.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use events::schema::{JoinRefused, NodeCertificateIssued, NodeJoined, RefusalsSuppressed};
use events::store::EventStore;
use events::RecordedEvent;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;

use super::agent::{AgentOutcome, Call};

/// A `node.certificate.issued` event.
#[derive(Debug, Clone)]
pub struct Issued {
    pub position: i64,
    pub payload: NodeCertificateIssued,
}

/// What the log holds, once its structure checked.
#[derive(Debug, Default)]
pub struct LogFacts {
    pub events: usize,
    pub streams: usize,
    pub node_streams: usize,
    pub issued: Vec<Issued>,
    pub joined: Vec<NodeJoined>,
    pub join_refusals: Vec<JoinRefused>,
    pub suppressed: Vec<RefusalsSuppressed>,
    pub renew_refusals: usize,
    pub by_type: BTreeMap<String, usize>,
}

/// Every event, oldest first (read once no writer runs, so no commit is still to land).
pub async fn read_log(store: &EventStore) -> Vec<RecordedEvent> {
    let mut all = store.read_all(0, 2000);
    let mut out = Vec::new();
    while let Some(batch) = all.next_batch().await.expect("read the log") {
        out.extend(batch);
    }
    out
}

/// Checks the log's structure position by position and collects the identity events.
pub fn check_log(events: &[RecordedEvent]) -> LogFacts {
    let mut facts = LogFacts::default();
    let mut last = 0i64;
    let mut ids = HashSet::new();
    let mut versions: HashMap<&str, i64> = HashMap::new();
    for e in events {
        assert!(
            e.position > last,
            "position {} after {last}: positions must strictly increase",
            e.position
        );
        last = e.position;
        assert!(
            ids.insert(e.event_id),
            "event id {} written twice (again at position {})",
            hex::encode(e.event_id),
            e.position
        );
        let version = versions.entry(e.stream_id.as_str()).or_insert(0);
        assert_eq!(
            e.stream_version,
            *version + 1,
            "stream {} at position {}: version {} after {}",
            e.stream_id,
            e.position,
            e.stream_version,
            version
        );
        *version = e.stream_version;
        *facts.by_type.entry(e.event_type.clone()).or_default() += 1;
        let bad = |what: &str| format!("position {}: {what}", e.position);
        match e.event_type.as_str() {
            "node.certificate.issued" => facts.issued.push(Issued {
                position: e.position,
                payload: e
                    .decode()
                    .unwrap_or_else(|x| panic!("{}: {x}", bad("issued"))),
            }),
            "node.joined" => facts.joined.push(
                e.decode()
                    .unwrap_or_else(|x| panic!("{}: {x}", bad("joined"))),
            ),
            "security.join.refused" => facts.join_refusals.push(
                e.decode()
                    .unwrap_or_else(|x| panic!("{}: {x}", bad("refused"))),
            ),
            "security.refusals.suppressed" => facts.suppressed.push(
                e.decode()
                    .unwrap_or_else(|x| panic!("{}: {x}", bad("suppressed"))),
            ),
            "security.renew.refused" | "security.renew.cloned" => facts.renew_refusals += 1,
            _ => {}
        }
    }
    facts.events = events.len();
    facts.streams = versions.len();
    facts.node_streams = versions.keys().filter(|s| s.starts_with("node/")).count();
    facts
}

/// Verifies `chain` (leaf first) as a client certificate under `node_ca_der` alone, now.
pub fn verify_chain(node_ca_der: &[u8], chain: &[Vec<u8>]) -> Result<(), String> {
    let mut roots = RootCertStore::empty();
    roots
        .add(CertificateDer::from(node_ca_der.to_vec()))
        .map_err(|e| format!("the node CA as a root: {e}"))?;
    let verifier = WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .map_err(|e| format!("the verifier: {e}"))?;
    let (leaf, rest) = chain.split_first().ok_or("an empty chain")?;
    let intermediates: Vec<CertificateDer<'static>> = rest
        .iter()
        .filter(|c| c.as_slice() != node_ca_der)
        .map(|c| CertificateDer::from(c.clone()))
        .collect();
    verifier
        .verify_client_cert(
            &CertificateDer::from(leaf.clone()),
            &intermediates,
            UnixTime::now(),
        )
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// The SubjectPublicKeyInfo (DER) of a certificate.
fn spki_of(der: &[u8]) -> Vec<u8> {
    x509_parser::parse_x509_certificate(der)
        .map(|(_, c)| c.tbs_certificate.subject_pki.raw.to_vec())
        .unwrap_or_default()
}

/// What the cross-check found.
#[derive(Debug)]
pub struct CrossCheck {
    pub held: usize,
    pub lost: usize,
}

/// Every certificate an agent holds is issued by exactly one event, for its node and by the
/// call it came from; every issued certificate no agent holds is the join answer lost at the
/// kill of a key an agent recorded as lost; every node joined is an agent's or a lost join's;
/// every join refusal is the retry of a lost join.
pub fn cross_check(facts: &LogFacts, agents: &[AgentOutcome]) -> CrossCheck {
    let mut by_der: HashMap<&[u8], Vec<&Issued>> = HashMap::new();
    for i in &facts.issued {
        by_der.entry(i.payload.der.as_slice()).or_default().push(i);
    }
    let mut held = HashSet::new();
    for a in agents {
        let node = a.node_id.as_deref().unwrap_or_default();
        for h in &a.held {
            let events = by_der.get(h.der.as_slice()).map_or(&[][..], Vec::as_slice);
            assert_eq!(
                events.len(),
                1,
                "agent {} holds certificate {} issued by {} events",
                a.index,
                h.serial,
                events.len()
            );
            let issued = &events[0].payload;
            let cause = match h.call {
                Call::Join => "join",
                Call::Renew => "renew",
            };
            assert_eq!(
                (
                    issued.node_id.as_str(),
                    issued.serial.as_str(),
                    issued.cause.as_str()
                ),
                (node, h.serial.as_str(), cause),
                "agent {}'s certificate at position {}",
                a.index,
                events[0].position
            );
            assert!(
                held.insert(h.der.as_slice()),
                "certificate {} held twice",
                h.serial
            );
        }
    }
    let lost_keys: HashSet<&[u8]> = agents
        .iter()
        .flat_map(|a| a.lost_joins.iter().map(|l| l.key_spki_der.as_slice()))
        .collect();
    let lost_csrs: HashSet<&[u8]> = agents
        .iter()
        .flat_map(|a| a.lost_joins.iter().map(|l| l.csr_sha256.as_slice()))
        .collect();
    let lost_count: usize = agents.iter().map(|a| a.lost_joins.len()).sum();
    let mut orphans = 0;
    for i in &facts.issued {
        if held.contains(i.payload.der.as_slice()) {
            continue;
        }
        orphans += 1;
        assert_eq!(
            i.payload.cause, "join",
            "position {}: a renewed certificate no agent holds ({})",
            i.position, i.payload.serial
        );
        assert!(
            lost_keys.contains(spki_of(&i.payload.der).as_slice()),
            "position {}: certificate {} of node {} is held by no agent and certifies no key of a \
             join whose answer was lost",
            i.position,
            i.payload.serial,
            i.payload.node_id
        );
    }
    assert_eq!(
        orphans, lost_count,
        "issued certificates no agent holds vs joins whose answer was lost"
    );
    let agent_nodes: HashSet<&str> = agents.iter().filter_map(|a| a.node_id.as_deref()).collect();
    let joined: HashSet<&str> = facts.joined.iter().map(|j| j.node_id.as_str()).collect();
    assert_eq!(facts.joined.len(), joined.len(), "a node joined twice");
    assert_eq!(
        joined.len(),
        agent_nodes.len() + lost_count,
        "node.joined events vs agents' nodes and lost joins"
    );
    assert!(
        agent_nodes.is_subset(&joined),
        "an agent's node has no node.joined"
    );
    let suppressed: u64 = facts.suppressed.iter().map(|s| s.count).sum();
    for r in &facts.join_refusals {
        assert_eq!(
            r.refusal, "join-token:csr-key-used",
            "a join refused for another reason than a lost answer's retry: {r:?}"
        );
        assert!(
            lost_csrs.contains(r.csr_sha256.as_slice()),
            "a join refusal for a CSR no agent lost: {r:?}"
        );
    }
    assert_eq!(
        facts.join_refusals.len() as u64 + suppressed,
        lost_count as u64,
        "join refusals (recorded + suppressed) vs lost joins"
    );
    assert_eq!(facts.renew_refusals, 0, "a renewal was refused");
    CrossCheck {
        held: held.len(),
        lost: lost_count,
    }
}
