//! Every test file of the workspace is compiled into a test binary. Crates whose integration
//! tests share one binary set `autotests = false`, so cargo no longer picks up a new
//! `tests/*.rs` by itself: a file that no harness declares (`mod <file>;`) and that is no
//! `[[test]]` of its own would never be built or run, silently. This test finds such files.

use std::fs;
use std::path::{Path, PathBuf};

/// The `[[test]]` paths of a crate's manifest, and whether it turned off test discovery.
fn manifest_tests(crate_dir: &Path) -> Option<(bool, Vec<String>)> {
    let text = fs::read_to_string(crate_dir.join("Cargo.toml")).ok()?;
    let manifest: toml::Table = text.parse().expect("a crate manifest parses");
    let autotests = manifest
        .get("package")
        .and_then(|p| p.get("autotests"))
        .and_then(toml::Value::as_bool)
        .unwrap_or(true);
    let paths = manifest
        .get("test")
        .and_then(toml::Value::as_array)
        .map(|tests| {
            tests
                .iter()
                .filter_map(|t| t.get("path").and_then(toml::Value::as_str))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    Some((autotests, paths))
}

/// The modules a `tests/` directory holds: `x` for `x.rs` and for `x/mod.rs`.
fn test_modules(tests: &Path) -> Vec<(String, PathBuf)> {
    let mut found = Vec::new();
    let Ok(entries) = fs::read_dir(tests) else {
        return found;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()).map(str::to_owned) else {
            continue;
        };
        if path.extension().is_some_and(|e| e == "rs") || path.join("mod.rs").is_file() {
            found.push((stem, path));
        }
    }
    found.sort();
    found
}

#[test]
fn every_test_file_is_in_a_test_binary() {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut left_out = Vec::new();
    let mut checked = 0;
    for entry in fs::read_dir(&workspace).expect("the workspace").flatten() {
        let crate_dir = entry.path();
        let Some((autotests, harnesses)) = manifest_tests(&crate_dir) else {
            continue;
        };
        if autotests {
            continue;
        }
        let declared: String = harnesses
            .iter()
            .filter_map(|h| fs::read_to_string(crate_dir.join(h)).ok())
            .collect();
        for (module, path) in test_modules(&crate_dir.join("tests")) {
            checked += 1;
            let relative = path
                .strip_prefix(&crate_dir)
                .map(|p| p.display().to_string())
                .unwrap_or_default();
            let own_binary = harnesses.contains(&relative);
            let a_module = declared
                .lines()
                .any(|l| l.trim() == format!("mod {module};"));
            if !own_binary && !a_module {
                left_out.push(path.display().to_string());
            }
        }
    }
    assert!(
        checked > 0,
        "no test files found under {}",
        workspace.display()
    );
    assert!(
        left_out.is_empty(),
        "test files no test binary builds (declare `mod <file>;` in the crate's tests/suite.rs, \
         or add a [[test]] for it): {left_out:?}"
    );
}
