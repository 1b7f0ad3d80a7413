//! `bcd tpm show [--json]`: what an operator needs from this machine's TPM before it joins —
//! the SHA-256 of its EK's public area (what `bcctl tpm allow --ek-sha256` takes, and what a
//! join request for an unknown EK names) and the statement its AK gives certificates
//! (`urn:bc:tpm-ak:…`). Reads the TPM only: nothing is created in it or written to disk.

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::tpm::{AttestationKey, Tpm, TpmError};

/// What `bcd tpm show` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TpmShow {
    /// The TCTI the TPM was opened with.
    pub tcti: String,
    /// SHA-256 of the EK's TPMT_PUBLIC, lower-case hex.
    pub ek_sha256: String,
    /// The EK certificate's size in bytes (as read from NV).
    pub ek_certificate_bytes: usize,
    /// The AK's certificate statement.
    pub ak_statement: String,
}

/// Reads the EK (the one a join sends: RSA-2048 when its certificate is in NV, else ECC) and
/// the AK of `tpm`.
pub fn show(tpm: &Tpm) -> Result<TpmShow, TpmError> {
    let evidence = tpm.join_evidence(&[])?;
    let ak = AttestationKey::from_public_area(evidence.ak_public);
    Ok(TpmShow {
        tcti: tpm.tcti().to_owned(),
        ek_sha256: hex(&Sha256::digest(&evidence.ek_public)),
        ek_certificate_bytes: evidence.ek_certificate.len(),
        ak_statement: ak.statement(),
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl TpmShow {
    /// The text form, with the command that allow-lists this TPM.
    pub fn to_text(&self) -> String {
        format!(
            "tpm:        {}\nek sha256:  {}\nak:         {}\nallow it:   bcctl tpm allow --ek-sha256 {} --tenant T --site S --pool P\n",
            self.tcti, self.ek_sha256, self.ak_statement, self.ek_sha256
        )
    }
}
