//! OpenSSH key revocation lists (OpenSSH's PROTOCOL.krl), written here: what sshd's
//! `RevokedKeys` reads and `ssh-keygen -Q -f` checks. Only what this plane revokes is written:
//! certificates of one CA by serial.
//!
//! ```text
//! uint64  KRL_MAGIC            0x5353484b524c0a00 ("SSHKRL\n\0")
//! uint32  format version       1
//! uint64  krl version          (rises with every change: the caller's log position)
//! uint64  generated date       (seconds since the Unix epoch)
//! uint64  flags                0
//! string  reserved             empty
//! string  comment
//! byte    section type         1 (KRL_SECTION_CERTIFICATES), only when there are serials
//! string  section data:
//!     string  CA key           (the SSH CA's wire blob)
//!     string  reserved         empty
//!     byte    0x20             (KRL_SECTION_CERT_SERIAL_LIST)
//!     string  uint64 serials, ascending, no repeats
//! ```
//!
//! No signature section: the file's integrity is the channel's that delivers it. Pure.

use super::wire::{put_string, put_u32, put_u64};

/// `"SSHKRL\n\0"` as a big-endian `uint64`.
pub const KRL_MAGIC: u64 = 0x5353_484b_524c_0a00;
const KRL_FORMAT_VERSION: u32 = 1;
const SECTION_CERTIFICATES: u8 = 1;
const CERT_SECTION_SERIAL_LIST: u8 = 0x20;

/// A KRL's contents.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KrlRequest<'a> {
    /// Rises with every change (sshd does not compare it; operators and tests may).
    pub krl_version: u64,
    /// Seconds since the Unix epoch.
    pub generated_at: u64,
    pub comment: &'a str,
    /// The CA's public key blob the serials are of.
    pub ca_key_blob: &'a [u8],
    /// Revoked serials, in any order (sorted and de-duplicated here; 0 is never a serial).
    pub serials: &'a [u64],
}

/// The KRL file's bytes.
pub fn write_krl(request: &KrlRequest<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    put_u64(&mut out, KRL_MAGIC);
    put_u32(&mut out, KRL_FORMAT_VERSION);
    put_u64(&mut out, request.krl_version);
    put_u64(&mut out, request.generated_at);
    put_u64(&mut out, 0);
    put_string(&mut out, &[]);
    put_string(&mut out, request.comment.as_bytes());
    let mut serials: Vec<u64> = request
        .serials
        .iter()
        .copied()
        .filter(|s| *s != 0)
        .collect();
    serials.sort_unstable();
    serials.dedup();
    if serials.is_empty() {
        return out;
    }
    let mut list = Vec::with_capacity(serials.len() * 8);
    for s in serials {
        put_u64(&mut list, s);
    }
    let mut section = Vec::new();
    put_string(&mut section, request.ca_key_blob);
    put_string(&mut section, &[]);
    section.push(CERT_SECTION_SERIAL_LIST);
    put_string(&mut section, &list);
    out.push(SECTION_CERTIFICATES);
    put_string(&mut out, &section);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_then_one_section_of_sorted_serials() {
        let krl = write_krl(&KrlRequest {
            krl_version: 7,
            generated_at: 1,
            comment: "c",
            ca_key_blob: b"k",
            serials: &[9, 3, 9, 0],
        });
        assert_eq!(&krl[..8], b"SSHKRL\n\0");
        let tail = &krl[krl.len() - 16..];
        assert_eq!(tail, [0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 9]);
        let empty = write_krl(&KrlRequest {
            serials: &[],
            ..KrlRequest {
                krl_version: 1,
                generated_at: 1,
                comment: "",
                ca_key_blob: b"k",
                serials: &[],
            }
        });
        assert_eq!(empty.len(), 8 + 4 + 8 + 8 + 8 + 4 + 4);
    }
}
