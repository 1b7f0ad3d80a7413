//! Every subject of a batch names a machine of the batch's own tenant (spec 003 "The scope",
//! fc2df7d): the node itself (`<node id>`), the target in `node:<id>`, or the site agent in
//! `bmc:<agent>/<address>`. Approvers sign under the batch's tenant while the daemon checks only
//! the leaf, so a subject naming another tenant's machine would let a compromised worker spend
//! tenant A's approval on tenant B's machines: it is NOT_FOUND (as an unknown node is), and a
//! subject that names no machine at all is INVALID_INPUT.

use std::collections::BTreeMap;

use crate::pki::NodeId;

use super::batch::{BatchRefusal, ScopeLeafRequest};

/// The node a subject names (the node itself, `node:<id>`'s target, or `bmc:<agent>/<address>`'s
/// site agent), or `None` when it names none.
pub fn subject_node(subject: &str) -> Option<&str> {
    let node = if let Some(target) = subject.strip_prefix("node:") {
        target
    } else if let Some(rest) = subject.strip_prefix("bmc:") {
        let (agent, address) = rest.split_once('/')?;
        if address.is_empty() || address.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return None;
        }
        agent
    } else {
        subject
    };
    NodeId::new(node).is_ok().then_some(node)
}

/// The distinct nodes the leaves' subjects name, in order; INVALID_INPUT for the first subject
/// that names none.
pub fn subject_nodes(leaves: &[ScopeLeafRequest]) -> Result<Vec<String>, BatchRefusal> {
    let mut nodes = Vec::new();
    for (index, leaf) in leaves.iter().enumerate() {
        match subject_node(&leaf.subject) {
            Some(node) => nodes.push(node.to_string()),
            None => {
                return Err(BatchRefusal::SubjectMalformed {
                    index,
                    subject: leaf.subject.clone(),
                })
            }
        }
    }
    nodes.sort_unstable();
    nodes.dedup();
    Ok(nodes)
}

/// Checks that every subject names a node of `tenant`; `tenants` maps each node the subjects name
/// (as [`subject_nodes`] lists them) to its tenant, when the node exists.
pub fn check_batch_subjects(
    leaves: &[ScopeLeafRequest],
    tenant: &str,
    tenants: &BTreeMap<String, String>,
) -> Result<(), BatchRefusal> {
    for (index, leaf) in leaves.iter().enumerate() {
        let Some(node) = subject_node(&leaf.subject) else {
            return Err(BatchRefusal::SubjectMalformed {
                index,
                subject: leaf.subject.clone(),
            });
        };
        if tenants.get(node).map(String::as_str) != Some(tenant) {
            return Err(BatchRefusal::SubjectNotFound {
                index,
                subject: leaf.subject.clone(),
                tenant: tenant.to_string(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(subject: &str) -> ScopeLeafRequest {
        ScopeLeafRequest {
            subject: subject.into(),
            kind: "node.reboot".into(),
            payload_sha256: None,
            payload: None,
        }
    }

    #[test]
    fn subjects_name_the_node_its_target_or_its_site_agent() {
        assert_eq!(subject_node("n-1"), Some("n-1"));
        assert_eq!(subject_node("node:n-2"), Some("n-2"));
        assert_eq!(subject_node("bmc:agent-1/10.0.0.7"), Some("agent-1"));
        for bad in [
            "",
            "bmc:agent-1",
            "bmc:/10.0.0.7",
            "bmc:a/",
            "x:y",
            "a b",
            "node:",
        ] {
            assert_eq!(subject_node(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn another_tenants_or_an_unknown_node_is_not_found_a_malformed_one_invalid() {
        let tenants: BTreeMap<String, String> = [
            ("n-1".to_string(), "t1".to_string()),
            ("n-2".to_string(), "t2".to_string()),
        ]
        .into();
        assert_eq!(
            check_batch_subjects(&[leaf("n-1"), leaf("node:n-1")], "t1", &tenants),
            Ok(())
        );
        assert!(matches!(
            check_batch_subjects(&[leaf("n-1"), leaf("n-2")], "t1", &tenants),
            Err(BatchRefusal::SubjectNotFound { index: 1, .. })
        ));
        assert!(matches!(
            check_batch_subjects(&[leaf("n-9")], "t1", &tenants),
            Err(BatchRefusal::SubjectNotFound { index: 0, .. })
        ));
        assert!(matches!(
            subject_nodes(&[leaf("n-1"), leaf("bmc:x")]),
            Err(BatchRefusal::SubjectMalformed { index: 1, .. })
        ));
        assert_eq!(
            subject_nodes(&[leaf("n-1"), leaf("node:n-1"), leaf("bmc:n-0/a")]).unwrap(),
            vec!["n-0".to_string(), "n-1".to_string()]
        );
    }
}
