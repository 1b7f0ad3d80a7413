//! Reading PEM text: every block of one label, decoded (certificates of an internal chain, EK
//! roots of `[attestors.tpm]`).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

/// Every `label` block of a PEM text, decoded.
pub(crate) fn pem_blocks(text: &str, label: &str) -> Result<Vec<Vec<u8>>, String> {
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find(&begin) {
        let after = &rest[at + begin.len()..];
        let stop = after
            .find(&end)
            .ok_or_else(|| format!("a {label} block has no END line"))?;
        let body: String = after[..stop].split_whitespace().collect();
        out.push(
            STANDARD
                .decode(body)
                .map_err(|e| format!("a {label} block is not base64: {e}"))?,
        );
        rest = &after[stop + end.len()..];
    }
    Ok(out)
}
