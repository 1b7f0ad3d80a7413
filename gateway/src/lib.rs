//! The agent-facing edge: TLS, node sessions and the revocation feed.
//!
//! Identity and mTLS stay here: past this crate, code sees only typed, already-checked node
//! identities. It must never hold a signing key when it runs split from the API.
