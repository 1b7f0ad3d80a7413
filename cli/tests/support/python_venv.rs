//! The Python venvs the end-to-end tests run outside checkers from (grpcio, the `spiffe`
//! package, PyJWT, `cryptography`): each built once under the target directory from a pinned
//! requirements file and reused while the requirements and the interpreter stay the same (the
//! directory is named by a digest of both), built again when either changes or the venv no
//! longer imports what its tests need. A lock file keeps two test runs from building one at
//! once; the key file written last marks it finished. Nothing fetched is committed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn run(cmd: &mut Command) -> std::process::Output {
    let out = cmd.output().expect("command starts");
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The interpreter the venv is made with, and what identifies it: its version and build, and
/// the file it runs from.
fn interpreter() -> String {
    let out = run(Command::new("python3").args([
        "-c",
        "import sys, os; print(sys.version); print(os.path.realpath(sys.executable))",
    ]));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether the venv at `dir` was finished for `key` and still imports `imports`.
fn works(dir: &Path, key: &str, imports: &str) -> bool {
    std::fs::read_to_string(dir.join("bc-venv-key")).is_ok_and(|k| k == key)
        && Command::new(dir.join("bin/python"))
            .args(["-c", &format!("import {imports}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

/// The python of the venv named `prefix` built from `requirements` (relative to the cli
/// crate), which must import `imports` (a comma-separated module list).
pub fn venv(prefix: &str, requirements: &str, imports: &str) -> PathBuf {
    use sha2::{Digest, Sha256};
    let requirements = Path::new(env!("CARGO_MANIFEST_DIR")).join(requirements);
    let wanted = std::fs::read(&requirements).expect("the venv's requirements file");
    let mut digest = Sha256::new();
    digest.update(&wanted);
    digest.update(interpreter().as_bytes());
    let key = hex::encode(&digest.finalize()[..8]);

    let cache = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = cache.join(format!("{prefix}-{key}"));
    let lock = std::fs::File::create(cache.join(format!("{prefix}-{key}.lock")))
        .expect("the venv's lock file");
    lock.lock().expect("lock the venv");
    if !works(&dir, &key, imports) {
        let _ = std::fs::remove_dir_all(&dir);
        run(Command::new("python3").args(["-m", "venv"]).arg(&dir));
        run(Command::new(dir.join("bin/python"))
            .args(["-m", "pip", "install", "--quiet"])
            .args(["--disable-pip-version-check", "-r"])
            .arg(&requirements));
        std::fs::write(dir.join("bc-venv-key"), &key).expect("mark the venv finished");
        // Venvs of this prefix for requirements or interpreters no longer in use (best effort).
        for old in std::fs::read_dir(cache).into_iter().flatten().flatten() {
            let name = old.file_name().to_string_lossy().into_owned();
            let ours = name.starts_with(prefix) && !name.contains(&key);
            if ours && old.path().is_dir() {
                let _ = std::fs::remove_dir_all(old.path());
            }
        }
    }
    drop(lock);
    dir.join("bin/python")
}
