//! Event types of `proto/bc/events/v1/gateway.proto`.

use super::*;

event_payload! {
    GatewayServingIssued => "gateway.serving.issued", version 1;
}
