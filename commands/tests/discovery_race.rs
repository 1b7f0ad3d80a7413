//! (Postgres, real concurrency) 50 ramdisks join at once with one site agent's signed discovery
//! assertion (issue 20): exactly one is admitted, the 49 others are refused
//! `discovery:assertion-reused`, and the assertion's single use is recorded once. Each of the 50
//! seals the same discovery token to its own CSR, so nothing but the assertion's and the token's
//! single use stops them.

use std::sync::Arc;
use std::time::Duration;

use commands::identity::{IdentityError, JoinRequest, NewToken};
use commands::site::{
    BootEntries, LeaseAction, NewBootEntry, NewSite, SiteAgent, SiteSettings, Sites,
};
use commands::Clock;
use domain::attest::discovery::{DiscoveryAssertion, SignedDiscoveryAssertion};
use domain::identity::{HardwareClaims, JoinInput, TokenRole};
use domain::pki::{seal_token, TokenSecret, TrustDomain};
use events::store::testkit::TestDb;
use events::store::EventStore;

use crate::identity_support::*;
use crate::site_support::{boot_token_by, lease_by, SiteCaller};
use crate::x509pop_support::join_refusals;

const MAC: &str = "52:54:00:aa:bb:01";
const UUID: &str = "4c4c4544-0000-1000-8000-0000000000aa";

#[tokio::test]
async fn fifty_joins_with_one_signed_assertion_admit_exactly_one() {
    let db = TestDb::postgres().await.unwrap();
    let store = EventStore::Postgres(db.pg_store(70).await.unwrap());
    let f = Arc::new(fixture_on(db, store).await);
    let clock = Arc::new(f.clock.clone());
    Sites::new(f.store.clone(), clock.clone())
        .create(&NewSite {
            site_id: "par1".into(),
            tenant_id: "acme".into(),
            description: String::new(),
            default_pool_id: Some("edge".into()),
            actor: "alice".into(),
        })
        .await
        .unwrap();
    let entry = BootEntries::new(f.store.clone(), clock.clone())
        .add(&NewBootEntry {
            site_id: "par1".into(),
            mac: MAC.into(),
            product_uuid: Some(UUID.into()),
            kernel_url: "http://boot.example/vmlinuz".into(),
            initrd_url: "http://boot.example/initrd".into(),
            kernel_args: String::new(),
            pool_id: None,
            expires_in_us: None,
            replace: false,
            actor: "alice".into(),
        })
        .await
        .unwrap();

    // The site agent: joined with a site token, holding the boot lease.
    let site_token = f
        .svc
        .create_token(&NewToken {
            role: TokenRole::Site,
            site_id: "par1".into(),
            ..token_spec("acme")
        })
        .await
        .unwrap();
    let site_agent = Agent::new();
    let joined = f
        .svc
        .join(&join_request(
            &f,
            &site_agent,
            &site_token.secret,
            "site",
            HardwareClaims::default(),
        ))
        .await
        .unwrap();
    let leaf = joined.certificate_chain[0].clone();
    let calls = SiteAgent::new(
        f.store.clone(),
        clock.clone(),
        TrustDomain::new(TD).unwrap(),
        SiteSettings {
            boot_lease_ttl: Duration::from_secs(60),
        },
    );
    let caller = SiteCaller::new(leaf.clone(), site_agent.key, f.clock.clone());
    let lease = lease_by(&calls, &caller, LeaseAction::Acquire, 0)
        .await
        .unwrap();
    assert!(lease.held);
    let boot = boot_token_by(&calls, &caller, MAC, lease.epoch)
        .await
        .unwrap();

    // One signed assertion, as bcd site renders it.
    let now_ms = f.clock.now_us() / 1000;
    let assertion = DiscoveryAssertion {
        site_id: "par1".into(),
        signer_node_id: joined.node_id.clone(),
        lease_epoch: lease.epoch,
        mac: MAC.into(),
        ip: "10.0.0.7".into(),
        product_uuid: UUID.into(),
        workflow_id: entry.entry_id.clone(),
        issued_at_ms: now_ms,
        not_after_ms: now_ms + 10 * 60 * 1000,
    };
    let signed = SignedDiscoveryAssertion::sign(&assertion, leaf, caller.key()).unwrap();
    let secret = TokenSecret::parse(&boot.token).unwrap();

    // 50 ramdisks, each its own key and CSR, the same token and assertion.
    let requests: Vec<JoinRequest> = (0..50)
        .map(|_| {
            let ramdisk = Agent::new();
            let sealed = seal_token(
                f.keys.join_encryption.public_key(),
                &secret,
                &ramdisk.csr_sha256(),
            )
            .unwrap();
            JoinRequest {
                attestor: "discovery".into(),
                input: JoinInput {
                    csr_der: ramdisk.csr.clone(),
                    sealed_token: sealed.as_bytes().to_vec(),
                    role: "ramdisk".into(),
                    claims: HardwareClaims {
                        product_uuid: Some(UUID.into()),
                        macs: vec![MAC.into()],
                        ..HardwareClaims::default()
                    },
                    attestation: signed.to_bytes(),
                    report: Default::default(),
                },
            }
        })
        .collect();
    let barrier = Arc::new(tokio::sync::Barrier::new(requests.len()));
    let mut tasks = tokio::task::JoinSet::new();
    for request in requests {
        let (f, barrier) = (f.clone(), barrier.clone());
        tasks.spawn(async move {
            barrier.wait().await;
            f.svc.join(&request).await
        });
    }
    let (mut admitted, mut denied) = (Vec::new(), 0);
    while let Some(r) = tasks.join_next().await {
        match r.unwrap() {
            Ok(answer) => admitted.push(answer),
            Err(IdentityError::AccessDenied(_)) => denied += 1,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert_eq!((admitted.len(), denied), (1, 49));
    assert_eq!(admitted[0].role, "ramdisk");
    let refusals = join_refusals(&f).await;
    assert_eq!(refusals.len(), 49, "{refusals:?}");
    assert!(
        refusals
            .iter()
            .all(|(t, r)| t == "acme" && r == "discovery:assertion-reused"),
        "{refusals:?}"
    );
    let uses: Vec<events::schema::EvidenceUsed> = all_events(&f.store)
        .await
        .into_iter()
        .filter(|e| e.event_type == "attestation.evidence.used")
        .map(|e| e.decode().unwrap())
        .filter(|u: &events::schema::EvidenceUsed| u.attestor == "discovery")
        .collect();
    assert_eq!(uses.len(), 1, "one use of the assertion");
    assert_eq!(uses[0].node_id, admitted[0].node_id);
    let spent = all_events(&f.store)
        .await
        .into_iter()
        .filter(|e| {
            e.event_type == "token.used" && e.stream_id == format!("token/{}", boot.token_id)
        })
        .count();
    assert_eq!(spent, 1, "the discovery token is spent once");
}
