//! Trust domains, SPIFFE IDs and roles.
//!
//! An agent's identity is `spiffe://<trust-domain>/site/<site>/node/<node>`:
//!
//! * the trust domain is 1 to 255 characters of lower-case `a-z`, `0-9`, `.`, `-` and `_`
//!   (spec 003, "Trust domain and SPIFFE IDs");
//! * the site and node ids are 1 to 128 characters of `A-Z`, `a-z`, `0-9`, `.`, `-` and `_`,
//!   and neither `.` nor `..` (the spec names no rule of its own for them; this is the SPIFFE
//!   path-segment alphabet with a length bound, recorded here as the decision);
//! * nothing else: no query, fragment, port, user info, percent-encoding or trailing slash.
//!
//! The role travels in the subject as one `OU=bc-role:<role>` ([`Role`]); roles are 1 to 32 of
//! `a-z`, `0-9` and `-`, starting with a letter. Agents are [`NodeRole`]s.

use std::fmt;
use std::str::FromStr;

/// `spiffe://`, the scheme and authority separator of every SPIFFE ID.
pub const SPIFFE_SCHEME: &str = "spiffe://";
/// Prefix of the role OU in a certificate subject.
pub const ROLE_OU_PREFIX: &str = "bc-role:";
/// Longest trust domain.
pub const MAX_TRUST_DOMAIN_LEN: usize = 255;
/// Longest site or node id.
pub const MAX_SEGMENT_LEN: usize = 128;

/// Why a trust domain, id, SPIFFE ID or role was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpiffeError {
    /// Empty or longer than 255 characters.
    #[error("trust domain must be 1 to 255 characters, got {0} (a DNS-like name such as prod.example.org)")]
    TrustDomainLength(usize),
    /// A character outside `a-z 0-9 . - _`.
    #[error(
        "trust domain {0:?} may hold only lower-case a-z, 0-9, '.', '-' and '_' (found {found:?})",
        found = first_bad_trust_domain_char(.0).unwrap_or('?')
    )]
    TrustDomainCharacter(String),
    /// Empty or longer than 128 characters.
    #[error("{kind} id must be 1 to 128 characters, got {len}")]
    SegmentLength {
        /// `site` or `node`.
        kind: &'static str,
        /// Its length.
        len: usize,
    },
    /// A character outside `A-Z a-z 0-9 . - _`, or `.`/`..`.
    #[error("{kind} id {value:?} may hold only A-Z, a-z, 0-9, '.', '-' and '_' and may not be '.' or '..'")]
    SegmentCharacter {
        /// `site` or `node`.
        kind: &'static str,
        /// The value refused.
        value: String,
    },
    /// Not of the form `spiffe://<td>/site/<site>/node/<node>`.
    #[error("{0:?} is not a node SPIFFE ID (spiffe://<trust-domain>/site/<site>/node/<node>)")]
    NotNodeSpiffeId(String),
    /// Not a known role.
    #[error(
        "unknown role {0:?} (roles: node, site, ramdisk, node-tenant, gateway, internal, worker)"
    )]
    UnknownRole(String),
    /// A role that no agent certificate carries.
    #[error("role {0} is not an agent role (node, site, ramdisk or node-tenant)")]
    NotAgentRole(Role),
}

/// A validated trust domain, such as `compute.example.com`: the one trust-domain type of the
/// codebase. SPIFFE IDs carry it, certificates are issued in it, and every quorum signature ends
/// with it ([`crate::quorum::TrustDomain`] is this type, re-exported): a verifier takes it from
/// its own configuration, never from the message it checks.
///
/// Serialized as the plain string; deserializing validates it like [`TrustDomain::new`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct TrustDomain(String);

impl TrustDomain {
    /// Validates a trust domain: 1 to 255 bytes, each one of `a-z`, `0-9`, `.`, `-` and `_`.
    pub fn new(value: impl Into<String>) -> Result<TrustDomain, SpiffeError> {
        let value = value.into();
        if value.is_empty() || value.len() > MAX_TRUST_DOMAIN_LEN {
            return Err(SpiffeError::TrustDomainLength(value.len()));
        }
        if first_bad_trust_domain_char(&value).is_some() {
            return Err(SpiffeError::TrustDomainCharacter(value));
        }
        Ok(TrustDomain(value))
    }

    /// The trust domain text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The first character a trust domain may not hold, if any.
fn first_bad_trust_domain_char(value: &str) -> Option<char> {
    value
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '-' | '_')))
}

impl<'de> serde::Deserialize<'de> for TrustDomain {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let name = String::deserialize(deserializer)?;
        TrustDomain::new(name).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for TrustDomain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for TrustDomain {
    type Err = SpiffeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        TrustDomain::new(s)
    }
}

fn check_segment(kind: &'static str, value: &str) -> Result<(), SpiffeError> {
    if value.is_empty() || value.len() > MAX_SEGMENT_LEN {
        return Err(SpiffeError::SegmentLength {
            kind,
            len: value.len(),
        });
    }
    let ok = value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    if !ok || value == "." || value == ".." {
        return Err(SpiffeError::SegmentCharacter {
            kind,
            value: value.to_owned(),
        });
    }
    Ok(())
}

macro_rules! segment_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(String);

        impl $name {
            /// Validates the id.
            pub fn new(value: &str) -> Result<$name, SpiffeError> {
                check_segment($kind, value)?;
                Ok($name(value.to_owned()))
            }

            /// The id text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl FromStr for $name {
            type Err = SpiffeError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $name::new(s)
            }
        }
    };
}

segment_type!(
    /// A validated site id (one SPIFFE path segment).
    SiteId,
    "site"
);
segment_type!(
    /// A validated node id (one SPIFFE path segment).
    NodeId,
    "node"
);

/// `spiffe://<trust-domain>/site/<site>/node/<node>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SpiffeId {
    /// Trust domain.
    pub trust_domain: TrustDomain,
    /// Site id.
    pub site: SiteId,
    /// Node id.
    pub node: NodeId,
}

impl SpiffeId {
    /// Builds the ID from its validated parts.
    pub fn new(trust_domain: TrustDomain, site: SiteId, node: NodeId) -> SpiffeId {
        SpiffeId {
            trust_domain,
            site,
            node,
        }
    }

    /// Parses a node SPIFFE ID, refusing anything but the exact form.
    pub fn parse(uri: &str) -> Result<SpiffeId, SpiffeError> {
        let not = || SpiffeError::NotNodeSpiffeId(uri.to_owned());
        let rest = uri.strip_prefix(SPIFFE_SCHEME).ok_or_else(not)?;
        let mut parts = rest.split('/');
        let (Some(td), Some("site"), Some(site), Some("node"), Some(node), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(not());
        };
        Ok(SpiffeId {
            trust_domain: TrustDomain::new(td)?,
            site: SiteId::new(site)?,
            node: NodeId::new(node)?,
        })
    }

    /// Whether `uri` is a SPIFFE URI at all (well-formed or not): used to count SPIFFE SANs.
    pub fn is_spiffe_uri(uri: &str) -> bool {
        // Compared as bytes: a URI from a certificate may hold a multi-byte character across the
        // scheme's length, where a string slice would panic (found by fuzzing).
        uri.as_bytes()
            .get(..SPIFFE_SCHEME.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(SPIFFE_SCHEME.as_bytes()))
    }
}

impl fmt::Display for SpiffeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{SPIFFE_SCHEME}{}/site/{}/node/{}",
            self.trust_domain, self.site, self.node
        )
    }
}

impl FromStr for SpiffeId {
    type Err = SpiffeError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        SpiffeId::parse(s)
    }
}

/// Every role a certificate can carry in `OU=bc-role:<role>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// An ordinary node agent.
    Node,
    /// A site agent.
    Site,
    /// A ramdisk (discovery, install) agent; certificates of at most 2 h.
    Ramdisk,
    /// A node on a dedicated-root lease: runs as a node, gets no secrets.
    NodeTenant,
    /// A gateway's serving certificate.
    Gateway,
    /// An internal control API certificate.
    Internal,
    /// A worker key certified by the command-signing root.
    Worker,
}

impl Role {
    /// All roles.
    pub const ALL: [Role; 7] = [
        Role::Node,
        Role::Site,
        Role::Ramdisk,
        Role::NodeTenant,
        Role::Gateway,
        Role::Internal,
        Role::Worker,
    ];

    /// The role's name as written after `bc-role:`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Node => "node",
            Role::Site => "site",
            Role::Ramdisk => "ramdisk",
            Role::NodeTenant => "node-tenant",
            Role::Gateway => "gateway",
            Role::Internal => "internal",
            Role::Worker => "worker",
        }
    }

    /// The OU value, `bc-role:<role>`.
    pub fn ou(self) -> String {
        format!("{ROLE_OU_PREFIX}{}", self.as_str())
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Role {
    type Err = SpiffeError;
    fn from_str(s: &str) -> Result<Role, SpiffeError> {
        Role::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| SpiffeError::UnknownRole(s.to_owned()))
    }
}

/// The roles an agent (node CA-issued) certificate can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeRole {
    /// `node`.
    Node,
    /// `site`.
    Site,
    /// `ramdisk`.
    Ramdisk,
    /// `node-tenant`.
    NodeTenant,
}

impl NodeRole {
    /// The general role.
    pub fn role(self) -> Role {
        match self {
            NodeRole::Node => Role::Node,
            NodeRole::Site => Role::Site,
            NodeRole::Ramdisk => Role::Ramdisk,
            NodeRole::NodeTenant => Role::NodeTenant,
        }
    }

    /// The role's name.
    pub fn as_str(self) -> &'static str {
        self.role().as_str()
    }
}

impl From<NodeRole> for Role {
    fn from(r: NodeRole) -> Role {
        r.role()
    }
}

impl TryFrom<Role> for NodeRole {
    type Error = SpiffeError;
    fn try_from(r: Role) -> Result<NodeRole, SpiffeError> {
        match r {
            Role::Node => Ok(NodeRole::Node),
            Role::Site => Ok(NodeRole::Site),
            Role::Ramdisk => Ok(NodeRole::Ramdisk),
            Role::NodeTenant => Ok(NodeRole::NodeTenant),
            other => Err(SpiffeError::NotAgentRole(other)),
        }
    }
}

impl fmt::Display for NodeRole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for NodeRole {
    type Err = SpiffeError;
    fn from_str(s: &str) -> Result<NodeRole, SpiffeError> {
        NodeRole::try_from(s.parse::<Role>()?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by fuzzing: a character across byte 9 must not panic the scheme check.
    #[test]
    fn a_multibyte_character_across_the_scheme_length_is_not_a_spiffe_uri() {
        assert!(!SpiffeId::is_spiffe_uri("spiffe:/\u{6d9}x"));
        assert!(!SpiffeId::is_spiffe_uri(
            "\u{6d9}\u{6d9}\u{6d9}\u{6d9}\u{6d9}"
        ));
        assert!(SpiffeId::is_spiffe_uri("SPIFFE://td/x"));
    }

    #[test]
    fn round_trip() {
        let id = SpiffeId::parse("spiffe://compute.example.com/site/eu-1/node/node_01H").unwrap();
        assert_eq!(id.trust_domain.as_str(), "compute.example.com");
        assert_eq!(id.site.as_str(), "eu-1");
        assert_eq!(id.node.as_str(), "node_01H");
        assert_eq!(
            id.to_string(),
            "spiffe://compute.example.com/site/eu-1/node/node_01H"
        );
    }

    #[test]
    fn refusals() {
        for bad in [
            "spiffe://Compute.example.com/site/a/node/b",
            "spiffe://compute.example.com/site/a/node/b/",
            "spiffe://compute.example.com/site/a/node/b?x=1",
            "spiffe://compute.example.com/site/a/node/b#f",
            "spiffe://compute.example.com:443/site/a/node/b",
            "spiffe://user@compute.example.com/site/a/node/b",
            "spiffe://compute.example.com/site/a/nodes/b",
            "spiffe://compute.example.com/site/../node/b",
            "spiffe://compute.example.com/site/a/node/.",
            "spiffe://compute.example.com/site//node/b",
            "spiffe://compute.example.com/site/a%20b/node/b",
            "spiffe:///site/a/node/b",
            "https://compute.example.com/site/a/node/b",
            "SPIFFE://compute.example.com/site/a/node/b",
        ] {
            assert!(SpiffeId::parse(bad).is_err(), "{bad} accepted");
        }
        let long_td = "a".repeat(256);
        assert_eq!(
            TrustDomain::new(&long_td),
            Err(SpiffeError::TrustDomainLength(256))
        );
        assert!(TrustDomain::new("a".repeat(255)).is_ok());
        assert!(NodeId::new(&"n".repeat(129)).is_err());
        assert!(NodeId::new(&"n".repeat(128)).is_ok());
    }

    #[test]
    fn trust_domain_refusals() {
        assert_eq!(TrustDomain::new(""), Err(SpiffeError::TrustDomainLength(0)));
        assert_eq!(
            TrustDomain::new("a".repeat(256)),
            Err(SpiffeError::TrustDomainLength(256))
        );
        for bad in [
            "Prod.example.org",
            "prod example",
            "prod/example",
            "prod:443",
            "spiffe://prod",
            "prod\u{e9}",
            "prod\n",
        ] {
            assert_eq!(
                TrustDomain::new(bad),
                Err(SpiffeError::TrustDomainCharacter(bad.to_owned())),
                "{bad:?} accepted"
            );
        }
        let refused = TrustDomain::new("prod/example").unwrap_err();
        assert!(refused.to_string().contains("(found '/')"), "{refused}");
        for good in ["a", "prod.example.org", "eu-1_b.example", "0", "..-_"] {
            assert_eq!(
                TrustDomain::new(good).map(|t| t.to_string()),
                Ok(good.into())
            );
        }
        assert_eq!(
            TrustDomain::new(String::from("owned.example")).map(|t| t.to_string()),
            Ok("owned.example".to_owned())
        );
    }

    #[test]
    fn trust_domain_serde_validates() {
        let td = TrustDomain::new("prod.example.org").unwrap();
        assert_eq!(serde_json::to_string(&td).unwrap(), "\"prod.example.org\"");
        let back: TrustDomain = serde_json::from_str("\"prod.example.org\"").unwrap();
        assert_eq!(back, td);
        for bad in ["\"\"", "\"Prod\"", "\"a b\""] {
            assert!(
                serde_json::from_str::<TrustDomain>(bad).is_err(),
                "{bad} accepted"
            );
        }
    }

    #[test]
    fn the_quorum_trust_domain_is_this_one() {
        let td: crate::quorum::TrustDomain = TrustDomain::new("prod.example.org").unwrap();
        let same: TrustDomain = td.clone();
        assert_eq!(same, td);
    }

    #[test]
    fn roles() {
        assert_eq!("ramdisk".parse::<NodeRole>(), Ok(NodeRole::Ramdisk));
        assert_eq!(
            "gateway".parse::<NodeRole>(),
            Err(SpiffeError::NotAgentRole(Role::Gateway))
        );
        assert!("admin".parse::<Role>().is_err());
        assert_eq!(Role::Node.ou(), "bc-role:node");
    }
}
