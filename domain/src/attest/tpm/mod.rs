//! The `tpm` attestor (spec 000 "tpm", "Renewing a TPM-held key"): a machine proves itself with
//! its TPM's endorsement key in two rounds, and proves its node key is a key that TPM made and
//! can never let go, at the join and at every renewal.
//!
//! | module | job |
//! | --- | --- |
//! | [`wire`] | the messages bcd and the control plane exchange |
//! | [`config`] | what the operator configures, and how its table is read |
//! | [`factory`] | how it registers: its [`FACTORY`] |
//! | [`allow_list`] | the operator's allow-list of EKs, on the generic attestor entries |
//! | [`marshal`] | reading TPM-marshalled integers and TPM2B buffers; algorithm ids |
//! | [`public`] | TPMT_PUBLIC and a key's name |
//! | [`attest`] | TPMS_ATTEST (certify, quote) and ECDSA TPMT_SIGNATURE |
//! | [`credential`] | MakeCredential in software (KDFa, KDFe, RSA-OAEP, ECDH, AES-CFB, HMAC) |
//! | [`ek`] | the EK certificate's chain and key |
//! | [`keys`] | the AK and node-key checks, the shared certification check, the AK statement |
//! | [`state`] | the sealed challenge state |
//! | [`refusal`] | `tpm:<reason>` |
//! | [`attestor`] | [`TpmAttestor`]: round 1's challenge, round 2's checks, where the machine goes |

pub mod allow_list;
pub mod attest;
pub mod attestor;
pub mod config;
pub mod credential;
pub mod ek;
pub mod factory;
pub mod keys;
pub mod marshal;
pub mod public;
pub mod refusal;
pub mod state;
pub mod wire;

pub use allow_list::{parse_ek_sha256, TPM_ALLOW_LIST};
pub use attestor::TpmAttestor;
pub use config::{
    NodeKeyPolicy, Placement, TpmConfig, TpmSettings, MAX_CHALLENGE_TTL, TPM_CHALLENGE_INFO,
};
pub use factory::FACTORY;
pub use keys::{
    check_ak, parse_ak_statement, verify_key_certification, Ak, AkError, KeyCertRefusal,
    KeyCertification, AK_STATEMENT_PREFIX, TPM_NODE_KEY_LABEL,
};
pub use refusal::TpmRefusal;
pub use wire::{
    CertifiedKey, PcrValue, TpmAnswer, TpmAttestation, TpmChallenge, TpmEvidence,
    TpmKeyAttestation, DEFAULT_QUOTE_PCRS, TPM_ATTESTOR, TPM_WIRE_VERSION,
};
