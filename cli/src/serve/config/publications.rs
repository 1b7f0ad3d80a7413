//! What a gateway publishes beside its node service, and for which roles: the node CA's
//! revocation list (`[crl]`) and the SPIFFE bundle endpoint (`[spiffe_bundle]`), each resolved
//! by its own module, plus the CRL distribution point node certificates name, which only the
//! roles that issue them (`all`, `api`) take. Checks only; nothing is opened here.

use domain::pki::CrlDistributionPoint;

use crate::serve::config::crl::{crl_settings, distribution_point, FileCrl};
use crate::serve::config::spiffe_bundle::{spiffe_bundle_settings, FileSpiffeBundle};

/// The publications resolved.
pub(crate) struct Publications {
    pub crl: gateway::publish::crl::CrlOptions,
    pub crl_distribution_point: Option<CrlDistributionPoint>,
    pub spiffe_bundle: Option<gateway::trust::spiffe_bundle::SpiffeBundleEndpoint>,
}

/// `[crl]` and `[spiffe_bundle]` for a process of these roles (`serves`: a gateway runs here;
/// `issues`: node certificates are signed here), the environment (`env`) over the file. An
/// error is the key and what is wrong with it.
pub(crate) fn publications(
    crl: Option<&FileCrl>,
    spiffe_bundle: Option<&FileSpiffeBundle>,
    serves: bool,
    issues: bool,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Publications, (&'static str, String)> {
    let options = crl_settings(crl, env("BC_CRL_LISTEN"), env("BC_CRL_NEXT_UPDATE"))
        .map_err(|e| (e.key, e.message))?;
    if options.listen.is_some() && !serves {
        return Err(("crl.listen", "a gateway serves the revocation list (role all or gateway), not the api: leave [crl] listen and BC_CRL_LISTEN out".into()));
    }
    let point = distribution_point(crl, env("BC_CRL_DISTRIBUTION_POINT"))
        .map_err(|e| (e.key, e.message))?;
    if point.is_some() && !issues {
        return Err(("crl.distribution_point", "node certificates are issued by the api (role all or api), which names the distribution point: leave [crl] distribution_point and BC_CRL_DISTRIBUTION_POINT out of a gateway's configuration".into()));
    }
    let spiffe_bundle = spiffe_bundle_settings(
        spiffe_bundle,
        env("BC_SPIFFE_BUNDLE_LISTEN"),
        env("BC_SPIFFE_REFRESH_HINT"),
    )?;
    if spiffe_bundle.is_some() && !serves {
        return Err(("spiffe_bundle", "the SPIFFE bundle endpoint runs on a gateway (role all or gateway), not on an api: leave [spiffe_bundle] and BC_SPIFFE_BUNDLE_LISTEN out".into()));
    }
    Ok(Publications {
        crl: options,
        crl_distribution_point: point,
        spiffe_bundle,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crl(listen: Option<&str>, point: Option<&str>) -> FileCrl {
        FileCrl {
            listen: listen.map(str::to_owned),
            distribution_point: point.map(str::to_owned),
            ..FileCrl::default()
        }
    }

    fn refusal(file: &FileCrl, serves: bool, issues: bool) -> Option<&'static str> {
        publications(Some(file), None, serves, issues, |_| None)
            .err()
            .map(|(key, _)| key)
    }

    #[test]
    fn each_role_takes_only_its_own_publications() {
        let point = crl(None, Some("http://crl.example.com/node-ca.crl"));
        let listen = crl(Some("127.0.0.1:8080"), None);
        // all: both.
        assert_eq!(refusal(&point, true, true), None);
        assert_eq!(refusal(&listen, true, true), None);
        // gateway: serves, issues nothing.
        assert_eq!(refusal(&point, true, false), Some("crl.distribution_point"));
        assert_eq!(refusal(&listen, true, false), None);
        // api: issues, serves nothing.
        assert_eq!(refusal(&point, false, true), None);
        assert_eq!(refusal(&listen, false, true), Some("crl.listen"));
        let resolved = publications(Some(&point), None, true, true, |name| {
            (name == "BC_CRL_DISTRIBUTION_POINT").then(|| "http://10.0.0.9/c.crl".to_owned())
        })
        .map(|p| p.crl_distribution_point.map(|p| p.to_string()))
        .ok();
        assert_eq!(resolved, Some(Some("http://10.0.0.9/c.crl".to_owned())));
    }
}
