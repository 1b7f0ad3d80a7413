//! AWS's instance identity document (`/latest/dynamic/instance-identity/document`) and its
//! signature (`.../signature`: base64 RSA PKCS#1 v1.5 over SHA-256 of the document's exact
//! bytes), verified under any of the configured regions' AWS public certificates. The
//! certificates are pinned keys (AWS publishes them per region), so only their key is used.
//! The account is `accountId`, the instance `instanceId`, the issue time `pendingTime`.

use base64::Engine as _;
use rsa::Pkcs1v15Sign;
use serde::Deserialize;

use super::certs::rsa_key_of;
use super::config::AwsConfig;
use super::instance::CloudIdentity;
use super::refusal::CloudIidRefusal;
use super::wire::CloudProvider;
use crate::identity::{sha256, unix_us};

/// The fields of the document the attestor reads (the rest is ignored).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Document {
    account_id: String,
    instance_id: String,
    pending_time: String,
}

/// Verifies an identity document and its signature.
pub fn verify(
    document: &str,
    signature: Option<&str>,
    config: &AwsConfig,
) -> Result<CloudIdentity, CloudIidRefusal> {
    let signature = signature.ok_or(CloudIidRefusal::Malformed)?;
    let compact: String = signature
        .chars()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    let signature = base64::engine::general_purpose::STANDARD
        .decode(compact)
        .map_err(|_| CloudIidRefusal::Malformed)?;
    let digest = sha256(document.as_bytes());
    let verified = config.certificates.iter().any(|der| {
        rsa_key_of(der).is_ok_and(|key| {
            key.verify(Pkcs1v15Sign::new::<sha2::Sha256>(), &digest, &signature)
                .is_ok()
        })
    });
    if !verified {
        return Err(CloudIidRefusal::Signature);
    }
    let doc: Document = serde_json::from_str(document).map_err(|_| CloudIidRefusal::Malformed)?;
    if doc.account_id.is_empty() || doc.instance_id.is_empty() {
        return Err(CloudIidRefusal::Malformed);
    }
    let pending = time::OffsetDateTime::parse(
        &doc.pending_time,
        &time::format_description::well_known::Rfc3339,
    )
    .map_err(|_| CloudIidRefusal::Malformed)?;
    Ok(CloudIdentity {
        provider: CloudProvider::Aws,
        account: doc.account_id,
        instance: doc.instance_id,
        issued_at_us: unix_us(pending),
    })
}
