//! What an append expects of the stream it appends to.

/// What the caller believes about the stream it appends to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpectedVersion {
    /// Append whatever the stream holds.
    Any,
    /// The stream must not exist yet.
    NoStream,
    /// The stream must hold exactly this many events (its last version).
    Exact(u64),
}

impl std::fmt::Display for ExpectedVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ExpectedVersion::Any => f.write_str("any"),
            ExpectedVersion::NoStream => f.write_str("no stream"),
            ExpectedVersion::Exact(v) => write!(f, "version {v}"),
        }
    }
}
