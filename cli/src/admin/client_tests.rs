//! The client against the real listener, in-process: a key set and SQLite store, an operator
//! CA made here (rcgen), profiles written to disk as `pki issue-operator` lays them out.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine;
use commands::SystemClock;
use domain::pki::{KeySet, KeySetLifetimes, TrustDomain};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, SanType,
};

use super::*;
use crate::admin::server::{start_admin, RunningAdmin};
use crate::serve::config::admin::AdminSettings;

fn pem(label: &str, der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).expect("ascii"));
        out.push('\n');
    }
    out.push_str(&format!("-----END {label}-----\n"));
    out
}

struct Fixture {
    admin: RunningAdmin,
    dir: tempfile::TempDir,
    ca_params: CertificateParams,
    ca_key: KeyPair,
    ca_der: Vec<u8>,
    serving_ca: Vec<u8>,
}

async fn fixture() -> Fixture {
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
    let store = events::store::EventStore::open(&url).await.expect("store");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.distinguished_name = DistinguishedName::new();
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "test operator CA");
    let ca_key = KeyPair::generate().expect("key");
    let ca_der = ca_params.self_signed(&ca_key).expect("ca").der().to_vec();
    let located = crate::deployment::Located {
        store_url: Some(url),
        deployment: crate::deployment::Deployment::new(bundle),
        dir: None,
        config: None,
    };
    let admin = start_admin(
        &AdminSettings::on("127.0.0.1:0".parse().expect("addr")),
        keys.clone(),
        ca_der.clone(),
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
        dir,
        ca_params,
        ca_key,
        ca_der,
        serving_ca: keys.serving_ca.cert_der().to_vec(),
    }
}

/// A profile directory for operator `name` with `role`: the four files of the contract.
fn profile_for(f: &Fixture, name: &str, role: &str) -> PathBuf {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.subject_alt_names = vec![SanType::URI(
        format!("spiffe://bc.test/operator/{name}")
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
    let issuer = Issuer::from_params(&f.ca_params, &f.ca_key);
    let leaf = params.signed_by(&key, &issuer).expect("leaf");
    let dir = f.dir.path().join(name);
    std::fs::create_dir_all(&dir).expect("mkdir");
    std::fs::write(
        dir.join("operator.pem"),
        pem("CERTIFICATE", leaf.der()) + &pem("CERTIFICATE", &f.ca_der),
    )
    .expect("write");
    let key_path = dir.join("operator.key");
    std::fs::write(&key_path, pem("PRIVATE KEY", &key.serialize_der())).expect("write");
    std::fs::set_permissions(&key_path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    std::fs::write(
        dir.join("serving-ca.pem"),
        pem("CERTIFICATE", &f.serving_ca),
    )
    .expect("write");
    let profile = dir.join("profile.toml");
    std::fs::write(
        &profile,
        format!(
            "server = \"localhost:{}\"\ncert = \"operator.pem\"\nkey = \"operator.key\"\nca = \"serving-ca.pem\"\ntrust_domain = \"bc.test\"\n",
            f.admin.addr.port()
        ),
    )
    .expect("write");
    profile
}

async fn connect(profile: &Path) -> AdminClient {
    let remote = Remote::from_args(&RemoteArgs {
        server: None,
        profile: Some(profile.to_path_buf()),
    })
    .expect("profile")
    .expect("remote");
    remote.connect().await.expect("connect")
}

#[tokio::test]
async fn calls_run_as_the_profile_and_files_come_back_to_the_caller() {
    let f = fixture().await;
    let ops = profile_for(&f, "olive", "operator");
    let mut api = connect(&ops).await;
    let me = api.who_am_i().await.expect("whoami");
    assert_eq!(me.spiffe_id, "spiffe://bc.test/operator/olive");
    assert_eq!(me.role, "operator");

    // The verb's file comes back in the reply: nothing is written by the verb itself.
    let token = f.dir.path().join("out").join("token.txt");
    let argv = [
        "token",
        "create",
        "--out",
        token.to_str().expect("utf-8"),
        "--json",
    ];
    let reply = api.run(&argv, Vec::new()).await.expect("token create");
    assert_eq!(
        reply.exit_code,
        0,
        "{}",
        String::from_utf8_lossy(&reply.stderr)
    );
    assert!(!token.exists(), "the server side wrote the caller's file");
    assert_eq!(reply.files.len(), 1);
    assert_eq!(reply.files[0].path, token.display().to_string());
    assert_eq!(reply.files[0].mode, 0o600);

    // main's branch: plan from the command line, call, write the file locally with its mode.
    let token2 = f.dir.path().join("token2.txt");
    let cmdline: Vec<std::ffi::OsString> = [
        "bcctl",
        "token",
        "create",
        "--out",
        token2.to_str().expect("utf-8"),
        "--profile",
        ops.to_str().expect("utf-8"),
    ]
    .iter()
    .map(Into::into)
    .collect();
    let matches = crate::admin::remote::command()
        .try_get_matches_from(&cmdline)
        .expect("parses");
    let plan = crate::admin::remote::plan(&cmdline, &matches)
        .map_err(|e| e.message)
        .expect("plan")
        .expect("remote");
    assert_eq!(
        plan.argv,
        ["token", "create", "--out", token2.to_str().expect("utf-8")]
    );
    assert_eq!(
        crate::admin::remote::call(plan, false).await,
        std::process::ExitCode::SUCCESS
    );
    let meta = std::fs::metadata(&token2).expect("written locally");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert!(std::fs::read_to_string(&token2).expect("read").trim().len() > 20);

    // Two tokens, listed as JSON (what a direct run prints, the server's tests compare).
    let listed = api.run_json(&["token", "list"]).await.expect("token list");
    assert_eq!(listed.as_array().map(Vec::len), Some(2), "{listed}");

    // A verb's usage error is its exit code 2, over the API as directly.
    let reply = api
        .run(
            &[
                "site",
                "boot",
                "add",
                "--site",
                "s1",
                "--mac",
                "aa:bb:cc:dd:ee:ff",
                "--kernel",
                "k",
                "--initrd",
                "i",
                "--expires-in",
                "soon",
            ],
            Vec::new(),
        )
        .await
        .expect("a reply");
    assert_eq!(
        reply.exit_code,
        2,
        "{}",
        String::from_utf8_lossy(&reply.stderr)
    );
    assert!(
        String::from_utf8_lossy(&reply.stderr).starts_with("bcctl: INVALID_INPUT: --expires-in: "),
        "{}",
        String::from_utf8_lossy(&reply.stderr)
    );
    let failed = api
        .run_json(&["token", "revoke", "tok_nope"])
        .await
        .expect_err("no such token");
    assert!(
        matches!(failed, ClientError::Failed { exit_code: 1, .. }),
        "{failed}"
    );
    f.admin.shutdown().await;
}

#[tokio::test]
async fn a_refusal_is_the_servers_message_and_exit_1() {
    let f = fixture().await;
    let auditor = profile_for(&f, "carol", "auditor");
    let mut api = connect(&auditor).await;
    let e = api
        .run(&["token", "create"], Vec::new())
        .await
        .expect_err("denied");
    assert!(
        matches!(
            &e,
            ClientError::Status {
                code: tonic::Code::PermissionDenied,
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "permission denied: token create needs the operator role; spiffe://bc.test/operator/carol is auditor"
    );
    assert_eq!(crate::admin::remote::failure(e).code, 1);

    // A profile whose serving CA is another deployment's: the handshake is refused.
    let other = rcgen::generate_simple_self_signed(vec!["localhost".into()]).expect("cert");
    std::fs::write(auditor.with_file_name("serving-ca.pem"), other.cert.pem()).expect("write");
    let remote = Remote::from_args(&RemoteArgs {
        server: None,
        profile: Some(auditor.clone()),
    })
    .expect("profile")
    .expect("remote");
    let e = remote.connect().await.err().expect("TLS refused");
    assert!(matches!(e, ClientError::Tls { .. }), "{e:?}");
    assert!(
        e.to_string().starts_with(&format!(
            "admin API localhost:{}: TLS: ",
            f.admin.addr.port()
        )),
        "{e}"
    );
    f.admin.shutdown().await;
}
