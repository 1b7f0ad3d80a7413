//! The operator's TPM allow-list (`bcctl tpm allow|list|revoke`, spec 000 "tpm"): an entry
//! names one endorsement key (by the SHA-256 of its TPMT_PUBLIC) and the tenant, site and pool a
//! machine proving it joins, when the EK is bound to no node yet. The decisions here are pure:
//! input checks, one active entry per EK, and revocation of an active entry only.

use events::schema::{TpmEkAllowRevoked, TpmEkAllowed};

use super::contract::TpmAllowState;
use super::pools::{check_id, check_text, AttestAdminRefusal};
use crate::identity::{Decision, IdentityEvent};
use crate::pki::SiteId;

/// At most this many bytes of note or revocation reason.
pub const MAX_TPM_ALLOW_TEXT: usize = 512;

/// The prefix of an allow-list entry's id.
pub const TPM_ALLOW_ID_PREFIX: &str = "tpma_";

/// `tpm allow`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllowEk {
    /// The new entry's id (`tpma_…`, minted by the shell).
    pub allow_id: String,
    /// The EK's SHA-256 as the operator typed it: 64 hex digits (either case).
    pub ek_sha256_hex: String,
    /// Where the machine joins.
    pub tenant_id: String,
    /// Its site.
    pub site_id: String,
    /// Its pool.
    pub pool_id: String,
    /// Who allows it.
    pub actor: String,
    /// Free text (may be empty).
    pub note: String,
}

/// An allow-list entry as the revoke decision reads it (active or revoked).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TpmAllowEntry {
    /// Its id.
    pub allow_id: String,
    /// Its EK's SHA-256.
    pub ek_sha256: [u8; 32],
    /// Whether it was revoked.
    pub revoked: bool,
}

/// Parses an EK SHA-256 given as 64 hex digits (either case).
pub fn parse_ek_sha256(text: &str) -> Result<[u8; 32], AttestAdminRefusal> {
    let bad = || {
        AttestAdminRefusal::Invalid(format!(
            "the EK SHA-256 {text:?} must be 64 hex digits (the SHA-256 of the EK's TPMT_PUBLIC)"
        ))
    };
    if text.len() != 64 {
        return Err(bad());
    }
    let bytes = hex::decode(text).map_err(|_| bad())?;
    bytes.as_slice().try_into().map_err(|_| bad())
}

fn check_actor(actor: &str) -> Result<(), AttestAdminRefusal> {
    if actor.is_empty() {
        return Err(AttestAdminRefusal::Invalid("the actor is empty".into()));
    }
    check_text("actor", actor, 256)
}

/// Allows an EK; `active` is the entry not revoked that already names the same EK, if any.
pub fn decide_allow_ek(
    cmd: &AllowEk,
    active: Option<&TpmAllowState>,
) -> Result<Decision<()>, AttestAdminRefusal> {
    check_id("allow id", &cmd.allow_id)?;
    if !cmd.allow_id.starts_with(TPM_ALLOW_ID_PREFIX) {
        return Err(AttestAdminRefusal::Invalid(format!(
            "allow id {:?} must start with {TPM_ALLOW_ID_PREFIX}",
            cmd.allow_id
        )));
    }
    let ek = parse_ek_sha256(&cmd.ek_sha256_hex)?;
    check_id("tenant id", &cmd.tenant_id)?;
    SiteId::new(&cmd.site_id).map_err(|e| AttestAdminRefusal::Invalid(e.to_string()))?;
    check_id("pool id", &cmd.pool_id)?;
    check_actor(&cmd.actor)?;
    check_text("note", &cmd.note, MAX_TPM_ALLOW_TEXT)?;
    if let Some(existing) = active {
        return Err(AttestAdminRefusal::TpmAllowExists {
            ek_sha256: hex::encode(ek),
            allow_id: existing.allow_id.clone(),
        });
    }
    Ok(Decision::events_only(vec![IdentityEvent::TpmEkAllowed(
        TpmEkAllowed {
            allow_id: cmd.allow_id.clone(),
            ek_sha256: ek.to_vec(),
            tenant_id: cmd.tenant_id.clone(),
            site_id: cmd.site_id.clone(),
            pool_id: cmd.pool_id.clone(),
            actor: cmd.actor.clone(),
            note: cmd.note.clone(),
        },
    )]))
}

/// Revokes an active entry: its EK no longer joins through it (a node it admitted stays bound).
pub fn decide_revoke_tpm_allow(
    allow_id: &str,
    entry: Option<&TpmAllowEntry>,
    actor: &str,
    reason: &str,
) -> Result<Decision<()>, AttestAdminRefusal> {
    check_actor(actor)?;
    check_text("reason", reason, MAX_TPM_ALLOW_TEXT)?;
    let entry = entry.ok_or_else(|| AttestAdminRefusal::UnknownTpmAllow(allow_id.into()))?;
    if entry.revoked {
        return Err(AttestAdminRefusal::TpmAllowRevoked(entry.allow_id.clone()));
    }
    Ok(Decision::events_only(vec![
        IdentityEvent::TpmEkAllowRevoked(TpmEkAllowRevoked {
            allow_id: entry.allow_id.clone(),
            actor: actor.into(),
            reason: reason.into(),
            ek_sha256: entry.ek_sha256.to_vec(),
        }),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    const EK: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    fn allow() -> AllowEk {
        AllowEk {
            allow_id: "tpma_1".into(),
            ek_sha256_hex: EK.into(),
            tenant_id: "acme".into(),
            site_id: "par1".into(),
            pool_id: "edge".into(),
            actor: "alice".into(),
            note: String::new(),
        }
    }

    fn refusal(r: Result<Decision<()>, AttestAdminRefusal>) -> String {
        match r {
            Err(e) => e.to_string(),
            Ok(d) => panic!("admitted: {:?}", d.events),
        }
    }

    #[test]
    fn allow_writes_one_event_with_the_ek_bytes() {
        let mut cmd = allow();
        cmd.ek_sha256_hex = EK.to_uppercase();
        let d = decide_allow_ek(&cmd, None).expect("allowed");
        match d.events.as_slice() {
            [IdentityEvent::TpmEkAllowed(e)] => {
                assert_eq!(hex::encode(&e.ek_sha256), EK);
                assert_eq!(
                    (e.tenant_id.as_str(), e.site_id.as_str(), e.pool_id.as_str()),
                    ("acme", "par1", "edge")
                );
            }
            other => panic!("events {other:?}"),
        }
    }

    #[test]
    fn allow_refuses_each_bad_input_and_a_second_active_entry() {
        let with = |f: fn(&mut AllowEk)| {
            let mut c = allow();
            f(&mut c);
            refusal(decide_allow_ek(&c, None))
        };
        assert_eq!(
            with(|c| c.ek_sha256_hex = "abcd".into()),
            "INVALID_INPUT: the EK SHA-256 \"abcd\" must be 64 hex digits (the SHA-256 of the \
             EK's TPMT_PUBLIC)"
        );
        assert!(with(|c| c.ek_sha256_hex = format!("{}zz", &EK[..62])).contains("64 hex digits"));
        assert!(with(|c| c.tenant_id = String::new()).starts_with("INVALID_INPUT: tenant id"));
        assert!(with(|c| c.pool_id = "a b".into()).starts_with("INVALID_INPUT: pool id"));
        assert!(with(|c| c.site_id = String::new()).starts_with("INVALID_INPUT"));
        assert_eq!(
            with(|c| c.actor = String::new()),
            "INVALID_INPUT: the actor is empty"
        );
        assert!(with(|c| c.allow_id = "x_1".into()).contains("must start with tpma_"));
        let active = TpmAllowState {
            allow_id: "tpma_0".into(),
            tenant_id: "acme".into(),
            site_id: "par1".into(),
            pool_id: "edge".into(),
        };
        assert_eq!(
            refusal(decide_allow_ek(&allow(), Some(&active))),
            format!("INVALID_STATE: EK {EK} is already allowed by tpma_0 (revoke it first)")
        );
    }

    #[test]
    fn revoke_refuses_unknown_and_revoked_entries() {
        assert_eq!(
            refusal(decide_revoke_tpm_allow("tpma_9", None, "alice", "")),
            "NOT_FOUND: no tpm allow-list entry tpma_9"
        );
        let mut entry = TpmAllowEntry {
            allow_id: "tpma_1".into(),
            ek_sha256: [7; 32],
            revoked: false,
        };
        let d = decide_revoke_tpm_allow("tpma_1", Some(&entry), "alice", "sold").expect("ok");
        assert!(matches!(
            d.events.as_slice(),
            [IdentityEvent::TpmEkAllowRevoked(e)] if e.allow_id == "tpma_1" && e.reason == "sold"
        ));
        entry.revoked = true;
        assert_eq!(
            refusal(decide_revoke_tpm_allow("tpma_1", Some(&entry), "alice", "")),
            "INVALID_STATE: tpm allow-list entry tpma_1 is already revoked"
        );
    }
}
