//! x509pop evidence built by a producer we did not write: Python's `cryptography`, from the
//! format in docs/ATTESTORS.md ("x509pop") alone (`x509pop_python/x509pop_evidence.py`), is
//! accepted by the real JoinService; the same evidence with one byte of its signature changed is
//! refused. The test installs cryptography (pinned in `x509pop_python/requirements.txt`) into a
//! venv under the target directory, built once and reused while the requirements and the
//! interpreter are unchanged. Set `BC_SKIP_PYTHON=1` to skip it on a machine without python3 or
//! PyPI.

use crate::identity_support::*;
use crate::x509pop_support::*;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use events::store::testkit::TestDb;

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
const REQUIREMENTS: &str = "tests/x509pop_python/requirements.txt";
/// The producer.
const SCRIPT: &str = "tests/x509pop_python/x509pop_evidence.py";
/// The venv directories' prefix under the target's tmp directory (cli's grpc test owns
/// `grpc-python-venv*`).
const VENV_PREFIX: &str = "x509pop-python-venv";

/// The interpreter the venv is made with, and what identifies it.
fn interpreter() -> String {
    let out = run(Command::new("python3").args([
        "-c",
        "import sys, os; print(sys.version); print(os.path.realpath(sys.executable))",
    ]));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether the venv at `dir` was finished for `key` and still imports cryptography.
fn works(dir: &Path, key: &str) -> bool {
    std::fs::read_to_string(dir.join("bc-venv-key")).is_ok_and(|k| k == key)
        && Command::new(dir.join("bin/python"))
            .args(["-c", "import cryptography"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
}

/// The venv with the pinned requirements, named by a digest of them and the interpreter, built
/// under a lock once and reused; the key file written last marks it finished.
fn venv() -> PathBuf {
    use sha2::{Digest, Sha256};
    let requirements = Path::new(env!("CARGO_MANIFEST_DIR")).join(REQUIREMENTS);
    let wanted = std::fs::read(&requirements).expect("the venv's requirements file");
    let mut digest = Sha256::new();
    digest.update(&wanted);
    digest.update(interpreter().as_bytes());
    let key = hex::encode(&digest.finalize()[..8]);

    let cache = Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(cache).expect("the target's tmp directory");
    let dir = cache.join(format!("{VENV_PREFIX}-{key}"));
    let lock = std::fs::File::create(cache.join(format!("{VENV_PREFIX}-{key}.lock")))
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
        for old in std::fs::read_dir(cache).into_iter().flatten().flatten() {
            let name = old.file_name().to_string_lossy().into_owned();
            if name.starts_with(VENV_PREFIX) && !name.contains(&key) && old.path().is_dir() {
                let _ = std::fs::remove_dir_all(old.path());
            }
        }
    }
    drop(lock);
    dir.join("bin/python")
}

/// The Python producer's evidence for `node` proving over `next`'s CSR at `client_ms`.
fn python_evidence(python: &Path, node: &Joined, next: &Agent, client_ms: u64) -> Vec<u8> {
    let work = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let path = work.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path.display().to_string()
    };
    let params = serde_json::json!({
        "leaf": write("leaf.der", node.leaf()),
        "issuer": write("issuer.der", &node.answer.certificate_chain[1]),
        "key": write("key.p8", node.agent.key.pkcs8_der()),
        "csr": write("csr.der", &next.csr),
        "nodeId": node.node_id(),
        "clientTime": client_ms,
    });
    let input = write("input.json", params.to_string().as_bytes());
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(SCRIPT);
    run(Command::new(python).arg(script).arg(input)).stdout
}

#[tokio::test]
async fn python_built_evidence_re_joins_and_one_changed_byte_is_refused() {
    if std::env::var("BC_SKIP_PYTHON").is_ok_and(|v| v == "1") {
        eprintln!("skipped: BC_SKIP_PYTHON=1");
        return;
    }
    let python = venv();
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let node = joined(&f, "t1").await;
        expire(&f, &node);
        let next = Agent::new();
        let evidence = python_evidence(&python, &node, &next, clock_ms(&f));

        // One byte of the signature changed: refused, nothing admitted.
        let mut tampered: serde_json::Value = serde_json::from_slice(&evidence).unwrap();
        let sig = tampered["sig"].as_str().unwrap().to_owned();
        let mut raw = {
            use base64::Engine as _;
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(sig)
                .unwrap()
        };
        raw[10] ^= 0x01;
        tampered["sig"] = b64url(&raw).into();
        let tampered = serde_json::to_vec(&tampered).unwrap();
        assert_join_denied(f.svc.join(&x509pop_request(&next, tampered, "node")).await);
        assert_last_refusal(&f.store, "t1", "x509pop:bad-signature").await;

        // As produced: the node re-joins as itself.
        let answer = f
            .svc
            .join(&x509pop_request(&next, evidence, "node"))
            .await
            .unwrap();
        assert_eq!(answer.node_id, node.node_id());
        assert_eq!(answer.identity_generation, 2);
        assert_eq!(answer.csr_sha256, next.csr_sha256());
    }
}
