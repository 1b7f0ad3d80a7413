//! `service-join`: one token join through the real [`JoinService::join`] on SQLite (a file in a
//! temporary directory, in this process), then the JoinResponse encoded and signed as the
//! gateway does: every instruction a join costs in one process, the SQL included, with no
//! re-implementation of the handler. Unlike `join` (which calls the domain's functions the way
//! the handler did when it was written), this figure follows whatever the handler does, so the
//! same operation measures the join before and after a change of the handler (issue 18: the
//! attestor contract). Only [`join_once`] and [`new_token`] touch the handler's API.

use std::sync::Arc;

use commands::identity::{IdentityConfig, JoinRequest, JoinService, NewToken};
use commands::SystemClock;
use domain::identity::{ExpectBinding, HardwareClaims, JoinInput, TokenRole};
use domain::pki::statement::{sign, JoinResponseStatement};
use domain::pki::{KeySet, KeySetLifetimes, TokenSecret, TrustDomain};
use events::store::testkit::TestDb;
use prost::Message;
use time::OffsetDateTime;

use super::{keep, measured, Agent, Fallible};

/// The token every measured join spends (its tenant, site and pool).
fn new_token(uses: u32) -> NewToken {
    NewToken {
        tenant_id: super::TENANT.into(),
        site_id: "site-1".into(),
        pool_id: "pool-1".into(),
        role: TokenRole::Node,
        uses,
        ttl_seconds: 86_400,
        expect: ExpectBinding::default(),
        allow_reclaim: false,
        reclaim_node_id: None,
        for_node_id: None,
        require_approval: false,
    }
}

/// One join through the service, answered as the gateway answers it.
async fn join_once(svc: &JoinService, request: &JoinRequest) -> Fallible<()> {
    let answer = svc.join(request).await?;
    let body = proto::JoinResponse {
        csr_sha256: answer.csr_sha256.to_vec(),
        trust_domain: answer.trust_domain,
        node_id: answer.node_id,
        site_id: answer.site_id,
        role: answer.role,
        certificate_chain: answer.certificate_chain,
        trust_roots: answer.trust_roots,
        not_after_ms: answer.not_after_us / 1000,
        server_time_ms: answer.server_time_us / 1000,
        identity_generation: answer.identity_generation,
        ..Default::default()
    }
    .encode_to_vec();
    let signature = sign(
        &svc.joins().keys().join_signing,
        &JoinResponseStatement {
            csr_sha256: answer.csr_sha256,
            response: &body,
        },
    )?;
    keep(proto::SignedJoinResponse {
        response: body,
        signature: signature.as_bytes().to_vec(),
    });
    Ok(())
}

/// Prepares a SQLite store, a JoinService with fresh keys and a token, `count + 1` sealed
/// requests; joins once to warm up (statement caches, the token row), then measures `count`
/// joins.
pub fn run(count: usize) -> Fallible<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let db = TestDb::sqlite()?;
    let store = rt.block_on(db.store())?;
    let td = TrustDomain::new("bench.example.com")?;
    let now = OffsetDateTime::now_utc();
    let keys = Arc::new(KeySet::generate(
        td.clone(),
        now,
        KeySetLifetimes::default(),
    )?);
    let svc = JoinService::new(
        store,
        keys.clone(),
        Arc::new(SystemClock),
        IdentityConfig::new(td),
    )?;
    let uses = u32::try_from(count + 1)?;
    let created = rt.block_on(svc.create_token(&new_token(uses)))?;
    let secret = TokenSecret::parse(&created.secret)?;
    let recipient = keys.join_encryption.public_key();
    let requests = (0..=count)
        .map(|_| {
            let agent = Agent::new()?;
            let csr_sha256 = domain::identity::sha256(&agent.csr);
            let sealed = domain::pki::seal_token(recipient, &secret, &csr_sha256)?;
            Ok(JoinRequest {
                attestor: String::new(),
                input: JoinInput {
                    csr_der: agent.csr,
                    sealed_token: sealed.as_bytes().to_vec(),
                    role: "node".into(),
                    claims: HardwareClaims::default(),
                    attestation: Vec::new(),
                    report: Default::default(),
                },
            })
        })
        .collect::<Fallible<Vec<_>>>()?;
    let (first, rest) = requests.split_first().ok_or("nothing to measure")?;
    rt.block_on(join_once(&svc, first))?;
    measured(u64::try_from(rest.len())?, || {
        rest.iter()
            .try_for_each(|r| rt.block_on(join_once(&svc, r)))
    })
}
