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
