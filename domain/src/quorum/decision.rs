//! The quorum deciders answer in the domain's one shape ([`crate::decision`]).

pub use crate::decision::Decision;
