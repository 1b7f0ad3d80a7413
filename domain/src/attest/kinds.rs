//! Command-kind patterns a certificate may be limited to (spec 001 "allowedKinds"): an exact
//! kind name (`disk.wipe`) or a prefix (`diag.*`). Matching is exact, so `wipe` never allows
//! `disk.wipe`. Checked where a list enters the control plane: an out-of-process attestor's
//! answer and `[attestors.discovery] allowed_kinds`. Applied ([`kinds_allow`]) at enqueue, at
//! dispatch and by bcd before it runs a command.

/// At most this many allowed command kinds on one certificate.
pub const MAX_ALLOWED_KINDS: usize = 64;

/// The longest kind pattern.
pub const MAX_KIND_LEN: usize = 128;

/// Whether `s` is a command kind name (`disk.wipe`) or prefix (`diag.*`): dot-separated parts
/// of lower-case letters, digits, `-` and `_`, none empty, at most [`MAX_KIND_LEN`] bytes.
pub fn valid_kind_pattern(s: &str) -> bool {
    let body = s.strip_suffix(".*").unwrap_or(s);
    !body.is_empty()
        && s.len() <= MAX_KIND_LEN
        && body.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_".contains(&b))
        })
}

/// Whether the allowed-kind pattern `pattern` (`disk.wipe` or `diag.*`) allows `kind`: a name
/// only itself, a prefix every kind below it (`diag.*` allows `diag.ping`, not `diag`).
pub fn pattern_allows(pattern: &str, kind: &str) -> bool {
    match pattern.strip_suffix(".*") {
        Some(prefix) => kind
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.starts_with('.') && rest.len() > 1),
        None => pattern == kind,
    }
}

/// Whether a certificate's allowed kinds `patterns` admit `kind`: an empty list admits every
/// kind (a certificate without allowed kinds is limited by its role alone), else one pattern
/// must ([`pattern_allows`]).
pub fn kinds_allow(patterns: &[String], kind: &str) -> bool {
    patterns.is_empty() || patterns.iter().any(|p| pattern_allows(p, kind))
}

/// Why a list of kind patterns was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KindListError {
    /// More than [`MAX_ALLOWED_KINDS`] entries.
    #[error("more than {MAX_ALLOWED_KINDS} allowed kinds")]
    TooMany,
    /// An entry is neither a kind name nor `prefix.*`.
    #[error("allowed kind {0:?} is not a kind name (disk.wipe) or prefix (diag.*)")]
    Invalid(String),
}

/// Checks a whole list: at most [`MAX_ALLOWED_KINDS`] valid patterns.
pub fn check_kind_list(kinds: &[String]) -> Result<(), KindListError> {
    if kinds.len() > MAX_ALLOWED_KINDS {
        return Err(KindListError::TooMany);
    }
    match kinds.iter().find(|k| !valid_kind_pattern(k)) {
        Some(k) => Err(KindListError::Invalid(k.clone())),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_prefixes_pass_anything_else_is_refused() {
        for ok in [
            "disk.wipe",
            "diag.*",
            "boot.kexec",
            "inventory.refresh",
            "a-b_c.d9",
        ] {
            assert!(valid_kind_pattern(ok), "{ok}");
        }
        for bad in [
            "",
            "*",
            ".*",
            "disk wipe",
            "Disk.wipe",
            "disk..wipe",
            "disk.",
            "a.*.b",
        ] {
            assert!(!valid_kind_pattern(bad), "{bad:?}");
        }
        assert!(!valid_kind_pattern(&"a".repeat(129)));
        let many: Vec<String> = (0..65).map(|i| format!("k{i}")).collect();
        assert_eq!(check_kind_list(&many), Err(KindListError::TooMany));
        assert_eq!(
            check_kind_list(&["x y".into()]),
            Err(KindListError::Invalid("x y".into()))
        );
    }
}
