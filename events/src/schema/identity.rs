//! Event types of `proto/bc/events/v1/identity.proto`.
