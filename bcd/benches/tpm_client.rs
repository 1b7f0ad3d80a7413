//! bcd's TPM client on swtpm (issue 19): what a join and a renewal cost the node, next to the raw
//! TPM commands they issue, timed with tss-esapi directly in the same run on the same swtpm.
//!
//! | bcd operation | the raw commands it stands on |
//! | --- | --- |
//! | `join_evidence` (round 1) | NV read of the EK certificate, create_primary EK, create_primary AK |
//! | `answer_challenge` (round 2) | create_primary AK, create_primary EK, activate_credential (policy session + PolicySecret + ActivateCredential), quote + PCR read, certify (node key loaded) |
//! | renewal: `create_node_key` + `certify` | get_random, create_primary node key (a new unique), create_primary AK, certify |
//!
//! Every create_primary's object is flushed after use (a renewal also flushes the key it
//! replaces): two flush_context per operation but `sign_es256`.
//! | `sign_es256` (node key loaded) | sign |
//!
//! One swtpm (the RSA-2048 EK, the one bcd picks first; `TPM_CLIENT_EK=p384` for the P-384 EK,
//! through `Tpm::use_ek`) serves one connection at a time, so each
//! round runs bcd's operations on a `bcd::tpm::Tpm`, closes it, then the raw commands on a
//! `tss_esapi::Context`; three rounds, medians. The challenge is a real one, made once by the
//! domain's `TpmAttestor` (not timed); the TPM does not remember a challenge, so answering it
//! again is the full work. `TPM_CLIENT_ITERS` (default 5) sets the runs per operation per round.

use std::collections::BTreeMap;
use std::error::Error;
use std::str::FromStr;
use std::time::{Duration, Instant};

use bcd::tpm::{templates, EkKind, Tpm};
use domain::attest::tpm::{NodeKeyPolicy, TpmAttestation, TpmAttestor, TpmChallenge, TpmConfig};
use domain::attest::{AttestRequest, Facts, Verdict};
use domain::identity::{claims_digests, HardwareClaims};
use domain::pki::{build_csr_with, NodeRole, NodeSigner, VerifiedCsr};
use sha2::{Digest as _, Sha256};
use swtpm_fixture::swtpm::{ek_ca, Swtpm};
use tss_esapi::abstraction::{nv, pcr};
use tss_esapi::constants::tss::{TPM2_RH_NULL, TPM2_ST_HASHCHECK};
use tss_esapi::constants::SessionType;
use tss_esapi::handles::{AuthHandle, KeyHandle, NvIndexTpmHandle, SessionHandle, TpmHandle};
use tss_esapi::interface_types::algorithm::HashingAlgorithm;
use tss_esapi::interface_types::resource_handles::{Hierarchy, NvAuth};
use tss_esapi::interface_types::session_handles::{AuthSession, PolicySession};
use tss_esapi::structures::{
    Data, Digest, DigestList, EncryptedSecret, HashScheme, HashcheckTicket, IdObject,
    PcrSelectionList, PcrSelectionListBuilder, PcrSlot, Public, SignatureScheme,
    SymmetricDefinition,
};
use tss_esapi::tcti_ldr::TctiNameConf;
use tss_esapi::tss2_esys::TPMT_TK_HASHCHECK;
use tss_esapi::Context;

type Fallible<T> = Result<T, Box<dyn Error>>;

const ROUNDS: usize = 3;

/// bcd's operations, then the raw ones, in the order printed.
const BCD: [&str; 4] = ["join_evidence", "answer_challenge", "renewal", "sign_es256"];
const RAW: [&str; 11] = [
    "nv_read (EK cert)",
    "create_primary EK",
    "create_primary AK",
    "create_primary node key",
    "get_random",
    "activate_credential",
    "quote + pcr_read",
    "certify",
    "sign",
    "create_primary node key (new unique)",
    "flush_context",
];

/// What every round needs: the TPM, the challenge and the CSR digest it is for.
struct Setup {
    tcti: String,
    kind: EkKind,
    challenge: TpmChallenge,
    csr_sha256: [u8; 32],
    node_unique: [u8; 32],
}

fn setup(swtpm: &Swtpm, kind: EkKind) -> Fallible<Setup> {
    let tcti = swtpm.tcti();
    let tpm = Tpm::open(&tcti)?;
    tpm.use_ek(kind)?;
    let key = tpm.create_node_key()?;
    let csr = VerifiedCsr::verify(&build_csr_with(&key)?)?;
    let evidence = tpm.join_evidence(&[ek_ca().issuer_der()])?;
    let attestor = TpmAttestor::new(TpmConfig {
        ek_roots: vec![ek_ca().root_der()],
        pcr_policy: BTreeMap::new(),
        node_key: NodeKeyPolicy::Certified,
        enrollment: None,
        challenge_key: [7; 32],
        challenge_ttl: Duration::from_secs(300),
    });
    let claims = HardwareClaims::default();
    let digests = claims_digests(&claims);
    let bytes = TpmAttestation::evidence(evidence).to_bytes();
    let request = AttestRequest {
        role: NodeRole::Node,
        csr: &csr,
        claims: &claims,
        digests: &digests,
        evidence: &bytes,
        token: None,
        now: time::OffsetDateTime::now_utc(),
        entropy: &const { domain::attest::Entropy::from_seed([7; 32]) },
    };
    let challenge = match domain::attest::plan_and_verify(&attestor, &request, &Facts::default()) {
        Verdict::Challenge(c) => serde_json::from_slice(&c.payload)?,
        other => return Err(format!("round 1 answered {other:?}").into()),
    };
    Ok(Setup {
        tcti,
        kind,
        challenge,
        csr_sha256: *csr.sha256(),
        node_unique: *key.unique(),
    })
}

/// Milliseconds per run of `f`, over `iters` runs.
fn time_ms(iters: u32, mut f: impl FnMut() -> Fallible<()>) -> Fallible<f64> {
    let start = Instant::now();
    for _ in 0..iters {
        f()?;
    }
    Ok(start.elapsed().as_secs_f64() * 1e3 / f64::from(iters))
}

/// bcd's four operations, ms each, in [`BCD`] order.
fn bcd_round(s: &Setup, iters: u32) -> Fallible<Vec<f64>> {
    let tpm = Tpm::open(&s.tcti)?;
    tpm.use_ek(s.kind)?;
    let issuer = vec![ek_ca().issuer_der()];
    let key = tpm.load_node_key(&s.node_unique)?;
    let mut out = vec![time_ms(iters, || {
        std::hint::black_box(tpm.join_evidence(&issuer)?);
        Ok(())
    })?];
    out.push(time_ms(iters, || {
        let answer = tpm.answer_challenge(&s.challenge, &s.csr_sha256, Some(&key))?;
        std::hint::black_box(answer);
        Ok(())
    })?);
    let mut last = None;
    out.push(time_ms(iters, || {
        let next = tpm.create_node_key()?;
        std::hint::black_box(tpm.certify(&next, &s.csr_sha256)?);
        last = Some(next);
        Ok(())
    })?);
    let signer = last.ok_or("no renewal ran")?;
    out.push(time_ms(iters, || {
        std::hint::black_box(signer.sign_es256(b"a renew-pop statement of some length")?);
        Ok(())
    })?);
    Ok(out)
}

/// A raw TPM connection with the objects loaded that the timed commands use.
struct Raw {
    ctx: Context,
}

impl Raw {
    fn open(tcti: &str) -> Fallible<Raw> {
        Ok(Raw {
            ctx: Context::new(TctiNameConf::from_str(tcti)?)?,
        })
    }

    fn primary(&mut self, hierarchy: Hierarchy, template: Public) -> Fallible<KeyHandle> {
        let made = self
            .ctx
            .execute_with_session(Some(AuthSession::Password), |ctx| {
                ctx.create_primary(hierarchy, template, None, None, None, None)
            })?;
        Ok(made.key_handle)
    }

    /// create_primary of `template(i)` and its flush, timed apart: ms per run of each.
    fn time_primary(
        &mut self,
        iters: u32,
        hierarchy: Hierarchy,
        template: impl Fn(u32) -> Fallible<Public>,
    ) -> Fallible<(f64, f64)> {
        let (mut create, mut flush) = (Duration::ZERO, Duration::ZERO);
        for i in 0..iters {
            let template = template(i)?;
            let start = Instant::now();
            let handle = self.primary(hierarchy, template)?;
            create += start.elapsed();
            let start = Instant::now();
            self.ctx.flush_context(handle.into())?;
            flush += start.elapsed();
        }
        let ms = |d: Duration| d.as_secs_f64() * 1e3 / f64::from(iters);
        Ok((ms(create), ms(flush)))
    }

    fn nv_read(&mut self, index: u32) -> Fallible<()> {
        let nv_index = NvIndexTpmHandle::new(index)?;
        let object = self
            .ctx
            .execute_without_session(|ctx| ctx.tr_from_tpm_public(TpmHandle::NvIndex(nv_index)))?;
        let cert = self
            .ctx
            .execute_with_session(Some(AuthSession::Password), |ctx| {
                nv::read_full(ctx, NvAuth::NvIndex(object.into()), nv_index)
            })?;
        std::hint::black_box(cert);
        Ok(())
    }

    /// A policy session, PolicySecret(endorsement) (and for the P-384 EK, SHA-384, PolicyOR
    /// of its policies A and C), ActivateCredential.
    fn activate(
        &mut self,
        kind: EkKind,
        ak: KeyHandle,
        ek: KeyHandle,
        c: &TpmChallenge,
    ) -> Fallible<()> {
        let blob = IdObject::try_from(c.credential_blob.clone())?;
        let secret = EncryptedSecret::try_from(c.encrypted_secret.clone())?;
        let session = self
            .ctx
            .start_auth_session(
                None,
                None,
                None,
                SessionType::Policy,
                SymmetricDefinition::Null,
                if kind.high_range() {
                    HashingAlgorithm::Sha384
                } else {
                    HashingAlgorithm::Sha256
                },
            )?
            .ok_or("no session")?;
        let policy = PolicySession::try_from(session)?;
        self.ctx
            .execute_with_session(Some(AuthSession::Password), |ctx| {
                ctx.policy_secret(
                    policy,
                    AuthHandle::Endorsement,
                    Default::default(),
                    Default::default(),
                    Default::default(),
                    None,
                )
            })?;
        if kind.high_range() {
            let mut list = DigestList::new();
            list.add(Digest::try_from(templates::policy_a_sha384())?)?;
            list.add(Digest::try_from(templates::POLICY_C_SHA384.to_vec())?)?;
            self.ctx
                .execute_without_session(|ctx| ctx.policy_or(policy, list))?;
        }
        let out = self
            .ctx
            .execute_with_sessions((Some(AuthSession::Password), Some(session), None), |ctx| {
                ctx.activate_credential(ak, ek, blob, secret)
            })?;
        std::hint::black_box(out);
        // ActivateCredential ended the session; flushing it again may fail, harmlessly.
        let _ = self.ctx.flush_context(SessionHandle::from(session).into());
        self.ctx.clear_sessions();
        Ok(())
    }

    fn quote(&mut self, ak: KeyHandle, selection: &PcrSelectionList) -> Fallible<()> {
        let data = Data::try_from(vec![0x5a; 32])?;
        let sel = selection.clone();
        let quoted = self
            .ctx
            .execute_with_session(Some(AuthSession::Password), |ctx| {
                ctx.quote(ak, data, SignatureScheme::Null, sel)
            })?;
        let values = self
            .ctx
            .execute_without_session(|ctx| pcr::read_all(ctx, selection.clone()))?;
        std::hint::black_box((quoted, values));
        Ok(())
    }

    fn certify(&mut self, node: KeyHandle, ak: KeyHandle) -> Fallible<()> {
        let data = Data::try_from(vec![0xa5; 32])?;
        let out = self.ctx.execute_with_sessions(
            (
                Some(AuthSession::Password),
                Some(AuthSession::Password),
                None,
            ),
            |ctx| ctx.certify(node.into(), ak, data, SignatureScheme::Null),
        )?;
        std::hint::black_box(out);
        Ok(())
    }

    fn sign(&mut self, node: KeyHandle) -> Fallible<()> {
        let digest = Digest::try_from(Sha256::digest(b"a renew-pop statement").to_vec())?;
        let ticket = HashcheckTicket::try_from(TPMT_TK_HASHCHECK {
            tag: TPM2_ST_HASHCHECK,
            hierarchy: TPM2_RH_NULL,
            digest: Default::default(),
        })?;
        let scheme = SignatureScheme::EcDsa {
            hash_scheme: HashScheme::new(HashingAlgorithm::Sha256),
        };
        let out = self
            .ctx
            .execute_with_session(Some(AuthSession::Password), |ctx| {
                ctx.sign(node, digest, scheme, ticket)
            })?;
        std::hint::black_box(out);
        Ok(())
    }
}

/// The raw commands, ms each, in [`RAW`] order.
fn raw_round(s: &Setup, iters: u32) -> Fallible<Vec<f64>> {
    let mut raw = Raw::open(&s.tcti)?;
    let ek_template = templates::ek_template(s.kind)?;
    let ak_template = templates::ak_template()?;
    let node_template = templates::node_key_template(&s.node_unique)?;
    let index = s.kind.certificate_index();
    let mut out = vec![time_ms(iters, || raw.nv_read(index))?];
    let ek_t = || Ok(ek_template.clone());
    out.push(
        raw.time_primary(iters, Hierarchy::Endorsement, |_| ek_t())?
            .0,
    );
    let (ak_ms, flush_ms) =
        raw.time_primary(iters, Hierarchy::Endorsement, |_| Ok(ak_template.clone()))?;
    out.push(ak_ms);
    let node_t = |_| Ok(node_template.clone());
    out.push(raw.time_primary(iters, Hierarchy::Owner, node_t)?.0);
    out.push(time_ms(iters, || {
        std::hint::black_box(raw.ctx.execute_without_session(|c| c.get_random(32))?);
        Ok(())
    })?);
    // Three transient slots: AK, EK and node key, all loaded for the rest.
    let ak = raw.primary(Hierarchy::Endorsement, ak_template)?;
    let ek = raw.primary(Hierarchy::Endorsement, ek_template)?;
    let node = raw.primary(Hierarchy::Owner, node_template)?;
    out.push(time_ms(iters, || {
        raw.activate(s.kind, ak, ek, &s.challenge)
    })?);
    let slots: Vec<PcrSlot> = s
        .challenge
        .pcrs
        .iter()
        .map(|i| PcrSlot::try_from(1u32 << i))
        .collect::<Result<_, _>>()?;
    let selection = PcrSelectionListBuilder::new()
        .with_selection(HashingAlgorithm::Sha256, &slots)
        .build()?;
    out.push(time_ms(iters, || raw.quote(ak, &selection))?);
    out.push(time_ms(iters, || raw.certify(node, ak))?);
    out.push(time_ms(iters, || raw.sign(node))?);
    for h in [ak, ek, node] {
        raw.ctx.flush_context(h.into())?;
    }
    // A renewal's node key has a unique never used before.
    let fresh = |i: u32| {
        let unique: [u8; 32] =
            Sha256::digest([&s.node_unique[..], &i.to_be_bytes()].concat()).into();
        Ok(templates::node_key_template(&unique)?)
    };
    out.push(raw.time_primary(iters, Hierarchy::Owner, fresh)?.0);
    out.push(flush_ms);
    Ok(out)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// The raw commands each bcd operation stands on, as indices into [`RAW`].
/// Each create_primary's object is flushed again (a renewal also flushes the key it replaces).
const UNDER: [&[usize]; 4] = [
    &[0, 1, 2, 10, 10],
    &[2, 1, 5, 6, 7, 10, 10],
    &[4, 9, 2, 7, 10, 10],
    &[8],
];

fn main() -> Fallible<()> {
    let iters: u32 = match std::env::var("TPM_CLIENT_ITERS") {
        Ok(v) => v.parse()?,
        Err(_) => 5,
    };
    let kind = match std::env::var("TPM_CLIENT_EK").as_deref() {
        Ok("p384") => EkKind::EccP384,
        Ok("rsa") | Err(_) => EkKind::Rsa2048,
        Ok(other) => return Err(format!("TPM_CLIENT_EK={other}: rsa or p384").into()),
    };
    let swtpm = Swtpm::start();
    let s = setup(&swtpm, kind)?;
    let mut bcd_rounds = Vec::new();
    let mut raw_rounds = Vec::new();
    for r in 0..ROUNDS {
        let b = bcd_round(&s, iters)?;
        let raw = raw_round(&s, iters)?;
        println!("  round {}: bcd {b:.1?} ms, raw {raw:.1?} ms", r + 1);
        bcd_rounds.push(b);
        raw_rounds.push(raw);
    }
    let col = |rounds: &[Vec<f64>], i: usize| median(rounds.iter().map(|r| r[i]).collect());
    println!(
        "bcd's TPM client on swtpm ({} EK): {ROUNDS} rounds of {iters} runs, medians",
        kind.label()
    );
    println!("raw TPM commands (tss-esapi, same swtpm, same run):");
    for (i, name) in RAW.iter().enumerate() {
        println!("  {name:<26} {:>8.2} ms", col(&raw_rounds, i));
    }
    println!("bcd operation vs the sum of the raw commands under it (ratio: median of rounds):");
    for (i, name) in BCD.iter().enumerate() {
        let sums: Vec<f64> = raw_rounds
            .iter()
            .map(|r| UNDER[i].iter().map(|j| r[*j]).sum())
            .collect();
        let ratios: Vec<f64> = bcd_rounds
            .iter()
            .zip(&sums)
            .map(|(b, raw)| b[i] / raw)
            .collect();
        println!(
            "  {name:<18} {:>8.2} ms  raw {:>8.2} ms  {:.2}×",
            col(&bcd_rounds, i),
            median(sums),
            median(ratios)
        );
    }
    Ok(())
}
