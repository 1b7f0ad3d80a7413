//! The rule every operator-chosen id of the log follows (tenants, pools, sites, tokens' ids):
//! 1 to 128 of A-Z, a-z, 0-9, '.', '-', '_'. One place for the rule and its message; each
//! decider wraps the message in its own refusal.

/// Why `value`, named `what` in the message, is not a plain id; `None` when it is one.
pub fn plain_id_problem(what: &str, value: &str) -> Option<String> {
    let ok = !value.is_empty()
        && value.len() <= 128
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b));
    (!ok).then(|| format!("{what} {value:?} must be 1 to 128 of A-Z, a-z, 0-9, '.', '-', '_'"))
}
