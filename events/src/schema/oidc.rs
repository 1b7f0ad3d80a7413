//! Event types of `proto/bc/events/v1/oidc.proto`.

use super::*;

event_payload! {
    OidcKeyAdded => "oidc.key_added", version 1;
    OidcKeyPromoted => "oidc.key_promoted", version 1;
    OidcKeyRetired => "oidc.key_retired", version 1;
}

/// The one stream of the OIDC issuer's keys.
pub const OIDC_ISSUER_STREAM: &str = "oidc-issuer";
