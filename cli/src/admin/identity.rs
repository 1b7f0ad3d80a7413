//! Who a verified client certificate names: its SPIFFE ID and role, the actor of every event
//! the call appends. Read from the leaf the handshake verified, never from the request.
//!
//! TEMPORARY reading until `domain::pki::OperatorIdentity` (helper "operator") is merged.

use domain::operator::OperatorRole;
use domain::pki::TrustDomain;
use events::Actor;
use x509_parser::extensions::GeneralName;

use super::run::Caller;

/// The caller a verified operator certificate names, or why it names none.
pub fn caller_of(leaf_der: &[u8], trust_domain: &TrustDomain) -> Result<Caller, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(leaf_der)
        .map_err(|_| "not an X.509 DER certificate".to_string())?;
    let san = cert
        .subject_alternative_name()
        .map_err(|_| "the subjectAltName does not parse".to_string())?;
    let names = san.map(|s| &s.value.general_names[..]).unwrap_or_default();
    let [GeneralName::URI(uri)] = names else {
        return Err(
            "an operator certificate carries exactly one subjectAltName, its SPIFFE ID URI".into(),
        );
    };
    let prefix = format!("spiffe://{trust_domain}/operator/");
    if uri.strip_prefix(&prefix).is_none_or(str::is_empty) {
        return Err(format!(
            "{uri:?} is not an operator SPIFFE ID of {trust_domain}"
        ));
    }
    let roles: Vec<&str> = cert
        .subject()
        .iter_organizational_unit()
        .filter_map(|ou| ou.as_str().ok())
        .filter_map(|ou| ou.strip_prefix("bc-role:"))
        .collect();
    let [one] = roles[..] else {
        return Err(
            "the operator certificate's subject needs exactly one OU=bc-role:<role>".into(),
        );
    };
    let role = OperatorRole::parse(one).map_err(|e| e.to_string())?;
    let actor = Actor::new(*uri, role.as_str()).map_err(|e| e.to_string())?;
    Ok(Caller {
        spiffe_id: uri.to_string(),
        role,
        actor,
    })
}
