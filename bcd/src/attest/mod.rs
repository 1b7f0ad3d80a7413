//! The agent halves of the attestors: what `bcd join` sends as evidence, and how it answers a
//! challenge.
//!
//! An [`EvidenceProducer`] is named by the attestor it produces for ([`EvidenceProducer::id`])
//! and is asked for the evidence of each round of one exchange: round 1 with no challenge, then
//! once per `JoinChallenge` of the same attestor with its payload. Every round is bound to the
//! same CSR (`csr_sha256`). A new attestor's agent half is a new file here.
//!
//! | producer | attestor | evidence |
//! | --- | --- | --- |
//! | [`NoEvidence`] | `join-token`, `provisioned` | none (the sealed token is the credential) |
//! | [`x509pop::X509PopProducer`] | `x509pop` | the identity on disk proving itself (spec 000 "x509pop") |
//! | [`tpm::TpmProducer`] | `tpm` | the TPM's EK and AK, then the answer to its challenge (spec 000 "tpm") |
//! | [`discovery::DiscoveryProducer`] | `discovery` | the site agent's signed assertion from the kernel command line (spec 000 "discovery") |
//! | [`cloud_iid::CloudIidProducer`] | `cloud-iid` | the instance identity document from the cloud's metadata service (spec 000 "cloud-iid") |
//! | [`command::CommandProducer`] | any other (`--evidence-command`) | what an external command prints |

pub mod cloud_iid;
pub mod command;
pub mod discovery;
pub mod tpm;
pub mod x509pop;

/// The join-token (an empty `JoinRequest.attestor` means it), provisioned and x509pop
/// attestors' ids ([`domain::attest::ids`]).
pub use domain::attest::ids::{JOIN_TOKEN, PROVISIONED, X509POP};

/// Why a producer could not answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EvidenceError {
    /// The attestor asked a question this producer does not answer.
    #[error("the {0} attestor's producer answers no challenge")]
    NoChallenges(String),
    /// Building the evidence failed (reading the identity, signing...).
    #[error("{attestor} evidence: {reason}")]
    Failed {
        /// The attestor.
        attestor: String,
        /// Why.
        reason: String,
    },
}

/// The agent half of an attestor.
pub trait EvidenceProducer {
    /// The attestor this produces for (`JoinRequest.attestor`; a challenge must name it).
    fn id(&self) -> &str;

    /// The evidence of `round` (1 for the first request, then 2, 3, 4 after each challenge),
    /// bound to `csr_sha256`; `challenge` is the payload of the challenge being answered.
    fn produce(
        &self,
        round: u32,
        csr_sha256: &[u8; 32],
        challenge: Option<&[u8]>,
    ) -> Result<Vec<u8>, EvidenceError>;
}

/// A producer with no evidence: the sealed token is the whole credential (join-token,
/// provisioned). Answers no challenge.
#[derive(Debug, Clone)]
pub struct NoEvidence {
    id: String,
}

impl NoEvidence {
    /// For the attestor `id`.
    pub fn new(id: &str) -> NoEvidence {
        NoEvidence { id: id.to_owned() }
    }
}

impl EvidenceProducer for NoEvidence {
    fn id(&self) -> &str {
        &self.id
    }

    fn produce(
        &self,
        _round: u32,
        _csr_sha256: &[u8; 32],
        challenge: Option<&[u8]>,
    ) -> Result<Vec<u8>, EvidenceError> {
        match challenge {
            None => Ok(Vec::new()),
            Some(_) => Err(EvidenceError::NoChallenges(self.id.clone())),
        }
    }
}

/// `JoinRequest.attestor` for a producer: empty for join-token (the wire's default, as bcd has
/// always sent it), the id otherwise.
pub fn wire_attestor(id: &str) -> String {
    if id == JOIN_TOKEN {
        String::new()
    } else {
        id.to_owned()
    }
}
