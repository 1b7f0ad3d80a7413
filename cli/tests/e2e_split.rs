//! The split deployment end to end with the real binaries on Postgres: `bcctl serve --role api`
//! (JoinService, signing keys, audit) and `bcctl serve --role gateway` (no signing key) joined
//! by internal mTLS; a `bcd` joins through the gateway, holds a session, stores the Welcome's
//! signed trust bundle, renews, is revoked and exits 1. The node CA's revocation list is signed
//! by the api (`ApiService.RevocationList`), served by the gateway (`[crl] listen`) and pushed to
//! bcd (`crl.pem`); after the revocation the gateway's list refuses the node's certificate under
//! `openssl verify -crl_check`, its number above the copy bcd held.
//!
//! The gateway is given a PKI bundle whose sealed private keys are destroyed, with the real
//! deployment secret in its environment: it starts and serves, while `--role all` and
//! `--role api` refuse that same file, so the gateway cannot be opening the keys. The api's
//! internal endpoint refuses TLS clients without a gateway's internal certificate (none, and a
//! node's own certificate).
//!
//! Run: `cargo test -p cli --test suite e2e_split::` (Postgres at `DATABASE_URL`, default
//! `postgres://postgres@127.0.0.1:5432/postgres`; the test makes its own database). Leaves live
//! 10 s, so the node renews every 6 s.

use crate::support;

use support::{bcctl_bin, bcd_bin, jwk, wait_for, Proc};

use std::fs;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use domain::pki::statement::{verify, TrustBundleStatement};
use domain::pki::{open_bundle, Signature};
use events::store::testkit::TestDb;
use prost::Message;

const SECRET: &str = "e2e-split-deployment-secret-0123456789abcdef";
const TD: &str = "split.test";
const REVOKED: &str = "agent: this node's certificate was revoked";

/// A bcctl command with a clean environment for the settings these tests use.
fn bcctl(args: &[&str]) -> Command {
    let mut cmd = Command::new(bcctl_bin());
    cmd.args(args);
    for var in [
        "BC_DEPLOYMENT_SECRET",
        "BC_DEPLOYMENT_SECRET_FILE",
        "DATABASE_URL",
        "BC_PKI_BUNDLE",
        "BC_ROLE",
        "BC_LISTEN",
        "BC_API_INTERNAL_LISTEN",
        "BC_API_INTERNAL_URL",
        "BC_INTERNAL_CERT",
        "BC_INTERNAL_KEY",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("BC_METRICS_LISTEN", "off");
    cmd
}

fn ok(mut cmd: Command) -> String {
    let out = cmd.stdin(Stdio::null()).output().expect("run bcctl");
    assert!(
        out.status.success(),
        "{cmd:?}: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A copy of the bundle whose sealed private keys are destroyed (same length, all zero bytes):
/// its public half reads, its keys never open, whatever the secret.
fn destroy_private_keys(bundle: &Path, out: &Path) {
    let mut doc: serde_json::Value =
        serde_json::from_slice(&fs::read(bundle).expect("bundle")).expect("bundle JSON");
    let ct = doc["privateKeys"]["ciphertext"]
        .as_str()
        .expect("a sealed bundle")
        .to_owned();
    let len = STANDARD.decode(ct).expect("base64").len();
    doc["privateKeys"]["ciphertext"] = STANDARD.encode(vec![0u8; len]).into();
    fs::write(out, serde_json::to_vec_pretty(&doc).expect("json")).expect("write");
    let loaded = open_bundle(&fs::read(out).expect("read"), None).expect("public half reads");
    assert!(loaded.keys.is_none());
}

/// A TLS 1.3 client handshake with the api's internal endpoint presenting `identity` (or
/// nothing), then one read: `Err` when the server refused us.
fn internal_probe(
    addr: &str,
    serving_ca_der: &[u8],
    identity: Option<(Vec<Vec<u8>>, Vec<u8>)>,
) -> Result<(), String> {
    use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(serving_ca_der.to_vec()))
        .map_err(|e| e.to_string())?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let mut config = match identity {
        Some((chain, key)) => builder
            .with_client_auth_cert(
                chain.into_iter().map(CertificateDer::from).collect(),
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key)),
            )
            .map_err(|e| e.to_string())?,
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
    let mut conn =
        rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
    let mut tcp = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let mut tls = rustls::Stream::new(&mut conn, &mut tcp);
    // The HTTP/2 preface; the server answers with SETTINGS only past a good client certificate.
    tls.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .map_err(|e| e.to_string())?;
    tls.flush().map_err(|e| e.to_string())?;
    let mut buf = [0u8; 64];
    match tls.read(&mut buf) {
        Ok(0) => Err("closed".into()),
        Ok(_) => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

fn pem_blocks(text: &str) -> Vec<Vec<u8>> {
    text.split("-----BEGIN ")
        .skip(1)
        .map(|b| {
            let body: String = b
                .lines()
                .skip(1)
                .take_while(|l| !l.starts_with("-----END"))
                .collect();
            STANDARD.decode(body).expect("PEM body")
        })
        .collect()
}

fn identity_json(data: &Path) -> serde_json::Value {
    serde_json::from_str(&fs::read_to_string(data.join("identity.json")).unwrap_or_default())
        .unwrap_or_default()
}

fn scenario(db_url: &str) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let t = tmp.path();
    let bcd = bcd_bin();
    let pki = t.join("pki.json");
    let pki_s = pki.display().to_string();
    let mut init = bcctl(&["pki", "init", "--trust-domain", TD, "--out", &pki_s]);
    init.env("BC_DEPLOYMENT_SECRET", SECRET);
    ok(init);
    let public = open_bundle(&fs::read(&pki).expect("pki"), None)
        .expect("bundle")
        .public;

    // The gateway's files: its internal certificate and a bundle without usable keys.
    let gw = t.join("gateway");
    let (cert, key) = (gw.join("internal.crt"), gw.join("internal.key"));
    let mut issue = bcctl(&[
        "pki",
        "issue-internal",
        "--pki",
        &pki_s,
        "--name",
        "gateway-1",
        // The names the gateway serves under (its default serving_names): the api issues its
        // serving certificates for these only.
        "--serving-name",
        "localhost",
        "--serving-name",
        "127.0.0.1",
    ]);
    issue
        .arg("--cert-out")
        .arg(&cert)
        .arg("--key-out")
        .arg(&key)
        .env("BC_DEPLOYMENT_SECRET", SECRET);
    ok(issue);
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(&key).expect("key").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    let public_only = gw.join("pki-public.json");
    destroy_private_keys(&pki, &public_only);

    // That file cannot serve a role that needs the keys, even with the right secret.
    for role in ["all", "api"] {
        let mut cmd = bcctl(&["serve", "--role", role]);
        cmd.arg("--pki-bundle")
            .arg(&public_only)
            .env("BC_DEPLOYMENT_SECRET", SECRET)
            .env("DATABASE_URL", db_url)
            .env("BC_LISTEN", "127.0.0.1:0")
            .env("BC_API_INTERNAL_LISTEN", "127.0.0.1:0")
            .env("BC_API_HEALTH_LISTEN", "127.0.0.1:0");
        let out = cmd.stdin(Stdio::null()).output().expect("bcctl serve");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "--role {role}: {stderr}");
        assert!(
            stderr.contains("pki-public.json"),
            "--role {role}: {stderr}"
        );
    }
    // A gateway without its settings names what is missing.
    let mut cmd = bcctl(&["serve", "--role", "gateway"]);
    cmd.arg("--pki-bundle")
        .arg(&public_only)
        .env("DATABASE_URL", db_url);
    let out = cmd.stdin(Stdio::null()).output().expect("bcctl serve");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("needs api_internal_url") && stderr.contains("BC_API_INTERNAL_URL"),
        "{stderr}"
    );

    // The api.
    let mut cmd = bcctl(&["serve", "--role", "api"]);
    cmd.env("BC_DEPLOYMENT_SECRET", SECRET)
        .env("DATABASE_URL", db_url)
        .env("BC_PKI_BUNDLE", &pki)
        .env("BC_API_INTERNAL_LISTEN", "127.0.0.1:0")
        .env("BC_API_HEALTH_LISTEN", "127.0.0.1:0")
        .env("BC_LEAF_LIFETIME", "10s");
    let mut api = Proc::spawn("bcctl serve --role api", cmd, t.join("api.log"));
    let api_addr = api
        .wait_line("internal endpoint on ", Duration::from_secs(60))
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned();
    let api_port = api_addr.rsplit(':').next().unwrap_or_default().to_owned();

    // The gateway: the destroyed bundle, the real secret in its environment.
    let crl_port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut cmd = bcctl(&["serve", "--role", "gateway"]);
    cmd.env("BC_CRL_LISTEN", format!("127.0.0.1:{crl_port}"))
        .env("BC_DEPLOYMENT_SECRET", SECRET)
        .env("DATABASE_URL", db_url)
        .env("BC_PKI_BUNDLE", &public_only)
        .env("BC_LISTEN", "127.0.0.1:0")
        .env("BC_API_INTERNAL_URL", format!("localhost:{api_port}"))
        .env("BC_INTERNAL_CERT", &cert)
        .env("BC_INTERNAL_KEY", &key);
    let mut gateway = Proc::spawn("bcctl serve --role gateway", cmd, t.join("gateway.log"));
    let gw_addr = gateway
        .wait_line("listening on ", Duration::from_secs(60))
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned();
    let logs = |extra: &[&Proc]| {
        let mut s = format!(
            "--- api:\n{}\n--- gateway:\n{}\n",
            api.log_text(),
            gateway.log_text()
        );
        for p in extra {
            s.push_str(&format!("--- {}:\n{}\n", p.name, p.log_text()));
        }
        s
    };

    // The internal endpoint: the gateway's certificate passes, no certificate does not.
    let internal = (
        pem_blocks(&fs::read_to_string(&cert).expect("cert")),
        pem_blocks(&fs::read_to_string(&key).expect("key"))
            .pop()
            .expect("key block"),
    );
    let local_api = format!("127.0.0.1:{api_port}");
    assert_eq!(
        internal_probe(&local_api, &public.serving_ca_der, Some(internal.clone())),
        Ok(())
    );
    let refused = internal_probe(&local_api, &public.serving_ca_der, None);
    assert!(refused.is_err(), "a client without a certificate got in");

    // A machine joins through the gateway.
    let mut token_cmd = bcctl(&[
        "token", "create", "--tenant", "default", "--site", "site-1", "--json",
    ]);
    token_cmd
        .arg("--database-url")
        .arg(db_url)
        .arg("--pki")
        .arg(&pki)
        .env("BC_DEPLOYMENT_SECRET", SECRET);
    let v: serde_json::Value = serde_json::from_str(ok(token_cmd).trim()).expect("token json");
    let token = v["secret"]
        .as_str()
        .or_else(|| v["token"].as_str())
        .expect("token secret")
        .to_owned();
    let pins = public.pins().expect("pins");
    let conf = t.join("bcd");
    fs::create_dir_all(&conf).expect("mkdir");
    let data = t.join("node-data");
    fs::write(
        conf.join("config.toml"),
        format!(
            "server = \"{gw_addr}\"\ndata_dir = \"{}\"\nserving_ca_spki_pin = \"{}\"\n\
             join_encryption_key_pin = \"{}\"\njoin_signing_key_pin = \"{}\"\n",
            data.display(),
            pins.serving_ca,
            pins.join_encryption,
            pins.join_signing
        ),
    )
    .expect("config");
    fs::write(
        conf.join("join-encryption.jwk"),
        jwk(&public.join_encryption),
    )
    .expect("jwk");
    fs::write(conf.join("join-signing.jwk"), jwk(&public.join_signing)).expect("jwk");
    let bcd_cmd = |args: &[&str]| {
        let mut c = Command::new(&bcd);
        c.arg("--config")
            .arg(conf.join("config.toml"))
            .args(args)
            .env_remove("BCD_JOIN_TOKEN")
            .env_remove("BCD_SERVER")
            .env_remove("BCD_DATA_DIR")
            .env_remove("BCD_CONFIG");
        c
    };
    let out = bcd_cmd(&["join"])
        .env("BCD_JOIN_TOKEN", &token)
        .stdin(Stdio::null())
        .output()
        .expect("bcd join");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        logs(&[])
    );
    let node_id = stdout
        .lines()
        .find_map(|l| l.strip_prefix("joined as "))
        .and_then(|r| r.split_whitespace().next())
        .unwrap_or_else(|| panic!("no `joined as` in {stdout}"))
        .to_owned();

    // A node's own certificate does not open the internal endpoint either.
    let stored = identity_json(&data);
    let node_chain: Vec<Vec<u8>> = stored["chain"]
        .as_array()
        .expect("chain")
        .iter()
        .map(|c| {
            STANDARD
                .decode(c.as_str().unwrap_or_default())
                .expect("b64")
        })
        .collect();
    let node_key = pem_blocks(&fs::read_to_string(data.join("node.key")).expect("node.key"))
        .pop()
        .expect("node key");
    assert!(
        internal_probe(
            &local_api,
            &public.serving_ca_der,
            Some((node_chain, node_key))
        )
        .is_err(),
        "a node certificate opened the internal endpoint"
    );

    // The session; the trust bundle came with the JoinResponse (through the relay), was
    // verified and stored at join, and the Welcome's is the same version; renewals through the
    // relay.
    let mut node = Proc::spawn("bcd node", bcd_cmd(&["node"]), t.join("bcd-node.log"));
    wait_for(
        "the session (trust version 1)",
        Duration::from_secs(30),
        || {
            let log = node.log_text();
            log.contains("session open as") && log.contains("trust version 1)")
        },
        || logs(&[&node]),
    );
    let stored = identity_json(&data);
    assert_eq!(stored["trustVersion"], 1, "{stored}");
    let signed = STANDARD
        .decode(
            stored["signedTrustBundle"]
                .as_str()
                .expect("signedTrustBundle"),
        )
        .expect("b64");
    let signed = proto::SignedTrustBundle::decode(signed.as_slice()).expect("SignedTrustBundle");
    verify(
        &public.join_signing,
        &TrustBundleStatement {
            trust_domain: TD,
            bundle: &signed.bundle,
        },
        &Signature::from_bytes(&signed.signature).expect("signature"),
    )
    .expect("the stored bundle verifies under the join signing key");
    let bundle = proto::TrustBundle::decode(signed.bundle.as_slice()).expect("TrustBundle");
    assert_eq!((bundle.version, bundle.trust_domain.as_str()), (1, TD));
    let roots = stored["trustRoots"].as_array().expect("trustRoots");
    assert_eq!(roots.len(), 1, "the command-signing root: {stored}");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(data.join("identity.json"))
            .expect("identity.json")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
    }
    wait_for(
        "two renewals",
        Duration::from_secs(60),
        || node.log_text().matches("renewed: certificate").count() >= 2,
        || logs(&[&node]),
    );

    // bcd holds the list the api signed and the gateway pushed.
    let held = data.join("crl.pem");
    wait_for(
        "crl.pem",
        Duration::from_secs(30),
        || held.exists(),
        || logs(&[&node]),
    );
    let crl_number = |args: &[&str]| -> u128 {
        let out = Command::new("openssl")
            .args(args)
            .output()
            .expect("openssl");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let hex = text.trim().strip_prefix("crlNumber=0x").unwrap_or_default();
        u128::from_str_radix(hex, 16).unwrap_or_else(|_| panic!("openssl crl: {text}"))
    };
    let held_s = held.display().to_string();
    let before = crl_number(&["crl", "-noout", "-crlnumber", "-in", &held_s]);

    // Revoked: the gateway's feed cuts the session and bcd node exits 1.
    let mut revoke = bcctl(&["node", "revoke", &node_id, "--reason", "e2e split"]);
    revoke
        .arg("--database-url")
        .arg(db_url)
        .arg("--pki")
        .arg(&pki)
        .env("BC_DEPLOYMENT_SECRET", SECRET);
    ok(revoke);
    let status = node.wait_exit(Duration::from_secs(15));
    let text = node.log_text();
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(text.contains("certificate revoked"), "{text}");
    assert!(text.trim_end().ends_with(REVOKED), "{text}");

    // The gateway's list (signed by the api) now refuses the node's certificate.
    let fetched = t.join("gateway.crl");
    let fetched_s = fetched.display().to_string();
    let url = format!("http://127.0.0.1:{crl_port}/node-ca.crl");
    let revoked_by_list = || {
        let got = Command::new("curl")
            .args(["-sf", "-o", &fetched_s, &url])
            .status();
        let pem = t.join("gateway-crl.pem").display().to_string();
        let ca = data.join("bundle.pem").display().to_string();
        let cert = data.join("cert.pem").display().to_string();
        got.is_ok_and(|s| s.success())
            && Command::new("openssl")
                .args(["crl", "-inform", "DER", "-in", &fetched_s, "-out", &pem])
                .status()
                .is_ok_and(|s| s.success())
            && Command::new("openssl")
                .args(["verify", "-partial_chain", "-crl_check", "-CRLfile", &pem])
                .args(["-CAfile", &ca, &cert])
                .output()
                .is_ok_and(|o| {
                    String::from_utf8_lossy(&o.stdout).contains("certificate revoked")
                        || String::from_utf8_lossy(&o.stderr).contains("certificate revoked")
                })
    };
    wait_for(
        "the revoked certificate on the gateway's list",
        Duration::from_secs(30),
        revoked_by_list,
        || logs(&[]),
    );
    let after = crl_number(&[
        "crl",
        "-inform",
        "DER",
        "-noout",
        "-crlnumber",
        "-in",
        &fetched_s,
    ]);
    assert!(after > before, "{before} then {after}");

    // The gateway never held a key, yet Welcome bundles were signed: by the api.
    let context = logs(&[]);
    let gateway_alive = gateway.child.try_wait().ok().flatten().is_none();
    let api_alive = api.child.try_wait().ok().flatten().is_none();
    assert!(gateway_alive && api_alive, "{context}");
}

#[tokio::test(flavor = "multi_thread")]
async fn split_roles_on_postgres() {
    let db = TestDb::postgres().await.expect("postgres test db");
    let url = db.url().to_owned();
    tokio::task::spawn_blocking(move || scenario(&url))
        .await
        .expect("scenario");
    drop(db);
}
