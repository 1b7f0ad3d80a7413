//! The TLS client identity signs through the node key, whatever holds it: a real TLS 1.3
//! handshake against an in-test rustls server that requires and verifies the client
//! certificate under the node CA, with a file key here and a TPM key in `node_key_tpm`.

use crate::common;

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

use bcd::client::{certificate_spki_pin, client_config, describe_io, ClientIdentity};
use bcd::node_key::NodeKey;
use common::{issue_for, keyset, now};
use domain::pki::{
    issue_serving_certificate, KeyRole, KeySet, PrivateKey, Serial, ServingCertificateRequest,
    ServingRole,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use time::Duration;

/// A TLS 1.3 handshake of `key`'s certificate (`chain`, leaf first) against a server that
/// verifies client certificates under `ks`'s node CA; the leaf the server saw.
pub async fn mtls_handshake(
    ks: &KeySet,
    chain: Vec<Vec<u8>>,
    key: &NodeKey,
) -> Result<Vec<u8>, String> {
    let gw_key = PrivateKey::generate(KeyRole::Serving).unwrap();
    let gw = issue_serving_certificate(
        &ks.serving_ca,
        gw_key.public_key(),
        &ServingCertificateRequest {
            dns_names: vec!["gw.example.com".into()],
            ip_addresses: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
            role: ServingRole::Gateway,
            serial: Serial::generate().unwrap(),
            lifetime: Duration::days(1),
        },
        now(),
    )
    .unwrap();
    let provider = bcd::client::provider();
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(ks.node_ca.cert_der().to_vec()))
        .unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .unwrap();
    let server_config = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_client_cert_verifier(verifier)
        .with_single_cert(
            vec![
                CertificateDer::from(gw.der.clone()),
                CertificateDer::from(ks.serving_ca.cert_der().to_vec()),
            ],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(gw_key.pkcs8_der().to_vec())),
        )
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config));
    let server = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let tls = acceptor.accept(tcp).await.map_err(|e| describe_io(&e))?;
        let peer = tls
            .get_ref()
            .1
            .peer_certificates()
            .ok_or("no client certificate")?;
        Ok::<Vec<u8>, String>(peer[0].to_vec())
    });
    let pin = certificate_spki_pin(ks.serving_ca.cert_der()).unwrap();
    let identity = ClientIdentity::new(&chain, key);
    let connector =
        tokio_rustls::TlsConnector::from(Arc::new(client_config(pin, Some(&identity)).unwrap()));
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let client = connector
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .map_err(|e| describe_io(&e));
    // TLS 1.3: the server has verified the client's CertificateVerify once it completes.
    let seen = server.await.unwrap();
    client?;
    seen
}

#[tokio::test]
async fn a_file_node_key_signs_the_handshake_through_node_signer() {
    let ks = keyset();
    let key = NodeKey::generate_file().unwrap();
    let leaf = issue_for(&ks, &key, "n1", &[]);
    let chain = vec![leaf.clone(), ks.node_ca.cert_der().to_vec()];
    assert_eq!(mtls_handshake(&ks, chain, &key).await.unwrap(), leaf);
}

#[tokio::test]
async fn a_key_that_is_not_the_certificates_fails_the_handshake() {
    let ks = keyset();
    let key = NodeKey::generate_file().unwrap();
    let other = NodeKey::generate_file().unwrap();
    let chain = vec![
        issue_for(&ks, &other, "n1", &[]),
        ks.node_ca.cert_der().to_vec(),
    ];
    let err = mtls_handshake(&ks, chain, &key).await.unwrap_err();
    // The server checks CertificateVerify against the certificate's key.
    assert_eq!(err, "invalid peer certificate: BadSignature");
}
