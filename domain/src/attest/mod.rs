//! The attestation plane's pure half: the attestor contract every attestor implements, the
//! built-in attestors, and the admission step run once after whichever attestor admitted.
//!
//! | module | job |
//! | --- | --- |
//! | [`contract`] | the [`Attestor`] trait, what it is asked and what it answers |
//! | [`state`] | pools and join requests, as the admission step reads them |
//! | [`x509pop`] | the `x509pop` attestor: an expired certificate re-joins as its node |

pub mod contract;
pub mod state;
pub mod x509pop;

pub use contract::{
    ApprovalAsk, AttestRequest, AttestationResult, Attestor, AttestorRefusal, BindingState,
    Challenge, FactKey, Facts, NodeKeyStatement, SingleUse, Verdict,
};
pub use state::{
    JoinRequestState, JoinRequestStatus, PoolState, JOIN_PENDING_RETRY_SECONDS, JOIN_REQUEST_TTL,
};
pub use x509pop::{build_evidence, X509PopAttestor, X509PopRefusal, X509POP_ATTESTOR};
