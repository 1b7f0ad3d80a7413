//! Sites on Postgres and SQLite, beyond the commands (issue 20): a rebuild gives the same
//! `sites`, `boot_entries` and `site_leases` at every batch size (the lease projection folds a
//! run of renewals into one write), and the join loads `FactKey::SiteLease` (no holder once
//! released) and `FactKey::BootEntry` (removed ones too) for an attestor's plan.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use commands::identity::{AttestorRegistry, JoinRequest, JoinService, NewToken};
use commands::site::{
    BootEntries, LeaseAction, NewBootEntry, NewSite, SiteAgent, SiteSettings, Sites,
};
use commands::Clock;
use domain::attest::{AttestRequest, Attestor, AttestorRefusal, FactKey, Facts, Planned, Verdict};
use domain::identity::{JoinInput, TokenRole};
use domain::pki::{NodeRole, TrustDomain};
use events::store::testkit::TestDb;

use crate::identity_support::*;
use crate::site_support::{boot_token_by, lease_by, SiteCaller};

struct World {
    sites: Sites,
    boots: BootEntries,
    agent: SiteAgent,
}

fn world(f: &Fixture) -> World {
    World {
        sites: Sites::new(f.store.clone(), Arc::new(f.clock.clone())),
        boots: BootEntries::new(f.store.clone(), Arc::new(f.clock.clone())),
        agent: SiteAgent::new(
            f.store.clone(),
            Arc::new(f.clock.clone()),
            TrustDomain::new(TD).unwrap(),
            SiteSettings {
                boot_lease_ttl: Duration::from_secs(3),
            },
        ),
    }
}

async fn site(w: &World, id: &str) {
    w.sites
        .create(&NewSite {
            site_id: id.into(),
            tenant_id: "acme".into(),
            description: String::new(),
            default_pool_id: Some("edge".into()),
            actor: "alice".into(),
        })
        .await
        .unwrap();
}

fn entry(site: &str, mac: &str, replace: bool) -> NewBootEntry {
    NewBootEntry {
        site_id: site.into(),
        mac: mac.into(),
        product_uuid: None,
        kernel_url: "http://boot.example/k".into(),
        initrd_url: "http://boot.example/i".into(),
        kernel_args: String::new(),
        pool_id: None,
        expires_in_us: None,
        replace,
        actor: "alice".into(),
    }
}

async fn site_leaf(f: &Fixture, site: &str) -> SiteCaller {
    let created = f
        .svc
        .create_token(&NewToken {
            role: TokenRole::Site,
            site_id: site.into(),
            ..token_spec("acme")
        })
        .await
        .unwrap();
    let agent = Agent::new();
    let req = join_request(f, &agent, &created.secret, "site", Default::default());
    let leaf = f.svc.join(&req).await.unwrap().certificate_chain[0].clone();
    SiteCaller::new(leaf, agent.key, f.clock.clone())
}

#[tokio::test]
async fn a_rebuild_gives_the_same_site_tables_at_every_batch_size() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let w = world(&f);
        site(&w, "par1").await;
        site(&w, "ams1").await;
        let one = w
            .boots
            .add(&entry("par1", "aa:bb:cc:dd:ee:01", false))
            .await
            .unwrap();
        w.boots
            .add(&entry("par1", "aa:bb:cc:dd:ee:01", true))
            .await
            .unwrap();
        w.boots
            .add(&entry("ams1", "aa:bb:cc:dd:ee:02", false))
            .await
            .unwrap();
        w.boots.remove(&one.entry_id, "bob", "").await.err();
        let a = site_leaf(&f, "par1").await;
        let b = site_leaf(&f, "ams1").await;
        lease_by(&w.agent, &a, LeaseAction::Acquire, 0)
            .await
            .unwrap();
        lease_by(&w.agent, &b, LeaseAction::Acquire, 0)
            .await
            .unwrap();
        for _ in 0..4 {
            f.clock.advance_secs(1);
            lease_by(&w.agent, &a, LeaseAction::Renew, 1).await.unwrap();
            lease_by(&w.agent, &b, LeaseAction::Acquire, 0)
                .await
                .unwrap();
        }
        boot_token_by(&w.agent, &a, "aa:bb:cc:dd:ee:01", 1)
            .await
            .unwrap();
        lease_by(&w.agent, &a, LeaseAction::Release, 1)
            .await
            .unwrap();
        f.clock.advance_secs(10);
        lease_by(&w.agent, &a, LeaseAction::Acquire, 0)
            .await
            .unwrap();
        w.sites.fence("par1", "carol").await.unwrap();
        lease_by(&w.agent, &b, LeaseAction::Acquire, 0)
            .await
            .unwrap();
        lease_by(&w.agent, &b, LeaseAction::Renew, 2).await.unwrap();
        let before = (
            w.sites.show("par1").await.unwrap(),
            w.sites.show("ams1").await.unwrap(),
        );
        assert_eq!(
            before.0.lease.as_ref().map(|l| (l.epoch, l.held)),
            Some((2, false))
        );
        assert_eq!(
            before.1.lease.as_ref().map(|l| (l.epoch, l.held)),
            Some((2, true))
        );
        let tables = projections::identity::tables();
        for name in ["sites", "boot_entries", "site_leases"] {
            assert!(tables.iter().any(|t| t.name == name), "{name}");
        }
        let inline = projections::digest_tables(&f.store, &tables).await.unwrap();
        for batch in [1, 2, 3, 500] {
            projections::rebuild(&f.store, &projections::identity::all(), None, batch, |_| {})
                .await
                .unwrap();
            assert_eq!(
                inline,
                projections::digest_tables(&f.store, &tables).await.unwrap(),
                "batch {batch}"
            );
        }
        let after = (
            w.sites.show("par1").await.unwrap(),
            w.sites.show("ams1").await.unwrap(),
        );
        assert_eq!(after, before);
    }
}

/// Plans the lease of par1 and the boot entry it was told, keeps the facts, refuses.
struct Probe {
    entry: Arc<Mutex<String>>,
    seen: Arc<Mutex<Vec<Facts>>>,
}

const NODE_ONLY: &[NodeRole] = &[NodeRole::Node];

impl Attestor for Probe {
    type Plan = ();
    fn id(&self) -> &str {
        "test-probe"
    }
    fn roles(&self) -> &[NodeRole] {
        NODE_ONLY
    }
    fn plan(&self, _request: &AttestRequest<'_>) -> Result<Planned<()>, AttestorRefusal> {
        let entry = self.entry.lock().map(|e| e.clone()).unwrap_or_default();
        Ok(Planned::new(
            vec![FactKey::SiteLease("par1".into()), FactKey::BootEntry(entry)],
            (),
        ))
    }
    fn verify(&self, _request: &AttestRequest<'_>, _plan: &(), facts: &Facts) -> Verdict {
        if let Ok(mut seen) = self.seen.lock() {
            seen.push(facts.clone());
        }
        Verdict::Refuse(AttestorRefusal::new("test-probe", "seen"))
    }
}

fn probe_request() -> JoinRequest {
    JoinRequest {
        attestor: "test-probe".into(),
        input: JoinInput {
            csr_der: Agent::new().csr.clone(),
            role: "node".into(),
            attestation: b"evidence".to_vec(),
            ..JoinInput::default()
        },
    }
}

#[tokio::test]
async fn the_join_loads_the_site_lease_and_the_boot_entry() {
    for db in TestDb::each().await.unwrap() {
        let f = fixture(db).await;
        let w = world(&f);
        let entry_id = Arc::new(Mutex::new("boot_none".to_string()));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let mut registry = AttestorRegistry::builtin();
        registry.register_in_process(Arc::new(Probe {
            entry: entry_id.clone(),
            seen: seen.clone(),
        }));
        let svc: JoinService = f.svc.clone().with_attestors(registry);
        let take = || seen.lock().unwrap().pop().expect("the probe verified");

        assert_join_denied(svc.join(&probe_request()).await);
        let facts = take();
        assert!(facts.site_leases.is_empty() && facts.boot_entries.is_empty());

        site(&w, "par1").await;
        let added = w
            .boots
            .add(&entry("par1", "AA:BB:CC:DD:EE:01", false))
            .await
            .unwrap();
        *entry_id.lock().unwrap() = added.entry_id.clone();
        let leaf = site_leaf(&f, "par1").await;
        let held = lease_by(&w.agent, &leaf, LeaseAction::Acquire, 0)
            .await
            .unwrap();
        let holder = held.holder_node_id.clone().expect("a holder");
        assert_join_denied(svc.join(&probe_request()).await);
        let facts = take();
        let lease = facts.site_leases.get("par1").expect("the lease");
        assert!(lease.held_by(&holder, 1, f.clock.now_us()));
        assert_eq!(lease.expires_at_us, held.expires_at_us);
        let boot = facts.boot_entries.get(&added.entry_id).expect("the entry");
        assert_eq!(
            (
                boot.mac.as_str(),
                boot.pool_id.as_str(),
                boot.removed,
                boot.not_after_us
            ),
            ("aa:bb:cc:dd:ee:01", "edge", false, added.not_after_us)
        );

        // Released: no holder; removed: still loaded, marked removed.
        lease_by(&w.agent, &leaf, LeaseAction::Release, 1)
            .await
            .unwrap();
        w.boots.remove(&added.entry_id, "alice", "").await.unwrap();
        assert_join_denied(svc.join(&probe_request()).await);
        let facts = take();
        let lease = facts.site_leases.get("par1").expect("the lease");
        assert_eq!((lease.holder_node_id.as_deref(), lease.epoch), (None, 1));
        assert!(
            facts
                .boot_entries
                .get(&added.entry_id)
                .expect("the entry")
                .removed
        );
    }
}
