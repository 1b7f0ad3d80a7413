//! The ids of the attestors built into the control plane, in one place: the strings a
//! `JoinRequest.attestor` names, a pool's policy lists, and events record (`attestation_uses`,
//! refusals, `attestation.evidence.used`). They are wire and log values: never change one.
//! `domain::attest::ids` is this module; the attestors and their callers use it from there.
//! Which attestors are built in is the control plane's list of factories
//! (`commands::identity::attestors::FACTORIES`, one line each; `BUILTIN_IDS` their ids).

/// The `join-token` attestor (an empty `JoinRequest.attestor` means it).
pub const JOIN_TOKEN: &str = "join-token";
/// The `x509pop` attestor: an expired certificate re-joins as its node.
pub const X509POP: &str = "x509pop";
/// The `provisioned` attestor: a single-use token bound to one machine.
pub const PROVISIONED: &str = "provisioned";
/// The `tpm` attestor: the TPM's EK, a challenge, and a node key that never leaves it.
pub const TPM: &str = "tpm";
/// The `discovery` attestor: a PXE-booted ramdisk vouched for by its site's boot server.
pub const DISCOVERY: &str = "discovery";
/// The `cloud-iid` attestor: a cloud VM's signed instance identity document.
pub const CLOUD_IID: &str = "cloud-iid";
