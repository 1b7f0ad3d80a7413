//! Event types of `proto/bc/events/v1/tenants.proto`.

use super::*;

event_payload! {
    TenantCreated => "tenant.created", version 1;
    TenantDeleted => "tenant.deleted", version 1;
}

/// The stream of one tenant's life cycle: `tenant/<id>`.
pub fn tenant_stream(tenant_id: &str) -> String {
    format!("tenant/{tenant_id}")
}
