//! A house rule of the attestation plane: every refusal reason the code can record
//! (`security.join.refused` `refusal`, `<attestor>:<reason>`) is named in `docs/ATTESTORS.md`,
//! so an operator reading a refusal event finds what it means.
//!
//! The reasons come from two places:
//!
//! - the attestors' exported lists (`JoinRefusal::ALL`, `X509PopRefusal::ALL`,
//!   `ProvisionedRefusal::ALL`, `TpmRefusal::ALL`, `DiscoveryRefusal::ALL`,
//!   `CloudIidRefusal::ALL`), which their own tests keep complete;
//! - the sources, for refusals written in place: in each attestor's file (and the admission
//!   step's, and the join shell's), the reason of every `refuse("…")` / `refuse(CONST)` call and
//!   every `AttestorRefusal::new(…, "…")` and every arm `XRefusal::Variant => "…"` of a
//!   refusal enum, attributed to the file's attestor, and every string literal of the form
//!   `"<attestor>:<reason>"`.
//!
//! The source scan is deliberately simple (comments and `#[cfg(test)]` modules left out); a new
//! way of spelling a refusal needs a line here, which the scan's own test below keeps honest.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("replay-tests sits in the workspace root")
        .to_path_buf()
}

/// The attestor files scanned, with the attestor their in-place refusals belong to. `None`:
/// the file refuses for several attestors (the shell), so only calls naming a known id count.
const SCANNED: &[(&str, Option<&str>)] = &[
    ("domain/src/attest/join_token.rs", Some("join-token")),
    ("domain/src/identity/join.rs", Some("join-token")),
    ("domain/src/attest/admission.rs", Some("join")),
    ("domain/src/attest/remote.rs", Some("join")),
    ("domain/src/attest/x509pop.rs", Some("x509pop")),
    ("domain/src/attest/provisioned.rs", Some("provisioned")),
    ("domain/src/attest/tpm/attestor.rs", Some("tpm")),
    ("domain/src/attest/discovery/attestor.rs", Some("discovery")),
    ("commands/src/identity/join.rs", None),
    ("examples/acme-asset/src/lib.rs", Some("acme-asset")),
];

/// The attestor ids this control plane builds in: the shell's `<id>:wrong-role` and
/// `<id>:bad-csr` apply to each.
const BUILTIN: &[&str] = &[
    "join-token",
    "x509pop",
    "provisioned",
    "tpm",
    "discovery",
    "cloud-iid",
];

/// `src` without comments and without `#[cfg(test)]` items (a test module at the end).
fn code_of(src: &str) -> String {
    let src = match src.find("#[cfg(test)]") {
        Some(at) => &src[..at],
        None => src,
    };
    src.lines()
        .map(|line| {
            let trimmed = line.trim_start();
            if trimmed.starts_with("//") {
                ""
            } else {
                line
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Whether `s` is a kebab-case reason (`csr-key-used`, `revoked`).
fn is_reason(s: &str) -> bool {
    !s.is_empty()
        && s.split('-').all(|w| {
            !w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        })
}

/// The first string literal of `text`.
fn first_literal(text: &str) -> Option<&str> {
    let start = text.find('"')? + 1;
    let len = text[start..].find('"')?;
    Some(&text[start..start + len])
}

/// The argument text of the call whose `(` is at `open` (up to the matching `)`).
fn call_args(code: &str, open: usize) -> &str {
    let mut depth = 0usize;
    for (i, c) in code[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return &code[open + 1..open + i];
                }
            }
            _ => {}
        }
    }
    &code[open + 1..]
}

/// The value of `const NAME: &str = "…";` in `code`.
fn const_value<'a>(code: &'a str, name: &str) -> Option<&'a str> {
    let at = code.find(&format!("const {name}: &str"))?;
    first_literal(&code[at..])
}

/// The refusals written in place in one file's code.
fn scanned_reasons(code: &str, attestor: Option<&str>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    // `"<attestor>:<reason>"` literals (error messages, the shell's own texts).
    let mut rest = code;
    while let Some(q) = rest.find('"') {
        let after = &rest[q + 1..];
        let Some(len) = after.find('"') else { break };
        let lit = &after[..len];
        if let Some((id, reason)) = lit.split_once(':') {
            if (BUILTIN.contains(&id) || Some(id) == attestor || id == "join") && is_reason(reason)
            {
                out.insert(lit.to_owned());
            }
        }
        rest = &after[len + 1..];
    }
    // The arms of a refusal enum's `reason()`: `XRefusal::Variant => "reason"` (or a const).
    if let Some(id) = attestor {
        for line in code
            .lines()
            .filter(|l| l.contains("Refusal::") && l.contains("=>"))
        {
            let Some((_, arm)) = line.split_once("=>") else {
                continue;
            };
            let arm = arm.trim().trim_end_matches(',');
            let reason = if arm.starts_with('"') {
                first_literal(arm)
            } else if !arm.is_empty()
                && arm
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            {
                const_value(code, arm)
            } else {
                None
            };
            if let Some(reason) = reason.filter(|r| is_reason(r)) {
                out.insert(format!("{id}:{reason}"));
            }
        }
    }
    // `refuse(…)` calls and `AttestorRefusal::new(id, reason)`.
    for (pattern, second) in [("refuse(", false), ("AttestorRefusal::new(", true)] {
        let mut from = 0;
        while let Some(at) = code[from..].find(pattern) {
            let start = from + at;
            let open = start + pattern.len() - 1;
            from = open + 1;
            // Calls only, not the definition `fn refuse(reason: &str)`.
            if code[..start].trim_end().ends_with("fn") {
                continue;
            }
            let args = call_args(code, open);
            let (id_arg, reason_arg) = if second {
                match args.split_once(',') {
                    Some((a, b)) => (Some(a.trim()), b.trim()),
                    None => continue,
                }
            } else {
                (None, args.trim())
            };
            let reason = if reason_arg.starts_with('"') {
                first_literal(reason_arg).map(str::to_owned)
            } else if reason_arg
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            {
                const_value(code, reason_arg).map(str::to_owned)
            } else {
                None
            };
            let Some(reason) = reason.filter(|r| is_reason(r)) else {
                continue;
            };
            let ids: Vec<String> = match id_arg {
                Some(a) if a.starts_with('"') => {
                    first_literal(a).into_iter().map(Into::into).collect()
                }
                Some("&id") | Some("id") | Some("&self.id") => {
                    BUILTIN.iter().map(|s| s.to_string()).collect()
                }
                Some(a) if a.contains("JOIN_TOKEN") => vec!["join-token".into()],
                Some(a) if a.contains("X509POP") => vec!["x509pop".into()],
                Some(a) if a.contains("PROVISIONED") => vec!["provisioned".into()],
                Some(a) if a.contains("ADMISSION") => vec!["join".into()],
                _ => attestor.map(|s| vec![s.to_owned()]).unwrap_or_default(),
            };
            for id in ids {
                out.insert(format!("{id}:{reason}"));
            }
        }
    }
    out
}

/// Every reason the code can record.
fn code_reasons() -> BTreeSet<String> {
    let root = workspace_root();
    let mut out = BTreeSet::new();
    for (path, attestor) in SCANNED {
        let Ok(src) = fs::read_to_string(root.join(path)) else {
            continue;
        };
        out.extend(scanned_reasons(&code_of(&src), *attestor));
    }
    out.extend(domain::identity::JoinRefusal::ALL.map(|r| r.reason()));
    out.extend(domain::attest::X509PopRefusal::ALL.map(|r| format!("x509pop:{}", r.reason())));
    out.extend(domain::attest::provisioned::ProvisionedRefusal::ALL.map(|r| r.text()));
    out.extend(domain::attest::tpm::refusal::TpmRefusal::ALL.map(|r| r.refusal().text()));
    out.extend(domain::attest::DiscoveryRefusal::ALL.map(|r| r.refusal().text()));
    // The tpm answer's single-use reason (the admission step refuses with it).
    out.insert(format!("tpm:{}", domain::attest::tpm::attestor::REUSED));
    out.extend(domain::attest::cloud_iid::CloudIidRefusal::ALL.map(|r| r.refusal().text()));
    for id in BUILTIN {
        out.insert(format!("{id}:wrong-role"));
        out.insert(format!("{id}:bad-csr"));
    }
    out
}

#[test]
fn every_refusal_reason_is_named_in_attestors_md() {
    let doc = fs::read_to_string(workspace_root().join("docs/ATTESTORS.md"))
        .expect("docs/ATTESTORS.md exists");
    let reasons = code_reasons();
    assert!(
        reasons.len() > 20,
        "the scan found too few reasons to be reading the attestors: {reasons:?}"
    );
    let missing: Vec<&String> = reasons
        .iter()
        .filter(|r| !doc.contains(&format!("`{r}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "refusal reasons the code records that docs/ATTESTORS.md does not name (as `attestor:reason`): {missing:?}"
    );
}

#[test]
fn the_scan_reads_each_way_a_refusal_is_written() {
    let code = r#"
        const USED: &str = "csr-key-used";
        fn refuse(reason: &str) -> AttestorRefusal { AttestorRefusal::new(ID, reason) }
        fn a() { refuse("unknown-token"); refuse(USED); }
        fn b() { AttestorRefusal::new(ADMISSION, "pool-attestor").in_tenant(t); }
        fn c() { AttestorRefusal::new(JOIN_TOKEN_ATTESTOR, "token-does-not-open"); }
        #[error("x509pop:clock-skew")]
        fn d() { format!("not a reason: {}", x); }
        fn reason(self) -> &'static str { match self { R::A => "no-use-left", R::B => USED, } }
        fn e(r: XRefusal) { match r { XRefusal::Gone => "gone-too", } }
    "#;
    let got = scanned_reasons(&code_of(code), Some("join-token"));
    let want: BTreeSet<String> = [
        "join-token:csr-key-used",
        "join-token:unknown-token",
        "join:pool-attestor",
        "join-token:token-does-not-open",
        "x509pop:clock-skew",
        "join-token:gone-too",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(got, want);
}
