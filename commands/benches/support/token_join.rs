//! The benches' token join: the pure steps production runs (the attestor's verify, then
//! the admission step and the signing after it), on a state the bench builds instead of one loaded from a store.

use domain::attest::admission::{decide_admission, Admission, AdmissionCommand, AdmissionFacts};
use domain::attest::join_token::JoinTokenAttestor;
use domain::attest::{AttestRequest, Attestor, AttestorRefusal, Entropy, Facts, Verdict};
use domain::identity::{
    DecideError, Decision, JoinCommand, JoinContext, JoinState, Joined, JOIN_TOKEN_ATTESTOR,
};
use domain::pki::NodeRole;
use time::OffsetDateTime;

/// A token join as production decides it, on a state given instead of loaded: the
/// `join-token` attestor's verify, then `decide_admission` (no pool, no bindings, no join
/// request), the two steps the command layer runs on the facts it loads.
pub fn token_join(
    ctx: &JoinContext<'_>,
    cmd: &JoinCommand,
    state: &JoinState,
    now: OffsetDateTime,
) -> Result<Decision<Joined>, DecideError<AttestorRefusal>> {
    let opened = &cmd.opened;
    let role: NodeRole = opened.role.parse().map_err(|_| {
        DecideError::Refused(AttestorRefusal::new(JOIN_TOKEN_ATTESTOR, "wrong-role"))
    })?;
    let request = AttestRequest {
        role,
        csr: &opened.csr,
        claims: &opened.claims,
        digests: &opened.digests,
        evidence: &[],
        token: Some(&opened.secret),
        now,
        // join-token draws no randomness: any seed does.
        entropy: &Entropy::from_seed([0; 32]),
    };
    let key = (JOIN_TOKEN_ATTESTOR.to_owned(), opened.csr_key_sha256());
    let mut facts = Facts {
        tokens: state.token.iter().cloned().collect(),
        ..Facts::default()
    };
    if state.csr_key_used {
        facts.uses.insert(key.clone());
    }
    let result = match JoinTokenAttestor.verify(&request, &(), &facts) {
        Verdict::Admit(r) => r,
        Verdict::Refuse(r) => return Err(DecideError::Refused(r)),
        Verdict::Challenge(_) => {
            return Err(DecideError::Failed("join-token never challenges".into()))
        }
    };
    let mut admission_facts = AdmissionFacts {
        reclaimed: state.reclaimed.clone(),
        reclaimed_unrevoked_serials: state.reclaimed_unrevoked_serials.clone(),
        ..AdmissionFacts::default()
    };
    if state.csr_key_used {
        admission_facts.uses.insert(key);
    }
    let admission = AdmissionCommand {
        attestor: JOIN_TOKEN_ATTESTOR,
        csr: &opened.csr,
        claims: &opened.claims,
        digests: &opened.digests,
        result: &result,
        new_node_id: &cmd.new_node_id,
        serial: &cmd.serial,
        new_request_id: "",
        report: &Default::default(),
    };
    let Decision { events, outcome } = decide_admission(ctx, &admission, &admission_facts, now)?
        .sign(ctx.node_ca, &opened.csr, now)?;
    match outcome {
        Admission::Joined(joined) => Ok(Decision {
            events,
            outcome: *joined,
        }),
        Admission::Pending(_) => Err(DecideError::Failed(
            "the token requires approval: join through the command layer".into(),
        )),
    }
}
