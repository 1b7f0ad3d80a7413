//! Every command a document or a message names exists: each backticked `` `bcctl X Y` `` or
//! `` `bcd X` `` in `README.md`, `docs/*.md` and the sources of `cli`, `bcd`, `commands` and
//! `domain` is resolved against the binaries' own `--help` (a group's `Commands:` list), so a
//! message that sends the operator to `bcctl tokens create` fails here, naming the file.

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cli_convention::commands_of;

/// Named commands that another helper of issue 22 is making true (a verb being built, or a
/// message being fixed in a file this test's author does not own). An entry that resolves
/// fails the test: remove it.
const PENDING: &[&str] = &[];

/// Names a document uses to say that no such command exists.
const NEGATED: &[&str] = &["bcd helper"];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace")
        .to_path_buf()
}

/// The files scanned: the README, the docs, and the Rust sources of the crates named.
fn scanned() -> Vec<PathBuf> {
    let root = workspace();
    let mut files = vec![root.join("README.md")];
    if let Ok(entries) = std::fs::read_dir(root.join("docs")) {
        for e in entries.flatten() {
            if e.path().extension().is_some_and(|x| x == "md") {
                files.push(e.path());
            }
        }
    }
    for krate in ["cli/src", "bcd/src", "commands/src", "domain/src"] {
        let mut todo = vec![root.join(krate)];
        while let Some(dir) = todo.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let p = e.path();
                if p.is_dir() {
                    todo.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    files.push(p);
                }
            }
        }
    }
    files.sort();
    files
}

/// The command words of each backticked `bin …` span in `text`: the words after `bin` up to
/// the first that is not a plain lower-case word (a flag, a placeholder, a value).
pub fn named_in(text: &str, bin: &str) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let opener = format!("`{bin} ");
    let mut rest = text;
    while let Some(at) = rest.find(&opener) {
        let after = &rest[at + opener.len()..];
        let end = after.find('`').unwrap_or(after.len());
        let span = &after[..end];
        rest = &after[end.min(after.len())..];
        if span.contains('\n') {
            continue;
        }
        let words: Vec<String> = span
            .split_whitespace()
            .take_while(|w| {
                w.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                    && w.chars().all(|c| c.is_ascii_lowercase() || c == '-')
            })
            .map(str::to_string)
            .collect();
        if !words.is_empty() {
            found.push(words);
        }
    }
    found
}

/// Resolves command words against a binary's `--help` tree: the longest prefix that is a
/// command, or an error naming the word that is not one. Words after a leaf are its values.
struct Resolver {
    bin: PathBuf,
    help: BTreeMap<Vec<String>, Vec<String>>,
}

impl Resolver {
    fn subcommands(&mut self, path: &[String]) -> Vec<String> {
        if let Some(s) = self.help.get(path) {
            return s.clone();
        }
        let out = Command::new(&self.bin)
            .args(path)
            .arg("--help")
            .env_remove("DATABASE_URL")
            .output()
            .expect("run --help");
        assert_eq!(out.status.code(), Some(0), "{path:?} --help");
        let subs = commands_of(&String::from_utf8_lossy(&out.stdout));
        self.help.insert(path.to_vec(), subs.clone());
        subs
    }

    fn check(&mut self, words: &[String]) -> Result<(), String> {
        let mut path: Vec<String> = Vec::new();
        for w in words {
            let subs = self.subcommands(&path);
            if subs.is_empty() {
                return Ok(());
            }
            if !subs.contains(w) {
                return Err(format!(
                    "`{w}` is not a subcommand (there are: {})",
                    subs.join(", ")
                ));
            }
            path.push(w.clone());
        }
        // A group named alone is fine (`bcctl audit`).
        Ok(())
    }
}

#[test]
fn every_command_a_document_or_a_message_names_exists() {
    let mut bcctl = Resolver {
        bin: support::bcctl_bin(),
        help: BTreeMap::new(),
    };
    let mut bcd = Resolver {
        bin: support::bcd_bin(),
        help: BTreeMap::new(),
    };
    let root = workspace();
    let mut wrong: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut checked = 0usize;
    for file in scanned() {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let shown = file
            .strip_prefix(&root)
            .unwrap_or(&file)
            .display()
            .to_string();
        for (name, resolver) in [("bcctl", &mut bcctl), ("bcd", &mut bcd)] {
            for words in named_in(&text, name) {
                checked += 1;
                let named = format!("{name} {}", words.join(" "));
                if NEGATED.contains(&named.as_str()) {
                    continue;
                }
                if let Err(why) = resolver.check(&words) {
                    wrong
                        .entry(format!("{named}: {why}"))
                        .or_default()
                        .insert(shown.clone());
                }
            }
        }
    }
    assert!(checked > 50, "too few named commands found: {checked}");
    let (pending, real): (Vec<_>, Vec<_>) = wrong
        .iter()
        .partition(|(k, _)| PENDING.iter().any(|p| k.starts_with(&format!("{p}:"))));
    for (k, files) in &pending {
        eprintln!("note: pending elsewhere: {k} (in {files:?})");
    }
    for p in PENDING {
        let words: Vec<String> = p.split(' ').skip(1).map(str::to_string).collect();
        let resolver = if p.starts_with("bcd ") {
            &mut bcd
        } else {
            &mut bcctl
        };
        assert!(
            resolver.check(&words).is_err(),
            "{p} exists now: remove it from PENDING in cli/tests/named_commands.rs"
        );
    }
    assert!(
        real.is_empty(),
        "commands named that do not exist:\n{}",
        real.iter()
            .map(|(k, f)| format!("  {k}\n    in {f:?}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn named_commands_stop_at_flags_and_values() {
    let text = "run `bcctl token create --tenant t` then `bcd join <TOKEN>` or `bcctl pki show`.";
    assert_eq!(
        named_in(text, "bcctl"),
        vec![
            vec!["token".to_string(), "create".to_string()],
            vec!["pki".to_string(), "show".to_string()]
        ]
    );
    assert_eq!(named_in(text, "bcd"), vec![vec!["join".to_string()]]);
}
