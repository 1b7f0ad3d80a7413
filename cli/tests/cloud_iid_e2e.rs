//! End to end with the real binaries, on SQLite and on Postgres: the `cloud-iid` attestor for
//! GCP-style and AWS-style documents (spec 000 "cloud-iid").
//!
//! The test is the cloud: it makes an RSA key, publishes it as a JWKS file and a self-signed
//! certificate for `[attestors.cloud-iid]`, and runs a loopback metadata service (tokio) that
//! serves the documents it signs: GCP's identity endpoint (checking `Metadata-Flavor` and the
//! audience) and AWS's IMDSv2 (a session token from `PUT /latest/api/token`, then the document
//! and its signature). For each provider: `bcctl cloud account add`, then
//! `bcd join --attestor cloud-iid --provider P` joins once; a second join of the same instance
//! is refused `cloud-iid:instance-reused`; a GCP token 11 minutes old
//! `cloud-iid:document-too-old`, while an AWS instance launched 11 minutes ago joins (its
//! `pendingTime` is the launch, not aged: decision 0082); an account nobody registered
//! `cloud-iid:unknown-instance`.
//!
//! Run: `cargo test -p cli --test suite cloud_iid_e2e::` (Postgres at `DATABASE_URL`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use events::store::testkit::TestDb;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::cloud_iid_support::{aws_document, gcp_claims, key};
use crate::support;
use crate::x509pop_e2e::{node_in, run, Server};

const AUDIENCE: &str = "https://bc.example.com";
const AWS_TOKEN: &str = "imds-session-token-1";

/// What the metadata service answers now.
#[derive(Default)]
struct Documents {
    gcp_token: String,
    aws_document: String,
    aws_signature: String,
}

/// A loopback metadata service on its own thread and runtime.
struct Metadata {
    url: String,
    docs: Arc<Mutex<Documents>>,
}

fn answer(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// The answer to one request `head` (request line and headers).
fn respond(head: &str, docs: &Documents) -> Vec<u8> {
    let mut lines = head.split("\r\n");
    let request_line = lines.next().unwrap_or_default().to_owned();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let header = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let mut parts = request_line.split(' ');
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let aws_ok = header("x-aws-ec2-metadata-token") == Some(AWS_TOKEN);
    match (method, target) {
        ("GET", t)
            if t.starts_with("/computeMetadata/v1/instance/service-accounts/default/identity?") =>
        {
            let want = format!("audience={}&format=full", "https%3A%2F%2Fbc.example.com");
            if header("metadata-flavor") != Some("Google") || !t.ends_with(&want) {
                return answer("403 Forbidden", "");
            }
            answer("200 OK", &docs.gcp_token)
        }
        ("PUT", "/latest/api/token")
            if header("x-aws-ec2-metadata-token-ttl-seconds").is_some() =>
        {
            answer("200 OK", AWS_TOKEN)
        }
        ("GET", "/latest/dynamic/instance-identity/document") if aws_ok => {
            answer("200 OK", &docs.aws_document)
        }
        ("GET", "/latest/dynamic/instance-identity/signature") if aws_ok => {
            answer("200 OK", &docs.aws_signature)
        }
        ("GET", _) if target.starts_with("/latest/") => answer("401 Unauthorized", ""),
        _ => answer("404 Not Found", ""),
    }
}

impl Metadata {
    fn start() -> Metadata {
        let docs = Arc::new(Mutex::new(Documents::default()));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind the metadata port");
        listener.set_nonblocking(true).expect("nonblocking");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        let served = docs.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("tokio listener");
                loop {
                    let Ok((mut stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let docs = served.clone();
                    tokio::spawn(async move {
                        let mut head = Vec::new();
                        let mut buf = [0u8; 1024];
                        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16_384 {
                            match stream.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => head.extend_from_slice(&buf[..n]),
                            }
                        }
                        let text = String::from_utf8_lossy(&head).into_owned();
                        let bytes = match docs.lock() {
                            Ok(d) => respond(&text, &d),
                            Err(_) => answer("500 Internal Server Error", ""),
                        };
                        let _ = stream.write_all(&bytes).await;
                        let _ = stream.shutdown().await;
                    });
                }
            });
        });
        Metadata { url, docs }
    }

    fn set(&self, f: impl FnOnce(&mut Documents)) {
        f(&mut self.docs.lock().expect("the documents"));
    }
}

fn now() -> time::OffsetDateTime {
    time::OffsetDateTime::now_utc()
}

fn gcp_token(project: &str, instance: &str, issued: time::OffsetDateTime) -> String {
    key().jwt(&gcp_claims(
        AUDIENCE,
        project,
        instance,
        issued.unix_timestamp(),
    ))
}

fn aws(docs: &mut Documents, account: &str, instance: &str, pending: time::OffsetDateTime) {
    let document = aws_document(account, instance, pending);
    let signature = key().sign(document.as_bytes());
    docs.aws_document = document;
    // The service wraps the base64 at 64 columns; bcd and the attestor take it as sent.
    let b64 = base64::engine::general_purpose::STANDARD.encode(signature);
    docs.aws_signature = b64
        .as_bytes()
        .chunks(64)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect::<Vec<_>>()
        .join("\n");
}

/// The serve configuration: GCP's JWKS and audience, AWS's certificate.
fn serve_config(dir: &Path) -> PathBuf {
    let jwks = dir.join("google-jwks.json");
    fs::write(&jwks, key().jwks()).expect("jwks");
    let cert = dir.join("aws-us-east-1.pem");
    fs::write(&cert, key().certificate_pem("aws-us-east-1")).expect("aws certificate");
    let path = dir.join("serve.toml");
    let text = format!(
        "[attestors.cloud-iid]\nmax_age = \"10m\"\n\n[attestors.cloud-iid.aws]\n\
         certificates = [{cert:?}]\n\n[attestors.cloud-iid.gcp]\njwks_file = {jwks:?}\n\
         audience = {AUDIENCE:?}\n",
        cert = cert.display().to_string(),
        jwks = jwks.display().to_string(),
    );
    fs::write(&path, text).expect("serve config");
    path
}

/// bcd for machine `dir`: up's config with `[cloud]` naming the metadata service.
fn bcd_cloud(server: &Server, metadata: &Metadata, dir: &Path, provider: &str) -> Command {
    let up_config = PathBuf::from(server.s("bcdConfig"));
    let base = fs::read_to_string(&up_config).expect("up's bcd config");
    let machine = dir.file_name().and_then(|n| n.to_str()).unwrap_or("m");
    let path = up_config.with_file_name(format!("config-{machine}.toml"));
    let text = format!(
        "{base}\n[cloud]\nmetadata_url = {url:?}\naudience = {AUDIENCE:?}\n",
        url = metadata.url
    );
    fs::create_dir_all(dir).expect("mkdir");
    fs::write(&path, text).expect("bcd config");
    let mut cmd = Command::new(support::bcd_bin());
    cmd.arg("--config")
        .arg(path)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["join", "--attestor", "cloud-iid", "--provider", provider])
        .env_remove("BCD_JOIN_TOKEN")
        .env_remove("BCD_SERVER")
        .env_remove("BCD_DATA_DIR")
        .env_remove("BCD_CONFIG")
        .env_remove("BCD_CLOUD_METADATA_URL");
    cmd
}

fn add_account(server: &Server, provider: &str, account: &str) {
    let v = server.bcctl_json(&[
        "cloud",
        "account",
        "add",
        "--provider",
        provider,
        "--account",
        account,
        "--tenant",
        "default",
        "--site",
        "site-1",
        "--pool",
        "default",
        "--json",
    ]);
    assert_eq!(v["status"], "active", "{v}");
    assert!(
        v["entryId"]
            .as_str()
            .is_some_and(|id| id.starts_with("cloud_")),
        "{v}"
    );
}

/// The reasons of every `security.join.refused` event in the server's store, oldest first.
fn join_refusals(server: &Server) -> Vec<String> {
    use events::store::{EventStore, LogStore};
    let url = server.facts["databaseUrlFull"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let store = EventStore::open(&url).await.expect("open the store");
        let mut out = Vec::new();
        for e in store.read_batch(0, 1_000_000).await.expect("read the log") {
            if e.event_type == "security.join.refused" {
                let p: events::schema::JoinRefused = e.decode().expect("a JoinRefused");
                out.push(p.refusal);
            }
        }
        out
    })
}

/// A join that must be refused with `reason` (the newest refusal event).
fn refused(server: &Server, join: Command, reason: &str) {
    let (code, stdout, stderr) = run(join);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("ACCESS_DENIED"), "{stderr}");
    let all = join_refusals(server);
    assert_eq!(all.last().map(String::as_str), Some(reason), "{all:?}");
}

fn joins(server: &Server, join: Command) -> String {
    let (code, stdout, stderr) = run(join);
    assert_eq!(
        code,
        0,
        "{stdout}{stderr}\nserver:\n{}",
        server.proc.log_text()
    );
    node_in(&stdout, "joined")
}

fn scenario(db_url: &str) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let config = serve_config(tmp.path());
    let server =
        crate::x509pop_e2e::start_server_configured(tmp.path(), db_url, "1h", 1, Some(&config));
    let metadata = Metadata::start();
    let m = |name: &str| tmp.path().join(name);

    // GCP-style.
    add_account(&server, "gcp", "proj-1");
    metadata.set(|d| d.gcp_token = gcp_token("proj-1", "1001", now()));
    let node = joins(&server, bcd_cloud(&server, &metadata, &m("gcp-a"), "gcp"));
    let shown = server.bcctl_json(&["node", "show", &node, "--json"]);
    assert_eq!(shown["node"]["attestor"], "cloud-iid", "{shown}");
    assert_eq!(shown["node"]["poolId"], "default", "{shown}");
    metadata.set(|d| d.gcp_token = gcp_token("proj-1", "1001", now()));
    let again = bcd_cloud(&server, &metadata, &m("gcp-b"), "gcp");
    refused(&server, again, "cloud-iid:instance-reused");
    let old = now() - time::Duration::minutes(11);
    metadata.set(|d| d.gcp_token = gcp_token("proj-1", "1002", old));
    let stale = bcd_cloud(&server, &metadata, &m("gcp-c"), "gcp");
    refused(&server, stale, "cloud-iid:document-too-old");
    metadata.set(|d| d.gcp_token = gcp_token("proj-nobody", "1003", now()));
    let unknown = bcd_cloud(&server, &metadata, &m("gcp-d"), "gcp");
    refused(&server, unknown, "cloud-iid:unknown-instance");

    // AWS-style.
    add_account(&server, "aws", "123456789012");
    metadata.set(|d| aws(d, "123456789012", "i-0aaa", now()));
    let aws_node = joins(&server, bcd_cloud(&server, &metadata, &m("aws-a"), "aws"));
    assert_ne!(aws_node, node);
    let again = bcd_cloud(&server, &metadata, &m("aws-b"), "aws");
    refused(&server, again, "cloud-iid:instance-reused");
    // An instance launched 11 minutes ago joins: an AWS document's `pendingTime` is the launch,
    // not when it was read, so it is not aged (decision 0082).
    metadata.set(|d| aws(d, "123456789012", "i-0bbb", old));
    let launched_earlier = joins(&server, bcd_cloud(&server, &metadata, &m("aws-c"), "aws"));
    assert_ne!(launched_earlier, aws_node);
    metadata.set(|d| aws(d, "999999999999", "i-0ccc", now()));
    let unknown = bcd_cloud(&server, &metadata, &m("aws-d"), "aws");
    refused(&server, unknown, "cloud-iid:unknown-instance");

    let nodes = server.bcctl_json(&["node", "list", "--json"]);
    assert_eq!(nodes.as_array().map(Vec::len), Some(3), "{nodes}");
    assert_eq!(join_refusals(&server).len(), 5);
}

#[test]
fn cloud_iid_e2e_sqlite() {
    let db = TestDb::sqlite().expect("sqlite test db");
    scenario(db.url());
}

#[tokio::test(flavor = "multi_thread")]
async fn cloud_iid_e2e_postgres() {
    let db = TestDb::postgres().await.expect("postgres test db");
    let url = db.url().to_owned();
    tokio::task::spawn_blocking(move || scenario(&url))
        .await
        .expect("scenario");
    drop(db);
}
