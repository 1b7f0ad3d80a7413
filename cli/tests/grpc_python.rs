//! A gRPC client we did not write: Python grpcio, with stubs generated from `proto/` by
//! grpc_tools.protoc, joins a running `bcctl up --port 0 --json` over TLS pinned to the serving
//! CA and gets a certificate with the right SPIFFE ID; an unknown token gets PERMISSION_DENIED
//! "Join refused". The test installs grpcio, grpcio-tools and cryptography (pinned in
//! `grpc_python/requirements.txt`) into a venv under the target directory, built once and reused
//! while the requirements and the interpreter are unchanged. Set `BC_SKIP_PYTHON=1` to skip it on
//! a machine without python3 or PyPI.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

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

/// The requirements the venv is built from (pinned).
const REQUIREMENTS: &str = "tests/grpc_python/requirements.txt";

/// The interpreter the venv is made with, and what identifies it: its version and build, and
/// the file it runs from.
fn interpreter() -> String {
    let out = run(Command::new("python3").args([
        "-c",
        "import sys, os; print(sys.version); print(os.path.realpath(sys.executable))",
    ]));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether the venv at `dir` was finished for `key` and still imports what the client needs.
fn works(dir: &Path, key: &str) -> bool {
    std::fs::read_to_string(dir.join("bc-venv-key")).is_ok_and(|k| k == key)
        && Command::new(dir.join("bin/python"))
            .args(["-c", "import grpc, grpc_tools, cryptography"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

/// The venv with the pinned requirements: built once under the target directory and reused
/// while the requirements and the interpreter stay the same (the directory is named by a digest
/// of both), built again when either changes or the venv is broken. A lock file keeps two test
/// runs from building it at once; the key file written last marks it finished.
fn venv() -> PathBuf {
    use sha2::{Digest, Sha256};
    let requirements = Path::new(env!("CARGO_MANIFEST_DIR")).join(REQUIREMENTS);
    let wanted = std::fs::read(&requirements).expect("the venv's requirements file");
    let mut digest = Sha256::new();
    digest.update(&wanted);
    digest.update(interpreter().as_bytes());
    let key = hex::encode(&digest.finalize()[..8]);

    let cache = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = cache.join(format!("grpc-python-venv-{key}"));
    let lock = std::fs::File::create(cache.join(format!("grpc-python-venv-{key}.lock")))
        .expect("the venv's lock file");
    lock.lock().expect("lock the venv");
    if !works(&dir, &key) {
        let _ = std::fs::remove_dir_all(&dir);
        run(Command::new("python3").args(["-m", "venv"]).arg(&dir));
        run(Command::new(dir.join("bin/python"))
            .args([
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "-r",
            ])
            .arg(&requirements));
        std::fs::write(dir.join("bc-venv-key"), &key).expect("mark the venv finished");
        // Venvs for requirements or interpreters no longer in use (best effort).
        for old in std::fs::read_dir(cache).into_iter().flatten().flatten() {
            let name = old.file_name().to_string_lossy().into_owned();
            let ours = name.starts_with("grpc-python-venv") && !name.contains(&key);
            if ours && old.path().is_dir() {
                let _ = std::fs::remove_dir_all(old.path());
            }
        }
    }
    drop(lock);
    dir.join("bin/python")
}

#[test]
fn python_grpcio_joins_and_is_refused_with_a_bad_token() {
    if std::env::var("BC_SKIP_PYTHON").is_ok_and(|v| v == "1") {
        eprintln!("skipped: BC_SKIP_PYTHON=1");
        return;
    }
    let python = venv();
    let work = tempfile::tempdir().unwrap();
    let gen = work.path().join("gen");
    std::fs::create_dir_all(&gen).unwrap();
    let protos = Path::new(env!("CARGO_MANIFEST_DIR")).join("../proto/proto");
    run(Command::new(&python)
        .args(["-m", "grpc_tools.protoc", "-I"])
        .arg(&protos)
        .arg(format!("--python_out={}", gen.display()))
        .arg(format!("--grpc_python_out={}", gen.display()))
        .args([
            "bc/wire/v1/join.proto",
            "bc/wire/v1/node.proto",
            "bc/wire/v1/site.proto",
        ]));
    for pkg in ["bc", "bc/wire", "bc/wire/v1"] {
        std::fs::write(gen.join(pkg).join("__init__.py"), b"").unwrap();
    }

    let mut server = KillOnDrop(
        Command::new(env!("CARGO_BIN_EXE_bcctl"))
            .args(["up", "--port", "0", "--json", "--dir"])
            .arg(work.path().join(".bcctl"))
            .env_remove("BC_DEPLOYMENT_SECRET")
            .env_remove("DATABASE_URL")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let stdout = server.0.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let facts: serde_json::Value =
        serde_json::from_str(&line).expect("one JSON line from bcctl up");
    let s = |k: &str| {
        facts[k]
            .as_str()
            .unwrap_or_else(|| panic!("{k} in {facts}"))
            .to_string()
    };

    let out = run(Command::new(&python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/grpc_python/join_client.py"))
        .arg(&gen)
        .arg(s("address"))
        .arg(s("servingCa"))
        .arg(s("joinEncryptionKey"))
        .arg(s("joinSigningKey"))
        .arg(s("trustDomain"))
        .arg(s("token")));
    let seen: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("one JSON line from the Python client");
    let node = seen["nodeId"].as_str().unwrap();
    assert_eq!(
        seen["spiffeId"],
        format!("spiffe://bc.local/site/site-1/node/{node}")
    );
    assert_eq!(seen["role"], "node");
    assert_eq!(seen["badTokenCode"], "PERMISSION_DENIED");
    assert_eq!(seen["badTokenDetails"], "Join refused");
    drop(server);
}
