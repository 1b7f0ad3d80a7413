//! The trust bundle between the control plane and its nodes: the signed bundle a Welcome (and an
//! admitted join's JoinResponse) carries out to a node ([`bundle`]), and the trust versions and
//! approver sets nodes report back in their sessions, recorded as `node.trust.reported`
//! ([`reports`]). The trust domain's X.509 authorities go out to other SPIFFE software at the
//! bundle endpoint ([`spiffe_bundle`]).
//!
//! A bundle is signed only by a process holding the JoinService signing key (`--role all` or
//! `api`); a split gateway must never sign or alter one, only relay it. Reports must never hold
//! up a session: they are appended off the request path, bounded per session, and a full queue
//! drops and counts them.

pub mod bundle;
pub mod reports;
pub mod spiffe_bundle;
