//! Where a relying party fetches the node CA's revocation list: the URL node certificates name
//! in their CRL distribution points extension (RFC 5280 §4.2.1.13), when the deployment says
//! one (issue 41 item 4; docs/decisions/0102).
//!
//! Only `http://` URLs: a distribution point over HTTPS would ask the relying party to check a
//! certificate while checking a certificate, and the list is public and signed (RFC 5280 §4.2.1.13
//! and RFC 5280 §8 expect HTTP or LDAP). The URL is written into every certificate as given, so
//! it is checked here once: printable ASCII, no spaces, a host, at most [`MAX_URL_LEN`] bytes.

/// The longest URL accepted (a certificate carries it whole).
pub const MAX_URL_LEN: usize = 512;

/// A URL fit for the CRL distribution points extension. Only [`CrlDistributionPoint::parse`]
/// makes one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrlDistributionPoint(String);

/// Why a URL is not a distribution point.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CrlUrlError {
    #[error("{0:?} is not an http:// URL (a CRL distribution point is plain HTTP: the list is public and signed)")]
    NotHttp(String),
    #[error("{0:?} names no host after http://")]
    NoHost(String),
    #[error("{url:?} holds {what}: give printable ASCII without spaces (percent-encode the rest)")]
    BadCharacter { url: String, what: &'static str },
    #[error("the URL is {len} bytes: at most {MAX_URL_LEN}")]
    TooLong { len: usize },
}

impl CrlDistributionPoint {
    /// Checks `url`.
    pub fn parse(url: &str) -> Result<CrlDistributionPoint, CrlUrlError> {
        if url.len() > MAX_URL_LEN {
            return Err(CrlUrlError::TooLong { len: url.len() });
        }
        if let Some(c) = url.chars().find(|c| !c.is_ascii_graphic()) {
            let what = if c == ' ' {
                "a space"
            } else if c.is_ascii() {
                "a control character"
            } else {
                "a non-ASCII character"
            };
            return Err(CrlUrlError::BadCharacter {
                url: url.to_owned(),
                what,
            });
        }
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| CrlUrlError::NotHttp(url.to_owned()))?;
        let host = rest.split(['/', '?', '#']).next().unwrap_or_default();
        if host.is_empty() || host.starts_with(':') {
            return Err(CrlUrlError::NoHost(url.to_owned()));
        }
        Ok(CrlDistributionPoint(url.to_owned()))
    }

    /// The URL.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for CrlDistributionPoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
