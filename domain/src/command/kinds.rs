//! The command kind registry (issue 21 "A kind registry"): each kind's name, whether it is
//! destructive, the agent roles that may run it and its payload type.
//!
//! Destructive means the spec's `CommandKindSpec.destructive`: with approver keys in the trust
//! bundle such a kind runs on a machine only under an approved batch (or the unbatched allowance).
//! A node-tenant certificate "gets no destructive platform commands", so no destructive kind
//! lists that role. A ramdisk certificate is further limited by its own allowed kinds
//! (`node_certs.allowed_kinds`), checked at enqueue by [`super::enqueue`], again at dispatch by
//! [`super::queue::decide_dispatched`], and by bcd before it runs anything.
//!
//! The kinds whose roles include `ramdisk` are exactly the ones the discovery attestor's default
//! allowed kinds admit (spec 000 "discovery"; `the_default_allowed_kinds_are_exactly_the_
//! registered_ramdisk_kinds` in `attest::discovery::config` compares them): a ramdisk does not
//! reboot through a command (issue 40 item 16), it ends commissioning with `boot.kexec`.

use crate::pki::NodeRole;

/// The prefix of every payload's type URL: `type.googleapis.com/` plus the payload type.
pub const TYPE_URL_PREFIX: &str = "type.googleapis.com/";

/// One command kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KindSpec {
    /// The kind's name (`node.reboot`).
    pub name: &'static str,
    /// Whether the kind is destructive (batched under a quorum).
    pub destructive: bool,
    /// The agent roles that may run it.
    pub roles: &'static [NodeRole],
    /// The protobuf message of its payload (`bc.command.v1.NodeReboot`).
    pub payload_type: &'static str,
}

impl KindSpec {
    /// Whether an agent of `role` may run this kind.
    pub fn allows_role(&self, role: NodeRole) -> bool {
        self.roles.contains(&role)
    }

    /// The type URL its payload must carry.
    pub fn type_url(&self) -> String {
        format!("{TYPE_URL_PREFIX}{}", self.payload_type)
    }
}

const ALL_AGENTS: &[NodeRole] = &[
    NodeRole::Node,
    NodeRole::Site,
    NodeRole::Ramdisk,
    NodeRole::NodeTenant,
];
const NODES_AND_SITES: &[NodeRole] = &[NodeRole::Node, NodeRole::Site];
const MACHINES: &[NodeRole] = &[NodeRole::Node, NodeRole::Ramdisk];

/// The built-in kinds, in name order.
pub const BUILT_IN_KINDS: &[KindSpec] = &[
    KindSpec {
        name: "boot.kexec",
        destructive: true,
        roles: MACHINES,
        payload_type: "bc.command.v1.BootKexec",
    },
    KindSpec {
        name: "deploy.image",
        destructive: true,
        roles: MACHINES,
        payload_type: "bc.command.v1.DeployImage",
    },
    KindSpec {
        name: "diag.ping",
        destructive: false,
        roles: ALL_AGENTS,
        payload_type: "bc.command.v1.DiagPing",
    },
    KindSpec {
        name: "disk.wipe",
        destructive: true,
        roles: MACHINES,
        payload_type: "bc.command.v1.DiskWipe",
    },
    KindSpec {
        name: "inventory.refresh",
        destructive: false,
        roles: ALL_AGENTS,
        payload_type: "bc.command.v1.InventoryRefresh",
    },
    KindSpec {
        name: "logs.collect",
        destructive: false,
        roles: ALL_AGENTS,
        payload_type: "bc.command.v1.LogsCollect",
    },
    KindSpec {
        name: "node.reboot",
        destructive: true,
        roles: NODES_AND_SITES,
        payload_type: "bc.command.v1.NodeReboot",
    },
];

/// The registry entry of `kind`, if it is one.
pub fn kind_spec(kind: &str) -> Option<&'static KindSpec> {
    BUILT_IN_KINDS.iter().find(|k| k.name == kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_is_sorted_and_node_tenants_get_no_destructive_kind() {
        let names: Vec<&str> = BUILT_IN_KINDS.iter().map(|k| k.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted);
        for k in BUILT_IN_KINDS {
            assert!(
                crate::attest::kinds::valid_kind_pattern(k.name),
                "{}",
                k.name
            );
            if k.destructive {
                assert!(!k.allows_role(NodeRole::NodeTenant), "{}", k.name);
            }
        }
        let destructive: Vec<&str> = BUILT_IN_KINDS
            .iter()
            .filter(|k| k.destructive)
            .map(|k| k.name)
            .collect();
        assert_eq!(
            destructive,
            ["boot.kexec", "deploy.image", "disk.wipe", "node.reboot"]
        );
        assert_eq!(
            kind_spec("node.reboot").map(KindSpec::type_url).as_deref(),
            Some("type.googleapis.com/bc.command.v1.NodeReboot")
        );
        assert!(kind_spec("node.rebooot").is_none());
    }
}
