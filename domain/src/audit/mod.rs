//! Audit tree maths: RFC 9162 Merkle hashing and proofs, leaf encoding, C2SP checkpoints.
