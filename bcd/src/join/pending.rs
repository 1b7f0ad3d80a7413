//! A join's request kept until it is answered (issue 40: nothing lost on a lost answer).
//!
//! The control plane answers the same join request again (same token, same CSR, within the
//! token's life) with the identity it already issued (docs/DECISIONS.md "Issue 40: lost answers
//! (a join answered again, a renewal's next key kept across a restart)"). `bcd join` retries
//! within one run with the same key and CSR; this file carries them across a kill or a power
//! cut: before the first send, `join.pending` (mode 0600, written atomically) holds the
//! attestor, the node key (a PKCS#8 file key or a TPM key's record) and the CSR's exact bytes.
//! The next `bcd join` through the same attestor sends that request again instead of making a
//! new key, so a join the control plane committed but whose answer never arrived completes as
//! the node it admitted, with the same token. The file is removed once the identity is stored
//! (right after `identity.json`), when the control plane refuses the request (a spent request
//! admits nothing new), by `bcd join --reset`, and when the identity on disk already loads.
//!
//! Kept only for the attestors whose same request is answered again and whose evidence is the
//! token: `join-token` and `provisioned`. A TPM join answers fresh challenges each round; an
//! x509pop re-join keeps its own next key (`node.key.next`); cloud-iid documents are fetched
//! anew. A `join.pending` that does not read (another attestor's, a key that is not the CSR's,
//! a damaged file) is set aside with a line saying so, and the join starts over.

use domain::pki::{read_pem_blocks, VerifiedCsr};

use crate::attest::{JOIN_TOKEN, PROVISIONED};
use crate::files::{pem_encode, DataDir, FileError};
use crate::node_key::{parse_key_file, NodeKey, TpmHost};

/// The file in the data directory.
pub const JOIN_PENDING_FILE: &str = "join.pending";
/// The CSR's PEM label.
const CSR_LABEL: &str = "CERTIFICATE REQUEST";
/// The largest `join.pending` read.
const MAX_PENDING_LEN: u64 = 64 * 1024;

/// A request sent and not answered: its key and CSR.
pub struct PendingJoin {
    /// The node key the CSR is for.
    pub key: NodeKey,
    /// The CSR, exactly as sent.
    pub csr_der: Vec<u8>,
}

/// Whether a join through `attestor` keeps its request in `join.pending`.
pub fn keeps(attestor: &str) -> bool {
    attestor == JOIN_TOKEN || attestor == PROVISIONED
}

/// Writes `join.pending` for a request through `attestor` with `key` and `csr_der`.
pub fn save(dir: &DataDir, attestor: &str, key: &NodeKey, csr_der: &[u8]) -> Result<(), FileError> {
    dir.ensure_exists()?;
    let text = format!(
        "attestor {attestor}\n{}{}",
        key.to_pem(),
        pem_encode(CSR_LABEL, csr_der)
    );
    dir.write(JOIN_PENDING_FILE, text.as_bytes())
}

/// The request kept for `attestor`, if one is and it reads; `note` gets a line when a kept file
/// is set aside.
pub fn load(
    dir: &DataDir,
    attestor: &str,
    host: &TpmHost,
    note: &mut dyn FnMut(&str),
) -> Option<PendingJoin> {
    if !dir.exists(JOIN_PENDING_FILE) {
        return None;
    }
    match read(dir, attestor, host) {
        Ok(pending) => Some(pending),
        Err(why) => {
            note(&format!(
                "bcd join: {} set aside ({why}); this join makes a new key",
                dir.file(JOIN_PENDING_FILE).display()
            ));
            discard(dir);
            None
        }
    }
}

fn read(dir: &DataDir, attestor: &str, host: &TpmHost) -> Result<PendingJoin, String> {
    let bytes = dir
        .read(JOIN_PENDING_FILE, MAX_PENDING_LEN)
        .map_err(|e| e.to_string())?;
    let text = std::str::from_utf8(&bytes).map_err(|_| "not text".to_owned())?;
    let kept_for = text
        .lines()
        .next()
        .and_then(|l| l.strip_prefix("attestor "))
        .ok_or("no attestor line")?;
    if kept_for != attestor {
        return Err(format!(
            "it is the request of a join through {kept_for}, not {attestor}"
        ));
    }
    let key = parse_key_file(text.as_bytes())
        .map_err(|e| format!("the key: {e}"))?
        .open(host)
        .map_err(|e| format!("the key: {e}"))?;
    let csr_der = match read_pem_blocks(CSR_LABEL, text)?.as_slice() {
        [one] => one.clone(),
        _ => return Err("not one CSR".into()),
    };
    let csr = VerifiedCsr::verify(&csr_der).map_err(|e| format!("the CSR: {e}"))?;
    if csr.public_key() != key.public_key() {
        return Err("the CSR is not for the key".into());
    }
    Ok(PendingJoin { key, csr_der })
}

/// Removes `join.pending` (best effort: a file left behind is set aside by the next join).
pub fn discard(dir: &DataDir) {
    let _ = dir.remove(JOIN_PENDING_FILE);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> (tempfile::TempDir, DataDir) {
        let tmp = tempfile::tempdir().unwrap();
        let dir = DataDir::new(tmp.path().join("data"));
        (tmp, dir)
    }

    fn request() -> (NodeKey, Vec<u8>) {
        let key = NodeKey::generate_file().unwrap();
        let (csr, _) = crate::renewal::request::csr_for(&key).unwrap();
        (key, csr)
    }

    #[test]
    fn a_kept_request_reads_back_for_its_attestor_only() {
        let (_tmp, dir) = dir();
        let (key, csr) = request();
        save(&dir, JOIN_TOKEN, &key, &csr).unwrap();
        assert_eq!(dir.mode(JOIN_PENDING_FILE), Some(0o600));
        let mut notes = Vec::new();
        let kept = load(&dir, JOIN_TOKEN, &TpmHost::none(), &mut |l| {
            notes.push(l.to_owned())
        })
        .unwrap();
        assert_eq!(kept.csr_der, csr);
        assert_eq!(kept.key.public_key(), key.public_key());
        assert!(notes.is_empty(), "{notes:?}");
        // Another attestor's join sets it aside and starts over.
        assert!(load(&dir, PROVISIONED, &TpmHost::none(), &mut |l| notes
            .push(l.to_owned()))
        .is_none());
        assert!(
            notes[0].ends_with(
                "set aside (it is the request of a join through join-token, not provisioned); \
                 this join makes a new key"
            ),
            "{notes:?}"
        );
        assert!(!dir.exists(JOIN_PENDING_FILE));
    }

    #[test]
    fn a_csr_of_another_key_or_a_damaged_file_is_set_aside() {
        let (_tmp, dir) = dir();
        let (key, _) = request();
        let (_, other_csr) = request();
        save(&dir, JOIN_TOKEN, &key, &other_csr).unwrap();
        let mut notes = Vec::new();
        assert!(load(&dir, JOIN_TOKEN, &TpmHost::none(), &mut |l| notes
            .push(l.to_owned()))
        .is_none());
        assert!(
            notes[0].contains("(the CSR is not for the key)"),
            "{notes:?}"
        );
        dir.write(JOIN_PENDING_FILE, b"attestor join-token\nnot a key")
            .unwrap();
        assert!(load(&dir, JOIN_TOKEN, &TpmHost::none(), &mut |l| notes
            .push(l.to_owned()))
        .is_none());
        assert!(notes[1].contains("(the key: "), "{notes:?}");
        assert!(!dir.exists(JOIN_PENDING_FILE));
        assert!(load(&dir, JOIN_TOKEN, &TpmHost::none(), &mut |_| {}).is_none());
    }

    #[test]
    fn only_token_attestors_keep_their_request() {
        assert!(keeps(JOIN_TOKEN) && keeps(PROVISIONED));
        for other in ["tpm", "x509pop", "cloud-iid", "acme-asset"] {
            assert!(!keeps(other), "{other}");
        }
    }
}
