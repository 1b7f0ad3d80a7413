//! The names a node may serve TLS for (issue 41 item 1): DNS names and IP addresses an operator
//! gave it (`bcctl node names set|add|remove`), never names a node claims.
//!
//! [`decide_node_names`] is the one decision: the names checked as plain names
//! ([`dns_name_problem`], [`parse_ip`]), the node able to hold them (it exists; not retired,
//! deleted or revoked), the change applied to what it holds, the bound on how many it holds
//! ([`MAX_NODE_NAMES`]), and no name another node of the tenant holds unless the operator allows
//! sharing. It appends one `node.names.set` carrying the whole resulting set; a change that
//! leaves the set as it was appends nothing. Pure: the shell loads what it reads.

use std::collections::BTreeSet;
use std::net::IpAddr;

use events::schema::NodeNamesSet;

use super::state::{IdentityEvent, NodeState, NodeStatus};
use super::Decision;

/// The most names (DNS names and IP addresses together) a node holds.
pub const MAX_NODE_NAMES: usize = 32;

/// The longest DNS name, in characters (RFC 1035, without the trailing dot).
pub const MAX_DNS_NAME_LEN: usize = 253;

/// The longest label of a DNS name.
pub const MAX_DNS_LABEL_LEN: usize = 63;

/// What kind of name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NameKind {
    /// A DNS name (`--dns`).
    Dns,
    /// An IP address (`--ip`).
    Ip,
}

impl NameKind {
    /// The stored text: `dns` or `ip`.
    pub fn as_str(self) -> &'static str {
        match self {
            NameKind::Dns => "dns",
            NameKind::Ip => "ip",
        }
    }

    /// Parses the stored text.
    pub fn parse(text: &str) -> Option<NameKind> {
        match text {
            "dns" => Some(NameKind::Dns),
            "ip" => Some(NameKind::Ip),
            _ => None,
        }
    }

    fn flag(self) -> &'static str {
        match self {
            NameKind::Dns => "--dns",
            NameKind::Ip => "--ip",
        }
    }

    fn what(self) -> &'static str {
        match self {
            NameKind::Dns => "DNS name",
            NameKind::Ip => "IP address",
        }
    }
}

/// What the operator ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamesChange {
    /// `set`: the given names replace the node's.
    Set,
    /// `add`: the given names join the node's.
    Add,
    /// `remove`: the given names leave the node's (each must be held).
    Remove,
}

impl NamesChange {
    /// The text the event records: `set`, `add` or `remove`.
    pub fn as_str(self) -> &'static str {
        match self {
            NamesChange::Set => "set",
            NamesChange::Add => "add",
            NamesChange::Remove => "remove",
        }
    }
}

/// A set of names, each in its canonical text (DNS names as given, which the checks keep
/// lower-case; IP addresses as `IpAddr` prints them).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeNames {
    /// DNS names, sorted.
    pub dns: BTreeSet<String>,
    /// IP addresses, sorted by their text.
    pub ips: BTreeSet<String>,
}

impl NodeNames {
    /// How many names, of both kinds.
    pub fn len(&self) -> usize {
        self.dns.len() + self.ips.len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether it holds `name` of `kind`.
    pub fn holds(&self, kind: NameKind, name: &str) -> bool {
        match kind {
            NameKind::Dns => self.dns.contains(name),
            NameKind::Ip => self.ips.contains(name),
        }
    }

    /// Every name with its kind, DNS names first.
    pub fn iter(&self) -> impl Iterator<Item = (NameKind, &str)> {
        let dns = self.dns.iter().map(|n| (NameKind::Dns, n.as_str()));
        dns.chain(self.ips.iter().map(|n| (NameKind::Ip, n.as_str())))
    }

    fn insert(&mut self, kind: NameKind, name: &str) {
        match kind {
            NameKind::Dns => self.dns.insert(name.to_owned()),
            NameKind::Ip => self.ips.insert(name.to_owned()),
        };
    }

    fn remove(&mut self, kind: NameKind, name: &str) {
        match kind {
            NameKind::Dns => self.dns.remove(name),
            NameKind::Ip => self.ips.remove(name),
        };
    }
}

/// A change of a node's names, as the operator asked it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangeNames {
    /// The node.
    pub node_id: String,
    /// Set, add or remove.
    pub change: NamesChange,
    /// The `--dns` values, as given.
    pub dns: Vec<String>,
    /// The `--ip` values, as given.
    pub ips: Vec<String>,
    /// `--allow-shared`: a name another node of the tenant holds may be held by this one too.
    pub allow_shared: bool,
}

/// Another node of the tenant holding one of the names asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameHolder {
    /// Which kind.
    pub kind: NameKind,
    /// The name, canonical.
    pub name: String,
    /// The node holding it.
    pub node_id: String,
}

/// What the decision reads, as the shell loaded it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamesFacts {
    /// The node (`None`: no such node).
    pub node: Option<NodeState>,
    /// Its identity reads as revoked ([`super::identity_revoked`]).
    pub identity_revoked: bool,
    /// The names it holds now.
    pub held: NodeNames,
    /// The other nodes of its tenant holding any of the names asked for ([`requested_names`]).
    pub holders: Vec<NameHolder>,
}

/// What a change answers: the names the node holds after it, and whether anything changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamesOutcome {
    /// The resulting set.
    pub names: NodeNames,
    /// False when the set was already what the change makes it (nothing appended).
    pub changed: bool,
}

/// Why a change of a node's names was refused. Each message says what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NamesRefusal {
    /// A `--dns` value that is not a plain DNS name.
    #[error("INVALID_INPUT: --dns {name:?}: {why}")]
    BadDnsName {
        /// As given.
        name: String,
        /// What is wrong and how to write it.
        why: String,
    },
    /// An `--ip` value that is not an address a node can serve on.
    #[error("INVALID_INPUT: --ip {name:?}: {why}")]
    BadIpAddress {
        /// As given.
        name: String,
        /// What is wrong.
        why: String,
    },
    /// `add` or `remove` without a name.
    #[error(
        "INVALID_INPUT: node names {change} needs at least one --dns NAME or --ip ADDR (node names \
         set with none clears the node's names)"
    )]
    NothingGiven {
        /// `add` or `remove`.
        change: &'static str,
    },
    /// No such node.
    #[error("NOT_FOUND: no node {0}")]
    UnknownNode(String),
    /// The node cannot hold names: retired, deleted, or its identity revoked.
    #[error("INVALID_STATE: node {node} is {status}: {}", state_hint(status, node))]
    NodeState {
        /// The node.
        node: String,
        /// `revoked`, `retired` or `deleted`.
        status: &'static str,
    },
    /// `remove` of a name the node does not hold.
    #[error(
        "INVALID_STATE: node {node} does not hold {} {name}; bcctl node names show {node} lists \
         what it holds", kind.what()
    )]
    NotHeld {
        /// The node.
        node: String,
        /// Which kind.
        kind: NameKind,
        /// The name, canonical.
        name: String,
    },
    /// The node would hold more than [`MAX_NODE_NAMES`].
    #[error(
        "INVALID_STATE: node {node} would hold {count} names; at most {max}: remove some first \
         (bcctl node names remove {node} ...)"
    )]
    TooMany {
        /// The node.
        node: String,
        /// How many it would hold.
        count: usize,
        /// [`MAX_NODE_NAMES`].
        max: usize,
    },
    /// Another node of the tenant holds a name asked for, and sharing was not allowed.
    #[error(
        "INVALID_STATE: {} {name} is held by node {holder} of tenant {tenant}: remove it there \
         first (bcctl node names remove {holder} {} {name}), or give --allow-shared to let both \
         nodes hold it", kind.what(), kind.flag()
    )]
    HeldElsewhere {
        /// Which kind.
        kind: NameKind,
        /// The name, canonical.
        name: String,
        /// The node holding it.
        holder: String,
        /// The tenant of both.
        tenant: String,
    },
}

/// What an operator can do about a node that cannot hold names.
fn state_hint(status: &str, node: &str) -> String {
    if status == "revoked" {
        format!(
            "its names cannot change until a --reclaim token re-keys it (bcctl token create \
             --reclaim {node}), or retire it to free them"
        )
    } else {
        "it serves nothing any more, and holds no names".to_owned()
    }
}

impl NamesRefusal {
    /// Whether the refusal is of the input alone (a usage error, exit 2), not of the state.
    pub fn is_input(&self) -> bool {
        matches!(
            self,
            NamesRefusal::BadDnsName { .. }
                | NamesRefusal::BadIpAddress { .. }
                | NamesRefusal::NothingGiven { .. }
        )
    }

    /// A short stable name of the reason (`bad-dns-name`, `held-elsewhere`, ...).
    pub fn reason(&self) -> &'static str {
        match self {
            NamesRefusal::BadDnsName { .. } => "bad-dns-name",
            NamesRefusal::BadIpAddress { .. } => "bad-ip-address",
            NamesRefusal::NothingGiven { .. } => "nothing-given",
            NamesRefusal::UnknownNode(_) => "unknown-node",
            NamesRefusal::NodeState { .. } => "node-state",
            NamesRefusal::NotHeld { .. } => "not-held",
            NamesRefusal::TooMany { .. } => "too-many",
            NamesRefusal::HeldElsewhere { .. } => "held-elsewhere",
        }
    }
}

/// What is wrong with `name` as a plain DNS name, or `None` when it is one: lower-case letters,
/// digits, `-` and `.`; labels of 1 to 63 characters neither starting nor ending with `-`; at
/// most 253 characters; no wildcard, no trailing dot, not an IP address.
pub fn dns_name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("empty".into());
    }
    if name.contains('*') {
        return Some("a wildcard is not allowed: give each name the node serves".into());
    }
    if let Some(trimmed) = name.strip_suffix('.') {
        return Some(format!("no trailing dot: write {trimmed}"));
    }
    if name.chars().any(|c| c.is_ascii_uppercase()) {
        return Some(format!(
            "upper-case letters: write {}",
            name.to_ascii_lowercase()
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-' || *c == '.'))
    {
        return Some(format!("{c:?} is not allowed: only a-z, 0-9, '-' and '.'"));
    }
    if name.len() > MAX_DNS_NAME_LEN {
        return Some(format!(
            "{} characters; at most {MAX_DNS_NAME_LEN}",
            name.len()
        ));
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Some("an empty label (a leading dot or two dots in a row)".into());
        }
        if label.len() > MAX_DNS_LABEL_LEN {
            return Some(format!(
                "label {label} is {} characters; at most {MAX_DNS_LABEL_LEN}",
                label.len()
            ));
        }
        if label.starts_with('-') || label.ends_with('-') {
            return Some(format!("label {label} starts or ends with '-'"));
        }
    }
    if name.parse::<IpAddr>().is_ok() {
        return Some("an IP address: give it with --ip".into());
    }
    None
}

/// `text` as an address a node can serve on, in its canonical text (IPv6 compressed), or what
/// is wrong with it.
pub fn parse_ip(text: &str) -> Result<String, String> {
    let ip: IpAddr = text
        .parse()
        .map_err(|_| "not an IPv4 or IPv6 address (no port, no brackets, no zone)".to_owned())?;
    if ip.is_unspecified() {
        return Err(format!(
            "{ip} is the unspecified address, not one a node serves on"
        ));
    }
    if ip.is_multicast() {
        return Err(format!("{ip} is a multicast address"));
    }
    if let IpAddr::V4(v4) = ip {
        if v4.is_broadcast() {
            return Err(format!("{ip} is the broadcast address"));
        }
    }
    Ok(ip.to_string())
}

/// The names a change asks for, checked and canonical (duplicates fold into one).
pub fn requested_names(cmd: &ChangeNames) -> Result<NodeNames, NamesRefusal> {
    let mut names = NodeNames::default();
    for name in &cmd.dns {
        if let Some(why) = dns_name_problem(name) {
            return Err(NamesRefusal::BadDnsName {
                name: name.clone(),
                why,
            });
        }
        names.insert(NameKind::Dns, name);
    }
    for text in &cmd.ips {
        let ip = parse_ip(text).map_err(|why| NamesRefusal::BadIpAddress {
            name: text.clone(),
            why,
        })?;
        names.insert(NameKind::Ip, &ip);
    }
    if names.is_empty() && cmd.change != NamesChange::Set {
        return Err(NamesRefusal::NothingGiven {
            change: cmd.change.as_str(),
        });
    }
    Ok(names)
}

/// Decides a change of a node's names (the module's rules, checked in the order written there).
pub fn decide_node_names(
    cmd: &ChangeNames,
    facts: &NamesFacts,
) -> Result<Decision<NamesOutcome>, NamesRefusal> {
    let asked = requested_names(cmd)?;
    let node = facts
        .node
        .as_ref()
        .ok_or_else(|| NamesRefusal::UnknownNode(cmd.node_id.clone()))?;
    let status = match node.status {
        NodeStatus::Retired | NodeStatus::Deleted => Some(node.status.as_str()),
        NodeStatus::Active if facts.identity_revoked => Some("revoked"),
        NodeStatus::Active => None,
    };
    if let Some(status) = status {
        return Err(NamesRefusal::NodeState {
            node: cmd.node_id.clone(),
            status,
        });
    }
    let names = match cmd.change {
        NamesChange::Set => asked.clone(),
        NamesChange::Add => {
            let mut names = facts.held.clone();
            asked.iter().for_each(|(k, n)| names.insert(k, n));
            names
        }
        NamesChange::Remove => {
            let mut names = facts.held.clone();
            for (kind, name) in asked.iter() {
                if !facts.held.holds(kind, name) {
                    return Err(NamesRefusal::NotHeld {
                        node: cmd.node_id.clone(),
                        kind,
                        name: name.to_owned(),
                    });
                }
                names.remove(kind, name);
            }
            names
        }
    };
    if names.len() > MAX_NODE_NAMES {
        return Err(NamesRefusal::TooMany {
            node: cmd.node_id.clone(),
            count: names.len(),
            max: MAX_NODE_NAMES,
        });
    }
    if !cmd.allow_shared {
        // Only a name the node does not hold yet: one it holds, shared before, stays.
        let mut taken = facts.holders.iter().filter(|h| {
            h.node_id != cmd.node_id
                && names.holds(h.kind, &h.name)
                && !facts.held.holds(h.kind, &h.name)
        });
        if let Some(h) = taken.next() {
            return Err(NamesRefusal::HeldElsewhere {
                kind: h.kind,
                name: h.name.clone(),
                holder: h.node_id.clone(),
                tenant: node.tenant_id.clone(),
            });
        }
    }
    if names == facts.held {
        return Ok(Decision::unchanged(NamesOutcome {
            names,
            changed: false,
        }));
    }
    let event = IdentityEvent::NodeNamesSet(NodeNamesSet {
        node_id: node.node_id.clone(),
        dns_names: names.dns.iter().cloned().collect(),
        ip_addresses: names.ips.iter().cloned().collect(),
        change: cmd.change.as_str().to_owned(),
        allow_shared: cmd.allow_shared,
    });
    Ok(Decision {
        events: vec![event],
        outcome: NamesOutcome {
            names,
            changed: true,
        },
    })
}
