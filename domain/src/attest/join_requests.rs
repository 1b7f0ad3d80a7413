//! Operator decisions on join requests (spec 001 "Approval"): approve or reject a pending one;
//! and the maintenance decision that expires one not decided (or, approved, not consumed) in
//! time. Creating and consuming a request belong to the join's admission step.

use events::schema::{JoinRequestApproved, JoinRequestExpired, JoinRequestRejected};
use time::OffsetDateTime;

use super::pools::{check_text, AttestAdminRefusal};
use super::state::{JoinRequestState, JoinRequestStatus};
use crate::identity::{unix_us, Decision, IdentityEvent};

/// At most this many bytes of decision reason.
pub const MAX_DECISION_REASON: usize = 512;

fn pending<'a>(
    request_id: &str,
    request: Option<&'a JoinRequestState>,
) -> Result<&'a JoinRequestState, AttestAdminRefusal> {
    let r = request.ok_or_else(|| AttestAdminRefusal::UnknownJoinRequest(request_id.into()))?;
    if r.status != JoinRequestStatus::Pending {
        return Err(AttestAdminRefusal::JoinRequestState {
            request: r.request_id.clone(),
            status: r.status.as_str(),
        });
    }
    Ok(r)
}

fn check_decision(actor: &str, reason: &str) -> Result<(), AttestAdminRefusal> {
    if actor.is_empty() {
        return Err(AttestAdminRefusal::Invalid("the actor is empty".into()));
    }
    check_text("actor", actor, 256)?;
    check_text("reason", reason, MAX_DECISION_REASON)
}

/// Approves a pending request that has not expired: the agent's next retry joins.
pub fn decide_approve(
    request_id: &str,
    request: Option<&JoinRequestState>,
    actor: &str,
    reason: &str,
    now: OffsetDateTime,
) -> Result<Decision<()>, AttestAdminRefusal> {
    check_decision(actor, reason)?;
    let r = pending(request_id, request)?;
    if r.expires_at_us <= unix_us(now) {
        return Err(AttestAdminRefusal::JoinRequestExpired(r.request_id.clone()));
    }
    Ok(Decision::events_only(vec![
        IdentityEvent::JoinRequestApproved(JoinRequestApproved {
            request_id: r.request_id.clone(),
            actor: actor.into(),
            reason: reason.into(),
        }),
    ]))
}

/// Rejects a pending request (also one past its expiry that maintenance has not expired yet: a
/// rejection is never less safe); retries with it are refused (`join:request-rejected`).
pub fn decide_reject(
    request_id: &str,
    request: Option<&JoinRequestState>,
    actor: &str,
    reason: &str,
) -> Result<Decision<()>, AttestAdminRefusal> {
    check_decision(actor, reason)?;
    let r = pending(request_id, request)?;
    Ok(Decision::events_only(vec![
        IdentityEvent::JoinRequestRejected(JoinRequestRejected {
            request_id: r.request_id.clone(),
            actor: actor.into(),
            reason: reason.into(),
        }),
    ]))
}

/// Expires a request still open (pending, or approved and not consumed) whose expiry is at or
/// before `now`; nothing for any other (maintenance may race an operator or a join: then the
/// request has moved on and there is nothing to expire).
pub fn decide_expire(request: &JoinRequestState, now: OffsetDateTime) -> Decision<()> {
    let open = matches!(
        request.status,
        JoinRequestStatus::Pending | JoinRequestStatus::Approved
    );
    if !open || request.expires_at_us > unix_us(now) {
        return Decision::events_only(Vec::new());
    }
    Decision::events_only(vec![IdentityEvent::JoinRequestExpired(
        JoinRequestExpired {
            request_id: request.request_id.clone(),
        },
    )])
}

/// Applies an event to a join request's state (`None` before `join_request.created`); every
/// event of its stream moves `version` on by one.
pub fn evolve_join_request(
    state: Option<JoinRequestState>,
    event: &IdentityEvent,
) -> Option<JoinRequestState> {
    let next = |mut s: JoinRequestState, status| {
        s.status = status;
        s.version += 1;
        Some(s)
    };
    match (state, event) {
        (None, IdentityEvent::JoinRequestCreated(e)) => Some(JoinRequestState {
            request_id: e.request_id.clone(),
            tenant_id: e.tenant_id.clone(),
            attestor: e.attestor.clone(),
            subject: e.subject.as_slice().try_into().ok()?,
            csr_sha256: e.csr_sha256.as_slice().try_into().ok()?,
            status: JoinRequestStatus::Pending,
            expires_at_us: e.expires_at_us,
            version: 1,
        }),
        (Some(s), IdentityEvent::JoinRequestApproved(_)) => next(s, JoinRequestStatus::Approved),
        (Some(s), IdentityEvent::JoinRequestRejected(_)) => next(s, JoinRequestStatus::Rejected),
        (Some(s), IdentityEvent::JoinRequestConsumed(_)) => next(s, JoinRequestStatus::Consumed),
        (Some(s), IdentityEvent::JoinRequestExpired(_)) => next(s, JoinRequestStatus::Expired),
        (s, _) => s,
    }
}

#[cfg(test)]
mod tests {
    use events::schema::{JoinRequestConsumed, JoinRequestCreated};

    use super::*;

    const T0: i64 = 1_800_000_000_000_000;

    fn at(us: i64) -> OffsetDateTime {
        OffsetDateTime::from_unix_timestamp_nanos(i128::from(us) * 1000).expect("time")
    }

    fn created() -> Option<JoinRequestState> {
        let e = IdentityEvent::JoinRequestCreated(JoinRequestCreated {
            request_id: "jr_1".into(),
            tenant_id: "acme".into(),
            attestor: "join-token".into(),
            subject: vec![7; 32],
            csr_sha256: vec![7; 32],
            role: "node".into(),
            site_id: "s1".into(),
            pool_id: "edge".into(),
            expires_at_us: T0 + 1000,
            ..Default::default()
        });
        evolve_join_request(None, &e)
    }

    fn refusal(r: Result<Decision<()>, AttestAdminRefusal>) -> String {
        match r {
            Err(e) => e.to_string(),
            Ok(d) => panic!("decided {:?}", d.events),
        }
    }

    #[test]
    fn a_pending_request_is_approved_once() {
        let s = created();
        assert_eq!(s.as_ref().map(|s| s.version), Some(1));
        let d = decide_approve("jr_1", s.as_ref(), "alice", "known box", at(T0)).expect("ok");
        let s = d.events.iter().fold(s, evolve_join_request);
        let st = s.clone().expect("request");
        assert_eq!((st.status, st.version), (JoinRequestStatus::Approved, 2));
        assert_eq!(
            refusal(decide_approve("jr_1", s.as_ref(), "alice", "", at(T0))),
            "INVALID_STATE: join request jr_1 is approved"
        );
        assert_eq!(
            refusal(decide_reject("jr_1", s.as_ref(), "alice", "")),
            "INVALID_STATE: join request jr_1 is approved"
        );
    }

    #[test]
    fn rejected_consumed_and_expired_requests_are_not_decided_again() {
        let rejected = decide_reject("jr_1", created().as_ref(), "bob", "unknown box")
            .expect("ok")
            .events
            .iter()
            .fold(created(), evolve_join_request);
        assert_eq!(
            refusal(decide_approve("jr_1", rejected.as_ref(), "a", "", at(T0))),
            "INVALID_STATE: join request jr_1 is rejected"
        );
        let consumed = [
            IdentityEvent::JoinRequestApproved(JoinRequestApproved {
                request_id: "jr_1".into(),
                actor: "a".into(),
                reason: String::new(),
            }),
            IdentityEvent::JoinRequestConsumed(JoinRequestConsumed {
                request_id: "jr_1".into(),
                node_id: "node_1".into(),
            }),
        ]
        .iter()
        .fold(created(), evolve_join_request);
        assert_eq!(
            refusal(decide_reject("jr_1", consumed.as_ref(), "a", "")),
            "INVALID_STATE: join request jr_1 is consumed"
        );
        let expired = decide_expire(&created().expect("r"), at(T0 + 1000))
            .events
            .iter()
            .fold(created(), evolve_join_request);
        assert_eq!(
            refusal(decide_approve("jr_1", expired.as_ref(), "a", "", at(T0))),
            "INVALID_STATE: join request jr_1 is expired"
        );
        assert_eq!(
            refusal(decide_approve("jr_9", None, "a", "", at(T0))),
            "NOT_FOUND: no join request jr_9"
        );
    }

    #[test]
    fn a_pending_request_past_its_expiry_cannot_be_approved_but_can_be_rejected() {
        let s = created();
        assert_eq!(
            refusal(decide_approve("jr_1", s.as_ref(), "a", "", at(T0 + 1000))),
            "INVALID_STATE: join request jr_1 has expired"
        );
        assert!(decide_reject("jr_1", s.as_ref(), "a", "late").is_ok());
        assert_eq!(
            refusal(decide_approve("jr_1", s.as_ref(), "", "", at(T0))),
            "INVALID_INPUT: the actor is empty"
        );
    }

    #[test]
    fn expiry_takes_open_requests_past_their_expiry_only() {
        let s = created().expect("r");
        assert!(decide_expire(&s, at(T0 + 999)).events.is_empty());
        assert_eq!(decide_expire(&s, at(T0 + 1000)).events.len(), 1);
        let approved = JoinRequestState {
            status: JoinRequestStatus::Approved,
            ..s.clone()
        };
        assert_eq!(decide_expire(&approved, at(T0 + 5000)).events.len(), 1);
        for status in [
            JoinRequestStatus::Rejected,
            JoinRequestStatus::Consumed,
            JoinRequestStatus::Expired,
        ] {
            let done = JoinRequestState {
                status,
                ..s.clone()
            };
            assert!(decide_expire(&done, at(T0 + 5000)).events.is_empty());
        }
    }
}
