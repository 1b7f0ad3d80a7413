//! The house rules of the workspace, checked on its sources so they stay true:
//!
//! - SQL text lives only in `events`, `projections` and `migrations` (DESIGN: "SQL lives only in
//!   events, projections, migrations"), tests and benches included;
//! - `gateway` and `commands` do not depend on `sqlx` (they reach tables through projections);
//! - no source file outside tests and benches is over 650 lines;
//! - no import circle between the files of a crate: each `use` and each path in code is followed
//!   to the file that defines the name (through `pub use` re-exports, globs included), and no
//!   two files may reach each other that way, directly or through others. Edges to a parent and
//!   to the crate root count like any other; only a parent's `mod child;` declaration does not;
//! - no function in a crate's `src` is over 120 lines (from its `fn` line to its closing brace,
//!   test items aside), but for the few listed with their reason.
//!
//! Each rule reports every offender with its path, so a failure says exactly what to move.

mod code;
mod modules;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use code::{code_only, functions, without_test_items};
use modules::{crates_of, defining_module, file_edges, import_circles, Crate};

/// The crates of the workspace (top-level folders).
const CRATES: &[&str] = &[
    "events",
    "domain",
    "projections",
    "commands",
    "gateway",
    "bcd",
    "migrations",
    "replay-tests",
    "cli",
    "proto",
];

/// Crates whose sources may hold SQL.
const SQL_CRATES: &[&str] = &["events", "projections", "migrations"];

/// The longest a source file outside tests and benches may be.
const MAX_LINES: usize = 650;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("replay-tests sits in the workspace root")
        .to_path_buf()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.filter_map(|e| e.ok()).map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn relative(path: &Path) -> String {
    path.strip_prefix(workspace_root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The text of `src` with comments blanked out (line comments and block comments), string
/// literals kept: what the compiler sees as code and data.
fn without_comments(src: &str) -> String {
    let chars: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let mut in_string = false;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if in_string {
            out.push(c);
            if c == '\\' {
                if let Some(n) = next {
                    out.push(n);
                }
                i += 2;
                continue;
            }
            if c == '"' {
                in_string = false;
            }
            i += 1;
            continue;
        }
        if c == '"' {
            in_string = true;
            out.push('"');
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            i += 2;
            while i + 1 < chars.len() && !(chars[i] == '*' && chars[i + 1] == '/') {
                if chars[i] == '\n' {
                    out.push('\n');
                }
                i += 1;
            }
            i += 2;
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            // A char literal such as '"': keep it from opening a string.
            out.push_str("' '");
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// The string literals of `code` (comments already removed).
fn string_literals(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    let mut chars = code.chars().peekable();
    while let Some(c) = chars.next() {
        match (&mut current, c) {
            (None, '"') => current = Some(String::new()),
            (Some(s), '\\') => {
                if let Some(n) = chars.next() {
                    s.push(n);
                }
            }
            (Some(_), '"') => out.push(current.take().unwrap_or_default()),
            (Some(s), c) => s.push(c),
            (None, _) => {}
        }
    }
    out
}

/// Whether a string literal is (part of) an SQL statement.
fn looks_like_sql(literal: &str) -> bool {
    const STARTS: &[&str] = &[
        "SELECT ",
        "INSERT INTO ",
        "DELETE FROM ",
        "CREATE TABLE",
        "CREATE INDEX",
        "CREATE UNIQUE INDEX",
        "CREATE DATABASE",
        "DROP DATABASE",
        "DROP TABLE",
        "ALTER TABLE",
        "ALTER SYSTEM",
        "TRUNCATE ",
        "LOCK TABLE",
        "PRAGMA ",
        "WITH ",
        "UPDATE ",
    ];
    let words: Vec<&str> = literal.split_whitespace().collect();
    let normal = words.join(" ");
    STARTS.iter().any(|s| {
        normal.starts_with(s.trim_end())
            && match *s {
                "UPDATE " => normal.contains(" SET "),
                "WITH " => normal.contains(" AS (") || normal.contains(" AS("),
                _ => true,
            }
    }) || normal.contains(" FROM events")
        || normal.contains("pg_advisory")
        || normal.contains("pg_try_advisory")
}

#[test]
fn sql_text_lives_only_in_events_projections_and_migrations() {
    let root = workspace_root();
    let mut offenders = Vec::new();
    for krate in CRATES.iter().filter(|c| !SQL_CRATES.contains(c)) {
        let mut files = Vec::new();
        rust_files(&root.join(krate), &mut files);
        for file in files {
            // This file names SQL keywords to look for them. bcd's command journal is the
            // machine's own SQLite file (`journal.db`, spec 002), not the control plane's store,
            // and bcd may not depend on `projections`: its schema is `migrations/bcd/`, its
            // seven statements the one job of that module (docs/DECISIONS.md).
            if file.ends_with("replay-tests/tests/house_rules.rs")
                || file.ends_with("bcd/src/signed_commands/journal.rs")
            {
                continue;
            }
            let Ok(src) = fs::read_to_string(&file) else {
                continue;
            };
            for literal in string_literals(&without_comments(&src)) {
                if looks_like_sql(&literal) {
                    let first: String = literal
                        .split_whitespace()
                        .take(6)
                        .collect::<Vec<_>>()
                        .join(" ");
                    offenders.push(format!("{}: \"{first} ...\"", relative(&file)));
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "SQL text outside events, projections and migrations (move it into a named function of \
         the projection that owns the table):\n{}",
        offenders.join("\n")
    );
}

#[test]
fn gateway_and_commands_do_not_depend_on_sqlx() {
    let root = workspace_root();
    let mut offenders = Vec::new();
    for krate in ["gateway", "commands"] {
        let manifest = root.join(krate).join("Cargo.toml");
        let text = fs::read_to_string(&manifest).unwrap_or_default();
        for (n, line) in text.lines().enumerate() {
            if line.contains("sqlx") {
                offenders.push(format!(
                    "{}:{}: {}",
                    relative(&manifest),
                    n + 1,
                    line.trim()
                ));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "sqlx named in:\n{}",
        offenders.join("\n")
    );
}

/// A manifest's sections, each as its header (`lib`, `[bin]` for every `[[bin]]`) with its
/// `key = value` lines, in order.
fn manifest_sections(text: &str) -> Vec<(String, BTreeMap<String, String>)> {
    let mut sections: Vec<(String, BTreeMap<String, String>)> = Vec::new();
    for line in text.lines().map(str::trim) {
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            sections.push((header.to_owned(), BTreeMap::new()));
        } else if let (Some((key, value)), Some(last)) = (line.split_once('='), sections.last_mut())
        {
            let value = value.trim().trim_matches('"').to_owned();
            last.1.insert(key.trim().to_owned(), value);
        }
    }
    sections
}

/// A library or binary built with `test = false` has no test harness, so a unit test written in
/// it would never be compiled or run, silently. Those targets must hold none.
#[test]
fn no_silent_unit_tests() {
    let root = workspace_root();
    let mut offenders = Vec::new();
    for krate in CRATES {
        let dir = root.join(krate);
        let text = fs::read_to_string(dir.join("Cargo.toml")).unwrap_or_default();
        let sections = manifest_sections(&text);
        let bins: Vec<PathBuf> = sections
            .iter()
            .filter(|(h, _)| h == "[bin]")
            .filter_map(|(_, keys)| keys.get("path").map(|p| dir.join(p)))
            .collect();
        let mut silent: Vec<PathBuf> = Vec::new();
        for (header, keys) in &sections {
            if keys.get("test").map(String::as_str) != Some("false") {
                continue;
            }
            if header == "lib" {
                let mut files = Vec::new();
                rust_files(&dir.join("src"), &mut files);
                silent.extend(files.into_iter().filter(|f| !bins.contains(f)));
            } else if let Some(path) = keys.get("path").filter(|_| header == "[bin]") {
                silent.push(dir.join(path));
            }
        }
        for file in silent {
            let src = fs::read_to_string(&file).unwrap_or_default();
            if src.contains("#[cfg(test)]") || src.contains("#[test]") {
                offenders.push(relative(&file));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "unit tests in a target built with `test = false` (they never run; move them to the \
         crate's tests/suite.rs or drop `test = false`):\n{}",
        offenders.join("\n")
    );
}

#[test]
fn no_source_file_outside_tests_is_over_650_lines() {
    let root = workspace_root();
    let mut offenders = Vec::new();
    for krate in CRATES {
        let mut files = Vec::new();
        rust_files(&root.join(krate).join("src"), &mut files);
        for file in files {
            let lines = fs::read_to_string(&file)
                .map(|s| s.lines().count())
                .unwrap_or(0);
            if lines > MAX_LINES {
                offenders.push(format!("{}: {lines} lines", relative(&file)));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "source files over {MAX_LINES} lines (split them by job):\n{}",
        offenders.join("\n")
    );
}

/// A crate's sources under `src`, by path relative to it.
fn source_files(src: &Path) -> BTreeMap<PathBuf, String> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files
        .into_iter()
        .filter_map(|f| {
            let text = fs::read_to_string(&f).ok()?;
            Some((f.strip_prefix(src).ok()?.to_path_buf(), text))
        })
        .collect()
}

#[test]
fn no_import_circle_between_files() {
    let root = workspace_root();
    let mut offenders = Vec::new();
    for krate in CRATES {
        let src = root.join(krate).join("src");
        for modules in crates_of(&source_files(&src)) {
            for (files, edges) in import_circles(&modules) {
                let files: Vec<String> = files.iter().map(|f| relative(&src.join(f))).collect();
                offenders.push(format!("{} files: {}", files.len(), files.join(" <-> ")));
                offenders.extend(edges.iter().map(|e| format!("    {krate}/src/{e}")));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "files that reach each other through what they name (move what they share into a \
         module of its own that imports neither):\n{}",
        offenders.join("\n")
    );
}

/// An in-memory crate: `(path under src, text)`.
fn crate_of(files: &[(&str, &str)]) -> Crate {
    let files: BTreeMap<PathBuf, String> = files
        .iter()
        .map(|(p, t)| (PathBuf::from(p), t.to_string()))
        .collect();
    crates_of(&files).remove(0)
}

fn module(path: &str) -> Vec<String> {
    path.split("::")
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

#[test]
fn the_resolver_sees_through_re_exports_globs_and_groups() {
    let krate = crate_of(&[
        (
            "lib.rs",
            "mod a;\nmod b;\nmod c;\nmod d;\npub use a::Thing;\npub use std::fmt as f;\n",
        ),
        ("a/mod.rs", "mod inner;\npub use inner::*;\n"),
        ("a/inner.rs", "pub struct Thing;\npub fn helper() {}\n"),
        // A group, with a re-export chain (crate root, then a glob) behind one name.
        ("b.rs", "use crate::{Thing, a::{helper, inner::{self}}};\n"),
        ("c.rs", "pub use crate::a::helper as h;\n"),
        ("d.rs", "use super::c::h;\nfn f() { crate::c::h(); }\n"),
    ]);
    let defining = |here: &str, path: &str| defining_module(&krate, &module(here), &module(path));
    assert_eq!(defining("b", "crate::Thing"), Some(module("a::inner")));
    assert_eq!(defining("b", "crate::a::helper"), Some(module("a::inner")));
    assert_eq!(defining("d", "super::c::h"), Some(module("a::inner")));
    assert_eq!(defining("b", "std::fmt"), None);
    // A name another crate defines is no edge to the file that imports it.
    assert_eq!(defining("d", "crate::f::Debug"), None);
    let edges = file_edges(&krate);
    let targets = |from: &str| -> Vec<Vec<String>> {
        edges
            .keys()
            .filter(|(f, _)| f == &module(from))
            .map(|(_, t)| t.clone())
            .collect()
    };
    // Every name of b's group lands in inner.rs: not in lib.rs or a/mod.rs that re-export it.
    assert_eq!(targets("b"), vec![module("a::inner")]);
    assert_eq!(targets("d"), vec![module("a::inner")]);
    // A re-export is an edge of the file that re-exports; a `mod x;` declaration is not.
    assert_eq!(targets(""), vec![module("a::inner")]);
    assert_eq!(targets("a"), vec![module("a::inner")]);
}

#[test]
fn the_circle_finder_counts_parents_but_not_mod_declarations() {
    let circles = |files: &[(&str, &str)]| -> Vec<Vec<PathBuf>> {
        import_circles(&crate_of(files))
            .into_iter()
            .map(|(files, _)| files)
            .collect()
    };
    // A parent re-exporting a child that names the parent's own type: a circle.
    let found = circles(&[
        ("lib.rs", "mod a;\nmod b;\nmod c;\n"),
        ("a/mod.rs", "mod x;\npub use x::X;\npub struct P;\n"),
        ("a/x.rs", "use super::P;\npub struct X(P);\n"),
        // Comments and strings name nothing; test items are not part of the build.
        ("b.rs", "use crate::c::{C, D as _};\n// use crate::a::X;\n"),
        ("c.rs", "pub struct C; pub struct D;\nfn f() { let _ = \"crate::b::g\"; }\n#[cfg(test)]\nmod tests { use crate::b::*; }\n"),
    ]);
    assert_eq!(
        found,
        vec![vec![PathBuf::from("a/mod.rs"), PathBuf::from("a/x.rs")]]
    );
    // The same child under a parent that only declares it: no circle.
    let found = circles(&[
        ("lib.rs", "mod a;\n"),
        ("a/mod.rs", "mod x;\npub struct P;\n"),
        ("a/x.rs", "use super::P;\npub struct X(P);\n"),
    ]);
    assert!(found.is_empty(), "{found:?}");
}

// ---------------------------------------------------------------------------------------------
// No function over MAX_FN_LINES lines.

/// The longest a function in a crate's `src` may be, from its `fn` line to its closing brace.
const MAX_FN_LINES: usize = 120;

/// The functions over [`MAX_FN_LINES`] that stay whole: `(file, function, why)`. None is a
/// decider; each is a shell's sequence or loop whose steps share its locals.
const LONG_FUNCTIONS: &[(&str, &str, &str)] = &[
    (
        "gateway/src/run.rs",
        "serve_edge",
        "the edge's start: one linear wiring of feed, TLS, listeners, command poller, health \
         and server, whose parts hand each other their handles",
    ),
    (
        "gateway/src/session/session_loop.rs",
        "open_session",
        "a session's opening: the refusals in their order, then the session task, which moves \
         the locals the checks produced",
    ),
    (
        "bcd/src/join/command.rs",
        "join",
        "bcd join from its argument checks to the stored identity: each step ends the command \
         with its own exit code, and both joins share the transport and the retry environment",
    ),
    (
        "cli/src/serve/config/mod.rs",
        "resolve",
        "serve's configuration one key after another (file, environment, flag); the keys' \
         order is the order its errors come in",
    ),
    (
        "cli/src/up/cmd.rs",
        "up_in",
        "bcctl up's one sequence (directory, secret, bundle, serve, admin, bcd files, token) \
         and its startup report, which names twenty of the sequence's values",
    ),
];

#[test]
fn no_function_in_src_is_over_120_lines() {
    let root = workspace_root();
    let mut offenders = Vec::new();
    let mut long = BTreeSet::new();
    for krate in CRATES {
        let src = root.join(krate).join("src");
        let files = source_files(&src);
        for modules in crates_of(&files) {
            for module in modules.values() {
                let code = without_test_items(&code_only(&files[&module.file]));
                let file = format!("{krate}/src/{}", module.file.display());
                for (name, line, lines) in functions(&code) {
                    if lines <= MAX_FN_LINES {
                        continue;
                    }
                    long.insert((file.clone(), name.clone()));
                    if !LONG_FUNCTIONS
                        .iter()
                        .any(|(f, n, _)| *f == file && *n == name)
                    {
                        offenders.push(format!("{file}:{line}: fn {name}: {lines} lines"));
                    }
                }
            }
        }
    }
    for (file, name, _) in LONG_FUNCTIONS {
        if !long.contains(&(file.to_string(), name.to_string())) {
            offenders.push(format!(
                "{file}: fn {name} is exempt but no longer over (drop it)"
            ));
        }
    }
    assert!(
        offenders.is_empty(),
        "functions over {MAX_FN_LINES} lines (extract their steps into named functions):\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_function_counter_reads_bodies_not_text() {
    let src = "fn a(x: [u8; 2]) -> u8 {\n    let s = \"}\";\n    '}';\n    x[0]\n}\n\
               trait T { fn b(&self); }\n\
               #[cfg(test)]\nmod tests {\n    fn c() {}\n}\n";
    let found = functions(&without_test_items(&code_only(src)));
    assert_eq!(found, vec![("a".to_string(), 1, 5)]);
}

#[test]
fn the_sql_finder_tells_sql_from_prose() {
    assert!(looks_like_sql(
        "SELECT tenant_id FROM nodes WHERE node_id = $1"
    ));
    assert!(looks_like_sql("UPDATE events SET payload = $1"));
    assert!(looks_like_sql("SELECT pg_advisory_xact_lock($1)"));
    assert!(!looks_like_sql("Update the node's certificate set"));
    assert!(!looks_like_sql("select a node with --node"));
    assert!(!looks_like_sql("WITH the deployment secret"));
}
