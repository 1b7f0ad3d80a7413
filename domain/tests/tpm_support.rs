//! A machine with a real software TPM (swtpm) driven by tpm2-tools, the independent client of
//! the `tpm` attestor's tests: it reads the EK and its certificate, makes the AK and node keys
//! (primaries, left loaded: swtpm has no resource manager), activates credentials, quotes,
//! certifies and signs. TPM2_Certify with qualifying data goes through `tpm2_send` (tpm2-tools
//! 5.4's tpm2_certify cannot pass qualifying data). commands' tests use it too (`#[path]`), each
//! suite a part of it.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

use domain::attest::tpm::attest::EcdsaSignature;
use domain::attest::tpm::{CertifiedKey, PcrValue, TpmAnswer, TpmChallenge};
use domain::pki::{NodeSigner, PublicKey, Signature, SignerError};
use sha2::{Digest, Sha256, Sha384};
use swtpm_fixture::swtpm::Swtpm;

/// Which of swtpm's two EKs the machine uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EkKind {
    /// RSA-2048, TCG template L-1 (SHA-256, AES-128-CFB).
    Rsa,
    /// ECC P-384, TCG template H-3 (SHA-384, AES-256-CFB).
    P384,
}

impl EkKind {
    fn handle(self) -> &'static str {
        match self {
            EkKind::Rsa => "0x81010001",
            EkKind::P384 => "0x81010016",
        }
    }

    fn cert_index(self) -> &'static str {
        match self {
            EkKind::Rsa => "0x01C00002",
            EkKind::P384 => "0x01C00016",
        }
    }
}

/// The AK template of the contract (endorsement hierarchy).
pub const AK_ATTRIBUTES: &str =
    "fixedtpm|fixedparent|sensitivedataorigin|userwithauth|restricted|sign";
/// The node key template (owner hierarchy).
pub const NODE_ATTRIBUTES: &str = "fixedtpm|fixedparent|sensitivedataorigin|userwithauth|noda|sign";

/// A machine: one swtpm and a scratch directory.
pub struct Machine {
    pub tpm: Swtpm,
    pub ek: EkKind,
    dir: tempfile::TempDir,
    pub ak: String,
}

fn run(cmd: &mut Command) -> Vec<u8> {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

fn strip_tpm2b(bytes: Vec<u8>) -> Vec<u8> {
    let size = usize::from(u16::from_be_bytes([bytes[0], bytes[1]]));
    assert_eq!(bytes.len(), size + 2, "a TPM2B file");
    bytes[2..].to_vec()
}

fn tpm2b(bytes: &[u8]) -> Vec<u8> {
    let mut out = (bytes.len() as u16).to_be_bytes().to_vec();
    out.extend_from_slice(bytes);
    out
}

/// The DER certificate at the start of an NV read (the index may be longer than it).
fn der_prefix(bytes: &[u8]) -> Vec<u8> {
    assert_eq!(bytes[0], 0x30);
    let len = match bytes[1] {
        0x82 => usize::from(bytes[2]) << 8 | usize::from(bytes[3]),
        0x81 => usize::from(bytes[2]),
        n => usize::from(n),
    };
    let header = if bytes[1] == 0x82 {
        4
    } else if bytes[1] == 0x81 {
        3
    } else {
        2
    };
    bytes[..header + len].to_vec()
}

impl Machine {
    /// A fresh TPM with its AK made and loaded.
    pub fn new(ek: EkKind) -> Machine {
        let tpm = Swtpm::start();
        let dir = tempfile::tempdir().expect("a scratch directory");
        let mut m = Machine {
            tpm,
            ek,
            dir,
            ak: String::new(),
        };
        m.tool("tpm2_flushcontext", &["-t"]);
        m.ak = m.create_primary("e", AK_ATTRIBUTES, None);
        m
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn path_str(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }

    /// Runs a tpm2-tools command against this TPM.
    pub fn tool(&self, tool: &str, args: &[&str]) -> Vec<u8> {
        run(Command::new(tool)
            .args(args)
            .env("TPM2TOOLS_TCTI", self.tpm.tcti()))
    }

    fn transient(&self) -> Vec<String> {
        let out = self.tool("tpm2_getcap", &["handles-transient"]);
        String::from_utf8_lossy(&out)
            .lines()
            .filter_map(|l| l.trim().strip_prefix("- ").map(str::to_owned))
            .collect()
    }

    /// A primary ECC P-256 ECDSA-SHA256 signing key in `hierarchy`, left loaded: its handle.
    pub fn create_primary(
        &self,
        hierarchy: &str,
        attributes: &str,
        unique: Option<&[u8]>,
    ) -> String {
        let before = self.transient();
        let ctx = self.path_str("primary.ctx");
        let mut args = vec![
            "-C",
            hierarchy,
            "-g",
            "sha256",
            "-G",
            "ecc256:ecdsa-sha256:null",
            "-a",
            attributes,
            "-c",
            &ctx,
        ];
        let unique_path = self.path_str("unique.bin");
        if let Some(u) = unique {
            // TPMS_ECC_POINT: x = the record, y empty (tpm2-tools reads its sizes
            // little-endian).
            let mut point = (u.len() as u16).to_le_bytes().to_vec();
            point.extend_from_slice(u);
            point.extend_from_slice(&[0, 0]);
            std::fs::write(&unique_path, point).unwrap();
            args.extend(["-u", &unique_path]);
        }
        self.tool("tpm2_createprimary", &args);
        let after = self.transient();
        let new: Vec<String> = after.into_iter().filter(|h| !before.contains(h)).collect();
        assert_eq!(new.len(), 1, "one new transient object");
        new[0].clone()
    }

    /// A TPMT_PUBLIC of a loaded or persistent object.
    pub fn public(&self, handle: &str) -> Vec<u8> {
        let out = self.path_str("read.pub");
        self.tool("tpm2_readpublic", &["-c", handle, "-o", &out]);
        strip_tpm2b(std::fs::read(&out).unwrap())
    }

    /// The name tpm2-tools reports.
    pub fn name(&self, handle: &str) -> Vec<u8> {
        let out = self.path_str("read.name");
        self.tool("tpm2_readpublic", &["-c", handle, "-n", &out]);
        std::fs::read(&out).unwrap()
    }

    /// The EK's TPMT_PUBLIC.
    pub fn ek_public(&self) -> Vec<u8> {
        self.public(self.ek.handle())
    }

    /// The EK certificate (DER) from NV.
    pub fn ek_certificate(&self) -> Vec<u8> {
        let out = self.path_str("ek.der");
        self.tool("tpm2_nvread", &[self.ek.cert_index(), "-o", &out]);
        der_prefix(&std::fs::read(&out).unwrap())
    }

    /// The AK's TPMT_PUBLIC.
    pub fn ak_public(&self) -> Vec<u8> {
        self.public(&self.ak.clone())
    }

    /// TPM2_ActivateCredential with the AK and the EK (its policy: PolicySecret(endorsement),
    /// and for the H-3 EK PolicyOR(PolicyA, PolicyC) in SHA-384).
    pub fn activate(&self, credential_blob: &[u8], encrypted_secret: &[u8]) -> Vec<u8> {
        let mut file = 0xBADC_C0DEu32.to_be_bytes().to_vec();
        file.extend_from_slice(&1u32.to_be_bytes());
        file.extend(tpm2b(credential_blob));
        file.extend(tpm2b(encrypted_secret));
        let cred = self.path_str("cred.bin");
        std::fs::write(&cred, file).unwrap();
        let session = self.path_str("session.ctx");
        let mut start = vec!["--policy-session", "-S", &session];
        if self.ek == EkKind::P384 {
            start.extend(["-g", "sha384"]);
        }
        self.tool("tpm2_startauthsession", &start);
        self.tool("tpm2_policysecret", &["-S", &session, "-c", "e"]);
        if self.ek == EkKind::P384 {
            let mut a = Sha384::new();
            a.update([0u8; 48]);
            a.update(0x151u32.to_be_bytes());
            a.update(0x4000_000Bu32.to_be_bytes());
            let policy_a = Sha384::digest(a.finalize());
            let policy_c = hex::decode(
                "d6032ce61f2fb3c240eb3cf6a33237ef2b6a16f4293c22b455e261cffd217ad5\
                 b4947c2d73e63005eed2dc2b3593d165",
            )
            .unwrap();
            let (pa, pc) = (self.path_str("policy_a"), self.path_str("policy_c"));
            std::fs::write(&pa, policy_a).unwrap();
            std::fs::write(&pc, policy_c).unwrap();
            let list = format!("sha384:{pa},{pc}");
            self.tool("tpm2_policyor", &["-S", &session, "-l", &list]);
        }
        let secret = self.path_str("secret.bin");
        let auth = format!("session:{session}");
        self.tool(
            "tpm2_activatecredential",
            &[
                "-c",
                &self.ak,
                "-C",
                self.ek.handle(),
                "-i",
                &cred,
                "-o",
                &secret,
                "-P",
                &auth,
            ],
        );
        self.tool("tpm2_flushcontext", &[&session]);
        std::fs::read(&secret).unwrap()
    }

    /// TPM2_Quote by the AK of SHA-256 `pcrs`, qualified by `extra`: (TPMS_ATTEST, TPMT_SIGNATURE).
    pub fn quote(&self, pcrs: &[u32], extra: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let list = format!(
            "sha256:{}",
            pcrs.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
        let (msg, sig) = (self.path_str("quote.msg"), self.path_str("quote.sig"));
        let q = hex::encode(extra);
        self.tool(
            "tpm2_quote",
            &[
                "-c", &self.ak, "-l", &list, "-q", &q, "-m", &msg, "-s", &sig, "-g", "sha256",
            ],
        );
        (std::fs::read(&msg).unwrap(), std::fs::read(&sig).unwrap())
    }

    /// The SHA-256 bank's values of `pcrs`.
    pub fn pcr_values(&self, pcrs: &[u32]) -> Vec<Vec<u8>> {
        let list = format!(
            "sha256:{}",
            pcrs.iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
        let out = self.path_str("pcrs.bin");
        self.tool("tpm2_pcrread", &[&list, "-o", &out]);
        let bytes = std::fs::read(&out).unwrap();
        assert_eq!(bytes.len(), 32 * pcrs.len());
        bytes.chunks(32).map(<[u8]>::to_vec).collect()
    }

    /// Extends a SHA-256 PCR.
    pub fn extend(&self, pcr: u32, digest: &[u8; 32]) {
        let arg = format!("{pcr}:sha256={}", hex::encode(digest));
        self.tool("tpm2_pcrextend", &[&arg]);
    }

    /// TPM2_Certify(`key`, `signer`) qualified by `qualifying`, as a raw command through
    /// tpm2_send (password sessions for both): (TPMS_ATTEST, TPMT_SIGNATURE).
    pub fn certify_with(&self, key: &str, signer: &str, qualifying: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let handle = |h: &str| u32::from_str_radix(h.trim_start_matches("0x"), 16).unwrap();
        let mut auth = Vec::new();
        for _ in 0..2 {
            auth.extend_from_slice(&0x4000_0009u32.to_be_bytes());
            auth.extend_from_slice(&[0, 0, 0, 0, 0]);
        }
        let mut body = handle(key).to_be_bytes().to_vec();
        body.extend_from_slice(&handle(signer).to_be_bytes());
        body.extend_from_slice(&(auth.len() as u32).to_be_bytes());
        body.extend(auth);
        body.extend(tpm2b(qualifying));
        body.extend_from_slice(&0x0010u16.to_be_bytes());
        let mut cmd = 0x8002u16.to_be_bytes().to_vec();
        cmd.extend_from_slice(&((10 + body.len()) as u32).to_be_bytes());
        cmd.extend_from_slice(&0x148u32.to_be_bytes());
        cmd.extend(body);
        let (cmd_path, rsp_path) = (self.path_str("certify.cmd"), self.path_str("certify.rsp"));
        std::fs::write(&cmd_path, &cmd).unwrap();
        for _ in 0..20 {
            let stdin = std::fs::File::open(&cmd_path).unwrap();
            run(Command::new("tpm2_send")
                .args(["-o", &rsp_path])
                .stdin(stdin)
                .env("TPM2TOOLS_TCTI", self.tpm.tcti()));
            let rsp = std::fs::read(&rsp_path).unwrap();
            let rc = u32::from_be_bytes([rsp[6], rsp[7], rsp[8], rsp[9]]);
            if rc & 0x900 == 0x900 && rc & 0x80 == 0 {
                std::thread::sleep(std::time::Duration::from_millis(20));
                continue; // a warning (TPM_RC_RETRY, TPM_RC_YIELDED): send again
            }
            assert_eq!(rc, 0, "TPM2_Certify answered {rc:#x}");
            let params = &rsp[14..];
            let size = usize::from(u16::from_be_bytes([params[0], params[1]]));
            let attest = params[2..2 + size].to_vec();
            let sig = &params[2 + size..];
            // TPMT_SIGNATURE (ECDSA): alg, hash, TPM2B r, TPM2B s.
            let r_len = usize::from(u16::from_be_bytes([sig[4], sig[5]]));
            let s_at = 6 + r_len;
            let s_len = usize::from(u16::from_be_bytes([sig[s_at], sig[s_at + 1]]));
            return (attest, sig[..s_at + 2 + s_len].to_vec());
        }
        panic!("TPM2_Certify kept answering a warning");
    }

    /// The AK's certification of `key`.
    pub fn certify(&self, key: &str, qualifying: &[u8]) -> (Vec<u8>, Vec<u8>) {
        let ak = self.ak.clone();
        self.certify_with(key, &ak, qualifying)
    }

    /// An ES256 signature by a loaded key over SHA-256 of `message`, as r || s.
    pub fn sign(&self, key: &str, message: &[u8]) -> Vec<u8> {
        let digest = self.path_str("digest.bin");
        std::fs::write(&digest, Sha256::digest(message)).unwrap();
        let sig = self.path_str("sign.sig");
        self.tool(
            "tpm2_sign",
            &["-c", key, "-g", "sha256", "-d", "-o", &sig, &digest],
        );
        let parsed =
            EcdsaSignature::parse(&std::fs::read(&sig).unwrap()).expect("an ECDSA signature");
        let mut rs = vec![0u8; 64];
        rs[32 - parsed.r.len()..32].copy_from_slice(&parsed.r);
        rs[64 - parsed.s.len()..].copy_from_slice(&parsed.s);
        rs
    }

    /// Everything a good agent answers to `challenge` for the CSR `csr_sha256`: the activated
    /// secret, a quote of the challenge's PCRs bound to it and the CSR, and the AK's
    /// certification of the loaded `node_key`.
    pub fn answer(
        &self,
        challenge: &TpmChallenge,
        node_key: &str,
        csr_sha256: &[u8; 32],
    ) -> TpmAnswer {
        let secret = self.activate(&challenge.credential_blob, &challenge.encrypted_secret);
        let extra: [u8; 32] = Sha256::digest([&secret[..], &csr_sha256[..]].concat()).into();
        let (quote, quote_signature) = self.quote(&challenge.pcrs, &extra);
        let values = self.pcr_values(&challenge.pcrs);
        let (certify_info, signature) = self.certify(node_key, csr_sha256);
        TpmAnswer {
            state: challenge.state.clone(),
            secret,
            quote,
            quote_signature,
            pcr_values: challenge
                .pcrs
                .iter()
                .zip(values)
                .map(|(i, d)| PcrValue {
                    index: *i,
                    digest: d,
                })
                .collect(),
            node_key: Some(CertifiedKey {
                public: self.public(node_key),
                certify_info,
                signature,
            }),
        }
    }

    /// A [`NodeSigner`] for a loaded node key.
    pub fn signer(&self, key: &str) -> TpmSigner<'_> {
        let public = domain::attest::tpm::public::TpmPublic::parse(&self.public(key)).unwrap();
        let point = public.ecc_point(32).unwrap();
        TpmSigner {
            machine: self,
            key: key.to_owned(),
            public: PublicKey::from_uncompressed_point(&point).unwrap(),
        }
    }
}

/// A node key held by the machine's TPM.
pub struct TpmSigner<'a> {
    machine: &'a Machine,
    key: String,
    public: PublicKey,
}

impl NodeSigner for TpmSigner<'_> {
    fn public_key(&self) -> &PublicKey {
        &self.public
    }

    fn sign_es256(&self, message: &[u8]) -> Result<Signature, SignerError> {
        let rs = self.machine.sign(&self.key, message);
        Signature::from_bytes(&rs).ok_or_else(|| SignerError("not r || s".into()))
    }
}
