//! Helpers of the TPM client tests (`tpm_client`, `tpm_answer`): real swtpm processes, tpm2-tools
//! and openssl as independent checkers, another swtpm's MakeCredential, and the parsing of what the TPM signed.

use std::process::{Command, Output};
use std::str::FromStr;

use bcd::tpm::Tpm;
use domain::attest::tpm::TpmChallenge;
use domain::pki::{PublicKey, Signature};
use sha2::{Digest as _, Sha256};
use swtpm_fixture::swtpm::Swtpm;
use tss_esapi::interface_types::resource_handles::Hierarchy;
use tss_esapi::structures::{Attest, Digest, Name, Public};
use tss_esapi::tcti_ldr::TctiNameConf;
use tss_esapi::traits::UnMarshall;
use tss_esapi::Context;

/// A fresh swtpm and a connection to it.
pub fn tpm() -> (Swtpm, Tpm) {
    let swtpm = Swtpm::start();
    let tpm = Tpm::open(&swtpm.tcti()).expect("swtpm opens");
    (swtpm, tpm)
}

/// Runs a tpm2-tools command against `swtpm` (no connection of ours may be open: swtpm serves one
/// client at a time).
pub fn tool(swtpm: &Swtpm, program: &str, args: &[&str]) -> Output {
    let out = Command::new(program)
        .args(args)
        .env("TPM2TOOLS_TCTI", swtpm.tcti())
        .output()
        .unwrap_or_else(|e| panic!("{program} runs (apt-get install tpm2-tools): {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The transient handles loaded in `swtpm`, as `tpm2_getcap handles-transient` lists them.
pub fn transient_handles(swtpm: &Swtpm) -> Vec<String> {
    let out = tool(swtpm, "tpm2_getcap", &["handles-transient"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.trim_start_matches("- ").trim().to_owned())
        .filter(|l| !l.is_empty())
        .collect()
}

/// The TPM name (`0x000B || SHA-256(TPMT_PUBLIC)`) of a public area.
pub fn name_of(public_area: &[u8]) -> Vec<u8> {
    let mut name = vec![0x00, 0x0B];
    name.extend(Sha256::digest(public_area));
    name
}

/// The parsed TPMT_PUBLIC.
pub fn public(public_area: &[u8]) -> Public {
    Public::unmarshall(public_area).expect("a TPMT_PUBLIC")
}

/// The P-256 key of an ECC TPMT_PUBLIC.
pub fn p256_of(public_area: &[u8]) -> PublicKey {
    let Public::Ecc { unique, .. } = public(public_area) else {
        panic!("not an ECC public area");
    };
    let mut point = vec![4u8];
    point.extend(pad32(unique.x().value()));
    point.extend(pad32(unique.y().value()));
    PublicKey::from_uncompressed_point(&point).expect("a P-256 point")
}

fn pad32(v: &[u8]) -> [u8; 32] {
    let mut out = [0u8; 32];
    out[32 - v.len()..].copy_from_slice(v);
    out
}

/// A TPMT_SIGNATURE (ECDSA) as ES256 `r || s`.
pub fn es256_of(tpmt_signature: &[u8]) -> Signature {
    let parsed =
        tss_esapi::structures::Signature::unmarshall(tpmt_signature).expect("a TPMT_SIGNATURE");
    let tss_esapi::structures::Signature::EcDsa(ecc) = parsed else {
        panic!("not an ECDSA signature: {parsed:?}");
    };
    let mut raw = [0u8; 64];
    raw[..32].copy_from_slice(&pad32(ecc.signature_r().value()));
    raw[32..].copy_from_slice(&pad32(ecc.signature_s().value()));
    Signature::from_bytes(&raw).expect("64 bytes")
}

/// The parsed TPMS_ATTEST.
pub fn attest(bytes: &[u8]) -> Attest {
    Attest::unmarshall(bytes).expect("a TPMS_ATTEST")
}

/// A challenge made by TPM2_MakeCredential on `maker` (another swtpm, standing in for the
/// control plane: tpm2-tools 5.4's `tpm2_makecredential -T none` fails here with "FAILED: -2"),
/// for the EK public area and the AK name, wrapping `secret`; `pcrs` as given, `state` a marker
/// the answer must echo.
pub fn make_credential(
    maker: &Swtpm,
    ek_public: &[u8],
    ak_name: &[u8],
    secret: &[u8],
    pcrs: &[u32],
) -> TpmChallenge {
    let conf = TctiNameConf::from_str(&maker.tcti()).unwrap();
    let mut ctx = Context::new(conf).expect("the maker swtpm opens");
    let ek = ctx
        .load_external_public(public(ek_public), Hierarchy::Null)
        .expect("LoadExternal of the EK public");
    let made = ctx.make_credential(
        ek,
        Digest::try_from(secret.to_vec()).unwrap(),
        Name::try_from(ak_name.to_vec()).unwrap(),
    );
    ctx.flush_context(ek.into()).unwrap();
    let (blob, encrypted) = made.expect("MakeCredential");
    TpmChallenge {
        v: 1,
        credential_blob: blob.value().to_vec(),
        encrypted_secret: encrypted.value().to_vec(),
        pcrs: pcrs.to_vec(),
        state: b"opaque state".to_vec(),
    }
}
