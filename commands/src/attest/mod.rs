//! The attestation plane's operator side: pools and their attestor policy, join requests and
//! their decisions. The join's admission step (in `identity`) reads the same rows through
//! [`rows`] and [`projections::attest::read`].
//!
//! | module | job |
//! | --- | --- |
//! | [`rows`] | projection rows into domain state |

pub mod rows;

/// The reads of `pools` and `join_requests`, named here for the join's admission step.
pub use projections::attest::read;
