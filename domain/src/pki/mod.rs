//! PKI: the key set, certificate profiles, CSR checks and SPIFFE IDs.
