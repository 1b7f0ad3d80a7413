//! `bcctl tpm allow | list | revoke` through the real binary on both backends (the `--json`
//! output field by field, the text table, refusals exit 1, usage errors exit 2); the
//! `[attestors.tpm]` configuration refused with the key and what is wrong; and a `bcctl up`
//! with `[attestors.tpm]` (the EK root of the swtpm fixture's test CA) answering a `tpm`
//! JoinRequest PERMISSION_DENIED with a `tpm:` refusal, while one without it answers
//! UNIMPLEMENTED (the attestor registers only when configured).

use crate::support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

use domain::pki::{build_csr, KeyRole, Pin, PrivateKey};
use serde_json::{json, Value};
use support::{bcctl_at, ok_json};

use events::store::testkit::TestDb;

const EK1: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

fn fails_with(dir: &Path, url: &str, args: &[&str], needle: &str, code: i32) {
    let out = bcctl_at(dir, url, args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "bcctl {args:?}: {err}");
    assert!(
        err.contains(needle),
        "bcctl {args:?}: {err:?} lacks {needle:?}"
    );
}

fn int(v: &Value, field: &str) -> i64 {
    v[field]
        .as_i64()
        .unwrap_or_else(|| panic!("{field} is not an integer in {v}"))
}

fn pki_init(dir: &Path, url: &str) {
    let init = bcctl_at(
        dir,
        url,
        &[
            "pki",
            "init",
            "--trust-domain",
            "cli.example.com",
            "--plaintext",
        ],
    );
    assert!(init.status.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tpm_allow_list_and_revoke_on_both_backends() {
    for db in TestDb::each().await.expect("databases") {
        db.store().await.expect("the store, migrated"); // the verbs never create one
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let url = db.url().to_string();
        pki_init(d, &url);

        let allow = [
            "tpm",
            "allow",
            "--ek-sha256",
            EK1,
            "--tenant",
            "acme",
            "--site",
            "par1",
            "--pool",
            "edge",
            "--note",
            "rack 4",
            "--json",
        ];
        let entry = ok_json(d, &url, &allow);
        let id = entry["allowId"].as_str().expect("allowId").to_owned();
        assert!(id.starts_with("tpma_") && id.len() == 37, "{id}");
        let created = int(&entry, "createdAtUs");
        let position = int(&entry, "position");
        assert_eq!(
            entry,
            json!({
                "allowId": id,
                "ekSha256": EK1,
                "tenantId": "acme",
                "siteId": "par1",
                "poolId": "edge",
                "allowedBy": support::local_actor(),
                "note": "rack 4",
                "status": "active",
                "revokedBy": null,
                "revokeReason": null,
                "createdAtUs": created,
                "updatedAtUs": created,
                "position": position,
            })
        );

        fails_with(
            d,
            &url,
            &allow,
            &format!("INVALID_STATE: EK {EK1} is already allowed by {id} (revoke it first)"),
            1,
        );
        fails_with(
            d,
            &url,
            &[
                "tpm",
                "allow",
                "--ek-sha256",
                "beef",
                "--tenant",
                "acme",
                "--site",
                "par1",
                "--pool",
                "edge",
            ],
            "INVALID_INPUT: the EK SHA-256 \"beef\" must be 64 hex digits",
            1,
        );
        fails_with(
            d,
            &url,
            &[
                "tpm", "allow", "--tenant", "acme", "--site", "par1", "--pool", "edge",
            ],
            "--ek-sha256",
            2,
        );
        fails_with(
            d,
            &url,
            &["tpm", "revoke", "tpma_nope"],
            "NOT_FOUND: no tpm allow-list entry tpma_nope",
            1,
        );

        // The text table names the entry.
        let out = bcctl_at(d, &url, &["tpm", "list"]);
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("EK SHA-256") && text.contains(&id) && text.contains(EK1));

        let revoked = ok_json(
            d,
            &url,
            &["tpm", "revoke", &id, "--reason", "sold", "--json"],
        );
        let updated = int(&revoked, "updatedAtUs");
        assert!(updated >= created);
        assert!(int(&revoked, "position") > position);
        let mut expected = entry.clone();
        expected["status"] = json!("revoked");
        expected["revokedBy"] = json!(support::local_actor());
        expected["revokeReason"] = json!("sold");
        expected["updatedAtUs"] = json!(updated);
        expected["position"] = revoked["position"].clone();
        assert_eq!(revoked, expected);
        fails_with(
            d,
            &url,
            &["tpm", "revoke", &id],
            &format!("INVALID_STATE: tpm allow-list entry {id} is already revoked"),
            1,
        );

        let again = ok_json(d, &url, &allow);
        let list = ok_json(d, &url, &["tpm", "list", "--json"]);
        assert_eq!(list, json!([expected, again]));
    }
}

/// `bcctl serve --config` with `[attestors.tpm]` as `table` exits 1 naming `needle`.
fn serve_refuses(dir: &Path, table: &str, needle: &str) {
    let config = dir.join("serve.toml");
    std::fs::write(&config, table).expect("config");
    let out = Command::new(support::bcctl_bin())
        .current_dir(dir)
        .args(["serve", "--pki-bundle", "pki.json", "--config"])
        .arg(&config)
        .env(
            "DATABASE_URL",
            format!("sqlite://{}/events.db", dir.display()),
        )
        .env_remove("BC_DEPLOYMENT_SECRET")
        .env("BC_METRICS_LISTEN", "off")
        .output()
        .expect("bcctl serve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{table}: {err}");
    assert!(err.contains(needle), "{table}: {err:?} lacks {needle:?}");
}

#[test]
fn serve_refuses_a_bad_tpm_table_naming_the_key() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let d = tmp.path();
    let init = bcctl_at(
        d,
        "sqlite://unused.db",
        &[
            "pki",
            "init",
            "--trust-domain",
            "cli.example.com",
            "--out",
            "pki.json",
            "--plaintext",
        ],
    );
    assert!(init.status.success());
    let root = d.join("root.pem");
    std::fs::write(&root, domain_root_pem()).expect("root");
    let missing = d.join("missing.pem");
    serve_refuses(
        d,
        &format!(
            "[attestors.tpm]\nek_roots = [{:?}]\n",
            missing.display().to_string()
        ),
        &format!(
            "configuration attestors.tpm.ek_roots: {}: cannot read the EK root",
            missing.display()
        ),
    );
    serve_refuses(
        d,
        "[attestors.tpm]\npcr_policy = {}\n",
        "configuration attestors.tpm.ek_roots: is required",
    );
    let with_root = |rest: &str| {
        format!(
            "[attestors.tpm]\nek_roots = [{:?}]\n{rest}",
            root.display().to_string()
        )
    };
    serve_refuses(
        d,
        &with_root("pcr_policy = { \"7\" = [\"abcd\"] }\n"),
        "configuration attestors.tpm.pcr_policy: PCR 7: \"abcd\" is not a SHA-256 value (64 hex \
         digits)",
    );
    serve_refuses(
        d,
        &with_root(&format!(
            "pcr_policy = {{ \"7\" = [\"{}zz\"] }}\n",
            &EK1[..62]
        )),
        "configuration attestors.tpm.pcr_policy: PCR 7:",
    );
    serve_refuses(
        d,
        &with_root(&format!("pcr_policy = {{ \"24\" = [\"{EK1}\"] }}\n")),
        "configuration attestors.tpm.pcr_policy: PCR \"24\" is not an index from 0 to 23",
    );
    serve_refuses(
        d,
        &with_root("challenge_ttl = \"6m\"\n"),
        "configuration attestors.tpm.challenge_ttl: 360s is not above 0 and at most 300s",
    );
    serve_refuses(
        d,
        &with_root("node_key = \"sometimes\"\n"),
        "configuration attestors.tpm.node_key: \"sometimes\" is not \"certified\" or \"any\"",
    );
    serve_refuses(d, &with_root("grace = \"1d\"\n"), "unknown field `grace`");
    let not_pem = d.join("not.pem");
    std::fs::write(&not_pem, "hello").expect("file");
    serve_refuses(
        d,
        &format!(
            "[attestors.tpm]\nek_roots = [{:?}]\n",
            not_pem.display().to_string()
        ),
        "holds no PEM CERTIFICATE block",
    );
}

/// A PEM certificate for the configuration tests that only need a readable root: the swtpm
/// fixture's EK root.
fn domain_root_pem() -> Vec<u8> {
    std::fs::read(swtpm_fixture::swtpm::ek_ca().root_pem_path()).expect("the EK CA's root")
}

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `bcctl up` with `config`: its address, database URL and serving CA pin.
fn up(work: &Path, config: &Path) -> (KillOnDrop, String, String, Pin) {
    let mut server = KillOnDrop(
        Command::new(support::bcctl_bin())
            .args(["up", "--port", "0", "--json", "--dir"])
            .arg(work.join(".bcctl"))
            .arg("--config")
            .arg(config)
            .env_remove("BC_DEPLOYMENT_SECRET")
            .env_remove("DATABASE_URL")
            .env("BC_METRICS_LISTEN", "off")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("bcctl up"),
    );
    let mut line = String::new();
    BufReader::new(server.0.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("bcctl up prints its facts");
    let facts: Value = serde_json::from_str(&line).expect("one JSON line from bcctl up");
    let address = facts["address"].as_str().expect("address").to_owned();
    let url = facts["databaseUrl"].as_str().expect("url").to_owned();
    let pin: Pin = facts["pins"]["servingCa"]
        .as_str()
        .expect("the serving CA pin")
        .parse()
        .expect("a pin");
    (server, address, url, pin)
}

fn tpm_request(evidence: &[u8]) -> proto::JoinRequest {
    let key = PrivateKey::generate(KeyRole::Node).expect("key");
    proto::JoinRequest {
        csr: build_csr(&key).expect("csr"),
        attestor: "tpm".into(),
        sealed_token: Vec::new(),
        role: "node".into(),
        claims: Some(proto::HardwareClaims::default()),
        attestation: evidence.to_vec(),
        agent_version: String::new(),
    }
}

async fn join_refusals(url: &str) -> Vec<String> {
    use events::store::{EventStore, LogStore};
    let store = EventStore::open(url).await.expect("open the store");
    let mut out = Vec::new();
    for e in store.read_batch(0, 1_000_000).await.expect("read the log") {
        if e.event_type == "security.join.refused" {
            let p: events::schema::JoinRefused = e.decode().expect("a JoinRefused");
            out.push(p.refusal);
        }
    }
    out
}

#[test]
fn serve_with_a_tpm_table_runs_the_tpm_attestor_and_without_one_does_not() {
    let work = tempfile::tempdir().expect("tempdir");
    let with = work.path().join("with");
    let without = work.path().join("without");
    for dir in [&with, &without] {
        std::fs::create_dir_all(dir).expect("dir");
    }
    let config = with.join("serve.toml");
    std::fs::write(
        &config,
        format!(
            "[attestors.tpm]\nek_roots = [{:?}]\nnode_key = \"certified\"\n\
             challenge_ttl = \"2m\"\npcr_policy = {{ \"7\" = [\"{EK1}\"] }}\n\
             [attestors.tpm.enrollment]\ntenant = \"acme\"\nsite = \"par1\"\npool = \"edge\"\n",
            swtpm_fixture::swtpm::ek_ca()
                .root_pem_path()
                .display()
                .to_string()
        ),
    )
    .expect("config");
    let plain = without.join("serve.toml");
    std::fs::write(&plain, "").expect("config");
    let rt = tokio::runtime::Runtime::new().expect("runtime");

    let (_server, address, url, pin) = up(&with, &config);
    rt.block_on(async {
        let mut client = bcd::client::connect(&address, pin, None)
            .await
            .expect("connect to the gateway");
        let refused = client
            .join(tpm_request(b"not a tpm attestation"))
            .await
            .expect_err("refused");
        assert_eq!(refused.code(), tonic::Code::PermissionDenied, "{refused:?}");
        let reasons = join_refusals(&url).await;
        // The placeholder refuses everything `tpm:not-built`; the verifier refuses this
        // evidence `tpm:malformed`.
        assert!(
            reasons == ["tpm:not-built"] || reasons == ["tpm:malformed"],
            "{reasons:?}"
        );
    });

    let (_server, address, _url, pin) = up(&without, &plain);
    rt.block_on(async {
        let mut client = bcd::client::connect(&address, pin, None)
            .await
            .expect("connect to the gateway");
        let unsupported = client
            .join(tpm_request(b"{}"))
            .await
            .expect_err("no tpm attestor");
        assert_eq!(
            unsupported.code(),
            tonic::Code::Unimplemented,
            "{unsupported:?}"
        );
    });
}
