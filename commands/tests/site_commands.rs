//! Sites, boot entries and the boot lease on Postgres and SQLite (issue 20): `site create /
//! list / show`, `site boot add / list / remove` (one active entry per MAC, `--replace`), the
//! site agent's SiteLease (acquire, renew, release, lapse, epochs) and BootToken (a discovery
//! token with the entry's fields; NOT_FOUND, not-holder and non-site refusals), the join's fact
//! loading of leases and boot entries, and (Postgres) 20 site agents acquiring at once.

use std::sync::Arc;
use std::time::Duration;

use commands::identity::NewToken;
use commands::site::{
    BootEntries, LeaseAction, NewBootEntry, NewSite, SiteAgent, SiteError, SiteSettings, Sites,
};
use commands::Clock;
use domain::identity::TokenRole;
use domain::pki::TrustDomain;
use domain::site::AgentRefusal;
use events::store::testkit::TestDb;
use events::store::EventStore;
use projections::identity::read as identity_read;

use crate::identity_support::*;
use crate::site_support::{boot_token_by, lease_by, SiteCaller};

const TTL_US: i64 = 3_000_000;

fn sites(f: &Fixture) -> Sites {
    Sites::new(f.store.clone(), Arc::new(f.clock.clone()))
}

fn boots(f: &Fixture) -> BootEntries {
    BootEntries::new(f.store.clone(), Arc::new(f.clock.clone()))
}

fn agent_calls(f: &Fixture) -> SiteAgent {
    SiteAgent::new(
        f.store.clone(),
        Arc::new(f.clock.clone()),
        TrustDomain::new(TD).unwrap(),
        SiteSettings {
            boot_lease_ttl: Duration::from_secs(3),
        },
    )
}

fn new_site(id: &str) -> NewSite {
    NewSite {
        site_id: id.into(),
        tenant_id: "acme".into(),
        description: "Paris".into(),
        default_pool_id: Some("edge".into()),
        actor: "alice".into(),
    }
}

fn new_entry(mac: &str) -> NewBootEntry {
    NewBootEntry {
        site_id: "par1".into(),
        mac: mac.into(),
        product_uuid: Some("4c4c4544-0000-1000-8000-000000000001".into()),
        kernel_url: "http://boot.example/vmlinuz".into(),
        initrd_url: "http://boot.example/initrd".into(),
        kernel_args: "console=ttyS0".into(),
        pool_id: None,
        expires_in_us: None,
        replace: false,
        actor: "alice".into(),
    }
}

fn refused<T: std::fmt::Debug>(r: Result<T, SiteError>) -> String {
    match r {
        Err(
            e @ (SiteError::Refused(_)
            | SiteError::NoBootEntry { .. }
            | SiteError::NotLeaseHolder { .. }
            | SiteError::NotSiteAgent(_)
            | SiteError::NoIdentity),
        ) => e.to_string(),
        other => panic!("not a refusal: {other:?}"),
    }
}

/// Joins a fresh agent of `role` ("site" or "node") at `site`; returns (node id, the agent as
/// a caller of the site agent's calls).
async fn join_as(f: &Fixture, role: TokenRole, site: &str) -> (String, SiteCaller) {
    let created = f
        .svc
        .create_token(&NewToken {
            role,
            site_id: site.into(),
            ..token_spec("acme")
        })
        .await
        .unwrap();
    let agent = Agent::new();
    let req = join_request(
        f,
        &agent,
        &created.secret,
        role.as_str(),
        Default::default(),
    );
    let answer = f.svc.join(&req).await.unwrap();
    let leaf = answer.certificate_chain[0].clone();
    (
        answer.node_id.clone(),
        SiteCaller::new(leaf, agent.key, f.clock.clone()),
    )
}

async fn site_events(f: &Fixture) -> Vec<(String, String, i64)> {
    all_events(&f.store)
        .await
        .into_iter()
        .filter(|e| e.event_type.starts_with("site."))
        .map(|e| (e.event_type, e.stream_id, e.stream_version))
        .collect()
}

#[tokio::test]
async fn sites_are_created_listed_and_shown_with_each_refusal() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let s = sites(&f);
        let par = s.create(&new_site("par1")).await.unwrap();
        assert_eq!(
            (
                par.site_id.as_str(),
                par.tenant_id.as_str(),
                par.description.as_str(),
                par.default_pool_id.as_deref(),
                par.created_by.as_str(),
                par.version
            ),
            ("par1", "acme", "Paris", Some("edge"), "alice", 1)
        );
        assert_eq!(par.created_at_us, f.clock.now_us());
        s.create(&NewSite {
            tenant_id: "other".into(),
            default_pool_id: None,
            ..new_site("ams1")
        })
        .await
        .unwrap();
        assert_eq!(
            refused(s.create(&new_site("par1")).await),
            "INVALID_STATE: site par1 already exists"
        );
        assert_eq!(
            refused(s.create(&new_site("Par_1")).await),
            "INVALID_INPUT: site id \"Par_1\" must be 1 to 63 of lower-case a-z, 0-9 and '-'"
        );
        let all: Vec<String> = s
            .list(None)
            .await
            .unwrap()
            .into_iter()
            .map(|v| v.site_id)
            .collect();
        assert_eq!(all, ["ams1", "par1"]);
        let acme: Vec<String> = s
            .list(Some("acme"))
            .await
            .unwrap()
            .into_iter()
            .map(|v| v.site_id)
            .collect();
        assert_eq!(acme, ["par1"]);
        let shown = s.show("par1").await.unwrap();
        assert_eq!(shown.site, par);
        assert_eq!((shown.lease, shown.boot_entries.len()), (None, 0));
        assert_eq!(refused(s.show("nope").await), "NOT_FOUND: no site nope");
        assert_eq!(
            site_events(&f).await,
            [
                ("site.created".into(), "site/par1".into(), 1),
                ("site.created".into(), "site/ams1".into(), 1)
            ]
        );
    }
}

#[tokio::test]
async fn boot_entries_are_added_replaced_and_removed() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        sites(&f).create(&new_site("par1")).await.unwrap();
        let b = boots(&f);
        let first = b.add(&new_entry("AA-BB-CC-DD-EE-01")).await.unwrap();
        assert!(first.entry_id.starts_with("boot_"), "{}", first.entry_id);
        assert_eq!(
            (
                first.mac.as_str(),
                first.pool_id.as_str(),
                first.status.as_str(),
                first.tenant_id.as_str()
            ),
            ("aa:bb:cc:dd:ee:01", "edge", "active", "acme")
        );
        assert_eq!(first.not_after_us, f.clock.now_us() + 24 * 3600 * 1_000_000);
        assert_eq!(
            refused(b.add(&new_entry("aa:bb:cc:dd:ee:01")).await),
            format!(
                "INVALID_STATE: site par1 already has active boot entry {} for MAC \
                 aa:bb:cc:dd:ee:01 (give --replace to replace it, or remove it first)",
                first.entry_id
            )
        );
        assert_eq!(
            refused(
                b.add(&NewBootEntry {
                    site_id: "nope".into(),
                    ..new_entry("aa:bb:cc:dd:ee:01")
                })
                .await
            ),
            "NOT_FOUND: no site nope"
        );
        f.clock.advance_secs(1);
        let second = b
            .add(&NewBootEntry {
                replace: true,
                pool_id: Some("lab".into()),
                ..new_entry("aa:bb:cc:dd:ee:01")
            })
            .await
            .unwrap();
        assert_eq!(second.pool_id, "lab");
        let listed = b.list("par1").await.unwrap();
        let states: Vec<(String, String, Option<String>)> = listed
            .iter()
            .map(|e| {
                (
                    e.entry_id.clone(),
                    e.status.clone(),
                    e.remove_reason.clone(),
                )
            })
            .collect();
        assert_eq!(
            states,
            [
                (
                    first.entry_id.clone(),
                    "removed".into(),
                    Some(format!("replaced by {}", second.entry_id))
                ),
                (second.entry_id.clone(), "active".into(), None)
            ]
        );
        let removed = b.remove(&second.entry_id, "bob", "done").await.unwrap();
        assert_eq!(
            (removed.status.as_str(), removed.removed_by.as_deref()),
            ("removed", Some("bob"))
        );
        assert_eq!(
            refused(b.remove(&second.entry_id, "bob", "").await),
            format!(
                "INVALID_STATE: boot entry {} is already removed",
                second.entry_id
            )
        );
        assert_eq!(
            refused(b.remove("boot_x", "bob", "").await),
            "NOT_FOUND: no boot entry boot_x"
        );
        assert_eq!(refused(b.list("nope").await), "NOT_FOUND: no site nope");
        // Every entry event moved the site's stream: the site row's version follows.
        let events = site_events(&f).await;
        let kinds: Vec<(&str, i64)> = events.iter().map(|(t, _, v)| (t.as_str(), *v)).collect();
        assert_eq!(
            kinds,
            [
                ("site.created", 1),
                ("site.boot.added", 2),
                ("site.boot.removed", 3),
                ("site.boot.added", 4),
                ("site.boot.removed", 5)
            ]
        );
        assert_eq!(sites(&f).show("par1").await.unwrap().site.version, 5);
        // An entry past its end shows expired and no longer blocks its MAC.
        let short = b
            .add(&NewBootEntry {
                expires_in_us: Some(1_000_000),
                ..new_entry("aa:bb:cc:dd:ee:02")
            })
            .await
            .unwrap();
        f.clock.advance_secs(2);
        let shown = sites(&f).show("par1").await.unwrap();
        let status = shown
            .boot_entries
            .iter()
            .find(|e| e.entry_id == short.entry_id)
            .map(|e| e.status.clone());
        assert_eq!(status.as_deref(), Some("expired"));
        b.add(&new_entry("aa:bb:cc:dd:ee:02")).await.unwrap();
    }
}

#[tokio::test]
async fn the_lease_is_acquired_renewed_released_and_lapses_with_rising_epochs() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        sites(&f).create(&new_site("par1")).await.unwrap();
        let (a, leaf_a) = join_as(&f, TokenRole::Site, "par1").await;
        let (b, leaf_b) = join_as(&f, TokenRole::Site, "par1").await;
        let calls = agent_calls(&f);
        let t0 = f.clock.now_us();
        let got = lease_by(&calls, &leaf_a, LeaseAction::Acquire, 0)
            .await
            .unwrap();
        assert_eq!(
            (
                got.held,
                got.epoch,
                got.expires_at_us,
                got.holder_node_id.as_deref()
            ),
            (true, 1, t0 + TTL_US, Some(a.as_str()))
        );
        assert_eq!(got.renew_every_ms, 1000);
        // Another agent is told who holds it.
        let other = lease_by(&calls, &leaf_b, LeaseAction::Acquire, 0)
            .await
            .unwrap();
        assert_eq!(
            (other.held, other.epoch, other.holder_node_id.as_deref()),
            (false, 1, Some(a.as_str()))
        );
        f.clock.advance_secs(2);
        let renewed = lease_by(&calls, &leaf_a, LeaseAction::Renew, 1)
            .await
            .unwrap();
        assert_eq!((renewed.held, renewed.epoch), (true, 1));
        assert_eq!(renewed.expires_at_us, f.clock.now_us() + TTL_US);
        let stale = lease_by(&calls, &leaf_a, LeaseAction::Renew, 9)
            .await
            .unwrap();
        assert!(!stale.held);
        // The lapse: a's renew is not held, b takes epoch 2.
        f.clock.advance_secs(4);
        let late = lease_by(&calls, &leaf_a, LeaseAction::Renew, 1)
            .await
            .unwrap();
        assert_eq!((late.held, late.holder_node_id), (false, None));
        let took = lease_by(&calls, &leaf_b, LeaseAction::Acquire, 0)
            .await
            .unwrap();
        assert_eq!((took.held, took.epoch), (true, 2));
        assert_eq!(took.holder_node_id.as_deref(), Some(b.as_str()));
        // b releases; a takes epoch 3.
        let released = lease_by(&calls, &leaf_b, LeaseAction::Release, 2)
            .await
            .unwrap();
        assert_eq!(
            (released.held, released.epoch, released.holder_node_id),
            (false, 2, None)
        );
        let again = lease_by(&calls, &leaf_a, LeaseAction::Acquire, 0)
            .await
            .unwrap();
        assert_eq!((again.held, again.epoch), (true, 3));
        // An operator fences it; a then acquires epoch 4.
        let fenced = sites(&f).fence("par1", "alice").await.unwrap();
        assert_eq!(
            (fenced.held, fenced.epoch, fenced.release_cause.as_deref()),
            (false, 3, Some("fenced"))
        );
        assert_eq!(
            refused(sites(&f).fence("par1", "alice").await),
            "INVALID_STATE: the boot lease of site par1 is not held"
        );
        let fourth = lease_by(&calls, &leaf_a, LeaseAction::Acquire, 0)
            .await
            .unwrap();
        assert_eq!((fourth.held, fourth.epoch), (true, 4));
        let shown = sites(&f)
            .show("par1")
            .await
            .unwrap()
            .lease
            .expect("a lease");
        assert_eq!(
            (
                shown.held,
                shown.epoch,
                shown.holder_node_id.as_deref(),
                shown.lease.as_str()
            ),
            (true, 4, Some(a.as_str()), "site:par1:boot")
        );
        let kinds: Vec<(String, String, i64)> = site_events(&f)
            .await
            .into_iter()
            .filter(|(t, _, _)| t.starts_with("site.lease."))
            .collect();
        let lease = "lease/site:par1:boot".to_string();
        assert_eq!(
            kinds,
            [
                ("site.lease.acquired".into(), lease.clone(), 1),
                ("site.lease.renewed".into(), lease.clone(), 2),
                ("site.lease.acquired".into(), lease.clone(), 3),
                ("site.lease.released".into(), lease.clone(), 4),
                ("site.lease.acquired".into(), lease.clone(), 5),
                ("site.lease.released".into(), lease.clone(), 6),
                ("site.lease.acquired".into(), lease, 7),
            ]
        );
    }
}

#[tokio::test]
async fn only_a_site_agent_of_an_existing_site_calls() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        sites(&f).create(&new_site("par1")).await.unwrap();
        let calls = agent_calls(&f);
        let (_, node_leaf) = join_as(&f, TokenRole::Node, "par1").await;
        assert!(matches!(
            lease_by(&calls, &node_leaf, LeaseAction::Acquire, 0).await,
            Err(SiteError::NotSiteAgent(AgentRefusal::NotSiteRole))
        ));
        assert!(matches!(
            lease_by(
                &calls,
                &node_leaf.presenting(b"not a certificate".to_vec()),
                LeaseAction::Acquire,
                0
            )
            .await,
            Err(SiteError::NoIdentity)
        ));
        let (site_node, leaf) = join_as(&f, TokenRole::Site, "par1").await;
        let mut bytes = leaf.leaf.clone();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let tampered = leaf.presenting(bytes);
        let r = lease_by(&calls, &tampered, LeaseAction::Acquire, 0).await;
        assert!(
            matches!(
                r,
                Err(SiteError::NotSiteAgent(AgentRefusal::CertificateMismatch))
            ),
            "{r:?}"
        );
        // A retired agent no longer calls.
        f.svc.retire_node(&site_node, "gone").await.unwrap();
        let r = lease_by(&calls, &leaf, LeaseAction::Acquire, 0).await;
        assert!(
            matches!(r, Err(SiteError::NotSiteAgent(AgentRefusal::Revoked))),
            "{r:?}"
        );
        // A site agent of a site nobody created.
        let (_, orphan) = join_as(&f, TokenRole::Site, "lyon1").await;
        assert_eq!(
            refused(lease_by(&calls, &orphan, LeaseAction::Acquire, 0).await),
            "NOT_FOUND: no site lyon1"
        );
        // An expired certificate.
        let (_, fresh) = join_as(&f, TokenRole::Site, "par1").await;
        f.clock.advance_secs(400 * 24 * 3600);
        let r = lease_by(&calls, &fresh, LeaseAction::Acquire, 0).await;
        assert!(
            matches!(r, Err(SiteError::NotSiteAgent(AgentRefusal::Expired))),
            "{r:?}"
        );
    }
}

#[tokio::test]
async fn boot_token_mints_a_discovery_token_for_the_lease_holder_only() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        sites(&f).create(&new_site("par1")).await.unwrap();
        let entry = boots(&f)
            .add(&new_entry("aa:bb:cc:dd:ee:01"))
            .await
            .unwrap();
        let (_a, leaf_a) = join_as(&f, TokenRole::Site, "par1").await;
        let (b, leaf_b) = join_as(&f, TokenRole::Site, "par1").await;
        let calls = agent_calls(&f);
        let held = lease_by(&calls, &leaf_a, LeaseAction::Acquire, 0)
            .await
            .unwrap();
        let now = f.clock.now_us();
        let got = boot_token_by(&calls, &leaf_a, "AA:BB:CC:DD:EE:01", held.epoch)
            .await
            .unwrap();
        assert!(
            !format!("{got:?}").contains(&got.token),
            "the token is never printed"
        );
        assert_eq!(
            (
                got.entry_id.as_str(),
                got.mac.as_str(),
                got.product_uuid.as_deref(),
                got.kernel_url.as_str(),
                got.kernel_args.as_str()
            ),
            (
                entry.entry_id.as_str(),
                "aa:bb:cc:dd:ee:01",
                Some("4c4c4544-0000-1000-8000-000000000001"),
                "http://boot.example/vmlinuz",
                "console=ttyS0"
            )
        );
        assert_eq!(got.token_expires_at_us, now + 15 * 60 * 1_000_000);
        assert_eq!(got.entry_not_after_us, entry.not_after_us);
        let mut tx = events::store::LogStore::begin(&f.store).await.unwrap();
        let token = identity_read::token_by_id(&mut tx, &got.token_id)
            .await
            .unwrap()
            .expect("the token row");
        events::store::LogTx::rollback(tx).await.unwrap();
        assert_eq!(
            (
                token.role.as_str(),
                token.uses_total,
                token.site_id.as_str(),
                token.tenant_id.as_str(),
                token.pool_id.as_str(),
                token.expect_mac.as_deref(),
                token.expect_product_uuid.as_deref(),
                token.boot_entry_id.as_deref()
            ),
            (
                "discovery",
                1,
                "par1",
                "acme",
                "edge",
                Some("aa:bb:cc:dd:ee:01"),
                Some("4c4c4544-0000-1000-8000-000000000001"),
                Some(entry.entry_id.as_str())
            )
        );
        let secret = domain::pki::TokenSecret::parse(&got.token).unwrap();
        assert_eq!(token.secret_sha256, secret.hash().as_bytes().to_vec());
        // The token is minted per call.
        let second = boot_token_by(&calls, &leaf_a, "aa:bb:cc:dd:ee:01", held.epoch)
            .await
            .unwrap();
        assert_ne!(
            (second.token_id.as_str(), second.token.as_str()),
            (got.token_id.as_str(), got.token.as_str())
        );
        // An entry ending sooner bounds the token.
        let short = boots(&f)
            .add(&NewBootEntry {
                expires_in_us: Some(60_000_000),
                ..new_entry("aa:bb:cc:dd:ee:03")
            })
            .await
            .unwrap();
        let bounded = boot_token_by(&calls, &leaf_a, "aa:bb:cc:dd:ee:03", held.epoch)
            .await
            .unwrap();
        assert_eq!(bounded.token_expires_at_us, short.not_after_us);
        // NOT_FOUND: no entry for the MAC, or only a removed one.
        assert_eq!(
            refused(boot_token_by(&calls, &leaf_a, "aa:bb:cc:dd:ee:99", held.epoch).await),
            "NOT_FOUND: site par1 has no active boot entry for MAC aa:bb:cc:dd:ee:99"
        );
        boots(&f)
            .remove(&short.entry_id, "alice", "")
            .await
            .unwrap();
        assert_eq!(
            refused(boot_token_by(&calls, &leaf_a, "aa:bb:cc:dd:ee:03", held.epoch).await),
            "NOT_FOUND: site par1 has no active boot entry for MAC aa:bb:cc:dd:ee:03"
        );
        // FAILED_PRECONDITION: another agent, or the holder at another epoch.
        let r = boot_token_by(&calls, &leaf_b, "aa:bb:cc:dd:ee:01", held.epoch).await;
        assert_eq!(
            refused(r),
            format!(
                "FAILED_PRECONDITION: node {b} does not hold the boot lease of site par1 at \
                 epoch 1 (ACQUIRE it first)"
            )
        );
        let r = boot_token_by(&calls, &leaf_a, "aa:bb:cc:dd:ee:01", held.epoch + 1).await;
        assert!(
            matches!(r, Err(SiteError::NotLeaseHolder { epoch: 2, .. })),
            "{r:?}"
        );
        // After the lapse the holder's epoch vouches no more.
        f.clock.advance_secs(4);
        let r = boot_token_by(&calls, &leaf_a, "aa:bb:cc:dd:ee:01", held.epoch).await;
        assert!(matches!(r, Err(SiteError::NotLeaseHolder { .. })), "{r:?}");
        // PERMISSION_DENIED: a node certificate.
        let (_, node_leaf) = join_as(&f, TokenRole::Node, "par1").await;
        let r = boot_token_by(&calls, &node_leaf, "aa:bb:cc:dd:ee:01", 1).await;
        assert_eq!(
            r.as_ref().err().map(SiteError::code),
            Some("PERMISSION_DENIED")
        );
    }
}

/// (Postgres) 20 site agents ACQUIRE at once: exactly one holds, at epoch 1, and the log has one
/// `site.lease.acquired`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_acquires_one_holder_at_epoch_1() {
    let db = TestDb::postgres().await.unwrap();
    let store = EventStore::Postgres(db.pg_store(30).await.unwrap());
    let f = Arc::new(fixture_on(db, store).await);
    sites(&f).create(&new_site("par1")).await.unwrap();
    let mut leaves = Vec::new();
    for _ in 0..20 {
        leaves.push(join_as(&f, TokenRole::Site, "par1").await);
    }
    let calls = agent_calls(&f);
    let barrier = Arc::new(tokio::sync::Barrier::new(leaves.len()));
    let mut tasks = tokio::task::JoinSet::new();
    for (node, leaf) in leaves {
        let calls = calls.clone();
        let barrier = barrier.clone();
        tasks.spawn(async move {
            barrier.wait().await;
            (node, lease_by(&calls, &leaf, LeaseAction::Acquire, 0).await)
        });
    }
    let mut holders = Vec::new();
    let mut holder_seen = Vec::new();
    while let Some(done) = tasks.join_next().await {
        let (node, answer) = done.unwrap();
        let answer = answer.unwrap();
        assert_eq!(answer.epoch, 1);
        if answer.held {
            holders.push(node);
        }
        holder_seen.push(answer.holder_node_id.expect("someone holds it"));
    }
    assert_eq!(holders.len(), 1, "{holders:?}");
    assert!(holder_seen.iter().all(|h| *h == holders[0]));
    let acquired = all_events(&f.store)
        .await
        .into_iter()
        .filter(|e| e.event_type == "site.lease.acquired")
        .count();
    assert_eq!(acquired, 1);
}
