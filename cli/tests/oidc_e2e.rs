//! End to end with the real binaries, on SQLite and on Postgres: workload identity's OIDC
//! issuer (issue 43 items 1 and 2; `docs/WORKLOAD-IDENTITY.md`, decision 0096) checked by an
//! outside relying party, PyJWT (`oidc_e2e/verify.py`, in the venv of
//! `spiffe_bundle_e2e/requirements.txt`, which pins PyJWT and `cryptography`).
//!
//! `bcctl up` serves with `[oidc]` (issuer `https://127.0.0.1:PORT/wl`, its own listener);
//! `bcctl oidc keys add` and `promote` make key A sign. The relying party reads the discovery
//! document over HTTPS, trusting only the deployment's root (`SSL_CERT_FILE`), checks its
//! headers (cached 5 minutes, any origin, HEAD without a body), and verifies with `PyJWKClient`
//! tokens this test mints with the promoted key through `commands::oidc::OidcIssuer` (the
//! commands-level minting; no node asks over its session yet): issuer, audience, expiry,
//! signature. A token for another audience is refused (`InvalidAudienceError`), and a token
//! after its expiry (`ExpiredSignatureError`).
//!
//! Then a rotation with tokens minted and verified continuously: `keys add` B (A still signs),
//! the relying party's JWK Set cache waited out (see [`VERIFIER_CACHE`]), `keys promote` B,
//! `keys retire` A refused while a token of A could be valid (the reason checked), tokens
//! verified until every token A signed has expired (see [`MINTED_AGO`]); then A is retired on a clock 16 minutes ahead (the retire window
//! of the longest token, which this test does not wait out in real time), and B's tokens still
//! verify with A gone from the JWK Set. Zero failed verifications throughout.
//! Set `BC_SKIP_PYTHON=1` to skip on a machine without python3 or PyPI.
//!
//! Run: `cargo test -p cli --test suite oidc_e2e::` (Postgres at `DATABASE_URL`).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use commands::oidc::{OidcIssuer, OidcKeyAdmin, OidcSettings};
use commands::{SimClock, SystemClock};
use domain::oidc::{IssuerUrl, TokenRequest};
use domain::pki::{DeploymentSecret, TrustDomain};
use events::store::testkit::TestDb;
use events::store::EventStore;

use crate::x509pop_e2e::{start_server_configured, Server};

const AUDIENCE: &str = "sts.example.com";

/// How long the relying party keeps the JWK Set: PyJWKClient's default (and the documents'
/// max-age) is 5 minutes; this test's relying party keeps it 3 s, and the rotation waits that
/// out between `add` and `promote` as an operator waits out the 5 minutes. PyJWKClient's
/// refresh on an unknown key id has a 30 s cooldown after any fetch, so a promotion before the
/// relying party re-read the set fails verifications (this test failed so before the wait).
const VERIFIER_CACHE: Duration = Duration::from_secs(3);

/// How far in the past this test's tokens are minted: they live the spec's shortest lifetime
/// (60 s) from an issue time 50 s ago, so each expires 10 s after it is minted, and the rotation
/// waits 10 s, not a minute, for every token of the old key to expire. The relying party checks
/// `iat`, `nbf` and `exp` against its own clock as it would any token.
const MINTED_AGO: Duration = Duration::from_secs(50);

/// The issuer's clock: the system's, [`MINTED_AGO`] behind.
struct MintingClock;

impl commands::Clock for MintingClock {
    fn now_us(&self) -> i64 {
        commands::Clock::now_us(&SystemClock) - MINTED_AGO.as_micros() as i64
    }
}

/// The relying party: `verify.py` running, one JSON line per question.
struct Verifier {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Verifier {
    fn start(python: &Path, issuer: &str, cafile: &Path) -> (Verifier, serde_json::Value) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oidc_e2e/verify.py");
        let mut child = Command::new(python)
            .arg(script)
            .arg(issuer)
            .arg(VERIFIER_CACHE.as_secs().to_string())
            .env("SSL_CERT_FILE", cafile)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python starts");
        let stdin = child.stdin.take().expect("stdin");
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        let mut v = Verifier {
            child,
            stdin,
            stdout,
        };
        let first = v.read();
        (v, first)
    }

    fn read(&mut self) -> serde_json::Value {
        let mut line = String::new();
        self.stdout.read_line(&mut line).expect("verify.py answers");
        serde_json::from_str(line.trim()).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    }

    fn ask(&mut self, line: &str) -> serde_json::Value {
        writeln!(self.stdin, "{line}").expect("verify.py reads");
        self.read()
    }

    fn verify(&mut self, jwt: &str, audience: &str) -> serde_json::Value {
        self.ask(&format!("{jwt} {audience}"))
    }
}

impl Drop for Verifier {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port free now (the issuer URL must name the listener's port before the server starts).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

fn bundle_facts(server: &Server, tmp: &Path) -> (String, PathBuf) {
    let shown = server.bcctl_json(&["bundle", "show", "--format", "json"]);
    let td = shown["trustDomain"]
        .as_str()
        .expect("trustDomain")
        .to_owned();
    let root = shown["certificates"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["role"] == "rootCa"))
        .unwrap_or_else(|| panic!("rootCa in {shown}"));
    let cafile = tmp.join("root.pem");
    std::fs::write(&cafile, root["pem"].as_str().expect("pem")).expect("root.pem");
    (td, cafile)
}

/// What the test mints with, and manages keys with in process.
struct Minting {
    rt: tokio::runtime::Runtime,
    store: EventStore,
    issuer: OidcIssuer,
    subject: String,
}

impl Minting {
    fn mint(&self, lifetime_secs: u64) -> commands::oidc::MintedToken {
        let request = TokenRequest {
            subject: self.subject.clone(),
            audience: None,
            lifetime_secs,
            extra: Default::default(),
        };
        self.rt
            .block_on(self.issuer.mint(&request))
            .expect("minted")
    }
}

fn kid_of(out: &serde_json::Value) -> String {
    out["kid"].as_str().expect("kid").to_owned()
}

fn scenario(db_url: &str) {
    if std::env::var_os("BC_SKIP_PYTHON").is_some() {
        eprintln!("BC_SKIP_PYTHON set: skipped");
        return;
    }
    let python = crate::support::python_venv::venv(
        "spiffe-python-venv",
        "tests/spiffe_bundle_e2e/requirements.txt",
        "spiffe, jwt, cryptography",
    );
    let tmp = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let issuer = format!("https://127.0.0.1:{port}/wl");
    let config = tmp.path().join("serve.toml");
    std::fs::write(
        &config,
        format!("[oidc]\nissuer = \"{issuer}\"\ndefault_audience = \"{AUDIENCE}\"\nlisten = \"127.0.0.1:{port}\"\n"),
    )
    .expect("serve.toml");
    let mut server = start_server_configured(tmp.path(), db_url, "1h", 1, Some(&config));
    server.proc.wait_line("oidc=Some(", Duration::from_secs(30));
    let (td, cafile) = bundle_facts(&server, tmp.path());

    // A key id is base64url: one in 64 begins with '-' and must still be taken as the id (this
    // test once failed on such a key, refused by the argument parser as an unknown flag).
    let dashed_kid = "-p2VMB1jeNp0AtWjuupyAceijvsNnkZ9fz3-EIf9_Hg";
    let dashed = server.bcctl_output(&["oidc", "keys", "promote", dashed_kid]);
    assert_eq!(dashed.status.code(), Some(1));
    let why = String::from_utf8_lossy(&dashed.stderr);
    assert!(
        why.contains(&format!(
            "NOT_FOUND: no OIDC key {dashed_kid} (bcctl oidc keys list)"
        )),
        "{why}"
    );
    let a = kid_of(&server.bcctl_json(&["oidc", "keys", "add", "--json"]));
    server.bcctl(&["oidc", "keys", "promote", &a]);
    let shown = server.bcctl_json(&["oidc", "discovery", "--issuer", &issuer, "--json"]);
    assert_eq!(shown["jwks"]["keys"][0]["kid"], a.as_str(), "{shown}");

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let store = rt
        .block_on(EventStore::open(
            server.facts["databaseUrlFull"].as_str().unwrap_or_default(),
        ))
        .expect("store");
    let settings = OidcSettings {
        issuer: IssuerUrl::parse(&issuer).expect("issuer"),
        default_audience: AUDIENCE.into(),
    };
    let issuer_of = OidcIssuer::new(
        store.clone(),
        Arc::new(MintingClock),
        DeploymentSecret::new(&server.secret).expect("secret"),
        &settings,
        TrustDomain::new(&td).expect("td"),
    );
    let minting = Minting {
        rt,
        store,
        issuer: issuer_of,
        subject: format!("spiffe://{td}/site/site-1/node/n-oidc"),
    };

    let (mut rp, document) = Verifier::start(&python, &issuer, &cafile);
    assert_eq!(document["status"], 200, "{document}");
    assert_eq!(document["document"], shown["discovery"], "{document}");
    assert_eq!(document["document"]["issuer"], issuer.as_str());
    assert_eq!(
        document["cacheControl"], "public, max-age=300",
        "{document}"
    );
    assert_eq!(document["allowOrigin"], "*", "{document}");
    assert_eq!(document["headStatus"], 200, "{document}");
    assert_eq!(document["headBody"], "", "{document}");
    assert_eq!(
        (
            document["jwksHeadStatus"].clone(),
            document["jwksAllowOrigin"].clone()
        ),
        (200.into(), "*".into()),
        "{document}"
    );

    // One token: issuer, audience, expiry, signature; another audience is refused.
    let early = minting.mint(60);
    let ok = rp.verify(&early.jwt, AUDIENCE);
    assert_eq!(ok["ok"], true, "{ok}");
    assert_eq!(ok["kid"], a.as_str());
    assert_eq!(ok["claims"]["iss"], issuer.as_str());
    assert_eq!(ok["claims"]["sub"], minting.subject.as_str());
    let other = rp.verify(&early.jwt, "vault.example.com");
    assert_eq!(other["error"], "InvalidAudienceError", "{other}");

    // The rotation, tokens minted and verified all along.
    let mut verified = 0;
    let mut check = |rp: &mut Verifier, want_kid: &str| {
        let t = minting.mint(60);
        let got = rp.verify(&t.jwt, AUDIENCE);
        assert_eq!(got["ok"], true, "a verification failed mid-rotation: {got}");
        verified += 1;
        t.kid == want_kid
    };
    check(&mut rp, &a);
    let b = kid_of(&server.bcctl_json(&["oidc", "keys", "add", "--json"]));
    assert_eq!(
        rp.ask("JWKS")["kids"],
        serde_json::json!([a, b]),
        "B published at once"
    );
    // Until the relying party re-read the JWK Set (its cache), A signing all along.
    let added = Instant::now();
    while added.elapsed() < VERIFIER_CACHE + Duration::from_secs(1) {
        assert!(check(&mut rp, &a), "A signs until B is promoted");
        std::thread::sleep(Duration::from_millis(250));
    }
    server.bcctl(&["oidc", "keys", "promote", &b]);
    let promoted = Instant::now();
    while !check(&mut rp, &b) {
        assert!(
            promoted.elapsed() < Duration::from_secs(5),
            "B signs within seconds"
        );
    }
    let refused = server.bcctl_output(&["oidc", "keys", "retire", &a]);
    assert!(!refused.status.success());
    let why = String::from_utf8_lossy(&refused.stderr);
    assert!(
        why.contains(&format!("INVALID_STATE: OIDC key {a} stopped signing"))
            && why.contains("retire it in"),
        "{why}"
    );
    // Until every token of A has expired (10 s after its minting here), verifying all along.
    while promoted.elapsed() < Duration::from_secs(60) - MINTED_AGO + Duration::from_secs(3) {
        assert!(check(&mut rp, &b));
        std::thread::sleep(Duration::from_millis(500));
    }
    let expired = rp.verify(&early.jwt, AUDIENCE);
    assert_eq!(expired["error"], "ExpiredSignatureError", "{expired}");
    // Retire A on a clock past its window (the longest token's 15 minutes and a minute).
    let ahead =
        SimClock::at_us(commands::Clock::now_us(&SystemClock) + 16 * 60 * 1_000_000 + 1_000_000);
    minting
        .rt
        .block_on(OidcKeyAdmin::new(minting.store.clone(), Arc::new(ahead)).retire(&a))
        .expect("A retired");
    assert_eq!(
        rp.ask("JWKS")["kids"],
        serde_json::json!([b]),
        "A left the JWK Set"
    );
    for _ in 0..5 {
        assert!(check(&mut rp, &b));
    }
    let listed = server.bcctl_json(&["oidc", "keys", "list", "--json"]);
    let states: Vec<&str> = listed
        .as_array()
        .expect("list")
        .iter()
        .filter_map(|k| k["state"].as_str())
        .collect();
    assert_eq!(states, ["retired", "signing"], "{listed}");
    eprintln!("oidc rotation: {verified} tokens minted and verified by PyJWT through add, promote and retire, none failed");
}

#[test]
fn oidc_e2e_sqlite() {
    let db = TestDb::sqlite().expect("sqlite test db");
    scenario(db.url());
}

#[tokio::test(flavor = "multi_thread")]
async fn oidc_e2e_postgres() {
    let db = TestDb::postgres().await.expect("postgres test db");
    let url = db.url().to_owned();
    tokio::task::spawn_blocking(move || scenario(&url))
        .await
        .expect("scenario");
    drop(db);
}
