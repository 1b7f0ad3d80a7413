//! A join at the gateway, beside the NodeService's `join` (`crate::node_service`): the join's
//! wire, a JoinRequest decoded and the signed JoinResponse encoded, an admitted one carrying the
//! Welcome's trust bundle ([`wire`]); the per-peer limit on refused joins, checked before a join
//! reaches the JoinService or the api ([`refusal_limits`]); and the `external` attestor, the
//! client of an attestor that runs outside the control plane ([`external_attestor`]). A TPM
//! join's two rounds take the same path: round 1's challenge goes out as a signed deferral,
//! round 2's answer comes in as the JoinRequest's attestation.
//!
//! The gateway decides no join: the JoinService (`commands::identity`) does, in this process or
//! in the api. A join must never tell its caller why it was refused (every refusal is
//! PERMISSION_DENIED "Join refused"), a limited peer's join must never reach the JoinService or
//! write to the store, and an external attestor that gives no valid answer must never refuse a
//! join (it fails it as an error, spending nothing).

pub mod external_attestor;
pub mod refusal_limits;
pub mod wire;
