//! The house rules of the workspace, checked on its sources so they stay true:
//!
//! - SQL text lives only in `events`, `projections` and `migrations` (DESIGN: "SQL lives only in
//!   events, projections, migrations"), tests and benches included;
//! - `gateway` and `commands` do not depend on `sqlx` (they reach tables through projections);
//! - no source file outside tests and benches is over 650 lines;
//! - no import circle between the files of a crate: no two files reach each other through `use`
//!   (or `crate::` / `super::` paths), directly or through others. A module's own parent and
//!   children are not counted: a child naming its parent's items and a parent declaring (and
//!   re-exporting) its children is how Rust lays out one module, not a circle between two.
//!
//! Each rule reports every offender with its path, so a failure says exactly what to move.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

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
                || file.ends_with("bcd/src/commands/journal.rs")
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

/// A crate's module tree: module path (`["identity", "join"]`) to its file.
fn module_files(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut out = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(src).unwrap_or(&file);
        let mut parts: Vec<String> = rel
            .iter()
            .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
            .collect();
        match parts.last().map(String::as_str) {
            Some("lib") | Some("main") if parts.len() == 1 => parts.clear(),
            Some("mod") => {
                parts.pop();
            }
            _ => {}
        }
        // Binaries under src/bin are crates of their own: leave them out.
        if parts.first().is_some_and(|p| p == "bin") {
            continue;
        }
        out.insert(parts, file);
    }
    out
}

/// The module paths `code` (in module `here`) names through `crate::`, `super::` and `self::`,
/// including each name of a `use a::{b, c}` group.
fn named_paths(code: &str, here: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let is_ident = |c: u8| c.is_ascii_alphanumeric() || c == b'_';
    let mut i = 0;
    while i < bytes.len() {
        if !code.is_char_boundary(i) {
            i += 1;
            continue;
        }
        let starts_word = i == 0 || !(is_ident(bytes[i - 1]) || bytes[i - 1] == b':');
        let rest = &code[i..];
        let start = ["crate::", "super::", "self::"]
            .into_iter()
            .find(|p| starts_word && rest.starts_with(p));
        let Some(_) = start else {
            i += 1;
            continue;
        };
        // Read a path with optional `{...}` groups (one level is enough for this tree).
        let mut end = i;
        let mut depth = 0;
        while end < bytes.len() {
            let c = bytes[end];
            if c == b'{' {
                depth += 1;
            } else if c == b'}' {
                if depth == 0 {
                    break;
                }
                depth -= 1;
            } else if depth == 0 && !(is_ident(c) || c == b':') {
                break;
            }
            end += 1;
        }
        let text = &code[i..end];
        for path in expand(text) {
            let mut segs: Vec<String> = Vec::new();
            let mut resolved: Vec<String> = Vec::new();
            let mut first = true;
            for seg in path.split("::").filter(|s| !s.is_empty()) {
                if first {
                    first = false;
                    match seg {
                        "crate" => resolved.clear(),
                        "self" => resolved = here.to_vec(),
                        "super" => {
                            resolved = here.to_vec();
                            resolved.pop();
                        }
                        _ => {}
                    }
                    continue;
                }
                if seg == "super" && segs.is_empty() {
                    resolved.pop();
                    continue;
                }
                segs.push(seg.to_string());
            }
            resolved.extend(segs);
            out.push(resolved);
        }
        i = end.max(i + 1);
    }
    out
}

/// `a::{b, c::d}` into `a::b`, `a::c::d`.
fn expand(text: &str) -> Vec<String> {
    match text.find('{') {
        None => vec![text.to_string()],
        Some(open) => {
            let prefix = &text[..open];
            let inner = text[open + 1..].trim_end_matches('}');
            let mut parts = Vec::new();
            let mut depth = 0;
            let mut current = String::new();
            for c in inner.chars() {
                match c {
                    '{' => {
                        depth += 1;
                        current.push(c);
                    }
                    '}' => {
                        depth -= 1;
                        current.push(c);
                    }
                    ',' if depth == 0 => {
                        parts.push(std::mem::take(&mut current));
                    }
                    c if c.is_whitespace() => {}
                    c => current.push(c),
                }
            }
            parts.push(current);
            parts
                .into_iter()
                .filter(|p| !p.is_empty())
                .flat_map(|p| expand(&format!("{prefix}{p}")))
                .collect()
        }
    }
}

/// The file a module path lands in: the longest prefix of it that is a module of the crate.
fn landing<'a>(
    path: &[String],
    modules: &'a BTreeMap<Vec<String>, PathBuf>,
) -> Option<(&'a Vec<String>, &'a PathBuf)> {
    (0..=path.len())
        .rev()
        .find_map(|n| modules.get_key_value(&path[..n]))
}

fn is_prefix(a: &[String], b: &[String]) -> bool {
    a.len() <= b.len() && a == &b[..a.len()]
}

/// The circles among the files of one crate's `src`, each as the files in it.
fn import_circles(src: &Path) -> Vec<Vec<String>> {
    let modules = module_files(src);
    let mut edges: BTreeMap<&Vec<String>, BTreeSet<&Vec<String>>> = BTreeMap::new();
    for (module, file) in &modules {
        let Ok(text) = fs::read_to_string(file) else {
            continue;
        };
        let code = without_comments(&text);
        // Test modules inside a file may name anything; they are not part of the build's graph.
        let code = match code.find("#[cfg(test)]") {
            Some(at) => &code[..at],
            None => &code[..],
        };
        for path in named_paths(code, module) {
            if let Some((target, _)) = landing(&path, &modules) {
                if target != module && !is_prefix(target, module) && !is_prefix(module, target) {
                    edges.entry(module).or_default().insert(target);
                }
            }
        }
    }
    // Tarjan's strongly connected components, written out plainly: a component of more than
    // one file is a circle.
    let nodes: Vec<&Vec<String>> = modules.keys().collect();
    let index_of: BTreeMap<&Vec<String>, usize> =
        nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let adjacency: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| {
            edges
                .get(n)
                .map(|ts| ts.iter().map(|t| index_of[t]).collect())
                .unwrap_or_default()
        })
        .collect();
    let components = strongly_connected(&adjacency);
    components
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| {
            let mut names: Vec<String> = c.iter().map(|&i| relative(&modules[nodes[i]])).collect();
            names.sort();
            names
        })
        .collect()
}

fn strongly_connected(adjacency: &[Vec<usize>]) -> Vec<Vec<usize>> {
    struct State<'a> {
        adjacency: &'a [Vec<usize>],
        index: Vec<Option<usize>>,
        low: Vec<usize>,
        on_stack: Vec<bool>,
        stack: Vec<usize>,
        next: usize,
        out: Vec<Vec<usize>>,
    }
    fn visit(s: &mut State<'_>, v: usize) {
        s.index[v] = Some(s.next);
        s.low[v] = s.next;
        s.next += 1;
        s.stack.push(v);
        s.on_stack[v] = true;
        for &w in &s.adjacency[v] {
            match s.index[w] {
                None => {
                    visit(s, w);
                    s.low[v] = s.low[v].min(s.low[w]);
                }
                Some(iw) if s.on_stack[w] => s.low[v] = s.low[v].min(iw),
                Some(_) => {}
            }
        }
        if Some(s.low[v]) == s.index[v] {
            let mut component = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on_stack[w] = false;
                component.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(component);
        }
    }
    let n = adjacency.len();
    let mut s = State {
        adjacency,
        index: vec![None; n],
        low: vec![0; n],
        on_stack: vec![false; n],
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in 0..n {
        if s.index[v].is_none() {
            visit(&mut s, v);
        }
    }
    s.out
}

#[test]
fn no_import_circle_between_files() {
    let root = workspace_root();
    let mut offenders = Vec::new();
    for krate in CRATES {
        for circle in import_circles(&root.join(krate).join("src")) {
            offenders.push(circle.join(" <-> "));
        }
    }
    assert!(
        offenders.is_empty(),
        "files that reach each other through their imports (move what they share into a module \
         both use):\n{}",
        offenders.join("\n")
    );
}

#[test]
fn the_circle_finder_finds_a_circle_and_ignores_parents() {
    let dir = tempfile_dir();
    let src = dir.join("src");
    fs::create_dir_all(src.join("a")).expect("temp dir");
    fs::write(src.join("lib.rs"), "mod a;\nmod b;\nmod c;\n").expect("write");
    fs::write(src.join("a/mod.rs"), "mod x;\npub use x::X;\n").expect("write");
    fs::write(src.join("a/x.rs"), "use super::Y;\npub struct X;\n").expect("write");
    fs::write(src.join("b.rs"), "use crate::c::{C, D as _};\n").expect("write");
    fs::write(
        src.join("c.rs"),
        "// use crate::a::X;\nfn f() { crate::b::g(); }\n",
    )
    .expect("write");
    let circles = import_circles(&src);
    assert_eq!(circles.len(), 1, "{circles:?}");
    assert_eq!(circles[0].len(), 2);
    assert!(circles[0][0].ends_with("b.rs") && circles[0][1].ends_with("c.rs"));
    fs::remove_dir_all(&dir).ok();
}

fn tempfile_dir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "house-rules-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = fs::remove_dir_all(&dir);
    dir
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
