//! The attestation plane's pure half: the attestor contract every attestor implements, the
//! built-in attestors, and the admission step run once after whichever attestor admitted.
//!
//! | module | job |
//! | --- | --- |
//! | [`contract`] | the [`Attestor`] trait, what it is asked and what it answers |
//! | [`ids`] | the built-in attestors' ids |
//! | [`state`] | pools and join requests, as the admission step reads them |
//! | [`join_token`] | the `join-token` attestor |
//! | [`x509pop`] | the `x509pop` attestor: an expired certificate re-joins as its node |
//! | [`admission`] | the admission step: the checks every result is held to, and its events |
//! | [`answer_again`] | a join whose answer was lost, asked again: the identity already issued, or the refusal |
//! | [`pools`] | pool create / update decisions (attestor policy), `evolve_pool` |
//! | [`join_requests`] | approve / reject / expire decisions, `evolve_join_request` |
//! | [`provisioned`] | the `provisioned` attestor: a single-use token bound to one machine |
//! | [`tpm`] | the `tpm` attestor: the TPM's EK, a challenge, and a node key that never leaves it |
//! | [`discovery`] | the `discovery` attestor: a PXE-booted ramdisk vouched for by its site's boot server |
//! | [`kinds`] | command-kind patterns a certificate may be limited to |
//! | [`factory`] | how an attestor configures and registers itself: one factory per attestor, its table, then what the deployment gives it |
//! | [`entries`] | operator-managed attestor lists (TPM allow-list, cloud accounts, ...): add / remove |
//! | [`cloud_iid`] | the `cloud-iid` attestor: a cloud VM's signed instance identity document |
//! | [`remote`] | an out-of-process attestor's verdict held to what the built-ins are held to (times, tenants) |

pub mod admission;
pub mod answer_again;
pub mod cloud_iid;
pub mod contract;
pub mod discovery;
pub mod entries;
pub mod factory;
pub mod join_requests;
pub mod join_token;
pub mod kinds;
pub mod pools;
pub mod provisioned;
pub mod remote;
pub mod state;
pub mod tpm;
pub mod x509pop;

/// The ids of the built-in attestors ([`events::schema::attestor_ids`], kept in `events` because
/// events record them): the one place their strings are written.
pub use events::schema::attestor_ids as ids;

pub use admission::{
    decide_admission, renewal_can_prove, Admission, AdmissionCommand, AdmissionFacts, Decided,
    PendingJoin, UnsignedJoin, ADMISSION,
};
pub use answer_again::{answer_again, EarlierJoin, NotAnsweredAgain};
pub use contract::{
    plan_and_verify, AnyAttestor, ApprovalAsk, AttestRequest, AttestationResult, Attestor,
    AttestorRefusal, BindingState, BootEntryState, BoxedPlan, Challenge, Entropy, FactKey, Facts,
    NodeKeyStatement, Planned, SingleUse, SiteLeaseState, SpentUse, Verdict,
};
pub use discovery::{DiscoveryAttestor, DiscoveryConfig, DiscoveryRefusal};
pub use entries::{
    decide_add_entry, decide_remove_entry, AddEntry, EntryList, EntryRecord, EntryState,
};
pub use factory::{
    built, configure, configured, entry_list, no_table, parse_table, AttestorConfig,
    AttestorFactory, AttestorSetup, AttestorTables, Built, ConfigTable, Configured, FromDeployment,
    SettingError,
};
pub use join_requests::{decide_approve, decide_expire, decide_reject, evolve_join_request};
pub use join_token::{csr_key_subject, JoinTokenAttestor, CSR_KEY_USED};
pub use pools::{
    decide_create_pool, decide_update_pool, evolve_pool, AttestAdminRefusal, AttestorPolicy,
    CreatePool, UpdatePool, MAX_POOL_ATTESTORS,
};
pub use provisioned::{ProvisionedAttestor, ProvisionedRefusal, PROVISIONED_ATTESTOR};
pub use remote::{
    check_remote_verdict, reserved_tenants, InvalidRemoteAnswer, DEPLOYMENT_TENANT,
    MAX_REMOTE_CHALLENGE_LIFE_US, MAX_REMOTE_USE_LIFE_US,
};
pub use state::{
    JoinRequestState, JoinRequestStatus, PoolState, JOIN_PENDING_RETRY_SECONDS, JOIN_REQUEST_TTL,
};
pub use x509pop::{
    build_evidence, X509PopAttestor, X509PopConfig, X509PopRefusal, X509POP_ATTESTOR,
};
