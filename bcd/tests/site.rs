//! `bcd site` (issue 20 item 3), the real binary against a fake gateway over real TLS: the boot
//! lease acquired at start, renewed, released on SIGTERM (the fake records every call); the iPXE
//! script for a registered MAC exactly, its assertion decoding to the epoch, MAC and entry and
//! verifying under the site agent's key; 404, 400 and 503 exactly; a RENEW answering
//! `held=false` and a lease lapsing with no answer both stop the vouching.

use crate::common::{identity_for, issue, keyset, now};
use crate::renewal_support::{fake_gateway_with, FakeGateway, OtherAnswers, RenewAnswer};

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration as StdDuration, Instant};

use bcd::client::certificate_spki_pin;
use bcd::files::identity::store_joined;
use bcd::files::DataDir;
use domain::attest::discovery::wire::{assertion_signed_input, SignedDiscoveryAssertion};
use domain::pki::{KeySet, NodeId, NodeRole, PrivateKey, Signature, Statement, TokenSecret};
use domain::site::{SiteCall, SiteCallStatement};
use proto::site_lease_request::Action;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::Status;

const MAC: &str = "52:54:00:12:34:56";
const UUID: &str = "4c4c4544-0042-3510-8052-b2c04f585931";

fn ms_now() -> i64 {
    bcd::node::now_ms(time::OffsetDateTime::now_utc())
}

/// How the fake answers SiteLease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaseMode {
    /// An honest lease server, this agent the only one.
    Honest,
    /// Another agent holds it at epoch 4.
    OtherHolds,
    /// ACQUIRE grants epoch 1; the first RENEW says epoch 2 is another agent's.
    LostAtFirstRenew,
    /// ACQUIRE grants epoch 1; every later call fails UNAVAILABLE.
    SilentAfterAcquire,
}

#[derive(Debug)]
struct LeaseServer {
    mode: LeaseMode,
    ttl_ms: i64,
    held: bool,
    epoch: u64,
    expires_at_ms: i64,
    calls: Vec<(Action, u64)>,
}

impl LeaseServer {
    fn answer(&mut self, req: proto::SiteLeaseRequest) -> Result<proto::SiteLeaseResponse, Status> {
        let action = Action::try_from(req.action).unwrap_or(Action::Unspecified);
        self.calls.push((action, req.epoch));
        let now = ms_now();
        let other = |epoch: u64, until: i64| proto::SiteLeaseResponse {
            held: false,
            epoch,
            expires_at_ms: until,
            holder_node_id: "site_b".into(),
            server_time_ms: now,
            renew_every_ms: 300,
        };
        match (self.mode, action) {
            (LeaseMode::OtherHolds, _) => return Ok(other(4, now + 3_000)),
            (LeaseMode::LostAtFirstRenew, Action::Renew) => {
                self.mode = LeaseMode::OtherHolds;
                self.held = false;
                return Ok(other(2, now + 3_000));
            }
            (LeaseMode::SilentAfterAcquire, _) if self.epoch > 0 => {
                return Err(Status::unavailable("the fake went quiet"))
            }
            _ => {}
        }
        let live = self.held && now < self.expires_at_ms;
        match action {
            Action::Acquire => {
                if !live {
                    self.epoch += 1;
                }
                self.held = true;
                self.expires_at_ms = now + self.ttl_ms;
            }
            Action::Renew if live && req.epoch == self.epoch => {
                self.expires_at_ms = now + self.ttl_ms
            }
            Action::Renew => self.held = false,
            Action::Release if req.epoch == self.epoch => {
                self.held = false;
                self.expires_at_ms = 0;
            }
            _ => {}
        }
        Ok(proto::SiteLeaseResponse {
            held: self.held,
            epoch: self.epoch,
            expires_at_ms: self.expires_at_ms,
            holder_node_id: if self.held {
                "site_a".into()
            } else {
                String::new()
            },
            server_time_ms: now,
            renew_every_ms: 300,
        })
    }
}

struct Site {
    _gw: FakeGateway,
    child: Child,
    listen: String,
    lease: Arc<Mutex<LeaseServer>>,
    boots: Arc<Mutex<Vec<proto::BootTokenRequest>>>,
    token: String,
    key: PrivateKey,
    leaf: Vec<u8>,
    log: PathBuf,
    _tmp: tempfile::TempDir,
}

impl Site {
    fn calls(&self) -> Vec<(Action, u64)> {
        self.lease.lock().unwrap().calls.clone()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    async fn wait_for(&self, what: &str, ok: impl Fn(&Site) -> bool) {
        let deadline = Instant::now() + StdDuration::from_secs(20);
        while !ok(self) {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; calls {:?}; log:\n{}",
                self.calls(),
                self.log()
            );
            tokio::time::sleep(StdDuration::from_millis(50)).await;
        }
    }

    /// SIGTERM, then the exit status.
    async fn stop(&mut self) -> std::process::ExitStatus {
        let pid = self.child.id() as libc::pid_t;
        // SAFETY: kill(2) on the child this test started (not yet waited for).
        unsafe { libc::kill(pid, libc::SIGTERM) };
        self.exited().await
    }

    /// The exit status, once it exits.
    async fn exited(&mut self) -> std::process::ExitStatus {
        let deadline = Instant::now() + StdDuration::from_secs(15);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "bcd site did not stop:\n{}",
                self.log()
            );
            tokio::time::sleep(StdDuration::from_millis(50)).await;
        }
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// A data directory joined as site agent `node` of site eu-1.
fn site_joined(dir: &Path, ks: &KeySet, node: &str, role: NodeRole) -> (PrivateKey, Vec<u8>) {
    let data = DataDir::new(dir);
    let key = crate::common::node_key();
    let leaf = issue(ks, &key, node, role);
    let identity = identity_for(ks, leaf.clone());
    store_joined(&data, &crate::common::as_node_key(&key), &identity, now()).unwrap();
    (key, leaf)
}

fn entry(token: &str, mac: &str) -> proto::BootTokenResponse {
    let now = ms_now();
    proto::BootTokenResponse {
        entry_id: "boot_1".into(),
        mac: mac.into(),
        product_uuid: UUID.into(),
        kernel_url: "http://boot.example/vmlinuz".into(),
        initrd_url: "http://boot.example/initrd.img".into(),
        kernel_args: "console=ttyS0".into(),
        entry_not_after_ms: now + 3_600_000,
        token: token.into(),
        token_expires_at_ms: now + 600_000,
        server_time_ms: now,
    }
}

async fn start(mode: LeaseMode, ttl_ms: i64, role: NodeRole) -> Site {
    let ks = keyset();
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let (key, leaf) = site_joined(&data, &ks, "site_a", role);
    let lease = Arc::new(Mutex::new(LeaseServer {
        mode,
        ttl_ms,
        held: false,
        epoch: 0,
        expires_at_ms: 0,
        calls: Vec::new(),
    }));
    let boots = Arc::new(Mutex::new(Vec::new()));
    let token = TokenSecret::generate().unwrap().expose().to_owned();
    let never: RenewAnswer = Arc::new(|_| Err(Status::unavailable("no renewals here")));
    let (l, b, t) = (lease.clone(), boots.clone(), token.clone());
    let other = OtherAnswers {
        lease: Some(Arc::new(move |req| l.lock().unwrap().answer(req))),
        boot: Some(Arc::new(move |req: proto::BootTokenRequest| {
            b.lock().unwrap().push(req.clone());
            if req.mac == MAC {
                Ok(entry(&t, &req.mac))
            } else {
                Err(Status::not_found("no boot entry"))
            }
        })),
        join: None,
        script: None,
        end_sessions_with: None,
        after_welcome: Vec::new(),
    };
    let gw = fake_gateway_with(&ks, never, 0, other).await;
    let pin = certificate_spki_pin(ks.serving_ca.cert_der()).unwrap();
    let cfg = tmp.path().join("config.toml");
    std::fs::write(
        &cfg,
        format!(
            "server = \"{}\"\nserving_ca_spki_pin = \"{pin}\"\n",
            gw.server()
        ),
    )
    .unwrap();
    let listen = free_port();
    let log = tmp.path().join("site.log");
    let child = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .arg("--config")
        .arg(&cfg)
        .arg("--data-dir")
        .arg(&data)
        .args(["site", "--listen", &listen])
        .env_remove("BCD_CONFIG")
        .env_remove("BCD_SERVER")
        .env_remove("BCD_DATA_DIR")
        .env_remove("BCD_TPM_TCTI")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    Site {
        _gw: gw,
        child,
        listen,
        lease,
        boots,
        token,
        key,
        leaf,
        log,
        _tmp: tmp,
    }
}

/// `GET path`: (status, content type, body).
async fn get(addr: &str, path: &str) -> (u16, String, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: boot\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head[9..12].parse().unwrap();
    let content_type = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Type: "))
        .unwrap_or_default()
        .to_owned();
    (status, content_type, body.to_owned())
}

fn held(site: &Site) -> bool {
    let s = site.lease.lock().unwrap();
    s.calls.iter().filter(|(a, _)| *a == Action::Renew).count() >= 2 && s.held
}

const NOT_HELD: &str =
    "this site agent does not hold the boot lease: it vouches for no machine now\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_is_acquired_renewed_and_released_and_the_script_carries_a_verifying_assertion() {
    let mut site = start(LeaseMode::Honest, 3_000, NodeRole::Site).await;
    site.wait_for("an ACQUIRE and two RENEWs", held).await;
    let calls = site.calls();
    assert_eq!(calls[0], (Action::Acquire, 0));
    assert!(
        calls[1..].iter().all(|c| *c == (Action::Renew, 1)),
        "{calls:?}"
    );

    let (status, ctype, body) = get(&site.listen, "/healthz").await;
    assert_eq!((status, ctype.as_str()), (200, "application/json"));
    let health: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(health["held"], true);
    assert_eq!(health["epoch"], 1);
    assert!(health["expiresAt"].is_string(), "{health}");

    let before = ms_now();
    let (status, ctype, script) = get(
        &site.listen,
        &format!("/boot.ipxe?mac=52-54-00-12-34-56&uuid={UUID}"),
    )
    .await;
    let after = ms_now();
    assert_eq!(
        (status, ctype.as_str()),
        (200, "text/plain; charset=utf-8"),
        "{script}"
    );
    let prefix = format!(
        "#!ipxe\nkernel http://boot.example/vmlinuz console=ttyS0 bc.token={} bc.assertion=",
        site.token
    );
    let rest = script
        .strip_prefix(&prefix)
        .unwrap_or_else(|| panic!("{script}"));
    let (b64, tail) = rest.split_once('\n').unwrap();
    assert_eq!(tail, "initrd http://boot.example/initrd.img\nboot\n");
    assert_eq!(script, format!("{prefix}{b64}\n{tail}"));

    let signed = SignedDiscoveryAssertion::from_cmdline(b64).unwrap();
    let assertion = signed.decode_assertion().unwrap();
    assert_eq!(assertion.site_id, "eu-1");
    assert_eq!(assertion.signer_node_id, "site_a");
    assert_eq!(assertion.lease_epoch, 1);
    assert_eq!(assertion.mac, MAC);
    assert_eq!(assertion.ip, "127.0.0.1");
    assert_eq!(assertion.product_uuid, UUID);
    assert_eq!(assertion.workflow_id, "boot_1");
    assert!(
        (before - 1_000..=after + 1_000).contains(&assertion.issued_at_ms),
        "{assertion:?}"
    );
    // The token's end (10 min) comes before issued + 15 min and the entry's end (1 h).
    assert!(assertion.not_after_ms < assertion.issued_at_ms + 15 * 60 * 1000);
    assert!(assertion.not_after_ms <= before + 600_000 + 1_000);
    assert_eq!(signed.signer_certificate, site.leaf);
    assert!(site.key.public_key().verify_es256(
        &assertion_signed_input(&signed.assertion),
        &signed.signature().unwrap()
    ));
    let asked = site.boots.lock().unwrap().clone();
    assert_eq!(
        asked
            .iter()
            .map(|a| (a.mac.as_str(), a.lease_epoch))
            .collect::<Vec<_>>(),
        vec![(MAC, 1)]
    );
    // Each BootToken carries the agent's proof of it (issue 40 item 10).
    let statement = SiteCallStatement {
        node_id: NodeId::new("site_a").unwrap(),
        call: SiteCall::boot_token(MAC, 1),
        client_time_ms: u64::try_from(asked[0].client_time_ms).unwrap(),
    };
    assert!(site.key.public_key().verify_es256(
        &statement.signed_input(),
        &Signature::from_bytes(&asked[0].signature).unwrap()
    ));
    assert!((before - 1_000..=after + 1_000).contains(&asked[0].client_time_ms));
    // The log names the entry and the MAC, never the token or the assertion.
    let log = site.log();
    assert!(
        log.contains("boot script for 52:54:00:12:34:56 (entry boot_1, epoch 1)"),
        "{log}"
    );
    assert!(!log.contains(&site.token) && !log.contains(b64), "{log}");

    // An ip= in the query is the asserted IP.
    let (_, _, script) = get(&site.listen, "/boot.ipxe?mac=52:54:00:12:34:56&ip=10.1.2.3").await;
    let b64 = script
        .lines()
        .nth(1)
        .unwrap()
        .rsplit_once("bc.assertion=")
        .unwrap()
        .1;
    let assertion = SignedDiscoveryAssertion::from_cmdline(b64)
        .unwrap()
        .decode_assertion()
        .unwrap();
    assert_eq!(
        (assertion.ip.as_str(), assertion.product_uuid.as_str()),
        ("10.1.2.3", UUID)
    );

    assert_eq!(
        get(&site.listen, "/boot.ipxe?mac=02:00:00:00:00:01").await,
        (
            404,
            "text/plain; charset=utf-8".into(),
            "no boot entry for 02:00:00:00:00:01 at this site\n".into()
        )
    );
    assert_eq!(
        get(&site.listen, "/boot.ipxe").await,
        (
            400,
            "text/plain; charset=utf-8".into(),
            "no mac= in the query (boot.ipxe?mac=${net0/mac})\n".into()
        )
    );
    assert_eq!(
        get(&site.listen, "/boot.ipxe?mac=52:54:00:12:34").await,
        (
            400,
            "text/plain; charset=utf-8".into(),
            "mac=\"52:54:00:12:34\" is not a MAC address (six hex pairs)\n".into()
        )
    );

    let status = site.stop().await;
    assert!(status.success(), "{status:?}\n{}", site.log());
    let calls = site.calls();
    assert_eq!(calls.last(), Some(&(Action::Release, 1)), "{calls:?}");
    assert_eq!(
        calls.iter().filter(|(a, _)| *a == Action::Release).count(),
        1
    );
    let log = site.log();
    assert!(log.contains("boot lease held at epoch 1"), "{log}");
    assert!(log.contains("boot lease released (epoch 1)"), "{log}");
    assert!(log.trim_end().ends_with("bcd site: stopped"), "{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_does_not_hold_the_lease_answers_503_and_releases_nothing() {
    let mut site = start(LeaseMode::OtherHolds, 3_000, NodeRole::Site).await;
    site.wait_for("two ACQUIREs", |s| s.calls().len() >= 2)
        .await;
    assert_eq!(
        get(&site.listen, "/boot.ipxe?mac=52:54:00:12:34:56").await,
        (503, "text/plain; charset=utf-8".into(), NOT_HELD.into())
    );
    let (_, _, body) = get(&site.listen, "/healthz").await;
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&body).unwrap(),
        serde_json::json!({"held": false, "epoch": 4, "expiresAt": null, "holder": "site_b"})
    );
    assert!(site.boots.lock().unwrap().is_empty());
    assert!(site.stop().await.success());
    assert!(site.calls().iter().all(|c| *c == (Action::Acquire, 0)));
    assert!(site
        .log()
        .contains("boot lease epoch 0 -> 4 (held by site_b)"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_answering_not_held_stops_the_vouching_at_once() {
    let site = start(LeaseMode::LostAtFirstRenew, 3_000, NodeRole::Site).await;
    site.wait_for("the RENEW and the ACQUIRE after it", |s| {
        let c = s.calls();
        c.len() >= 3 && c[1] == (Action::Renew, 1)
    })
    .await;
    assert_eq!(site.calls()[2], (Action::Acquire, 0));
    assert_eq!(
        get(&site.listen, "/boot.ipxe?mac=52:54:00:12:34:56").await,
        (503, "text/plain; charset=utf-8".into(), NOT_HELD.into())
    );
    let log = site.log();
    assert!(
        log.contains("boot lease not held: epoch 2 is held by site_b; not vouching"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_that_lapses_unanswered_stops_the_vouching_by_the_servers_clock() {
    let site = start(LeaseMode::SilentAfterAcquire, 1_500, NodeRole::Site).await;
    site.wait_for("the ACQUIRE", |s| !s.calls().is_empty())
        .await;
    tokio::time::sleep(StdDuration::from_millis(2_000)).await;
    assert_eq!(
        get(&site.listen, "/boot.ipxe?mac=52:54:00:12:34:56").await,
        (503, "text/plain; charset=utf-8".into(), NOT_HELD.into())
    );
    site.wait_for("the lapse in the log", |s| {
        s.log().contains("boot lease epoch 1 lapsed at")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bcd_site_refuses_a_node_that_is_not_a_site_agent() {
    let mut site = start(LeaseMode::Honest, 3_000, NodeRole::Node).await;
    let status = site.exited().await;
    assert_eq!(status.code(), Some(1), "{}", site.log());
    assert!(site.calls().is_empty());
    let log = site.log();
    assert!(
        log.contains(
            "bcd site: this node joined as site_a (site eu-1, role node), not as a site agent"
        ),
        "{log}"
    );
}

/// `GET path` from the loopback address `from` (127.0.0.x: another client to the server).
async fn get_from(from: [u8; 4], addr: &str, path: &str) -> (u16, String) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(std::net::SocketAddr::from((from, 0))).unwrap();
    let mut stream = socket.connect(addr.parse().unwrap()).await.unwrap();
    stream
        .write_all(format!("GET {path} HTTP/1.1\r\nHost: boot\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await.unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    (head[9..12].parse().unwrap(), body.to_owned())
}

/// Issue 40 item 6: 200 anonymous fetches of one MAC's script (from ten clients, each within
/// its rate bound, all at once) ask the control plane once: one BootToken, so one
/// `token.created` and one live token; every script carries that token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_fetches_for_one_mac_mint_one_token() {
    let mut site = start(LeaseMode::Honest, 3_000, NodeRole::Site).await;
    site.wait_for("the lease held", held).await;
    let mut fetches = Vec::new();
    for i in 0..200u8 {
        let addr = site.listen.clone();
        let from = [127, 0, 0, 10 + i % 10];
        fetches.push(tokio::spawn(async move {
            get_from(from, &addr, "/boot.ipxe?mac=52:54:00:12:34:56").await
        }));
    }
    for fetch in fetches {
        let (status, script) = fetch.await.unwrap();
        assert_eq!(status, 200, "{script}");
        assert!(
            script.contains(&format!("bc.token={} ", site.token)),
            "{script}"
        );
    }
    let boots = site.boots.lock().unwrap().clone();
    assert_eq!(boots.len(), 1, "BootToken calls: {boots:?}");
    assert_eq!(boots[0].mac, MAC);
    assert!(site.stop().await.success());
}

/// Issue 40 item 6: a client over its rate bound is answered 429, exactly, while another
/// client is still served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_over_its_rate_bound_gets_429_and_another_is_served() {
    let mut site = start(LeaseMode::Honest, 3_000, NodeRole::Site).await;
    site.wait_for("the lease held", held).await;
    let path = "/boot.ipxe?mac=52:54:00:12:34:56";
    // One more a second is earned, so on a slow machine a few more than the burst may pass.
    let mut served = 0;
    let refused = loop {
        let (status, body) = get_from([127, 0, 0, 77], &site.listen, path).await;
        if status != 200 {
            break (status, body);
        }
        served += 1;
        assert!(served < 200, "never refused");
    };
    assert!(served >= bcd::site::limit::CLIENT_BURST, "{served}");
    assert_eq!(
        refused,
        (
            429,
            "too many requests from this client: at most 20 at once, then 1 a second\n".into()
        )
    );
    let (status, script) = get_from([127, 0, 0, 78], &site.listen, path).await;
    assert_eq!(status, 200, "{script}");
    assert_eq!(site.boots.lock().unwrap().len(), 1);
    assert!(site.stop().await.success());
}

/// Issue 40 item 6: no default address (it was 0.0.0.0:8069): without `[site] listen` or
/// `--listen`, bcd site exits 1 naming the setting, before anything is opened.
#[test]
fn bcd_site_without_an_address_refuses_naming_the_setting() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("config.toml");
    std::fs::write(&cfg, "server = \"127.0.0.1:9\"\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_bcd"))
        .arg("--config")
        .arg(&cfg)
        .arg("--data-dir")
        .arg(tmp.path().join("data"))
        .arg("site")
        .env_remove("BCD_CONFIG")
        .env_remove("BCD_SERVER")
        .env_remove("BCD_DATA_DIR")
        .env_remove("BCD_TPM_TCTI")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        bcd::config::NO_SITE_LISTEN
    );
}
