//! The `cloud-iid` attestor (spec 000 "cloud-iid"): a cloud VM proves itself with the identity
//! document its cloud signed (AWS's instance identity document, GCP's instance identity token,
//! Azure's attested data, any OIDC issuer's token), and joins where the operator registered its
//! account (`bcctl cloud account add`). Each (provider, account, instance) admits one join ever.
//!
//! Issue 20 (h-cloud) fills this module in.

/// The attestor id.
pub const CLOUD_IID_ATTESTOR: &str = "cloud-iid";
