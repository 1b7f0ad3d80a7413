//! The listener in-process: a key set, a SQLite store, an operator CA made here (rcgen), and a
//! tonic client over rustls presenting certificates of it (or of another CA).

use std::sync::Arc;

use commands::SystemClock;
use domain::pki::{KeySet, KeySetLifetimes, TrustDomain};
use proto::admin::admin_service_client::AdminServiceClient;
use proto::admin::{RunRequest, WhoAmIRequest};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use tonic::transport::{Channel, Endpoint};

use super::*;

struct Ca {
    params: CertificateParams,
    key: KeyPair,
    der: Vec<u8>,
}

fn ca(name: &str) -> Ca {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    let key = KeyPair::generate().expect("key");
    let der = params.self_signed(&key).expect("ca").der().to_vec();
    Ca { params, key, der }
}

/// An operator leaf of `ca`: (chain DER, PKCS#8 key).
fn operator(ca: &Ca, td: &str, name: &str, role: &str) -> (Vec<Vec<u8>>, Vec<u8>) {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.subject_alt_names = vec![SanType::URI(
        format!("spiffe://{td}/operator/{name}")
            .try_into()
            .expect("uri"),
    )];
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    params
        .distinguished_name
        .push(DnType::OrganizationalUnitName, format!("bc-role:{role}"));
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().expect("key");
    let issuer = Issuer::from_params(&ca.params, &ca.key);
    let leaf = params.signed_by(&key, &issuer).expect("leaf");
    (
        vec![leaf.der().to_vec(), ca.der.clone()],
        key.serialize_der(),
    )
}

struct Fixture {
    admin: RunningAdmin,
    serving_ca: Vec<u8>,
    ca: Ca,
    _dir: tempfile::TempDir,
}

async fn fixture(limits: impl FnOnce(&mut AdminSettings)) -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let td = TrustDomain::new("bc.test").expect("td");
    let keys = Arc::new(
        KeySet::generate(
            td,
            time::OffsetDateTime::now_utc(),
            KeySetLifetimes::default(),
        )
        .expect("keys"),
    );
    let bundle = dir.path().join("pki.json");
    std::fs::write(
        &bundle,
        domain::pki::plaintext_bundle(&keys).expect("bundle"),
    )
    .expect("write");
    let url = format!("sqlite://{}", dir.path().join("events.db").display());
    let store = EventStore::open(&url).await.expect("store");
    let ca = ca("test operator CA");
    let mut settings = AdminSettings::on("127.0.0.1:0".parse().expect("addr"));
    limits(&mut settings);
    let located = Located {
        store_url: Some(url),
        deployment: crate::deployment::Deployment::new(dir.path().join("pki.json")),
        dir: None,
        config: None,
    };
    let admin = start_admin(
        &settings,
        keys.clone(),
        ca.der.clone(),
        store,
        Arc::new(SystemClock),
        located,
        time::Duration::days(1),
        None,
    )
    .await
    .expect("admin listener");
    Fixture {
        admin,
        serving_ca: keys.serving_ca.cert_der().to_vec(),
        ca,
        _dir: dir,
    }
}

async fn client(
    f: &Fixture,
    (chain, key): (Vec<Vec<u8>>, Vec<u8>),
) -> Result<AdminServiceClient<Channel>, tonic::transport::Error> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(f.serving_ca.clone()))
        .expect("serving CA");
    let mut config = rustls::ClientConfig::builder_with_provider(gateway::tls::provider())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .with_root_certificates(roots)
        .with_client_auth_cert(
            chain.into_iter().map(CertificateDer::from).collect(),
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)),
        )
        .expect("client cert");
    config.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let addr = f.admin.addr;
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

#[tokio::test]
async fn the_listener_answers_an_auditor_and_checks_roles_flags_and_limits() {
    let f = fixture(|s| s.max_request_bytes = 8 * 1024).await;
    let auditor = operator(&f.ca, "bc.test", "carol", "auditor");
    let mut api = client(&f, auditor).await.expect("connect");

    let me = api
        .who_am_i(WhoAmIRequest {})
        .await
        .expect("whoami")
        .into_inner();
    assert_eq!(me.spiffe_id, "spiffe://bc.test/operator/carol");
    assert_eq!(me.role, "auditor");
    assert_eq!(
        me.verbs,
        [
            "status",
            "audit export",
            "audit prove",
            "ssh ca",
            "ssh list",
            "ssh krl",
            "bundle show",
            "events list",
            "events show",
            "tenant list",
            "tenant show",
            "oidc keys list",
            "oidc discovery"
        ]
    );

    let denied = api
        .run(argv(&["token", "create"]))
        .await
        .expect_err("denied");
    assert_eq!(denied.code(), tonic::Code::PermissionDenied);
    assert_eq!(
        denied.message(),
        "permission denied: token create needs the operator role; spiffe://bc.test/operator/carol is auditor"
    );
    let local = api.run(argv(&["serve"])).await.expect_err("never remote");
    assert_eq!(local.code(), tonic::Code::PermissionDenied);
    assert_eq!(
        f.admin
            .counters
            .denied_count("token create", domain::operator::OperatorRole::Auditor),
        1
    );
    assert_eq!(f.admin.counters.denied_total(), 2);

    let flag = api
        .run(argv(&[
            "events",
            "list",
            "--database-url",
            "sqlite:///tmp/x.db",
        ]))
        .await
        .expect_err("deployment flag");
    assert_eq!(flag.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        flag.message(),
        "--database-url names a deployment: an admin API call runs against the server's own deployment; leave it out"
    );
    let bad = api
        .run(argv(&["events", "list", "--no-such-flag"]))
        .await
        .expect_err("parse");
    assert_eq!(bad.code(), tonic::Code::InvalidArgument);
    assert_eq!(bad.message(), "unexpected argument '--no-such-flag' found");

    let listed = api
        .run(argv(&["events", "list", "--json"]))
        .await
        .expect("events list")
        .into_inner();
    assert_eq!(
        listed.exit_code,
        0,
        "stderr: {}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&listed.stdout).expect("json");
    assert!(json.is_object() || json.is_array(), "{json}");

    let big = RunRequest {
        argv: vec!["events".into(), "list".into()],
        inputs: vec![proto::admin::InputFile {
            path: "big".into(),
            contents: vec![0; 16 * 1024],
        }],
    };
    let over = api.run(big).await.expect_err("over max_request_bytes");
    assert_eq!(over.code(), tonic::Code::OutOfRange, "{over:?}");
    assert_eq!(
        over.message(),
        "Error, decoded message length too large: found 16411 bytes, the limit is: 8192 bytes"
    );

    let stranger = ca("another CA");
    let other = operator(&stranger, "bc.test", "mallory", "admin");
    let refused = match client(&f, other).await {
        Err(_) => true,
        Ok(mut api) => api.who_am_i(WhoAmIRequest {}).await.is_err(),
    };
    assert!(
        refused,
        "a certificate of another CA must not get a call through"
    );
    f.admin.shutdown().await;
}

#[tokio::test]
async fn an_operators_calls_write_return_files_help_and_failures_as_replies() {
    let f = fixture(|s| s.max_request_bytes = 8 * 1024).await;
    let ops = operator(&f.ca, "bc.test", "olga", "operator");
    let mut ops = client(&f, ops).await.expect("connect");
    let made = ops
        .run(argv(&["token", "create", "--json"]))
        .await
        .expect("token create")
        .into_inner();
    assert_eq!(
        made.exit_code,
        0,
        "stderr: {}",
        String::from_utf8_lossy(&made.stderr)
    );
    let tokens = ops
        .run(argv(&["token", "list", "--json"]))
        .await
        .expect("token list")
        .into_inner();
    let tokens: serde_json::Value = serde_json::from_slice(&tokens.stdout).expect("json");
    assert_eq!(tokens.as_array().map(Vec::len), Some(1), "{tokens}");
    let busy_before = f
        .admin
        .counters
        .busy
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(busy_before, 0);
    let written = ops
        .run(argv(&["token", "create", "--out", "second-token"]))
        .await
        .expect("token create --out")
        .into_inner();
    assert_eq!(
        written.exit_code,
        0,
        "stderr: {}",
        String::from_utf8_lossy(&written.stderr)
    );
    assert_eq!(written.files.len(), 1);
    assert_eq!(written.files[0].path, "second-token");
    assert_eq!(written.files[0].mode, 0o600);
    assert!(
        !std::path::Path::new("second-token").exists(),
        "never written on the server"
    );
    let help = ops
        .run(argv(&["token", "--help"]))
        .await
        .expect("help")
        .into_inner();
    assert_eq!(help.exit_code, 0);
    assert!(String::from_utf8_lossy(&help.stdout).contains("create"));
    let failed = ops
        .run(argv(&["token", "revoke", "tok_nope"]))
        .await
        .expect("a verb that fails is a reply")
        .into_inner();
    assert_ne!(failed.exit_code, 0);
    assert!(String::from_utf8_lossy(&failed.stderr).starts_with("bcctl: "));

    f.admin.shutdown().await;
}
