//! [`TpmAttestor`] (spec 000 "tpm"): the `tpm` attestor on the attestor contract, in two
//! rounds.
//!
//! Round 1 (evidence): the EK's public area parses (`ek-malformed`) and is one a credential can
//! be made for (`ek-unsupported`); its certificate chains to a configured root through the
//! intermediates sent (`ek-malformed`, `ek-untrusted`) and certifies the EK's key
//! (`ek-mismatch`); the AK is the contract's AK (`ak-malformed`, `ak-unsupported`,
//! `ak-attributes`). The answer is a [`Verdict::Challenge`]: MakeCredential(EK, AK name, a
//! random secret), the PCRs to quote and the sealed [`ChallengeState`]. Round 1 writes nothing.
//!
//! Round 2 (answer): the state opens (`state-invalid`), is for this CSR (`state-other-csr`)
//! and not expired (`state-expired`); then the secret (`activation`), the quote (`quote-*`,
//! `pcr-mismatch`), the PCR policy (`pcr-policy`), the node key's certification
//! ([`verify_key_certification`], `node-key-*`) and where the machine goes: a bound EK reclaims
//! its node, an allow-listed one joins as a new node where the entry says, otherwise the
//! enrollment placement asks an operator (keyed by the EK), otherwise `unknown-ek`.

use subtle::ConstantTimeEq as _;

use super::allow_list::TPM_ALLOW_LIST;
use super::attest::{Attested, EcdsaSignature, TpmAttest};
use super::config::{NodeKeyPolicy, TpmConfig, MAX_CHALLENGE_TTL};
use super::credential::{self, make_credential, CredentialError};
use super::ek::{self, EkCertError};
use super::keys::{
    check_ak, verify_key_certification, Ak, AkError, KeyCertification, TPM_NODE_KEY_LABEL,
};
use super::marshal::{ALG_SHA256, TPM_GENERATED};
use super::public::{attr, PublicError, TpmPublic};
use super::refusal::TpmRefusal;
use super::state::ChallengeState;
use super::wire::{
    TpmAnswer, TpmAttestation, TpmChallenge, TpmEvidence, DEFAULT_QUOTE_PCRS, TPM_ATTESTOR,
    TPM_WIRE_VERSION,
};
use crate::attest::contract::{
    ApprovalAsk, AttestRequest, AttestationResult, Attestor, AttestorRefusal, Challenge, FactKey,
    Facts, NodeKeyStatement, Planned, SingleUse, Verdict,
};
use crate::identity::{sha256, unix_us};
use crate::pki::NodeRole;

/// The reason a replayed round-2 answer is refused with (`tpm:reused`, by the admission step).
pub const REUSED: &str = "reused";
/// How long past the state's deadline a used answer is remembered, µs.
const USE_MARGIN_US: i64 = 60_000_000;

/// The EK attributes a storage key has (TCG EK Credential Profile templates).
const EK_REQUIRED: u32 = attr::FIXED_TPM | attr::FIXED_PARENT | attr::RESTRICTED | attr::DECRYPT;

/// The `tpm` attestor.
#[derive(Debug, Clone)]
pub struct TpmAttestor {
    config: TpmConfig,
}

/// A parsed message: round 1's evidence or round 2's answer.
enum Round {
    Evidence(TpmEvidence),
    Answer(TpmAnswer),
}

/// Only `v`, read first so that a later version is `unsupported-version`, not `malformed`.
#[derive(serde::Deserialize)]
struct VersionOnly {
    v: serde_json::Value,
}

fn parse(evidence: &[u8]) -> Result<Round, TpmRefusal> {
    let version: VersionOnly =
        serde_json::from_slice(evidence).map_err(|_| TpmRefusal::Malformed)?;
    match version.v.as_u64() {
        Some(TPM_WIRE_VERSION) => {}
        _ if version.v.is_number() => return Err(TpmRefusal::UnsupportedVersion),
        _ => return Err(TpmRefusal::Malformed),
    }
    let message: TpmAttestation =
        serde_json::from_slice(evidence).map_err(|_| TpmRefusal::Malformed)?;
    match (message.evidence, message.answer) {
        (Some(e), None) => Ok(Round::Evidence(e)),
        (None, Some(a)) => Ok(Round::Answer(a)),
        _ => Err(TpmRefusal::Malformed),
    }
}

fn ak_refusal(e: AkError) -> TpmRefusal {
    match e {
        AkError::Malformed => TpmRefusal::AkMalformed,
        AkError::Unsupported => TpmRefusal::AkUnsupported,
        AkError::Attributes => TpmRefusal::AkAttributes,
    }
}

/// What [`Attestor::plan`] read of the request, handed to `verify`: round 1's evidence, or
/// round 2's answer with its state already opened (neither is parsed or opened again).
#[derive(Debug)]
pub enum TpmPlan {
    /// Round 1: the evidence, to check and challenge.
    Evidence(TpmEvidence),
    /// Round 2: the answer, its state opened for this CSR in time.
    Answer(Box<Opened>),
}

/// A round-2 answer whose state opened for this CSR in time.
#[derive(Debug)]
pub struct Opened {
    answer: TpmAnswer,
    state: ChallengeState,
}

impl TpmAttestor {
    /// With the operator's configuration.
    pub fn new(config: TpmConfig) -> TpmAttestor {
        TpmAttestor { config }
    }

    /// Its configuration.
    pub fn config(&self) -> &TpmConfig {
        &self.config
    }

    /// The PCRs a challenge asks to quote: the policy's indices, else [`DEFAULT_QUOTE_PCRS`].
    pub fn quote_pcrs(&self) -> Vec<u32> {
        if self.config.pcr_policy.is_empty() {
            DEFAULT_QUOTE_PCRS.to_vec()
        } else {
            self.config.pcr_policy.keys().copied().collect()
        }
    }

    /// Round 1: checks the evidence and makes the challenge.
    pub fn round1(
        &self,
        request: &AttestRequest<'_>,
        evidence: &TpmEvidence,
    ) -> Result<Challenge, TpmRefusal> {
        let ek = TpmPublic::parse(&evidence.ek_public).map_err(|e| match e {
            PublicError::UnsupportedNameAlg(_) | PublicError::UnsupportedType(_) => {
                TpmRefusal::EkUnsupported
            }
            _ => TpmRefusal::EkMalformed,
        })?;
        if !credential::supported(&ek) || !ek.has(EK_REQUIRED, attr::SIGN) {
            return Err(TpmRefusal::EkUnsupported);
        }
        let cert_error = |e: EkCertError| match e {
            EkCertError::Malformed => TpmRefusal::EkMalformed,
            EkCertError::Untrusted => TpmRefusal::EkUntrusted,
            EkCertError::Mismatch => TpmRefusal::EkMismatch,
        };
        ek::verify_chain(
            &evidence.ek_certificate,
            &evidence.ek_intermediates,
            &self.config.ek_roots,
            request.now,
        )
        .map_err(cert_error)?;
        ek::matches_public(&evidence.ek_certificate, &ek).map_err(cert_error)?;
        let ak = check_ak(&evidence.ak_public).map_err(ak_refusal)?;

        let secret: [u8; 32] = request.entropy.bytes("tpm challenge secret");
        let made =
            make_credential(&ek, &ak.name(), &secret, request.entropy).map_err(|e| match e {
                CredentialError::Unsupported => TpmRefusal::EkUnsupported,
                CredentialError::BadKey => TpmRefusal::EkMalformed,
            })?;
        let ttl = self.config.challenge_ttl.min(MAX_CHALLENGE_TTL);
        let ttl_us = i64::try_from(ttl.as_micros()).unwrap_or(i64::MAX);
        let not_after_us = unix_us(request.now).saturating_add(ttl_us);
        let pcrs = self.quote_pcrs();
        let state = ChallengeState {
            csr_sha256: *request.csr.sha256(),
            not_after_us,
            ek_sha256: sha256(&evidence.ek_public),
            ak_public: evidence.ak_public.clone(),
            secret,
            pcrs: pcrs.clone(),
        }
        .seal(
            &self.config.challenge_key,
            request.entropy.bytes("tpm challenge state nonce"),
        )
        .map_err(|_| TpmRefusal::ChallengeFailed)?;
        let payload = TpmChallenge {
            v: TPM_WIRE_VERSION,
            credential_blob: made.credential_blob,
            encrypted_secret: made.encrypted_secret,
            pcrs,
            state,
        };
        Ok(Challenge {
            payload: payload.to_bytes(),
            not_after_us,
        })
    }

    /// Round 2's first checks (also [`Attestor::plan`]'s): the state opens, is for this CSR,
    /// and has not expired.
    fn open(&self, request: &AttestRequest<'_>, answer: TpmAnswer) -> Result<Opened, TpmRefusal> {
        let state = ChallengeState::open(&answer.state, &self.config.challenge_key)
            .map_err(|_| TpmRefusal::StateInvalid)?;
        if &state.csr_sha256 != request.csr.sha256() {
            return Err(TpmRefusal::StateOtherCsr);
        }
        if unix_us(request.now) > state.not_after_us {
            return Err(TpmRefusal::StateExpired);
        }
        Ok(Opened { answer, state })
    }

    /// The quote: the AK signed a TPM-generated quote of the challenge's PCRs, bound to the
    /// secret and this CSR, and the values sent are the ones quoted.
    fn check_quote(
        &self,
        ak: &Ak,
        opened: &Opened,
        csr_sha256: &[u8; 32],
    ) -> Result<(), TpmRefusal> {
        let answer = &opened.answer;
        let quote = TpmAttest::parse(&answer.quote).map_err(|_| TpmRefusal::QuoteMalformed)?;
        let signature = EcdsaSignature::parse(&answer.quote_signature)
            .map_err(|_| TpmRefusal::QuoteMalformed)?;
        if !signature.verifies_p256(&ak.point, &answer.quote) {
            return Err(TpmRefusal::QuoteSignature);
        }
        let Attested::Quote {
            selection,
            pcr_digest,
        } = &quote.attested
        else {
            return Err(TpmRefusal::QuoteMalformed);
        };
        if quote.magic != TPM_GENERATED {
            return Err(TpmRefusal::QuoteMalformed);
        }
        if quote.extra_data.as_slice() != sha256(&[&opened.state.secret[..], csr_sha256].concat()) {
            return Err(TpmRefusal::QuoteNonce);
        }
        if selection.as_slice() != [(ALG_SHA256, opened.state.pcrs.clone())] {
            return Err(TpmRefusal::PcrMismatch);
        }
        let indices: Vec<u32> = answer.pcr_values.iter().map(|p| p.index).collect();
        if indices != opened.state.pcrs || answer.pcr_values.iter().any(|p| p.digest.len() != 32) {
            return Err(TpmRefusal::PcrMismatch);
        }
        let values: Vec<u8> = answer
            .pcr_values
            .iter()
            .flat_map(|p| p.digest.iter().copied())
            .collect();
        if pcr_digest.as_slice() != sha256(&values) {
            return Err(TpmRefusal::PcrMismatch);
        }
        for (index, allowed) in &self.config.pcr_policy {
            let value = answer.pcr_values.iter().find(|p| p.index == *index);
            let ok = value.is_some_and(|v| allowed.iter().any(|a| a.as_slice() == v.digest));
            if !ok {
                return Err(TpmRefusal::PcrPolicy);
            }
        }
        Ok(())
    }

    /// Round 2: every proof, then where the machine goes.
    pub fn round2(
        &self,
        request: &AttestRequest<'_>,
        opened: &Opened,
        facts: &Facts,
    ) -> Result<AttestationResult, TpmRefusal> {
        let csr_sha256 = request.csr.sha256();
        let ak = check_ak(&opened.state.ak_public).map_err(|_| TpmRefusal::StateInvalid)?;
        let secret_ok: bool = opened.answer.secret.ct_eq(&opened.state.secret).into();
        if !secret_ok {
            return Err(TpmRefusal::Activation);
        }
        self.check_quote(&ak, opened, csr_sha256)?;
        let node_key = match (&opened.answer.node_key, self.config.node_key) {
            (Some(key), _) => {
                let cert = KeyCertification {
                    key_public: &key.public,
                    certify_info: &key.certify_info,
                    signature: &key.signature,
                };
                let point = request.csr.public_key().uncompressed_point();
                verify_key_certification(&ak, cert, csr_sha256, point)?;
                NodeKeyStatement::Statement {
                    label: TPM_NODE_KEY_LABEL.to_owned(),
                    uri: ak.statement(),
                }
            }
            (None, NodeKeyPolicy::Certified) => return Err(TpmRefusal::NodeKeyNotCertified),
            (None, NodeKeyPolicy::Any) => NodeKeyStatement::Unattested,
        };
        self.place(request, opened, node_key, facts)
    }

    /// Where the machine goes (the COMMON contract, "Where the machine goes").
    fn place(
        &self,
        request: &AttestRequest<'_>,
        opened: &Opened,
        node_key: NodeKeyStatement,
        facts: &Facts,
    ) -> Result<AttestationResult, TpmRefusal> {
        let ek_sha256 = &opened.state.ek_sha256;
        let state_bytes = &opened.answer.state;
        let not_after_us = opened.state.not_after_us;
        // Only what the attestor proved binds the node: the EK. The machine's claims (its
        // hardware key, its product UUID) are recorded as sent and bind nothing, so a TPM that
        // claims another machine's identity cannot lock that machine out (decision 0082).
        let bind = vec![*ek_sha256];
        // The answer admits one join: a replay of it (within the state's life) is refused
        // `tpm:reused`, so a captured answer cannot reclaim the node a second time.
        let single_use = vec![SingleUse {
            attestor: TPM_ATTESTOR.to_owned(),
            subject: sha256(state_bytes),
            expires_at_us: Some(not_after_us.saturating_add(USE_MARGIN_US)),
            reason_if_used: REUSED.to_owned(),
        }];
        let result = |tenant: &str, site: &str, pool: &str| AttestationResult {
            tenant_id: tenant.to_owned(),
            role: request.role,
            site_id: site.to_owned(),
            pool_id: pool.to_owned(),
            reclaim_node_id: None,
            token: None,
            bind: bind.clone(),
            single_use: single_use.clone(),
            node_key: node_key.clone(),
            allowed_kinds: Vec::new(),
            approval: None,
        };
        if let Some(binding) = facts.bindings.get(ek_sha256) {
            let node = facts
                .nodes
                .get(&binding.node_id)
                .ok_or(TpmRefusal::UnknownEk)?;
            let mut r = result(&node.tenant_id, &node.site_id, &node.pool_id);
            r.reclaim_node_id = Some(node.node_id.clone());
            return Ok(r);
        }
        if let Some(allow) = facts.entry(&TPM_ALLOW_LIST, &hex::encode(ek_sha256)) {
            return Ok(result(&allow.tenant_id, &allow.site_id, &allow.pool_id));
        }
        let Some(place) = &self.config.enrollment else {
            return Err(TpmRefusal::UnknownEk);
        };
        let mut r = result(&place.tenant_id, &place.site_id, &place.pool_id);
        r.approval = Some(ApprovalAsk {
            subject: *ek_sha256,
            summary: format!(
                "a TPM with EK sha256 {} asks to join site {} pool {}",
                hex::encode(ek_sha256),
                place.site_id,
                place.pool_id
            ),
        });
        Ok(r)
    }
}

impl Attestor for TpmAttestor {
    type Plan = TpmPlan;

    fn id(&self) -> &str {
        TPM_ATTESTOR
    }

    fn roles(&self) -> &[NodeRole] {
        &[NodeRole::Node, NodeRole::Site]
    }

    fn plan(&self, request: &AttestRequest<'_>) -> Result<Planned<TpmPlan>, AttestorRefusal> {
        match parse(request.evidence).map_err(TpmRefusal::refusal)? {
            Round::Evidence(evidence) => Ok(Planned::new(Vec::new(), TpmPlan::Evidence(evidence))),
            Round::Answer(answer) => {
                let opened = self.open(request, answer).map_err(TpmRefusal::refusal)?;
                let ek = opened.state.ek_sha256;
                let keys = vec![
                    FactKey::Binding(ek),
                    FactKey::entry(&TPM_ALLOW_LIST, &hex::encode(ek)),
                ];
                Ok(Planned::new(keys, TpmPlan::Answer(Box::new(opened))))
            }
        }
    }

    fn verify(&self, request: &AttestRequest<'_>, plan: &TpmPlan, facts: &Facts) -> Verdict {
        match plan {
            TpmPlan::Evidence(evidence) => match self.round1(request, evidence) {
                Ok(challenge) => Verdict::Challenge(challenge),
                Err(r) => Verdict::Refuse(r.refusal()),
            },
            TpmPlan::Answer(opened) => match self.round2(request, opened, facts) {
                Ok(result) => Verdict::Admit(Box::new(result)),
                Err(r) => Verdict::Refuse(r.refusal()),
            },
        }
    }
}
