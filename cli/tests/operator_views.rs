//! What an operator sees after `bcctl up` (issue 22), through the real `bcctl` and `bcd`
//! binaries on SQLite: the join step `up` prints works as printed (token in a file), a restart
//! mints no second token, a busy port is reported with `--port 0` and leaves no `.bcctl` behind,
//! `node list` shows the SPIFFE ID, the certificate's expiry, a live session and a revoked node
//! as `revoked`, revoking twice exits 0, `events list` filters, `bundle show` prints PEM openssl
//! reads, `tenant list` counts nodes by status.

use crate::support;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use support::{bcctl_bin, bcd_bin, wait_for, Proc};

/// `bcctl args` with the deployment found by `--dir` alone (no environment).
fn bcctl(args: &[&str]) -> Output {
    Command::new(bcctl_bin())
        .args(args)
        .env_remove("DATABASE_URL")
        .env_remove("BC_DEPLOYMENT_SECRET")
        .env_remove("BC_DEPLOYMENT_SECRET_FILE")
        .env_remove("BC_PKI_BUNDLE")
        .output()
        .expect("run bcctl")
}

fn ok_json(args: &[&str]) -> serde_json::Value {
    let out = bcctl(args);
    assert!(
        out.status.success(),
        "bcctl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "bcctl {args:?}: {e}: {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// Starts `bcctl up --json` on `dir` and returns the process and its one JSON line.
fn up(dir: &Path, log: &Path) -> (Proc, serde_json::Value) {
    let child = Command::new(bcctl_bin())
        .args(["up", "--port", "0", "--json", "--dir"])
        .arg(dir)
        .env_remove("BC_DEPLOYMENT_SECRET")
        .env_remove("DATABASE_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(fs::File::create(log).expect("log")))
        .spawn()
        .expect("spawn bcctl up");
    let mut proc = Proc {
        name: "bcctl up".into(),
        child,
        log: log.to_path_buf(),
    };
    let facts = proc.first_json_line(Duration::from_secs(120));
    (proc, facts)
}

fn s<'a>(v: &'a serde_json::Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or_else(|| panic!("{key} in {v}"))
}

#[test]
fn the_operator_views_after_up() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let work = tmp.path().join("dep");
    let dir = work.display().to_string();
    let _ = bcd_bin(); // built beside bcctl, so `up` names it by its absolute path

    // First run: a token in a file, a bcctl.toml every verb reads.
    let (first, facts) = up(&work, &tmp.path().join("up1.log"));
    assert_eq!(facts["tokenReused"], false);
    let token_file = s(&facts, "tokenFile").to_string();
    let mode = fs::metadata(&token_file)
        .expect("token file")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    assert!(work.join("bcctl.toml").is_file());
    let join_command = s(&facts, "joinCommand").to_string();
    assert!(
        join_command.starts_with(&format!("{} join --config ", bcd_bin().display())),
        "{join_command}"
    );
    assert!(join_command.ends_with(&format!("--token-file {token_file}")));
    assert!(
        !join_command.contains(s(&facts, "token")),
        "the secret is not on the command line"
    );

    // A busy port: said so, with the way out, and no half-made directory.
    let port = s(&facts, "address")
        .rsplit(':')
        .next()
        .expect("port")
        .to_string();
    let other = tmp.path().join("other");
    let busy = bcctl(&["up", "--port", &port, "--dir", &other.display().to_string()]);
    assert_eq!(busy.status.code(), Some(1));
    let err = String::from_utf8_lossy(&busy.stderr);
    assert!(
        err.contains(&format!("port {port} on 127.0.0.1 is in use"))
            && err.contains("`bcctl up --port 0`"),
        "{err}"
    );
    assert!(!other.exists(), "a failed up leaves no directory it made");

    // A restart mints no second token while the first is unused.
    drop(first);
    let (server, facts) = up(&work, &tmp.path().join("up2.log"));
    assert_eq!(facts["tokenReused"], true, "{facts}");
    assert_eq!(facts["token"], serde_json::Value::Null);
    assert_eq!(s(&facts, "joinCommand"), join_command);
    let created = ok_json(&[
        "events",
        "list",
        "--dir",
        &dir,
        "--type",
        "token.created",
        "--json",
    ]);
    assert_eq!(created.as_array().map(Vec::len), Some(1), "{created}");

    // node config: the server from DIR/bcctl.toml's listen, the bundle authenticated by the dev
    // secret (no warning), the same pins as up's bcd/config.toml.
    let cfg = tmp.path().join("cfg");
    let out = bcctl(&[
        "node",
        "config",
        "--dir",
        &dir,
        "--out",
        &cfg.display().to_string(),
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(c["server"], facts["address"]);
    let pins = |p: &Path| {
        fs::read_to_string(p)
            .expect("config")
            .lines()
            .filter(|l| l.contains("_pin = "))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(pins(&cfg.join("config.toml")).len(), 3);
    assert_eq!(
        pins(&cfg.join("config.toml")),
        pins(Path::new(s(&facts, "bcdConfig")))
    );

    // The join step works as printed.
    let joined = Command::new("sh")
        .arg("-c")
        .arg(s(&facts, "joinCommand"))
        .env_remove("BCD_JOIN_TOKEN")
        .env_remove("BCD_CONFIG")
        .env_remove("BCD_SERVER")
        .env_remove("BCD_DATA_DIR")
        .stdin(Stdio::null())
        .output()
        .expect("sh");
    assert!(
        joined.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&joined.stdout),
        String::from_utf8_lossy(&joined.stderr)
    );
    assert!(
        !Path::new(&token_file).exists(),
        "bcd deletes the token file after the join"
    );

    // A live session.
    let mut node = Command::new(bcd_bin());
    node.args(["node", "--config", s(&facts, "bcdConfig")])
        .env_remove("BCD_JOIN_TOKEN");
    let _node = Proc::spawn("bcd node", node, tmp.path().join("node.log"));
    let list = |dir: &str| ok_json(&["node", "list", "--dir", dir, "--json"]);
    wait_for(
        "node list to show a connected node",
        Duration::from_secs(30),
        || list(&dir)[0]["connected"] == true,
        || format!("{}\n{}", list(&dir), server.log_text()),
    );
    let n = list(&dir)[0].clone();
    let node_id = s(&n, "nodeId").to_string();
    assert_eq!(
        s(&n, "spiffeId"),
        format!("spiffe://bc.local/site/site-1/node/{node_id}")
    );
    assert_eq!(s(&n, "status"), "active");
    assert!(s(&n, "certificateExpiresAt").ends_with('Z'));
    assert!(s(&n, "lastSeenAt").ends_with('Z'));
    let text = bcctl(&["node", "list", "--dir", &dir]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.starts_with("NODE "), "{text}");
    assert!(
        text.contains("SPIFFE ID") && text.contains(" yes "),
        "{text}"
    );

    // Revoked shows as revoked; revoking again exits 0 and says so.
    ok_json(&["node", "revoke", "--dir", &dir, &node_id, "--json"]);
    assert_eq!(s(&list(&dir)[0], "status"), "revoked");
    let again = bcctl(&["node", "revoke", "--dir", &dir, &node_id]);
    assert_eq!(again.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&again.stdout),
        format!(
            "node {node_id} is already revoked: it holds no valid certificate of its identity generation 2; nothing changed\n"
        )
    );
    let shown = ok_json(&["node", "show", "--dir", &dir, &node_id, "--json"]);
    assert_eq!(s(&shown, "status"), "revoked");
    assert_eq!(shown["certificates"].as_array().map(Vec::len), Some(1));

    // token create: the deployment's tenant and site, the join command, the secret in a file.
    let out = tmp.path().join("t2");
    let t = ok_json(&[
        "token",
        "create",
        "--dir",
        &dir,
        "--out",
        &out.display().to_string(),
        "--json",
    ]);
    assert_eq!(t["token"]["tenantId"], "default");
    assert_eq!(t["token"]["siteId"], "site-1");
    assert!(s(&t, "joinCommand").ends_with(&format!("--token-file {}", out.display())));
    assert_eq!(
        fs::read_to_string(&out).expect("token").trim(),
        s(&t, "secret")
    );
    let id = s(&t["token"], "tokenId").to_string();
    ok_json(&["token", "revoke", "--dir", &dir, &id, "--json"]);
    let again = ok_json(&["token", "revoke", "--dir", &dir, &id, "--json"]);
    assert_eq!(again["alreadyRevoked"], true);

    // events list: filters by type, tenant, position, limit.
    let all = ok_json(&["events", "list", "--dir", &dir, "--json"]);
    let all = all.as_array().expect("array").clone();
    assert!(all.len() >= 6, "{all:?}");
    let joined = ok_json(&[
        "events",
        "list",
        "--dir",
        &dir,
        "--type",
        "node.joined",
        "--tenant",
        "default",
        "--json",
    ]);
    assert_eq!(joined.as_array().map(Vec::len), Some(1));
    assert_eq!(joined[0]["streamId"], format!("node/{node_id}"));
    let at = joined[0]["position"].to_string();
    let shown = ok_json(&["events", "show", "--dir", &dir, &at, "--json"]);
    assert_eq!(shown["decoded"]["nodeId"], node_id.as_str(), "{shown}");
    assert_eq!(shown["decoded"]["siteId"], "site-1");
    let pos = all[2]["position"].as_i64().expect("position");
    let after = ok_json(&[
        "events",
        "list",
        "--dir",
        &dir,
        "--since",
        &pos.to_string(),
        "--limit",
        "2",
        "--json",
    ]);
    let after = after.as_array().expect("array");
    assert_eq!(after.len(), 2);
    assert_eq!(after[0]["position"], all[3]["position"]);
    let none = ok_json(&[
        "events", "list", "--dir", &dir, "--tenant", "nobody", "--json",
    ]);
    assert_eq!(none.as_array().map(Vec::len), Some(0));
    let one = ok_json(&["events", "show", "--dir", &dir, &pos.to_string(), "--json"]);
    assert_eq!(one["position"], pos);
    let bad = bcctl(&["events", "list", "--dir", &dir, "--since", "yesterday"]);
    assert_eq!(bad.status.code(), Some(2));

    // bundle show: PEM that openssl reads, four CA certificates.
    let pem = bcctl(&["bundle", "show", "--dir", &dir]);
    assert!(pem.status.success());
    let pem_path = tmp.path().join("roots.pem");
    fs::write(&pem_path, &pem.stdout).expect("write");
    let subject = Command::new("openssl")
        .args(["x509", "-noout", "-subject", "-in"])
        .arg(&pem_path)
        .output()
        .expect("openssl");
    assert_eq!(
        String::from_utf8_lossy(&subject.stdout).trim(),
        "subject=O = bc.local, CN = bc root CA"
    );
    let all_certs = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "openssl crl2pkcs7 -nocrl -certfile {} | openssl pkcs7 -print_certs -noout | grep -c '^subject='",
            pem_path.display()
        ))
        .output()
        .expect("openssl");
    assert_eq!(String::from_utf8_lossy(&all_certs.stdout).trim(), "4");
    let json = ok_json(&["bundle", "show", "--dir", &dir, "--format", "json"]);
    assert_eq!(json["trustDomain"], "bc.local");
    assert_eq!(json["trustBundle"]["version"], 1);

    // tenant list: the tenants the log names, with node counts.
    let tenants = ok_json(&["tenant", "list", "--dir", &dir, "--json"]);
    let default = tenants
        .as_array()
        .and_then(|a| a.iter().find(|t| t["tenantId"] == "default"))
        .expect("default tenant")
        .clone();
    assert_eq!(default["nodes"], 1);
    // The node's identity was revoked above: it counts as revoked, not active.
    assert_eq!(default["activeNodes"], 0);
    assert_eq!(default["nodesByStatus"], serde_json::json!({"revoked": 1}));
}
