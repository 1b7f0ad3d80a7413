//! Whether a session's bcd version and boot id change what the control plane holds (decision
//! 0105): equal values decide no event, another version or boot id one event carrying what was
//! reported, an empty field is not reported, and a value over the join's bounds, a boot id that
//! is not a lower-case UUID, an unknown or inactive node are refused with their own reason.

use domain::identity::runtime_report::{
    boot_id_ok, decide_runtime_report, RuntimeHeld, RuntimeRefusal, RuntimeReport,
};
use events::schema::NodeRuntimeReported;

const BOOT_A: &str = "0b4f3c2a-6d1e-4f5a-9b8c-7d6e5f4a3b2c";
const BOOT_B: &str = "5d0c9e1a-2b3c-4d5e-8f70-112233445566";

fn held(version: Option<&str>, boot: Option<&str>) -> RuntimeHeld {
    RuntimeHeld {
        status: "active".into(),
        bcd_version: version.map(str::to_owned),
        boot_id: boot.map(str::to_owned),
    }
}

fn report(version: &str, boot: &str) -> RuntimeReport {
    RuntimeReport {
        tenant_id: "t1".into(),
        node_id: "n1".into(),
        agent_version: version.into(),
        boot_id: boot.into(),
    }
}

fn events(r: &RuntimeReport, h: &RuntimeHeld) -> Vec<NodeRuntimeReported> {
    decide_runtime_report(r, Some(h)).expect("decided").events
}

fn event(version: &str, boot: &str) -> NodeRuntimeReported {
    NodeRuntimeReported {
        node_id: "n1".into(),
        agent_version: version.into(),
        boot_id: boot.into(),
    }
}

#[test]
fn equal_values_decide_no_event() {
    let h = held(Some("0.1.0"), Some(BOOT_A));
    assert!(events(&report("0.1.0", BOOT_A), &h).is_empty());
    // Nothing reported (an older daemon with no boot id and no version) changes nothing.
    assert!(events(&report("", ""), &h).is_empty());
    assert!(events(&report("0.1.0", ""), &h).is_empty());
    assert!(events(&report("", BOOT_A), &h).is_empty());
}

#[test]
fn a_version_change_decides_one_event() {
    let h = held(Some("0.1.0"), Some(BOOT_A));
    assert_eq!(
        events(&report("0.2.0", BOOT_A), &h),
        vec![event("0.2.0", BOOT_A)]
    );
    assert_eq!(events(&report("0.2.0", ""), &h), vec![event("0.2.0", "")]);
    // A node whose join recorded no version.
    let none = held(None, Some(BOOT_A));
    assert_eq!(
        events(&report("0.1.0", BOOT_A), &none),
        vec![event("0.1.0", BOOT_A)]
    );
}

#[test]
fn a_boot_id_change_decides_one_event() {
    let h = held(Some("0.1.0"), Some(BOOT_A));
    assert_eq!(
        events(&report("0.1.0", BOOT_B), &h),
        vec![event("0.1.0", BOOT_B)]
    );
    assert_eq!(events(&report("", BOOT_B), &h), vec![event("", BOOT_B)]);
    let none = held(Some("0.1.0"), None);
    assert_eq!(
        events(&report("0.1.0", BOOT_A), &none),
        vec![event("0.1.0", BOOT_A)]
    );
}

#[test]
fn malformed_values_and_unknown_or_inactive_nodes_are_refused() {
    let h = held(Some("0.1.0"), Some(BOOT_A));
    let refused = |r: RuntimeReport, h: Option<&RuntimeHeld>| {
        decide_runtime_report(&r, h).expect_err("refused")
    };
    assert_eq!(
        refused(report(&"v".repeat(129), BOOT_A), Some(&h)),
        RuntimeRefusal::BadVersion { len: 129 }
    );
    // 128 bytes is within the bound.
    assert_eq!(events(&report(&"v".repeat(128), BOOT_A), &h).len(), 1);
    assert_eq!(
        refused(report("0.2.0\u{1b}[2J", BOOT_A), Some(&h)),
        RuntimeRefusal::BadVersion { len: 9 }
    );
    for bad in [
        "boot-1",
        "0b4f3c2a6d1e4f5a9b8c7d6e5f4a3b2c",
        "0B4F3C2A-6D1E-4F5A-9B8C-7D6E5F4A3B2C",
        "0b4f3c2a-6d1e-4f5a-9b8c-7d6e5f4a3b2g",
        "0b4f3c2a-6d1e-4f5a-9b8c-7d6e5f4a3b2c\n",
    ] {
        assert!(!boot_id_ok(bad), "{bad}");
        assert_eq!(
            refused(report("0.1.0", bad), Some(&h)),
            RuntimeRefusal::BadBootId
        );
    }
    assert!(boot_id_ok(BOOT_A));
    assert_eq!(
        refused(report("0.2.0", BOOT_B), None),
        RuntimeRefusal::UnknownNode("n1".into())
    );
    let retired = RuntimeHeld {
        status: "retired".into(),
        ..h.clone()
    };
    assert_eq!(
        refused(report("0.2.0", BOOT_B), Some(&retired)),
        RuntimeRefusal::NotActive {
            node: "n1".into(),
            status: "retired".into()
        }
    );
}
