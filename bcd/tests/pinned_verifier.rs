//! The serving-CA pin on real certificates: the gateway's chain is accepted only under the
//! pinned serving CA, for the name dialled, within validity; and a real TLS 1.3 handshake
//! through `bcd::client::client_config` refuses a gateway of another deployment.

use crate::common;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use bcd::client::{
    certificate_spki_pin, client_config, describe_io, describe_tls_error, pinned_serving_ca,
    PinnedServingCa,
};
use common::{keyset, now};
use domain::pki::{
    issue_serving_certificate, KeyRole, KeySet, PrivateKey, Serial, ServingCertificateRequest,
    ServingRole,
};
use rustls::client::danger::ServerCertVerifier;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use time::Duration;

struct Gateway {
    leaf: Vec<u8>,
    key: PrivateKey,
}

fn gateway(ks: &KeySet, lifetime: Duration) -> Gateway {
    let key = PrivateKey::generate(KeyRole::Serving).unwrap();
    let issued = issue_serving_certificate(
        &ks.serving_ca,
        key.public_key(),
        &ServingCertificateRequest {
            dns_names: vec!["gw.example.com".into()],
            ip_addresses: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
            role: ServingRole::Gateway,
            serial: Serial::generate().unwrap(),
            lifetime,
        },
        now(),
    )
    .unwrap();
    Gateway {
        leaf: issued.der,
        key,
    }
}

fn at(t: time::OffsetDateTime) -> UnixTime {
    UnixTime::since_unix_epoch(std::time::Duration::from_secs(t.unix_timestamp() as u64))
}

fn verify(
    verifier: &PinnedServingCa,
    leaf: &[u8],
    rest: &[&[u8]],
    name: &str,
    t: time::OffsetDateTime,
) -> Result<(), String> {
    let rest: Vec<CertificateDer<'_>> = rest.iter().map(|d| CertificateDer::from(*d)).collect();
    let name = ServerName::try_from(name.to_owned()).unwrap();
    verifier
        .verify_server_cert(&CertificateDer::from(leaf), &rest, &name, &[], at(t))
        .map(|_| ())
        .map_err(|e| describe_tls_error(&e))
}

#[test]
fn accepts_only_the_pinned_serving_ca() {
    let ks = keyset();
    let gw = gateway(&ks, Duration::days(1));
    let ca = ks.serving_ca.cert_der();
    let pin = certificate_spki_pin(ca).unwrap();
    let v = pinned_serving_ca(pin);

    verify(&v, &gw.leaf, &[ca], "127.0.0.1", now()).unwrap();
    verify(&v, &gw.leaf, &[ca], "gw.example.com", now()).unwrap();
    // The root sent too changes nothing: the pinned CA is the only anchor.
    verify(
        &v,
        &gw.leaf,
        &[ks.root_ca.cert_der(), ca],
        "gw.example.com",
        now(),
    )
    .unwrap();

    // Another name than the certificate's.
    let e = verify(&v, &gw.leaf, &[ca], "other.example.com", now()).unwrap_err();
    assert!(
        e.contains("not valid for name") || e.contains("NotValidForName"),
        "{e}"
    );
    // The CA not sent: nothing to anchor on.
    let e = verify(&v, &gw.leaf, &[], "gw.example.com", now()).unwrap_err();
    assert!(e.contains("no certificate of the pinned serving CA"), "{e}");
    // Expired leaf.
    let e = verify(
        &v,
        &gw.leaf,
        &[ca],
        "gw.example.com",
        now() + Duration::days(2),
    )
    .unwrap_err();
    assert!(e.to_lowercase().contains("expired"), "{e}");

    // Another deployment's gateway, with its own serving CA sent along.
    let other = keyset();
    let foreign = gateway(&other, Duration::days(1));
    let e = verify(
        &v,
        &foreign.leaf,
        &[other.serving_ca.cert_der()],
        "gw.example.com",
        now(),
    )
    .unwrap_err();
    assert!(e.contains("no certificate of the pinned serving CA"), "{e}");
    // Our CA sent beside a foreign leaf: the signature does not verify.
    let e = verify(&v, &foreign.leaf, &[ca], "gw.example.com", now()).unwrap_err();
    assert!(!e.is_empty());
    // Pinning the root or the node CA instead of the serving CA does not admit the gateway.
    let root_pin = pinned_serving_ca(certificate_spki_pin(ks.root_ca.cert_der()).unwrap());
    let e = verify(&root_pin, &gw.leaf, &[ca], "gw.example.com", now()).unwrap_err();
    assert!(e.contains("no certificate of the pinned serving CA"), "{e}");
}

async fn handshake(ks: &KeySet, pin_from: &KeySet) -> Result<(), String> {
    let gw = gateway(ks, Duration::days(1));
    let provider = bcd::client::provider();
    let server_config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![
                CertificateDer::from(gw.leaf.clone()),
                CertificateDer::from(ks.serving_ca.cert_der().to_vec()),
            ],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(gw.key.pkcs8_der().to_vec())),
        )
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config));
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let _ = acceptor.accept(tcp).await;
    });
    let pin = certificate_spki_pin(pin_from.serving_ca.cert_der()).unwrap();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client_config(pin, None).unwrap()));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let result = connector
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .map(|tls| {
            assert_eq!(tls.get_ref().1.alpn_protocol(), None);
        })
        .map_err(|e| describe_io(&e));
    let _ = server.await;
    result
}

#[tokio::test]
async fn tls13_handshake_under_the_pin_and_refused_under_another() {
    let ks = keyset();
    handshake(&ks, &ks).await.unwrap();
    let other = keyset();
    let e = handshake(&ks, &other).await.unwrap_err();
    assert!(e.contains("no certificate of the pinned serving CA"), "{e}");
}
