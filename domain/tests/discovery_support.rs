//! The discovery tests' world (`discovery_join`, `discovery_admit`): a key set, a site agent
//! with its stored certificate holding its site's boot lease, a discovery token, a boot entry, a
//! ramdisk CSR and claims, and the assertion the agent signs; facts are built by hand.

#![allow(dead_code)]

use domain::attest::discovery::{
    DiscoveryAssertion, DiscoveryAttestor, DiscoveryConfig, DiscoveryRefusal,
    SignedDiscoveryAssertion,
};
use domain::attest::{
    AttestRequest, AttestationResult, Attestor, AttestorRefusal, BootEntryState, Facts,
    SiteLeaseState, Verdict,
};
use domain::identity::{
    claims_digests, unix_us, CertState, ExpectBinding, HardwareClaims, NodeState, NodeStatus,
    TokenRole, TokenState,
};
use domain::pki::{
    build_csr, issue_node_certificate, KeyRole, KeySet, KeySetLifetimes, NodeCertificateDecision,
    NodeId, NodeRole, PrivateKey, Serial, SiteId, SpiffeId, TokenSecret, TrustDomain, VerifiedCsr,
};
use time::OffsetDateTime;

pub const SITE: &str = "fra1";
pub const SIGNER: &str = "node_site1";
pub const MAC: &str = "aa:bb:cc:dd:ee:01";
pub const UUID: &str = "4c4c4544-0042-3510-8052-b4c04f384d32";
pub const ENTRY: &str = "boot_1";

pub struct World {
    pub keys: KeySet,
    pub site_key: PrivateKey,
    pub site_cert: Vec<u8>,
    pub site_serial: String,
    pub secret: TokenSecret,
    pub facts: Facts,
    pub assertion: DiscoveryAssertion,
    pub claims: HardwareClaims,
    pub csr: VerifiedCsr,
    pub now: OffsetDateTime,
    pub config: DiscoveryConfig,
}

pub fn t0() -> OffsetDateTime {
    OffsetDateTime::from_unix_timestamp(1_790_000_000).unwrap()
}

pub fn ms(t: OffsetDateTime) -> i64 {
    unix_us(t) / 1000
}

pub fn site_certificate(keys: &KeySet, key: &PrivateKey, node: &str) -> (Vec<u8>, String, i64) {
    let csr = VerifiedCsr::verify(&build_csr(key).unwrap()).unwrap();
    let decision = NodeCertificateDecision {
        spiffe_id: SpiffeId::new(
            keys.trust_domain.clone(),
            SiteId::new(SITE).unwrap(),
            NodeId::new(node).unwrap(),
        ),
        role: NodeRole::Site,
        serial: Serial::generate().unwrap(),
        requested_lifetime: None,
        statements: Vec::new(),
    };
    // Issued a minute before the join.
    let issued = issue_node_certificate(
        &keys.node_ca,
        &csr,
        &decision,
        t0() - time::Duration::minutes(1),
    )
    .unwrap();
    (
        issued.der,
        issued.serial.to_hex(),
        unix_us(issued.not_after),
    )
}

pub fn world() -> World {
    let now = t0();
    let td = TrustDomain::new("compute.example.com").unwrap();
    let keys = KeySet::generate(
        td,
        now - time::Duration::hours(1),
        KeySetLifetimes::default(),
    )
    .unwrap();
    let site_key = PrivateKey::generate(KeyRole::Node).unwrap();
    let (site_cert, site_serial, not_after_us) = site_certificate(&keys, &site_key, SIGNER);
    let secret = TokenSecret::generate().unwrap();
    let token = TokenState {
        token_id: "tok_d1".into(),
        tenant_id: "acme".into(),
        site_id: SITE.into(),
        pool_id: "commission".into(),
        role: TokenRole::Discovery,
        uses_total: 1,
        uses_left: 1,
        expires_at_us: unix_us(now + time::Duration::minutes(10)),
        secret_hash: secret.hash(),
        expect: ExpectBinding {
            product_uuid: None,
            mac: Some(MAC.to_uppercase()),
        },
        allow_reclaim: false,
        reclaim_node_id: None,
        for_node_id: None,
        require_approval: false,
        revoked: false,
    };
    let mut facts = Facts {
        tokens: vec![token],
        ..Facts::default()
    };
    facts.nodes.insert(
        SIGNER.into(),
        NodeState {
            node_id: SIGNER.into(),
            tenant_id: "acme".into(),
            site_id: SITE.into(),
            pool_id: "infra".into(),
            role: NodeRole::Site,
            status: NodeStatus::Active,
            identity_generation: 1,
            hardware_key_sha256: None,
            product_uuid_sha256: None,
        },
    );
    facts.certificates.insert(
        site_serial.clone(),
        CertState {
            serial: site_serial.clone(),
            node_id: SIGNER.into(),
            identity_generation: 1,
            der: site_cert.clone(),
            not_after_us,
            revoked: false,
            allowed_kinds: Vec::new(),
        },
    );
    facts.site_leases.insert(
        SITE.into(),
        SiteLeaseState {
            site_id: SITE.into(),
            holder_node_id: Some(SIGNER.into()),
            epoch: 4,
            expires_at_us: unix_us(now + time::Duration::seconds(40)),
        },
    );
    facts.boot_entries.insert(
        ENTRY.into(),
        BootEntryState {
            entry_id: ENTRY.into(),
            site_id: SITE.into(),
            tenant_id: "acme".into(),
            mac: MAC.into(),
            product_uuid: Some(UUID.into()),
            pool_id: "commission".into(),
            not_after_us: unix_us(now + time::Duration::hours(1)),
            removed: false,
        },
    );
    let issued_at = now - time::Duration::seconds(30);
    let assertion = DiscoveryAssertion {
        site_id: SITE.into(),
        signer_node_id: SIGNER.into(),
        lease_epoch: 4,
        mac: MAC.into(),
        ip: "10.0.0.7".into(),
        product_uuid: UUID.into(),
        workflow_id: ENTRY.into(),
        issued_at_ms: ms(issued_at),
        not_after_ms: ms(issued_at + time::Duration::minutes(15)),
    };
    let claims = HardwareClaims {
        product_uuid: Some(UUID.to_uppercase()),
        macs: vec!["AA-BB-CC-DD-EE-01".into(), "aa:bb:cc:dd:ee:02".into()],
        hardware_key: None,
    };
    let ramdisk_key = PrivateKey::generate(KeyRole::Node).unwrap();
    let csr = VerifiedCsr::verify(&build_csr(&ramdisk_key).unwrap()).unwrap();
    World {
        keys,
        site_key,
        site_cert,
        site_serial,
        secret,
        facts,
        assertion,
        claims,
        csr,
        now,
        config: DiscoveryConfig::default(),
    }
}

impl World {
    pub fn signed(&self) -> SignedDiscoveryAssertion {
        SignedDiscoveryAssertion::sign(&self.assertion, self.site_cert.clone(), &self.site_key)
            .unwrap()
    }

    pub fn attestor(&self) -> DiscoveryAttestor {
        DiscoveryAttestor::new(self.keys.trust_domain.clone(), self.config.clone())
    }

    pub fn token(&mut self) -> &mut TokenState {
        &mut self.facts.tokens[0]
    }

    pub fn signer(&mut self) -> &mut NodeState {
        self.facts.nodes.get_mut(SIGNER).unwrap()
    }

    pub fn signer_cert(&mut self) -> &mut CertState {
        let serial = self.site_serial.clone();
        self.facts.certificates.get_mut(&serial).unwrap()
    }

    pub fn lease(&mut self) -> &mut SiteLeaseState {
        self.facts.site_leases.get_mut(SITE).unwrap()
    }

    /// Plans and verifies `evidence` with `token`.
    pub fn run_with(
        &self,
        evidence: &[u8],
        token: Option<&TokenSecret>,
    ) -> Result<Box<AttestationResult>, AttestorRefusal> {
        let digests = claims_digests(&self.claims);
        let request = AttestRequest {
            role: NodeRole::Ramdisk,
            csr: &self.csr,
            claims: &self.claims,
            digests: &digests,
            evidence,
            token,
            now: self.now,
            entropy: &const { domain::attest::Entropy::from_seed([7; 32]) },
        };
        let attestor = self.attestor();
        let planned = attestor.plan(&request)?;
        match attestor.verify(&request, &planned.plan, &self.facts) {
            Verdict::Admit(r) => Ok(r),
            Verdict::Refuse(r) => Err(r),
            Verdict::Challenge(_) => panic!("discovery never challenges"),
        }
    }

    pub fn run(&self) -> Result<Box<AttestationResult>, AttestorRefusal> {
        self.run_with(&self.signed().to_bytes(), Some(&self.secret))
    }

    /// The refusal's text, which must be `discovery:<reason>`.
    pub fn refused(&self) -> String {
        match self.run() {
            Ok(r) => panic!("admitted: {r:?}"),
            Err(r) => r.text(),
        }
    }
}

/// A change to the world before a join.
pub type Change = Box<dyn Fn(&mut World)>;

pub fn text(r: DiscoveryRefusal) -> String {
    r.to_string()
}
