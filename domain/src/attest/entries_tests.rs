//! The generic entry decisions, on the two built-in lists (the TPM allow-list and the cloud
//! accounts): the refusals operators see are each list's own words.

use super::*;
use crate::attest::cloud_iid::accounts::CLOUD_ACCOUNT_LIST;
use crate::attest::tpm::allow_list::TPM_ALLOW_LIST;

const EK: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

fn allow() -> AddEntry {
    AddEntry {
        entry_id: "tpma_1".into(),
        key: EK.into(),
        tenant_id: "acme".into(),
        site_id: "par1".into(),
        pool_id: "edge".into(),
        role: String::new(),
        actor: "alice".into(),
        note: String::new(),
    }
}

fn account() -> AddEntry {
    AddEntry {
        entry_id: "cloud_1".into(),
        key: "gcp/proj-1".into(),
        tenant_id: "acme".into(),
        site_id: "eu1".into(),
        pool_id: "web".into(),
        role: "node".into(),
        actor: "alice".into(),
        note: String::new(),
    }
}

fn active(id: &str) -> EntryState {
    EntryState {
        entry_id: id.into(),
        tenant_id: "acme".into(),
        site_id: "par1".into(),
        pool_id: "edge".into(),
        role: None,
    }
}

fn refusal(r: Result<Decision<()>, AttestAdminRefusal>) -> String {
    match r {
        Err(e) => e.to_string(),
        Ok(d) => panic!("admitted: {:?}", d.events),
    }
}

#[test]
fn allow_writes_one_event_with_the_lower_case_key_on_the_eks_stream() {
    let mut cmd = allow();
    cmd.key = EK.to_uppercase();
    let d = decide_add_entry(&TPM_ALLOW_LIST, &cmd, None).expect("allowed");
    match d.events.as_slice() {
        [e @ IdentityEvent::AttestorEntryAdded(p, _)] => {
            assert_eq!((p.list.as_str(), p.key.as_str()), ("tpm-allow", EK));
            assert_eq!(
                (p.tenant_id.as_str(), p.site_id.as_str(), p.pool_id.as_str()),
                ("acme", "par1", "edge")
            );
            assert_eq!(p.role, "");
            assert_eq!(e.stream(), format!("tpm-ek/{EK}"));
        }
        other => panic!("events {other:?}"),
    }
}

#[test]
fn allow_refuses_each_bad_input_and_a_second_active_entry() {
    let with = |f: fn(&mut AddEntry)| {
        let mut c = allow();
        f(&mut c);
        refusal(decide_add_entry(&TPM_ALLOW_LIST, &c, None))
    };
    assert_eq!(
        with(|c| c.key = "abcd".into()),
        "INVALID_INPUT: the EK SHA-256 \"abcd\" must be 64 hex digits (the SHA-256 of the \
         EK's TPMT_PUBLIC)"
    );
    assert!(with(|c| c.key = format!("{}zz", &EK[..62])).contains("64 hex digits"));
    assert!(with(|c| c.tenant_id = String::new()).starts_with("INVALID_INPUT: tenant id"));
    assert!(with(|c| c.pool_id = "a b".into()).starts_with("INVALID_INPUT: pool id"));
    assert!(with(|c| c.site_id = String::new()).starts_with("INVALID_INPUT"));
    assert!(with(|c| c.role = "node".into()).contains("name no role"));
    assert_eq!(
        with(|c| c.actor = String::new()),
        "INVALID_INPUT: the actor is empty"
    );
    assert!(with(|c| c.entry_id = "x_1".into()).contains("must start with tpma_"));
    assert_eq!(
        refusal(decide_add_entry(
            &TPM_ALLOW_LIST,
            &allow(),
            Some(&active("tpma_0"))
        )),
        format!("INVALID_STATE: EK {EK} is already allowed by tpma_0 (revoke it first)")
    );
}

#[test]
fn revoke_refuses_unknown_and_revoked_entries() {
    assert_eq!(
        refusal(decide_remove_entry(
            &TPM_ALLOW_LIST,
            "tpma_9",
            None,
            "alice",
            ""
        )),
        "NOT_FOUND: no tpm allow-list entry tpma_9"
    );
    let mut entry = EntryRecord {
        entry_id: "tpma_1".into(),
        key: EK.into(),
        removed: false,
    };
    let d =
        decide_remove_entry(&TPM_ALLOW_LIST, "tpma_1", Some(&entry), "alice", "sold").expect("ok");
    assert!(matches!(
        d.events.as_slice(),
        [IdentityEvent::AttestorEntryRemoved(e, stream)]
            if e.entry_id == "tpma_1" && e.reason == "sold" && *stream == format!("tpm-ek/{EK}")
    ));
    entry.removed = true;
    assert_eq!(
        refusal(decide_remove_entry(
            &TPM_ALLOW_LIST,
            "tpma_1",
            Some(&entry),
            "alice",
            ""
        )),
        "INVALID_STATE: tpm allow-list entry tpma_1 is already revoked"
    );
}

#[test]
fn add_account_writes_one_event_on_the_accounts_stream() {
    let d = decide_add_entry(&CLOUD_ACCOUNT_LIST, &account(), None).expect("added");
    match d.events.as_slice() {
        [e @ IdentityEvent::AttestorEntryAdded(p, _)] => {
            assert_eq!((p.key.as_str(), p.role.as_str()), ("gcp/proj-1", "node"));
            assert_eq!(e.stream(), "cloud-account/gcp/proj-1");
        }
        other => panic!("events {other:?}"),
    }
}

#[test]
fn add_account_refuses_each_bad_input_and_a_second_active_entry() {
    let with = |f: fn(&mut AddEntry)| {
        let mut c = account();
        f(&mut c);
        refusal(decide_add_entry(&CLOUD_ACCOUNT_LIST, &c, None))
    };
    assert_eq!(
        with(|c| c.key = "ibm/proj-1".into()),
        "INVALID_INPUT: the provider \"ibm\" must be one of aws, gcp, azure, oidc"
    );
    assert!(with(|c| c.key = "gcp/".into()).contains("must be non-empty"));
    assert!(with(|c| c.key = "gcp/a b".into()).contains("no whitespace"));
    assert!(with(|c| c.key = format!("gcp/{}", "a".repeat(300))).contains("at most 256"));
    assert!(with(|c| c.role = "ramdisk".into()).contains("must be node or site"));
    assert!(with(|c| c.tenant_id = String::new()).starts_with("INVALID_INPUT: tenant id"));
    assert!(with(|c| c.entry_id = "x_1".into()).contains("must start with cloud_"));
    assert_eq!(
        refusal(decide_add_entry(
            &CLOUD_ACCOUNT_LIST,
            &account(),
            Some(&active("cloud_0"))
        )),
        "INVALID_STATE: gcp account proj-1 is already registered by cloud_0 (remove it first)"
    );
}

#[test]
fn remove_account_refuses_unknown_and_removed_entries() {
    assert_eq!(
        refusal(decide_remove_entry(
            &CLOUD_ACCOUNT_LIST,
            "cloud_9",
            None,
            "alice",
            ""
        )),
        "NOT_FOUND: no cloud account entry cloud_9"
    );
    let entry = EntryRecord {
        entry_id: "cloud_1".into(),
        key: "aws/123".into(),
        removed: true,
    };
    assert_eq!(
        refusal(decide_remove_entry(
            &CLOUD_ACCOUNT_LIST,
            "cloud_1",
            Some(&entry),
            "alice",
            ""
        )),
        "INVALID_STATE: cloud account entry cloud_1 is already removed"
    );
}
