//! The `tpm` attestor's cost per join (issue 19), next to the crypto a join cannot avoid,
//! measured in the same run (benchmarks/tpm-verify.sh, benchmarks/RESULTS.md).
//!
//! Each EK kind (RSA-2048, ECC P-384) gets a real swtpm and real evidence made by tpm2-tools
//! (the tests' independent client, `tests/tpm_support.rs`): the EK, its certificate, the AK, a
//! node key in the TPM, its CSR, and the answer to one real challenge (activation, quote,
//! certification). Then it times, per join:
//!
//! | part | what runs |
//! | --- | --- |
//! | `round1` | `plan` + `verify` of the evidence, as the join service calls them: parse, EK checks, chain (webpki), AK checks, MakeCredential, seal the state |
//! | `round2` | `plan` + `verify` of the answer: parse, open the state (twice: plan and verify), secret, quote, PCRs, certification, placement |
//! | `chain` | the EK chain's two signature verifications alone (webpki's algorithm, on ring) |
//! | `seed` | MakeCredential's seed: RSA-2048 OAEP encrypt (`rsa`) or ephemeral P-384 ECDH (ring) |
//! | `quote-verify`, `certify-verify` | ring P-256 verifies by the AK |
//! | `csr-verify` | ring P-256 verify of the CSR (the join service's, before the attestor) |
//! | `cert-sign` | ring P-256 signature of a certificate-sized message (the join service's) |
//!
//! Round 2 reuses one answer: the verifier keeps no record of used challenges (the state is
//! valid until it expires), so every run does the full work.
//!
//! With no arguments (or cargo's `--bench`): three rounds of wall time, medians printed.
//! `tpm_verify --callgrind KIND PART N` (KIND `rsa` or `p384`) prepares, runs PART once, then
//! N times between [`measure_begin`] and [`measure_end`] for `valgrind --tool=callgrind
//! --dump-before=*measure_begin* --dump-before=*measure_end*`; it prints `units=N`.
//! `TPM_BENCH_ITERS` (default 200) sets the runs per part per round.

#[path = "../tests/tpm_support.rs"]
mod tpm_support;

#[path = "tpm_verify/floor.rs"]
mod floor;

use std::collections::BTreeMap;
use std::error::Error;
use std::time::{Duration, Instant};

use domain::attest::tpm::public::TpmPublic;
use domain::attest::tpm::{
    NodeKeyPolicy, TpmAttestation, TpmAttestor, TpmChallenge, TpmConfig, TpmEvidence,
};
use domain::attest::{AttestRequest, Attestor, EntryState, Facts, Verdict};
use domain::identity::{claims_digests, ClaimsDigests, HardwareClaims};
use domain::pki::{build_csr_with, NodeRole, VerifiedCsr};
use sha2::{Digest, Sha256};
use swtpm_fixture::swtpm::ek_ca;
use time::OffsetDateTime;

use floor::{Floor, FloorInput};
use tpm_support::{EkKind, Machine, NODE_ATTRIBUTES};

type Fallible<T> = Result<T, Box<dyn Error>>;

const ROUNDS: usize = 3;

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

/// What is timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Round1,
    Round2,
    Chain,
    Seed,
    QuoteVerify,
    CertifyVerify,
    CsrVerify,
    CertSign,
}

const PARTS: [(Part, &str); 8] = [
    (Part::Round1, "round1"),
    (Part::Round2, "round2"),
    (Part::Chain, "chain"),
    (Part::Seed, "seed"),
    (Part::QuoteVerify, "quote-verify"),
    (Part::CertifyVerify, "certify-verify"),
    (Part::CsrVerify, "csr-verify"),
    (Part::CertSign, "cert-sign"),
];

fn kind_name(kind: EkKind) -> &'static str {
    match kind {
        EkKind::Rsa => "rsa",
        EkKind::P384 => "p384",
    }
}

/// One machine's join, ready to be verified again and again.
struct Fixture {
    // Held for the swtpm's lifetime; the timed parts never talk to it.
    _machine: Machine,
    attestor: TpmAttestor,
    csr: VerifiedCsr,
    claims: HardwareClaims,
    digests: ClaimsDigests,
    evidence: Vec<u8>,
    answer: Vec<u8>,
    facts: Facts,
    now: OffsetDateTime,
    floor: Floor,
}

fn sha(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

impl Fixture {
    fn new(kind: EkKind) -> Fallible<Fixture> {
        let m = Machine::new(kind);
        let node = m.create_primary("o", NODE_ATTRIBUTES, Some(&[1; 32]));
        let csr_der = build_csr_with(&m.signer(&node))?;
        let csr = VerifiedCsr::verify(&csr_der)?;
        let ek_public = m.ek_public();
        let evidence = TpmEvidence {
            ek_public: ek_public.clone(),
            ek_certificate: m.ek_certificate(),
            ek_intermediates: vec![ek_ca().issuer_der()],
            ak_public: m.ak_public(),
        };
        let attestor = TpmAttestor::new(TpmConfig {
            ek_roots: vec![ek_ca().root_der()],
            pcr_policy: BTreeMap::new(),
            node_key: NodeKeyPolicy::Certified,
            enrollment: None,
            challenge_key: [7; 32],
            challenge_ttl: Duration::from_secs(300),
        });
        let mut facts = Facts::default();
        facts.entries.insert(
            ("tpm-allow".into(), hex::encode(sha(&ek_public))),
            EntryState {
                entry_id: "tpma_bench".into(),
                tenant_id: "t1".into(),
                site_id: "site-1".into(),
                pool_id: "pool-1".into(),
                role: None,
            },
        );
        let claims = HardwareClaims::default();
        let digests = claims_digests(&claims);
        let mut fx_evidence = TpmAttestation::evidence(evidence.clone()).to_bytes();
        let now = OffsetDateTime::now_utc();
        let request = AttestRequest {
            role: NodeRole::Node,
            csr: &csr,
            claims: &claims,
            digests: &digests,
            evidence: &fx_evidence,
            token: None,
            now,
            entropy: &const { domain::attest::Entropy::from_seed([7; 32]) },
        };
        let challenge: TpmChallenge =
            match domain::attest::plan_and_verify(&attestor, &request, &Facts::default()) {
                Verdict::Challenge(c) => serde_json::from_slice(&c.payload)?,
                other => return Err(format!("round 1 answered {other:?}").into()),
            };
        let answer = m.answer(&challenge, &node, csr.sha256());
        let certified = answer
            .node_key
            .clone()
            .ok_or("the answer certifies the node key")?;
        let ak_point = TpmPublic::parse(&evidence.ak_public)
            .map_err(|e| format!("{e:?}"))?
            .ecc_point(32)
            .ok_or("the AK is not P-256")?;
        let floor = Floor::new(&FloorInput {
            ek_public: &evidence.ek_public,
            ek_certificate: &evidence.ek_certificate,
            issuer: &ek_ca().issuer_der(),
            root: &ek_ca().root_der(),
            ak_point: &ak_point,
            quote: (&answer.quote, &answer.quote_signature),
            certify: (&certified.certify_info, &certified.signature),
            csr_der: &csr_der,
            csr_point: csr.public_key().uncompressed_point(),
        })?;
        // Nothing loaded is left for the timed parts: they never reach the TPM.
        m.tool("tpm2_flushcontext", &["-t"]);
        let fx = Fixture {
            _machine: m,
            attestor,
            csr,
            claims,
            digests,
            evidence: std::mem::take(&mut fx_evidence),
            answer: TpmAttestation::answer(answer).to_bytes(),
            facts,
            now,
            floor,
        };
        for (part, _) in PARTS {
            fx.run(part)?;
        }
        Ok(fx)
    }

    fn request<'a>(&'a self, bytes: &'a [u8]) -> AttestRequest<'a> {
        AttestRequest {
            role: NodeRole::Node,
            csr: &self.csr,
            claims: &self.claims,
            digests: &self.digests,
            evidence: bytes,
            token: None,
            now: self.now,
            entropy: &const { domain::attest::Entropy::from_seed([7; 32]) },
        }
    }

    /// Runs `part` once; an unexpected outcome is an error.
    fn run(&self, part: Part) -> Fallible<()> {
        match part {
            Part::Round1 => {
                let request = self.request(&self.evidence);
                let planned = self.attestor.plan(&request).map_err(|r| r.text())?;
                let empty = Facts::default();
                match self.attestor.verify(&request, &planned.plan, &empty) {
                    Verdict::Challenge(c) if planned.facts.is_empty() => {
                        std::hint::black_box(c);
                        Ok(())
                    }
                    other => Err(format!("round 1 answered {other:?}").into()),
                }
            }
            Part::Round2 => {
                let request = self.request(&self.answer);
                let planned = self.attestor.plan(&request).map_err(|r| r.text())?;
                std::hint::black_box(&planned.facts);
                match self.attestor.verify(&request, &planned.plan, &self.facts) {
                    Verdict::Admit(r) => {
                        std::hint::black_box(r);
                        Ok(())
                    }
                    other => Err(format!("round 2 answered {other:?}").into()),
                }
            }
            Part::Chain => self.floor.chain(),
            Part::Seed => self.floor.seed(),
            Part::QuoteVerify => self.floor.quote_verify(),
            Part::CertifyVerify => self.floor.certify_verify(),
            Part::CsrVerify => self.floor.csr_verify(),
            Part::CertSign => self.floor.cert_sign(),
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// One round's figures: µs per part (in [`PARTS`] order) and their [`derived`] figures.
type Round = (Vec<f64>, [f64; 5]);

/// One round's figures for one EK kind: µs per part, in [`PARTS`] order. The parts take turns
/// (one run of each, `iters` times), so a change in the host's load falls on all of them alike.
fn round(fx: &Fixture, iters: u32) -> Fallible<Vec<f64>> {
    let mut total = vec![Duration::ZERO; PARTS.len()];
    for _ in 0..iters {
        for (i, (part, _)) in PARTS.iter().enumerate() {
            let start = Instant::now();
            fx.run(*part)?;
            total[i] += start.elapsed();
        }
    }
    Ok(total
        .iter()
        .map(|t| t.as_secs_f64() * 1e6 / f64::from(iters))
        .collect())
}

/// Derived figures of one round: attestor, attestor floor, join floor, and the two ratios.
fn derived(us: &[f64]) -> [f64; 5] {
    let attestor = us[0] + us[1];
    let own_floor = us[2] + us[3] + us[4] + us[5];
    let join_floor = own_floor + us[6] + us[7];
    [
        attestor,
        own_floor,
        join_floor,
        attestor / own_floor,
        attestor / join_floor,
    ]
}

fn wall() -> Fallible<()> {
    let iters: u32 = match std::env::var("TPM_BENCH_ITERS") {
        Ok(v) => v.parse()?,
        Err(_) => 200,
    };
    println!(
        "tpm verify benchmark: {ROUNDS} rounds of {iters} runs per part, medians (µs per join)"
    );
    for kind in [EkKind::Rsa, EkKind::P384] {
        let fx = Fixture::new(kind)?;
        let mut rounds = Vec::new();
        for r in 0..ROUNDS {
            let us = round(&fx, iters)?;
            let d = derived(&us);
            println!(
                "  {} round {}: attestor {:.1} µs, own floor {:.1} µs ({:.2}×), join floor {:.1} µs ({:.2}×)",
                kind_name(kind),
                r + 1,
                d[0],
                d[1],
                d[3],
                d[2],
                d[4]
            );
            rounds.push((us, d));
        }
        let col = |f: &dyn Fn(&Round) -> f64| median(rounds.iter().map(f).collect());
        println!("EK {}:", kind_name(kind));
        for (i, (_, name)) in PARTS.iter().enumerate() {
            println!("  {name:<16} {:>9.1} µs", col(&|r| r.0[i]));
        }
        let names = [
            "attestor (round1 + round2)",
            "own floor (chain + seed + quote + certify)",
            "join floor (own + csr-verify + cert-sign)",
        ];
        for (i, name) in names.iter().enumerate() {
            println!("  {name:<44} {:>9.1} µs", col(&|r| r.1[i]));
        }
        println!("  ratio attestor / own floor   {:.2}×", col(&|r| r.1[3]));
        println!("  ratio attestor / join floor  {:.2}×", col(&|r| r.1[4]));
    }
    Ok(())
}

fn callgrind(kind: &str, part: &str, count: &str) -> Fallible<()> {
    let kind = match kind {
        "rsa" => EkKind::Rsa,
        "p384" => EkKind::P384,
        other => return Err(format!("unknown EK kind {other:?} (rsa, p384)").into()),
    };
    let part = PARTS
        .iter()
        .find(|(_, n)| *n == part)
        .map(|(p, _)| *p)
        .ok_or_else(|| format!("unknown part {part:?}"))?;
    let n: u32 = count.parse()?;
    let fx = Fixture::new(kind)?;
    fx.run(part)?;
    let start = Instant::now();
    measure_begin();
    for _ in 0..n {
        fx.run(part)?;
    }
    measure_end();
    let us = start.elapsed().as_secs_f64() * 1e6;
    println!("wall_us_per_unit={:.1}", us / f64::from(n));
    println!("units={n}");
    Ok(())
}

fn main() -> Fallible<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.iter().position(|a| a == "--callgrind") {
        Some(i) => match args.get(i + 1..i + 4) {
            Some([kind, part, count]) => callgrind(kind, part, count),
            _ => Err("usage: tpm_verify --callgrind rsa|p384 PART N".into()),
        },
        None => wall(),
    }
}
