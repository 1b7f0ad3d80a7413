//! The admin API of a real `bcctl up` (SQLite, and once on Postgres), called by this test's own
//! tonic client over mTLS: operator certificates issued from the deployment's operator CA
//! (opened from the sealed bundle with the deployment's secret), WhoAmI, a denied verb, a call
//! naming `--database-url`, a request over `max_request_bytes`, a node certificate from a real
//! `bcd join` refused at the handshake, and `token list --json` over the API printing what the
//! direct run prints; on Postgres, a profile from `bcctl pki issue-operator` reaches it and
//! `bcctl operator revoke` shuts it out; one address holding raw TCP connections up to the
//! listener's global cap leaves room for an operator from another address (issue 40).
//!
//! Run: `cargo test -p cli --test suite admin_server::`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use domain::operator::{OperatorName, OperatorRole};
use domain::pki::{
    issue_operator_certificate, open_bundle, pem_blocks, DeploymentSecret, KeyRole, KeySet,
    PrivateKey,
};
use events::store::testkit::TestDb;
use proto::admin::admin_service_client::AdminServiceClient;
use proto::admin::{InputFile, RunRequest, WhoAmIRequest};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tonic::transport::{Channel, Endpoint};

use crate::support::{bcctl_bin, Proc};

struct Up {
    proc: Proc,
    deployment: PathBuf,
    admin: SocketAddr,
    serving_ca: Vec<u8>,
    facts: serde_json::Value,
    _dir: tempfile::TempDir,
}

/// `bcctl up --port 0 --json` with `config` as its `--config` file, on `database_url` (SQLite
/// in the directory when `None`).
fn up(database_url: Option<&str>, config: &str) -> Up {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("serve.toml");
    std::fs::write(&cfg, config).expect("config");
    let deployment = dir.path().join(".bcctl");
    let mut cmd = Command::new(bcctl_bin());
    cmd.current_dir(dir.path())
        .args(["up", "--port", "0", "--json", "--dir"])
        .arg(&deployment)
        .arg("--config")
        .arg(&cfg)
        .env_remove("BC_DEPLOYMENT_SECRET")
        .env_remove("DATABASE_URL")
        .env_remove("BC_ADMIN_LISTEN")
        .env("BC_METRICS_LISTEN", "off")
        .env("RUST_LOG", "warn");
    if let Some(url) = database_url {
        cmd.args(["--database-url", url]);
    }
    let log = dir.path().join("bcctl.log");
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(&log).expect("log")))
        .spawn()
        .expect("spawn bcctl up");
    let mut proc = Proc {
        name: "bcctl up".into(),
        child,
        log,
    };
    let facts = proc.first_json_line(Duration::from_secs(120));
    let admin: SocketAddr = facts["adminListen"]
        .as_str()
        .unwrap_or_else(|| panic!("adminListen in {facts}"))
        .parse()
        .expect("adminListen");
    let toml = std::fs::read_to_string(deployment.join("bcctl.toml")).expect("bcctl.toml");
    assert!(
        toml.contains(&format!("admin_listen = \"{admin}\"")),
        "bcctl.toml names the admin listener:\n{toml}"
    );
    let pem =
        std::fs::read_to_string(facts["servingCa"].as_str().expect("servingCa")).expect("pem");
    let serving_ca = pem_blocks("CERTIFICATE", &pem)
        .and_then(|b| b.into_iter().next())
        .expect("serving CA PEM");
    Up {
        proc,
        deployment,
        admin,
        serving_ca,
        facts,
        _dir: dir,
    }
}

impl Up {
    /// The deployment's key set, opened with its development secret.
    fn keys(&self) -> KeySet {
        let secret = std::fs::read_to_string(self.deployment.join("deployment-secret"))
            .expect("deployment-secret");
        let secret = DeploymentSecret::new(secret.trim()).expect("secret");
        let bytes = std::fs::read(self.deployment.join("pki.json")).expect("pki.json");
        open_bundle(&bytes, Some(&secret))
            .expect("bundle")
            .keys
            .expect("keys")
    }

    /// A direct run of `bcctl args` on this deployment.
    fn direct(&self, args: &[&str]) -> std::process::Output {
        Command::new(bcctl_bin())
            .args(args)
            .arg("--dir")
            .arg(&self.deployment)
            .env_remove("BC_DEPLOYMENT_SECRET")
            .env_remove("DATABASE_URL")
            .output()
            .expect("run bcctl")
    }
}

/// An operator certificate of the deployment: (chain leaf first, PKCS#8 key).
fn operator(keys: &KeySet, name: &str, role: OperatorRole) -> (Vec<Vec<u8>>, Vec<u8>) {
    let ca = keys.operator_ca.as_ref().expect("an operator CA");
    let key = PrivateKey::generate(KeyRole::Node).expect("key");
    let issued = issue_operator_certificate(
        ca,
        &OperatorName::new(name).expect("name"),
        role,
        key.public_key(),
        time::Duration::days(1),
        time::OffsetDateTime::now_utc(),
    )
    .expect("operator certificate");
    (
        vec![issued.der, ca.cert_der().to_vec()],
        key.pkcs8_der().to_vec(),
    )
}

async fn client(
    up: &Up,
    (chain, key): (Vec<Vec<u8>>, Vec<u8>),
) -> Result<AdminServiceClient<Channel>, tonic::transport::Error> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(up.serving_ca.clone()))
        .expect("serving CA");
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_protocol_versions(&[&rustls::version::TLS13])
    .expect("TLS 1.3")
    .with_root_certificates(roots)
    .with_client_auth_cert(
        chain.into_iter().map(CertificateDer::from).collect(),
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)),
    )
    .expect("client certificate");
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let addr = up.admin;
    let channel = Endpoint::from_static("http://localhost")
        .connect_with_connector(tower::service_fn(move |_| {
            let connector = connector.clone();
            async move {
                let tcp = tokio::net::TcpStream::connect(addr).await?;
                let name = ServerName::try_from("localhost").expect("name");
                let tls = connector.connect(name, tcp).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tls))
            }
        }))
        .await?;
    Ok(AdminServiceClient::new(channel))
}

fn argv(args: &[&str]) -> RunRequest {
    RunRequest {
        argv: args.iter().map(|a| a.to_string()).collect(),
        inputs: Vec::new(),
    }
}

/// Whether a client presenting `cert` gets no call through (the handshake refused: with TLS
/// 1.3 the client learns it at its first read, so the connect or the first call fails).
async fn refused(up: &Up, cert: (Vec<Vec<u8>>, Vec<u8>)) -> bool {
    match client(up, cert).await {
        Err(_) => true,
        // The server's alert (UnknownCA, CertificateUnknown) or the closed connection, as the
        // client's transport reports it; never an answer of the server's own.
        Ok(mut api) => match api.who_am_i(WhoAmIRequest {}).await {
            Err(status) => matches!(
                status.code(),
                tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
            ),
            Ok(_) => false,
        },
    }
}

/// `token list --json` over the API prints exactly what the direct run prints.
async fn same_token_list(up: &Up, api: &mut AdminServiceClient<Channel>) {
    let made = api
        .run(argv(&["token", "create", "--json"]))
        .await
        .expect("token create")
        .into_inner();
    assert_eq!(
        made.exit_code,
        0,
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let remote = api
        .run(argv(&["token", "list", "--json"]))
        .await
        .expect("token list")
        .into_inner();
    assert_eq!(remote.exit_code, 0);
    let direct = up.direct(&["token", "list", "--json"]);
    assert!(direct.status.success(), "{direct:?}");
    assert_eq!(
        String::from_utf8_lossy(&remote.stdout),
        String::from_utf8_lossy(&direct.stdout)
    );
    let listed: serde_json::Value = serde_json::from_slice(&remote.stdout).expect("JSON");
    assert_eq!(listed.as_array().map(Vec::len), Some(2), "{listed}");
}

/// The node certificate a real `bcd join` wrote (chain, key), from the command `up` printed.
fn joined_node(up: &Up) -> (Vec<Vec<u8>>, Vec<u8>) {
    let join = up.facts["joinCommand"].as_str().expect("joinCommand");
    let out = Command::new("bash")
        .arg("-c")
        .arg(join)
        .env_remove("BC_DEPLOYMENT_SECRET")
        .output()
        .expect("bcd join");
    assert!(out.status.success(), "{join}: {out:?}");
    let data = Path::new(up.facts["bcdDataDir"].as_str().expect("bcdDataDir"));
    let cert = std::fs::read_to_string(data.join("cert.pem")).expect("cert.pem");
    let key = std::fs::read_to_string(data.join("key.pem")).expect("key.pem");
    let chain = pem_blocks("CERTIFICATE", &cert).expect("certificates");
    let key = pem_blocks("PRIVATE KEY", &key)
        .and_then(|k| k.into_iter().next())
        .expect("PKCS#8 key");
    (chain, key)
}

/// An operator certificate issued through the log (`operator.cert.issued`, as `pki
/// issue-operator` does), revoked through it (`operator revoke`): refused at the handshake
/// within about a second, and on the connection it had already opened.
async fn revoked_within_a_second(up: &Up, keys: &KeySet) {
    let url = format!("sqlite://{}", up.deployment.join("events.db").display());
    let url = up.facts["databaseUrl"]
        .as_str()
        .filter(|u| u.starts_with("postgres"))
        .map_or(url, str::to_string);
    let store = events::store::EventStore::open(&url).await.expect("store");
    let clock = commands::SystemClock;
    let key = PrivateKey::generate(KeyRole::Node).expect("key");
    let ca = keys.operator_ca.as_ref().expect("operator CA");
    let decision = domain::operator::check_issue("dave", "operator", 1).expect("decision");
    let issued =
        commands::operators::issue_operator(&store, &clock, &decision, ca, key.public_key())
            .await
            .expect("issue");
    let cert = (
        vec![issued.certificate.der.clone(), ca.cert_der().to_vec()],
        key.pkcs8_der().to_vec(),
    );
    let mut api = client(up, cert.clone()).await.expect("connect");
    api.who_am_i(WhoAmIRequest {})
        .await
        .expect("not revoked yet");
    commands::operators::revoke_operator(
        &store,
        &clock,
        &issued.certificate.serial.to_hex(),
        "left the team",
    )
    .await
    .expect("revoke");
    let revoked_at = std::time::Instant::now();
    while !refused(up, cert.clone()).await {
        assert!(
            revoked_at.elapsed() < Duration::from_millis(2500),
            "a revoked operator certificate still gets through after {:?}",
            revoked_at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let took = revoked_at.elapsed();
    assert!(
        took < Duration::from_millis(1500),
        "refused only after {took:?}"
    );
    // The connection opened before the revocation ends at its next call too.
    let open = api
        .who_am_i(WhoAmIRequest {})
        .await
        .expect_err("a revoked operator's open connection");
    assert_eq!(open.code(), tonic::Code::Unauthenticated, "{open:?}");
    assert_eq!(
        open.message(),
        format!(
            "the operator certificate of spiffe://{}/operator/dave is revoked (serial {})",
            keys.trust_domain,
            issued.certificate.serial.to_hex()
        )
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_admin_api_of_bcctl_up_on_sqlite() {
    let _ = crate::support::bcd_bin();
    let up = up(None, "[admin]\nmax_request_bytes = 8192\n");
    let keys = up.keys();
    let td = keys.trust_domain.to_string();

    let auditor = operator(&keys, "carol", OperatorRole::Auditor);
    let mut api = client(&up, auditor).await.expect("connect");
    let me = api
        .who_am_i(WhoAmIRequest {})
        .await
        .expect("WhoAmI")
        .into_inner();
    assert_eq!(me.spiffe_id, format!("spiffe://{td}/operator/carol"));
    assert_eq!(me.role, "auditor");
    assert!(
        me.verbs.contains(&"events list".to_string()),
        "{:?}",
        me.verbs
    );
    assert!(!me.verbs.contains(&"token create".to_string()));

    let denied = api
        .run(argv(&["token", "create"]))
        .await
        .expect_err("an auditor creates no token");
    assert_eq!(denied.code(), tonic::Code::PermissionDenied);
    assert_eq!(
        denied.message(),
        format!("permission denied: token create needs the operator role; spiffe://{td}/operator/carol is auditor")
    );

    let named = api
        .run(argv(&[
            "events",
            "list",
            "--database-url",
            "sqlite:///tmp/other.db",
        ]))
        .await
        .expect_err("a call naming a deployment");
    assert_eq!(named.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        named.message(),
        "--database-url names a deployment: an admin API call runs against the server's own deployment; leave it out"
    );

    let over = api
        .run(RunRequest {
            argv: vec!["events".into(), "list".into()],
            inputs: vec![InputFile {
                path: "payload".into(),
                contents: vec![7; 10_000],
            }],
        })
        .await
        .expect_err("over max_request_bytes");
    assert_eq!(over.code(), tonic::Code::OutOfRange);
    assert!(
        over.message().contains("the limit is: 8192 bytes"),
        "{}",
        over.message()
    );

    let ops = operator(&keys, "olga", OperatorRole::Operator);
    let mut ops = client(&up, ops).await.expect("connect");
    same_token_list(&up, &mut ops).await;

    revoked_within_a_second(&up, &keys).await;

    let node = joined_node(&up);
    assert!(
        refused(&up, node).await,
        "a node certificate must not get past the admin listener's handshake"
    );
    drop(up.proc);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_admin_api_of_bcctl_up_on_postgres() {
    let db = TestDb::postgres().await.expect("a Postgres database");
    let up = up(Some(db.url()), "");
    let keys = up.keys();
    let admin = operator(&keys, "ada", OperatorRole::Admin);
    let mut api = client(&up, admin).await.expect("connect");
    let me = api
        .who_am_i(WhoAmIRequest {})
        .await
        .expect("WhoAmI")
        .into_inner();
    assert_eq!(me.role, "admin");
    same_token_list(&up, &mut api).await;
    revoked_within_a_second(&up, &keys).await;
    profile_from_the_cli(&up).await;
}

/// `bcctl pki issue-operator` writes a profile whose certificate, key and serving CA reach the
/// listener; `bcctl operator revoke` then shuts it out.
async fn profile_from_the_cli(up: &Up) {
    let out = up.deployment.parent().expect("dir").join("erin");
    let issued = up.direct(&[
        "pki",
        "issue-operator",
        "--name",
        "erin",
        "--role",
        "approver",
        "--out",
        out.to_str().expect("path"),
        "--json",
    ]);
    assert!(issued.status.success(), "{issued:?}");
    let issued: serde_json::Value = serde_json::from_slice(&issued.stdout).expect("JSON");
    let pem = std::fs::read_to_string(out.join("operator.pem")).expect("operator.pem");
    let key = std::fs::read_to_string(out.join("operator.key")).expect("operator.key");
    let ca = std::fs::read_to_string(out.join("serving-ca.pem")).expect("serving-ca.pem");
    assert_eq!(
        pem_blocks("CERTIFICATE", &ca).and_then(|c| c.into_iter().next()),
        Some(up.serving_ca.clone()),
        "the profile pins the serving CA the listener presents"
    );
    let cert = (
        pem_blocks("CERTIFICATE", &pem).expect("chain"),
        pem_blocks("PRIVATE KEY", &key)
            .and_then(|k| k.into_iter().next())
            .expect("PKCS#8"),
    );
    let mut api = client(up, cert.clone()).await.expect("connect");
    let me = api
        .who_am_i(WhoAmIRequest {})
        .await
        .expect("WhoAmI")
        .into_inner();
    assert_eq!(me.spiffe_id, issued["spiffeId"].as_str().expect("spiffeId"));
    assert_eq!(me.role, "approver");
    let serial = issued["serial"].as_str().expect("serial");
    let revoked = up.direct(&["operator", "revoke", "--serial", serial, "--reason", "gone"]);
    assert!(revoked.status.success(), "{revoked:?}");
    let at = std::time::Instant::now();
    while !refused(up, cert.clone()).await {
        assert!(
            at.elapsed() < Duration::from_millis(2500),
            "still let in after {:?}",
            at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Issue 40, item 7: one client opening raw TCP connections (no TLS, no certificate) from
/// 127.0.0.2, as many as the listener's global cap (64, as the attack did), holds only its
/// per-peer limit (8): the rest are closed at accept, and an operator from 127.0.0.1 is
/// answered while those 8 are held (they would be held until the 10 s handshake timeout).
#[tokio::test(flavor = "multi_thread")]
async fn one_address_holding_its_connection_limit_leaves_the_admin_api_to_operators() {
    use tokio::io::AsyncReadExt;
    let up = up(None, "[admin]\n");
    let keys = up.keys();
    let started = std::time::Instant::now();
    let mut held = Vec::new();
    for _ in 0..64 {
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind("127.0.0.2:0".parse().expect("address"))
            .expect("bind 127.0.0.2");
        held.push(socket.connect(up.admin).await.expect("TCP connect"));
    }
    let olga = operator(&keys, "olga", OperatorRole::Operator);
    let mut api = tokio::time::timeout(Duration::from_secs(5), client(&up, olga))
        .await
        .expect("an operator connects within 5 s")
        .expect("an operator connects while another address holds its connections");
    let me = tokio::time::timeout(Duration::from_secs(5), api.who_am_i(WhoAmIRequest {}))
        .await
        .expect("answered within 5 s")
        .expect("WhoAmI")
        .into_inner();
    assert_eq!(me.role, "operator");
    // Still inside the handshake timeout: the held connections were all still counted.
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "too slow to show anything: {:?}",
        started.elapsed()
    );
    // The first 8 are held open by the server; the other 56 were closed at accept.
    let mut open = 0;
    for conn in &mut held {
        let mut byte = [0u8; 1];
        match tokio::time::timeout(Duration::from_millis(300), conn.read(&mut byte)).await {
            Err(_) => open += 1,
            Ok(Ok(0)) | Ok(Err(_)) => {}
            Ok(Ok(n)) => panic!("the server sent {n} bytes before a ClientHello"),
        }
    }
    assert_eq!(open, 8, "connections from 127.0.0.2 the server still held");
}
