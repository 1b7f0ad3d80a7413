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

/// The venv of the pinned requirements ([`crate::support::python_venv`]).
fn venv() -> PathBuf {
    crate::support::python_venv::venv(
        "grpc-python-venv",
        REQUIREMENTS,
        "grpc, grpc_tools, cryptography",
    )
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
