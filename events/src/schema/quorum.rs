//! Event types of `proto/bc/events/v1/quorum.proto`.
