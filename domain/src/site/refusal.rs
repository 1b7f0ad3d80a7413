//! Why an operator command on a site, a boot entry or a lease was refused ([`SiteRefusal`]), and
//! the checks of its free-text and id fields that every site decider runs.

/// At most this many bytes of description, reason or kernel arguments.
pub const MAX_SITE_TEXT: usize = 1024;

/// Why an operator command on a site, a boot entry or a lease was refused. Operator errors
/// (bad input, unknown id, wrong state), never security refusals.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SiteRefusal {
    /// Invalid input; the text says which field and why.
    #[error("INVALID_INPUT: {0}")]
    Invalid(String),
    /// No such site.
    #[error("NOT_FOUND: no site {0}")]
    UnknownSite(String),
    /// `site create` of an id that exists.
    #[error("INVALID_STATE: site {0} already exists")]
    SiteExists(String),
    /// No such boot entry.
    #[error("NOT_FOUND: no boot entry {0}")]
    UnknownBootEntry(String),
    /// `site boot add` for a MAC that has an active entry, without `--replace`.
    #[error(
        "INVALID_STATE: site {site} already has active boot entry {entry_id} for MAC {mac} \
         (give --replace to replace it, or remove it first)"
    )]
    BootEntryExists {
        /// The site.
        site: String,
        /// The MAC.
        mac: String,
        /// The active entry.
        entry_id: String,
    },
    /// `site boot remove` of an entry already removed.
    #[error("INVALID_STATE: boot entry {0} is already removed")]
    BootEntryRemoved(String),
    /// `site lease fence` of a lease nobody holds.
    #[error("INVALID_STATE: the boot lease of site {0} is not held")]
    LeaseNotHeld(String),
}

impl SiteRefusal {
    /// The refusal's code, as the CLI and the API name it.
    pub fn code(&self) -> &'static str {
        match self {
            SiteRefusal::Invalid(_) => "INVALID_INPUT",
            SiteRefusal::UnknownSite(_) | SiteRefusal::UnknownBootEntry(_) => "NOT_FOUND",
            SiteRefusal::SiteExists(_)
            | SiteRefusal::BootEntryExists { .. }
            | SiteRefusal::BootEntryRemoved(_)
            | SiteRefusal::LeaseNotHeld(_) => "INVALID_STATE",
        }
    }
}

/// A free-text field: at most `max` bytes, no control character.
pub(crate) fn check_text(what: &str, value: &str, max: usize) -> Result<(), SiteRefusal> {
    if value.len() > max {
        return Err(SiteRefusal::Invalid(format!(
            "the {what} is {} bytes, at most {max}",
            value.len()
        )));
    }
    if value.chars().any(char::is_control) {
        return Err(SiteRefusal::Invalid(format!(
            "the {what} holds a control character"
        )));
    }
    Ok(())
}

/// The actor of an operator command: not empty, at most 256 bytes.
pub(crate) fn check_actor(actor: &str) -> Result<(), SiteRefusal> {
    if actor.is_empty() {
        return Err(SiteRefusal::Invalid("the actor is empty".into()));
    }
    check_text("actor", actor, 256)
}

/// A tenant or pool id, as tokens name them (1 to 128 of A-Z, a-z, 0-9, '.', '-', '_').
pub(crate) fn check_id(what: &str, value: &str) -> Result<(), SiteRefusal> {
    match crate::plain_id::plain_id_problem(what, value) {
        None => Ok(()),
        Some(problem) => Err(SiteRefusal::Invalid(problem)),
    }
}
