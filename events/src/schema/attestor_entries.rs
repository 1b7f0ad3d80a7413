//! Event types of `proto/bc/events/v1/attestor_entries.proto`: operator-managed attestor
//! entries, one generic list per name.

use super::*;

event_payload! {
    AttestorEntryAdded => "attestor.entry.added", version 1;
    AttestorEntryRemoved => "attestor.entry.removed", version 1;
}
