//! The attestation plane's pure half: the attestor contract every attestor implements, the
//! built-in attestors, and the admission step run once after whichever attestor admitted.
//!
//! | module | job |
//! | --- | --- |
//! | [`contract`] | the [`Attestor`] trait, what it is asked and what it answers |
//! | [`state`] | pools and join requests, as the admission step reads them |
//! | [`pools`] | pool create / update decisions (attestor policy), `evolve_pool` |
//! | [`join_requests`] | approve / reject / expire decisions, `evolve_join_request` |

pub mod contract;
pub mod join_requests;
pub mod pools;
pub mod state;

pub use contract::{
    ApprovalAsk, AttestRequest, AttestationResult, Attestor, AttestorRefusal, BindingState,
    Challenge, FactKey, Facts, NodeKeyStatement, SingleUse, Verdict,
};
pub use join_requests::{decide_approve, decide_expire, decide_reject, evolve_join_request};
pub use pools::{
    decide_create_pool, decide_update_pool, evolve_pool, AttestAdminRefusal, AttestorPolicy,
    CreatePool, UpdatePool, MAX_POOL_ATTESTORS,
};
pub use state::{
    JoinRequestState, JoinRequestStatus, PoolState, JOIN_PENDING_RETRY_SECONDS, JOIN_REQUEST_TTL,
};
