//! The attestor contract (spec 001 "The contract", "What a result means", "Two-round joins").
//!
//! An attestor answers one question at join time: may this machine join, and as which node? It
//! is pure. The shell runs it in two steps inside the join's transaction:
//!
//! 1. [`Attestor::plan`] reads the request (evidence, CSR digest, claims, the opened token) and
//!    names the [`FactKey`]s it needs, or refuses malformed evidence at once;
//! 2. the shell loads exactly those facts from the projections into [`Facts`], and
//!    [`Attestor::verify`] answers a [`Verdict`]: an [`AttestationResult`], a [`Deferral`] or an
//!    [`AttestorRefusal`].
//!
//! An attestor never spends anything itself: what must be used once, bound for good, or spent
//! (a token use) is *named* in the result, and the admission step (written once, after every
//! attestor) checks and records it in the same transaction. That is also what lets an
//! out-of-process attestor, which never sees the database, be held to the same rules.

use std::collections::{BTreeMap, BTreeSet};

use time::OffsetDateTime;

use super::entries::{EntryList, EntryState};
use crate::identity::{CertState, ClaimsDigests, HardwareClaims, NodeState, TokenState};
use crate::pki::{NodeRole, TokenHash, TokenSecret, VerifiedCsr};

/// What an attestor is asked: everything the JoinRequest carried, already decoded, with the CSR
/// verified and the sealed token (when the request had one) opened.
#[derive(Debug, Clone, Copy)]
pub struct AttestRequest<'a> {
    /// The role asked for; the registry already refused a role the attestor does not list.
    pub role: NodeRole,
    /// The CSR, verified (its SHA-256 is [`VerifiedCsr::sha256`]: bind every proof to it).
    pub csr: &'a VerifiedCsr,
    /// Self-asserted claims, and their digests (the only form events record).
    pub claims: &'a HardwareClaims,
    /// Digests of `claims`.
    pub digests: &'a ClaimsDigests,
    /// `JoinRequest.attestation`: the evidence, or the answer to a challenge.
    pub evidence: &'a [u8],
    /// The sealed token's secret, when the request carried one and it opened for this CSR.
    pub token: Option<&'a TokenSecret>,
    /// The JoinService's clock at this round.
    pub now: OffsetDateTime,
    /// Fresh random bytes the shell drew for this round: an attestor that needs randomness (a
    /// challenge's secret, a seal's nonce) derives it from here, never from the OS.
    pub entropy: &'a Entropy,
}

/// Randomness handed to an attestor by the shell (an attestor draws none itself): a 32-byte
/// seed, expanded per purpose with HKDF-SHA256, so that one round's uses never share bytes and
/// a test can fix the seed.
#[derive(Clone)]
pub struct Entropy([u8; 32]);

impl std::fmt::Debug for Entropy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Entropy(..)")
    }
}

impl Entropy {
    /// The seed the shell drew (from the OS; a test may fix it).
    pub const fn from_seed(seed: [u8; 32]) -> Entropy {
        Entropy(seed)
    }

    /// `out.len()` bytes for `purpose` (at most 8,160): HKDF-SHA256-Expand of the seed with
    /// the purpose as its info, so different purposes get independent bytes.
    pub fn fill(&self, purpose: &str, out: &mut [u8]) {
        struct Len(usize);
        impl ring::hkdf::KeyType for Len {
            fn len(&self) -> usize {
                self.0
            }
        }
        let prk = ring::hkdf::Prk::new_less_safe(ring::hkdf::HKDF_SHA256, &self.0);
        let info = [purpose.as_bytes()];
        // Only a length past 255 digests fails: every caller asks for far fewer bytes.
        prk.expand(&info, Len(out.len()))
            .and_then(|okm| okm.fill(out))
            .expect("HKDF-SHA256 expands at most 8,160 bytes");
    }

    /// `N` bytes for `purpose`.
    pub fn bytes<const N: usize>(&self, purpose: &str) -> [u8; N] {
        let mut out = [0u8; N];
        self.fill(purpose, &mut out);
        out
    }
}

/// A fact an attestor asks the shell to load before [`Attestor::verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FactKey {
    /// The `join_tokens` row whose secret hash this is.
    TokenByHash(TokenHash),
    /// The `join_tokens` row with this id.
    TokenById(String),
    /// The `nodes` row with this id.
    Node(String),
    /// The `node_certs` row with this serial (lower-case hex).
    Certificate(String),
    /// Whether `attestation_uses` holds (attestor, subject).
    Use {
        /// The `attestation_uses.attestor`.
        attestor: String,
        /// The 32-byte subject.
        subject: [u8; 32],
    },
    /// The `node_bindings` row of this subject.
    Binding([u8; 32]),
    /// The active entry of an operator-managed list ([`crate::attest::entries`]) holding this
    /// key (in the list's canonical form), if any.
    Entry {
        /// The list (`tpm-allow`, `cloud-account`, ...).
        list: String,
        /// The key.
        key: String,
    },
    /// The boot lease of this site (`site:<id>:boot`), if it was ever held.
    SiteLease(String),
    /// The boot entry with this id (`boot_…`), active or removed.
    BootEntry(String),
}

impl FactKey {
    /// The active entry of `list` holding `key`.
    pub fn entry(list: &EntryList, key: &str) -> FactKey {
        FactKey::Entry {
            list: list.name.to_owned(),
            key: key.to_owned(),
        }
    }
}

/// A site's boot lease (`site:<id>:boot`) as the discovery attestor reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteLeaseState {
    /// The site.
    pub site_id: String,
    /// The node holding it, or that held it last (`None`: released, or never held).
    pub holder_node_id: Option<String>,
    /// The epoch of the current (or last) holding: rises at every acquisition.
    pub epoch: u64,
    /// When the holding lapses (µs); a lease past it is held by nobody.
    pub expires_at_us: i64,
}

impl SiteLeaseState {
    /// Whether `node` holds the lease at exactly `epoch` at `now_us`.
    pub fn held_by(&self, node: &str, epoch: u64, now_us: i64) -> bool {
        self.holder_node_id.as_deref() == Some(node)
            && self.epoch == epoch
            && now_us < self.expires_at_us
    }
}

/// A site's boot entry: a machine an operator registered for commissioning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BootEntryState {
    /// `boot_…`.
    pub entry_id: String,
    /// The site.
    pub site_id: String,
    /// The tenant (the site's).
    pub tenant_id: String,
    /// Lower-case, colon-separated.
    pub mac: String,
    /// The registered product UUID, when the operator named one.
    pub product_uuid: Option<String>,
    /// The pool the ramdisk joins.
    pub pool_id: String,
    /// The entry serves no script after this (µs).
    pub not_after_us: i64,
    /// Removed by an operator (or replaced).
    pub removed: bool,
}

/// A `node_bindings` row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingState {
    /// The attestor that bound it.
    pub attestor: String,
    /// The node it is bound to.
    pub node_id: String,
}

/// The facts the shell loaded for the keys [`Attestor::plan`] named. A key that names nothing
/// stored is simply absent.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// Tokens found, by secret hash (`FactKey::TokenByHash`) or id (`FactKey::TokenById`).
    pub tokens: Vec<TokenState>,
    /// Nodes found, by id.
    pub nodes: BTreeMap<String, NodeState>,
    /// Certificates found, by serial.
    pub certificates: BTreeMap<String, CertState>,
    /// The (attestor, subject) pairs `attestation_uses` holds, of those asked.
    pub uses: BTreeSet<(String, [u8; 32])>,
    /// Bindings found, by subject.
    pub bindings: BTreeMap<[u8; 32], BindingState>,
    /// Active entries of operator-managed lists, by (list, key).
    pub entries: BTreeMap<(String, String), EntryState>,
    /// Site boot leases, by site id.
    pub site_leases: BTreeMap<String, SiteLeaseState>,
    /// Boot entries, by entry id.
    pub boot_entries: BTreeMap<String, BootEntryState>,
}

impl Facts {
    /// The token with this secret hash.
    pub fn token_by_hash(&self, hash: &TokenHash) -> Option<&TokenState> {
        self.tokens.iter().find(|t| &t.secret_hash == hash)
    }

    /// The token with this id.
    pub fn token_by_id(&self, id: &str) -> Option<&TokenState> {
        self.tokens.iter().find(|t| t.token_id == id)
    }

    /// The active entry of `list` holding `key`, when loaded.
    pub fn entry(&self, list: &EntryList, key: &str) -> Option<&EntryState> {
        self.entries.get(&(list.name.to_owned(), key.to_owned()))
    }

    /// Whether (attestor, subject) was used.
    pub fn used(&self, attestor: &str, subject: &[u8; 32]) -> bool {
        self.uses.contains(&(attestor.to_owned(), *subject))
    }
}

/// A refusal: `<attestor>:<reason>` in the `security.join.refused` event, ACCESS_DENIED on the
/// wire. `tenant_id` only once the evidence authenticated a tenant (a token's secret matched, a
/// stored certificate was presented); otherwise the refusal goes to the root tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttestorRefusal {
    /// The attestor id (or `join` for the admission step's own refusals). A `Box<str>`: a
    /// refusal is the error of every attestor decision and stays within clippy's bound on error
    /// sizes (128 bytes) with [`AttestorRefusal::spent`].
    pub attestor: Box<str>,
    /// The reason, kebab-case (`expired`, `bound-elsewhere`).
    pub reason: String,
    /// The tenant the evidence authenticated, if any.
    pub tenant_id: Option<String>,
    /// The token used, when known.
    pub token_id: Option<String>,
    /// The node named or reclaimed, when known.
    pub node_id: Option<String>,
    /// Set when the refusal is a single-use subject already spent (`csr-key-used`, `reused`):
    /// that subject. A join of this very request spent it when its answer was lost; the shell
    /// then loads that join and [`super::answer_again`] decides whether it is answered again.
    pub spent: Option<Box<SpentUse>>,
}

/// A single-use subject a refusal found spent (`attestation_uses` holds it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpentUse {
    /// The `attestation_uses.attestor`.
    pub attestor: String,
    /// The 32-byte subject.
    pub subject: [u8; 32],
}

impl AttestorRefusal {
    /// A refusal attributed to nobody (the root tenant).
    pub fn new(attestor: &str, reason: &str) -> Self {
        AttestorRefusal {
            attestor: attestor.into(),
            reason: reason.to_owned(),
            tenant_id: None,
            token_id: None,
            node_id: None,
            spent: None,
        }
    }

    /// Refused because the single-use (attestor, subject) is spent already.
    pub fn spent(mut self, attestor: &str, subject: &[u8; 32]) -> Self {
        self.spent = Some(Box::new(SpentUse {
            attestor: attestor.to_owned(),
            subject: *subject,
        }));
        self
    }

    /// Attributed to `tenant` (the evidence authenticated it).
    pub fn in_tenant(mut self, tenant: &str) -> Self {
        self.tenant_id = Some(tenant.to_owned());
        self
    }

    /// Naming the token.
    pub fn with_token(mut self, token: &str) -> Self {
        self.token_id = Some(token.to_owned());
        self
    }

    /// Naming the node.
    pub fn with_node(mut self, node: &str) -> Self {
        self.node_id = Some(node.to_owned());
        self
    }

    /// `<attestor>:<reason>`, as the event records it.
    pub fn text(&self) -> String {
        format!("{}:{}", self.attestor, self.reason)
    }
}

impl std::fmt::Display for AttestorRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.attestor, self.reason)
    }
}

/// What the control plane knows about the node key (spec 001 "What a result means").
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum NodeKeyStatement {
    /// Nothing proved about the key: `nodeKey: unattested`, no URI in the certificate.
    #[default]
    Unattested,
    /// A statement to write into the certificate (`urn:bc:tpm-ak:...`) with its `nodeKey`
    /// label (`tpm`). The admission step refuses one the renewal path cannot prove again
    /// (`join:node-key-statement`).
    Statement {
        /// The `node.joined` `node_key` value.
        label: String,
        /// The URI SAN.
        uri: String,
    },
}

/// Evidence that admits one join at most: recorded in `attestation_uses` by the admission step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SingleUse {
    /// The `attestation_uses.attestor` (usually the attestor's id).
    pub attestor: String,
    /// SHA-256 of what must be used once.
    pub subject: [u8; 32],
    /// When the row may be pruned (µs); `None` keeps it forever.
    pub expires_at_us: Option<i64>,
    /// The reason a second use is refused with (`reused`, `csr-key-used`).
    pub reason_if_used: String,
}

/// An operator must approve this join first (spec 001 "Approval"): the admission step finds
/// the join request keyed by (attestor, subject), creates it when there is none, defers while it
/// is pending, refuses when it was rejected, and admits (consuming it) once approved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalAsk {
    /// SHA-256 of what the request is keyed by (the built-ins use the CSR's SHA-256).
    pub subject: [u8; 32],
    /// One operator-readable line (never the evidence).
    pub summary: String,
}

/// An admitted join, as the attestor sees it (spec 001 "The contract"). The admission step then
/// checks the rest itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttestationResult {
    /// The tenant the node joins (or keeps, on a reclaim).
    pub tenant_id: String,
    /// Its role.
    pub role: NodeRole,
    /// Its site.
    pub site_id: String,
    /// Its pool.
    pub pool_id: String,
    /// The node to reclaim in place (identity generation + 1, older certificates revoked).
    pub reclaim_node_id: Option<String>,
    /// The token to spend one use of: its state as loaded (the admission step checks its expect
    /// binding and reclaim rule, and writes `token.used`).
    pub token: Option<TokenState>,
    /// Subjects to bind to the node for good (`node_bindings`).
    pub bind: Vec<[u8; 32]>,
    /// Single-use subjects to record in `attestation_uses`.
    pub single_use: Vec<SingleUse>,
    /// The node-key statement.
    pub node_key: NodeKeyStatement,
    /// Command kinds the certificate allows (empty: every kind the role allows).
    pub allowed_kinds: Vec<String>,
    /// Set when an operator must approve the join first.
    pub approval: Option<ApprovalAsk>,
}

/// A deferral that asks the agent a question (spec 001 "Challenge"). Stateless on the server:
/// whatever the attestor needs to check the answer goes into `payload`, sealed if it must be,
/// and bound to the CSR's SHA-256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Challenge {
    /// Attestor-specific bytes for the agent's producer.
    pub payload: Vec<u8>,
    /// Answers after this (µs) are refused.
    pub not_after_us: i64,
}

/// What [`Attestor::verify`] answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The machine may join, subject to the admission step.
    Admit(Box<AttestationResult>),
    /// Not yet: ask the agent this, and verify its answer in the next round.
    Challenge(Challenge),
    /// Refused.
    Refuse(AttestorRefusal),
}

/// What [`Attestor::plan`] answers: the facts to load, and what it already read of the request
/// (the parsed evidence, an opened state), handed to [`Attestor::verify`] so that nothing is
/// parsed or opened twice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Planned<P> {
    /// The facts the shell loads before `verify`.
    pub facts: Vec<FactKey>,
    /// The attestor's own plan.
    pub plan: P,
}

impl<P> Planned<P> {
    /// Load `facts`, then verify with `plan`.
    pub fn new(facts: Vec<FactKey>, plan: P) -> Planned<P> {
        Planned { facts, plan }
    }
}

/// An attestor (spec 001 "The contract"). Implementations are pure: no clock (the request has
/// `now`), no randomness (the request has `entropy`), no database (the facts are loaded by the
/// shell), no network.
pub trait Attestor: Send + Sync {
    /// What `plan` read of the request and `verify` needs (the parsed evidence); `()` when
    /// there is nothing to carry.
    type Plan: Send + Sync + 'static;

    /// The id an agent names in `JoinRequest.attestor` (`join-token`, `x509pop`).
    fn id(&self) -> &str;

    /// The agent roles it may admit; any other is refused `<id>:wrong-role` before `plan`.
    fn roles(&self) -> &[NodeRole];

    /// Reads the request and names the facts to load; refuses evidence that does not parse.
    fn plan(&self, request: &AttestRequest<'_>) -> Result<Planned<Self::Plan>, AttestorRefusal>;

    /// Decides, from the request, the plan and the facts loaded for its keys. The shell may
    /// call it again with the same plan (a transaction retried from a fresh read).
    fn verify(&self, request: &AttestRequest<'_>, plan: &Self::Plan, facts: &Facts) -> Verdict;
}

/// `plan`, then `verify` on `facts` (a plan's refusal is the verdict): for callers that load
/// no facts of their own (tests, benches, round 1 of a challenge).
pub fn plan_and_verify<A: Attestor + ?Sized>(
    attestor: &A,
    request: &AttestRequest<'_>,
    facts: &Facts,
) -> Verdict {
    match attestor.plan(request) {
        Ok(planned) => attestor.verify(request, &planned.plan, facts),
        Err(refusal) => Verdict::Refuse(refusal),
    }
}

/// A plan whose type is erased: the facts to load and the attestor's `verify` with its plan
/// bound, so the registry can hold attestors of every plan type side by side.
pub struct BoxedPlan<'a> {
    /// The facts the shell loads before [`BoxedPlan::verify`].
    pub facts: Vec<FactKey>,
    verify: Box<BoundVerify<'a>>,
}

/// An attestor's `verify` with its plan bound.
type BoundVerify<'a> = dyn Fn(&AttestRequest<'_>, &Facts) -> Verdict + Send + Sync + 'a;

impl BoxedPlan<'_> {
    /// The attestor's verdict on the loaded facts, with the plan it made.
    pub fn verify(&self, request: &AttestRequest<'_>, facts: &Facts) -> Verdict {
        (self.verify)(request, facts)
    }
}

impl std::fmt::Debug for BoxedPlan<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoxedPlan")
            .field("facts", &self.facts)
            .finish()
    }
}

/// [`Attestor`] with its plan type erased (implemented for every attestor): what the registry
/// holds as `Arc<dyn AnyAttestor>`.
pub trait AnyAttestor: Send + Sync {
    /// [`Attestor::id`].
    fn id(&self) -> &str;
    /// [`Attestor::roles`].
    fn roles(&self) -> &[NodeRole];
    /// [`Attestor::plan`], its plan bound into the answer's `verify`.
    fn plan_boxed<'s>(
        &'s self,
        request: &AttestRequest<'_>,
    ) -> Result<BoxedPlan<'s>, AttestorRefusal>;
}

impl<A: Attestor> AnyAttestor for A {
    fn id(&self) -> &str {
        Attestor::id(self)
    }

    fn roles(&self) -> &[NodeRole] {
        Attestor::roles(self)
    }

    fn plan_boxed<'s>(
        &'s self,
        request: &AttestRequest<'_>,
    ) -> Result<BoxedPlan<'s>, AttestorRefusal> {
        let Planned { facts, plan } = self.plan(request)?;
        Ok(BoxedPlan {
            facts,
            verify: Box::new(move |request, facts| self.verify(request, &plan, facts)),
        })
    }
}
