//! The attestation plane's pure half: the attestor contract every attestor implements, the
//! built-in attestors, and the admission step run once after whichever attestor admitted.
//!
//! | module | job |
//! | --- | --- |
//! | [`contract`] | the [`Attestor`] trait, what it is asked and what it answers |
//! | [`state`] | pools and join requests, as the admission step reads them |
//! | [`provisioned`] | the `provisioned` attestor: a single-use token bound to one machine |

pub mod contract;
pub mod provisioned;
pub mod state;

pub use contract::{
    ApprovalAsk, AttestRequest, AttestationResult, Attestor, AttestorRefusal, BindingState,
    Challenge, FactKey, Facts, NodeKeyStatement, SingleUse, Verdict,
};
pub use provisioned::{ProvisionedAttestor, ProvisionedRefusal, PROVISIONED_ATTESTOR};
pub use state::{
    JoinRequestState, JoinRequestStatus, PoolState, JOIN_PENDING_RETRY_SECONDS, JOIN_REQUEST_TTL,
};
