//! Conversions between what the TPM answers (tss-esapi structures) and what bcd keeps:
//! marshalled TPMT_PUBLICs, uncompressed P-256 points, ES256 `r || s` signatures.

use tss_esapi::structures::{Public, Signature};
use tss_esapi::traits::Marshall;

use super::error::TpmError;

fn command(operation: &'static str) -> impl FnOnce(tss_esapi::Error) -> TpmError {
    move |e| TpmError::Command {
        operation,
        reason: e.to_string(),
    }
}

pub(super) fn marshal_public(public: &Public) -> Result<Vec<u8>, TpmError> {
    public.marshall().map_err(command("marshal TPMT_PUBLIC"))
}

/// The uncompressed point (`04 || x || y`, each zero-padded to 32 bytes) of a P-256 public.
pub(super) fn ecc_point(public: &Public) -> Result<Vec<u8>, TpmError> {
    let Public::Ecc { unique, .. } = public else {
        return Err(TpmError::Command {
            operation: "create_primary (node key)",
            reason: "the TPM made a key that is not ECC".into(),
        });
    };
    let mut point = vec![4u8];
    point.extend(pad32(unique.x().value(), "x")?);
    point.extend(pad32(unique.y().value(), "y")?);
    Ok(point)
}

fn pad32(value: &[u8], what: &str) -> Result<[u8; 32], TpmError> {
    let value = strip_zeros(value);
    if value.len() > 32 {
        return Err(TpmError::Command {
            operation: "tpm answer",
            reason: format!("a P-256 {what} of {} bytes", value.len()),
        });
    }
    let mut out = [0u8; 32];
    out[32 - value.len()..].copy_from_slice(value);
    Ok(out)
}

fn strip_zeros(value: &[u8]) -> &[u8] {
    let first = value.iter().position(|b| *b != 0).unwrap_or(value.len());
    &value[first..]
}

/// TPMT_SIGNATURE (ECDSA) → `r || s`, each zero-padded to 32 bytes.
pub(super) fn raw_signature(signature: &Signature) -> Result<[u8; 64], TpmError> {
    let Signature::EcDsa(ecc) = signature else {
        return Err(TpmError::Command {
            operation: "sign",
            reason: "the TPM answered a signature that is not ECDSA".into(),
        });
    };
    let mut out = [0u8; 64];
    out[..32].copy_from_slice(&pad32(ecc.signature_r().value(), "r")?);
    out[32..].copy_from_slice(&pad32(ecc.signature_s().value(), "s")?);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pad32_left_pads_and_refuses_long_values() {
        assert_eq!(pad32(&[1, 2], "r").unwrap()[30..], [1, 2]);
        assert_eq!(pad32(&[0, 0, 9], "r").unwrap()[31], 9);
        assert!(pad32(&[1; 33], "r").is_err());
        assert_eq!(pad32(&[0; 33], "r").unwrap(), [0; 32]);
    }
}
