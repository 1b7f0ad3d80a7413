//! Reading a node identity from an agent certificate (`domain::pki::NodeIdentity::from_leaf_der`,
//! what the gateway does with every presented client certificate) and the SPIFFE ID and pin
//! text parsers. Accepted implies: the same bytes read to the same identity, the SPIFFE ID names
//! the trust domain asked for, and the text forms print back to what was parsed.
#![no_main]

use domain::pki::{NodeIdentity, Pin, SpiffeId};
use fuzz_support::trust_domain;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let td = trust_domain();
    if let Ok(identity) = NodeIdentity::from_leaf_der(data, &td) {
        assert_eq!(identity.spiffe_id.trust_domain, td);
        let again = NodeIdentity::from_leaf_der(data, &td).expect("reads again");
        assert_eq!(again, identity);
        let uri = identity.spiffe_id.to_string();
        assert_eq!(
            SpiffeId::parse(&uri).expect("own SPIFFE ID parses"),
            identity.spiffe_id
        );
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(id) = SpiffeId::parse(text) {
        assert_eq!(SpiffeId::parse(&id.to_string()).expect("prints back"), id);
    }
    if let Ok(pin) = text.parse::<Pin>() {
        assert_eq!(pin.to_string().parse::<Pin>().ok(), Some(pin));
    }
});
