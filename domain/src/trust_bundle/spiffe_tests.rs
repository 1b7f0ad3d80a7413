//! The SPIFFE bundle's exact bytes, for fixed certificates made with openssl (P-256 CA, a P-256
//! certificate that is no CA, a P-384 CA); the expected `x` and `y` were read from the key by
//! openssl, not by the code under test.

use super::*;

/// `openssl req -x509` with a prime256v1 key: CA:TRUE, keyCertSign, CN=bc root CA.
const CA: &str = "MIIBtTCCAVugAwIBAgIUeYZ3ZzWs3YmyF2A0ZkrSmuiD3bAwCgYIKoZIzj0EAwIwJzEQMA4GA1UECgwHYmMgdGVzdDETMBEGA1UEAwwKYmMgcm9vdCBDQTAgFw0yNjEyMDcxNjEyMDdaGA8yMTI2MTExMzE2MTIwN1owJzEQMA4GA1UECgwHYmMgdGVzdDETMBEGA1UEAwwKYmMgcm9vdCBDQTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABJPJ+P7/hU/xsY9+Gj1+NJHXs2thknXZBG/GCSal2UrvXzdUiPm5qGueNkAqR5hhld2QcObQcH2Mm+MSxPZkUKajYzBhMB0GA1UdDgQWBBRfeJBsHaoXUMF65fi5hznrfbGuHzAfBgNVHSMEGDAWgBRfeJBsHaoXUMF65fi5hznrfbGuHzAPBgNVHRMBAf8EBTADAQH/MA4GA1UdDwEB/wQEAwIBBjAKBggqhkjOPQQDAgNIADBFAiEAkRPdn+GGgXOK+0lNUCc2gDPKEAWwMAegxkmXzahixLECIHVtSxpqCkiItKK9FXOd/NcLvPpr4TEAvt2ZW/4m2BKT";
/// The same key, basicConstraints CA:FALSE.
const NOT_CA: &str = "MIIBeTCCASCgAwIBAgIUKr9+NK9N/k/zqNyB3+kSX4caphUwCgYIKoZIzj0EAwIwEzERMA8GA1UEAwwIbm90IGEgY2EwIBcNMjYxMjA3MTYxMjA3WhgPMjEyNjExMTMxNjEyMDdaMBMxETAPBgNVBAMMCG5vdCBhIGNhMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAEk8n4/v+FT/Gxj34aPX40kdeza2GSddkEb8YJJqXZSu9fN1SI+bmoa542QCpHmGGV3ZBw5tBwfYyb4xLE9mRQpqNQME4wHQYDVR0OBBYEFF94kGwdqhdQwXrl+LmHOet9sa4fMB8GA1UdIwQYMBaAFF94kGwdqhdQwXrl+LmHOet9sa4fMAwGA1UdEwEB/wQCMAAwCgYIKoZIzj0EAwIDRwAwRAIgfq4qUoWglzbAzw8RHJT2UHs1JvZjhRvtQmmDf2HJcnACIH1sDvVaJsd/ihdc6TfVTz+PxTV7yQJRIYxtiYF2TCTV";
/// A secp384r1 CA.
const P384_CA: &str = "MIIBuDCCAT6gAwIBAgIUcRZIyHMPMJHIGYczgCCFWZq3kiowCgYIKoZIzj0EAwIwEjEQMA4GA1UEAwwHcDM4NCBjYTAgFw0yNjEyMDcxNjEyMDdaGA8yMTI2MTExMzE2MTIwN1owEjEQMA4GA1UEAwwHcDM4NCBjYTB2MBAGByqGSM49AgEGBSuBBAAiA2IABEgBLR/y7TU4R96AVXuEh7srDQQJ916yAcb5iRemf7o9zOrb1M4EHGF3UTBGP5KQdA7lJDVRcoc1t4WSNbuVPO+BYO0ZiWwOj02CWoZm03bl5/P3WhyeLH3mrOFyeiK8u6NTMFEwHQYDVR0OBBYEFBbj2/JAgCFjxG7G58EbL3+A2dgyMB8GA1UdIwQYMBaAFBbj2/JAgCFjxG7G58EbL3+A2dgyMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDaAAwZQIxAPGQOg34LzPSAqkwQ3SuVz/puNkWcU8+TQMiw8Znhr5MIpbTqDJx9IAJSZbOQJBULwIwF4KcnR+tpO7a5QfkEqTSXNk4l13ch7ym+Z0rkXwnss5XkFK/m3nR7BVJ1o0CS6xr";

fn der(b64: &str) -> Vec<u8> {
    STANDARD.decode(b64).expect("fixture base64")
}

#[test]
fn one_authority_renders_the_exact_document() {
    let ca = der(CA);
    let text = render_spiffe_bundle(&[&ca], 7, 300).unwrap();
    let expected = format!(
        r#"{{
  "keys": [
    {{
      "crv": "P-256",
      "kty": "EC",
      "use": "x509-svid",
      "x": "k8n4_v-FT_Gxj34aPX40kdeza2GSddkEb8YJJqXZSu8",
      "x5c": [
        "{CA}"
      ],
      "y": "XzdUiPm5qGueNkAqR5hhld2QcObQcH2Mm-MSxPZkUKY"
    }}
  ],
  "spiffe_refresh_hint": 300,
  "spiffe_sequence": 7
}}
"#
    );
    assert_eq!(text, expected);
}

#[test]
fn the_sequence_and_hint_are_the_values_given_and_authorities_keep_their_order() {
    let ca = der(CA);
    let text = render_spiffe_bundle(&[&ca, &ca], u64::MAX, 1).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(doc["spiffe_sequence"], serde_json::json!(u64::MAX));
    assert_eq!(doc["spiffe_refresh_hint"], serde_json::json!(1));
    assert_eq!(doc["keys"].as_array().unwrap().len(), 2);
    assert!(doc["keys"][0].get("kid").is_none());
}

#[test]
fn no_authorities_is_an_empty_key_set() {
    assert_eq!(
        render_spiffe_bundle(&[], 1, 300).unwrap(),
        "{\n  \"keys\": [],\n  \"spiffe_refresh_hint\": 300,\n  \"spiffe_sequence\": 1\n}\n"
    );
}

#[test]
fn the_authorities_are_the_root_alone() {
    let root = der(CA);
    assert_eq!(x509_authorities(&root), vec![root.as_slice()]);
}

#[test]
fn a_certificate_that_is_no_ca_is_refused() {
    let (ca, leaf) = (der(CA), der(NOT_CA));
    assert_eq!(
        render_spiffe_bundle(&[&ca, &leaf], 1, 300),
        Err(SpiffeBundleError::NotACa { index: 1 })
    );
}

#[test]
fn a_p384_ca_is_refused() {
    assert_eq!(
        render_spiffe_bundle(&[&der(P384_CA)], 1, 300),
        Err(SpiffeBundleError::NotP256 { index: 0 })
    );
}

#[test]
fn bytes_that_are_no_certificate_are_refused() {
    assert!(matches!(
        render_spiffe_bundle(&[b"not a certificate"], 1, 300),
        Err(SpiffeBundleError::NotACertificate { index: 0, .. })
    ));
    let mut trailing = der(CA);
    trailing.push(0);
    assert_eq!(
        render_spiffe_bundle(&[&trailing], 1, 300),
        Err(SpiffeBundleError::NotACertificate {
            index: 0,
            reason: "1 bytes after the certificate".into()
        })
    );
}

#[test]
fn a_zero_refresh_hint_is_refused() {
    assert_eq!(
        render_spiffe_bundle(&[&der(CA)], 1, 0),
        Err(SpiffeBundleError::ZeroRefreshHint)
    );
}
