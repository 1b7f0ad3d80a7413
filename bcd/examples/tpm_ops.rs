//! Times each TPM operation bcd uses on a fresh swtpm (issue 19's figures): the raw commands
//! through tss-esapi with bcd's templates, then bcd's own `join_evidence` and
//! `answer_challenge`. `cargo run -p bcd --example tpm_ops [ROUNDS]` (needs swtpm, like the tests).

use std::str::FromStr;
use std::time::{Duration, Instant};

use bcd::tpm::templates::{ak_template, ek_template, node_key_template, EkKind};
use bcd::tpm::Tpm;
use domain::pki::NodeSigner;
use sha2::{Digest as _, Sha256};
use swtpm_fixture::swtpm::Swtpm;
use tss_esapi::constants::tss::{TPM2_RH_NULL, TPM2_ST_HASHCHECK};
use tss_esapi::constants::SessionType;
use tss_esapi::handles::AuthHandle;
use tss_esapi::interface_types::algorithm::HashingAlgorithm;
use tss_esapi::interface_types::resource_handles::Hierarchy;
use tss_esapi::interface_types::session_handles::{AuthSession, PolicySession};
use tss_esapi::structures::{
    Data, Digest, HashScheme, HashcheckTicket, Name, PcrSelectionListBuilder, PcrSlot, Public,
    SignatureScheme, SymmetricDefinition,
};
use tss_esapi::tcti_ldr::TctiNameConf;
use tss_esapi::traits::Marshall;
use tss_esapi::tss2_esys::TPMT_TK_HASHCHECK;
use tss_esapi::Context;

fn report(what: &str, mut times: Vec<Duration>) {
    times.sort();
    let median = times[times.len() / 2];
    let mean = times.iter().sum::<Duration>() / times.len() as u32;
    println!(
        "| {what} | {:.2} | {:.2} | {:.2} | {} |",
        median.as_secs_f64() * 1e3,
        mean.as_secs_f64() * 1e3,
        times[0].as_secs_f64() * 1e3,
        times.len()
    );
}

fn primary(
    ctx: &mut Context,
    hierarchy: Hierarchy,
    template: Public,
) -> (tss_esapi::handles::KeyHandle, Public, Duration) {
    let start = Instant::now();
    let made = ctx
        .execute_with_session(Some(AuthSession::Password), |c| {
            c.create_primary(hierarchy, template, None, None, None, None)
        })
        .expect("create_primary");
    (made.key_handle, made.out_public, start.elapsed())
}

fn name(public: &Public) -> Vec<u8> {
    let mut n = vec![0, 0x0B];
    n.extend(Sha256::digest(public.marshall().unwrap()));
    n
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(20);
    let swtpm = Swtpm::start();
    let mut ctx = Context::new(TctiNameConf::from_str(&swtpm.tcti()).unwrap()).unwrap();
    println!("| operation | median ms | mean ms | min ms | n |\n| --- | --- | --- | --- | --- |");
    let mut t = Vec::new();
    for _ in 0..rounds {
        let start = Instant::now();
        let _ = ctx
            .execute_without_session(|c| {
                c.get_capability(
                    tss_esapi::constants::CapabilityType::Handles,
                    0x01C0_0002,
                    1,
                )
            })
            .unwrap();
        let idx = tss_esapi::handles::NvIndexTpmHandle::new(0x01C0_0002).unwrap();
        let obj = ctx
            .execute_without_session(|c| c.tr_from_tpm_public(idx.into()))
            .unwrap();
        let _ = ctx
            .execute_with_session(Some(AuthSession::Password), |c| {
                tss_esapi::abstraction::nv::read_full(
                    c,
                    tss_esapi::interface_types::resource_handles::NvAuth::NvIndex(obj.into()),
                    idx,
                )
            })
            .unwrap();
        t.push(start.elapsed());
    }
    report("EK certificate NV read (RSA, 0x01C00002)", t);
    for (kind, label) in [
        (EkKind::Rsa2048, "create_primary EK RSA-2048 (L-1)"),
        (EkKind::EccP384, "create_primary EK P-384 (H-3)"),
    ] {
        let t = (0..rounds)
            .map(|_| {
                let (h, _, d) =
                    primary(&mut ctx, Hierarchy::Endorsement, ek_template(kind).unwrap());
                ctx.flush_context(h.into()).unwrap();
                d
            })
            .collect();
        report(label, t);
    }
    let t = (0..rounds)
        .map(|_| {
            let (h, _, d) = primary(&mut ctx, Hierarchy::Endorsement, ak_template().unwrap());
            ctx.flush_context(h.into()).unwrap();
            d
        })
        .collect();
    report("create_primary AK (P-256, endorsement)", t);
    let t = (0..rounds)
        .map(|i| {
            let (h, _, d) = primary(
                &mut ctx,
                Hierarchy::Owner,
                node_key_template(&[i as u8; 32]).unwrap(),
            );
            ctx.flush_context(h.into()).unwrap();
            d
        })
        .collect();
    report("create_primary node key (P-256, owner)", t);

    let (ak, ak_public, _) = primary(&mut ctx, Hierarchy::Endorsement, ak_template().unwrap());
    let (node, _, _) = primary(
        &mut ctx,
        Hierarchy::Owner,
        node_key_template(&[1; 32]).unwrap(),
    );
    let scheme = SignatureScheme::EcDsa {
        hash_scheme: HashScheme::new(HashingAlgorithm::Sha256),
    };
    let mut t = Vec::new();
    for i in 0..rounds * 5 {
        let digest = Digest::try_from(Sha256::digest([i as u8]).to_vec()).unwrap();
        let ticket = HashcheckTicket::try_from(TPMT_TK_HASHCHECK {
            tag: TPM2_ST_HASHCHECK,
            hierarchy: TPM2_RH_NULL,
            digest: Default::default(),
        })
        .unwrap();
        let start = Instant::now();
        ctx.execute_with_session(Some(AuthSession::Password), |c| {
            c.sign(node, digest, scheme, ticket)
        })
        .unwrap();
        t.push(start.elapsed());
    }
    report("TPM2_Sign ECDSA P-256 (node key loaded)", t);
    let t = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            ctx.execute_with_sessions(
                (
                    Some(AuthSession::Password),
                    Some(AuthSession::Password),
                    None,
                ),
                |c| {
                    c.certify(
                        node.into(),
                        ak,
                        Data::try_from(vec![7; 32]).unwrap(),
                        SignatureScheme::Null,
                    )
                },
            )
            .unwrap();
            start.elapsed()
        })
        .collect();
    report("TPM2_Certify (node key by AK)", t);
    let slots: Vec<PcrSlot> = (0..8)
        .map(|i| PcrSlot::try_from(1u32 << i).unwrap())
        .collect();
    let selection = PcrSelectionListBuilder::new()
        .with_selection(HashingAlgorithm::Sha256, &slots)
        .build()
        .unwrap();
    let t = (0..rounds)
        .map(|_| {
            let sel = selection.clone();
            let start = Instant::now();
            ctx.execute_with_session(Some(AuthSession::Password), |c| {
                c.quote(
                    ak,
                    Data::try_from(vec![7; 32]).unwrap(),
                    SignatureScheme::Null,
                    sel,
                )
            })
            .unwrap();
            start.elapsed()
        })
        .collect();
    report("TPM2_Quote PCR 0-7 SHA-256", t);
    let t = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            ctx.execute_without_session(|c| {
                tss_esapi::abstraction::pcr::read_all(c, selection.clone())
            })
            .unwrap();
            start.elapsed()
        })
        .collect();
    report("PCR read 0-7 SHA-256", t);
    ctx.flush_context(node.into()).unwrap();

    // Activation: the credential made by this TPM (LoadExternal of the EK public), then activated.
    let mut t = Vec::new();
    let (ek, ek_public, _) = primary(
        &mut ctx,
        Hierarchy::Endorsement,
        ek_template(EkKind::Rsa2048).unwrap(),
    );
    for _ in 0..rounds {
        let external = ctx
            .load_external_public(ek_public.clone(), Hierarchy::Null)
            .unwrap();
        let (blob, secret) = ctx
            .make_credential(
                external,
                Digest::try_from(vec![3; 32]).unwrap(),
                Name::try_from(name(&ak_public)).unwrap(),
            )
            .unwrap();
        ctx.flush_context(external.into()).unwrap();
        let start = Instant::now();
        let session = ctx
            .start_auth_session(
                None,
                None,
                None,
                SessionType::Policy,
                SymmetricDefinition::Null,
                HashingAlgorithm::Sha256,
            )
            .unwrap()
            .unwrap();
        ctx.execute_with_session(Some(AuthSession::Password), |c| {
            c.policy_secret(
                PolicySession::try_from(session).unwrap(),
                AuthHandle::Endorsement,
                Default::default(),
                Default::default(),
                Default::default(),
                None,
            )
        })
        .unwrap();
        ctx.execute_with_sessions((Some(AuthSession::Password), Some(session), None), |c| {
            c.activate_credential(ak, ek, blob, secret)
        })
        .unwrap();
        t.push(start.elapsed());
        let _ = ctx.flush_context(tss_esapi::handles::SessionHandle::from(session).into());
        ctx.clear_sessions();
    }
    report(
        "ActivateCredential RSA EK (policy session + PolicySecret + activate)",
        t,
    );
    ctx.flush_context(ek.into()).unwrap();
    ctx.flush_context(ak.into()).unwrap();
    drop(ctx);

    // bcd's own calls (the thread, templates, flushes and checks included).
    let tpm = Tpm::open(&swtpm.tcti()).unwrap();
    let key = tpm.create_node_key().unwrap();
    let mut t = Vec::new();
    for _ in 0..rounds * 5 {
        let start = Instant::now();
        key.sign_es256(b"message").unwrap();
        t.push(start.elapsed());
    }
    report("bcd TpmNodeKey::sign_es256", t);
    let t = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            tpm.load_node_key(key.unique()).unwrap();
            start.elapsed()
        })
        .collect();
    report("bcd Tpm::load_node_key", t);
    let t = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            tpm.certify(&key, &[1; 32]).unwrap();
            start.elapsed()
        })
        .collect();
    report("bcd Tpm::certify (AK derived, certify, AK flushed)", t);
    let maker = Swtpm::start();
    let mut mctx = Context::new(TctiNameConf::from_str(&maker.tcti()).unwrap()).unwrap();
    for kind in [EkKind::Rsa2048, EkKind::EccP384] {
        answer_rounds(&tpm, &mut mctx, &key, kind, rounds);
    }
}

/// `answer_challenge` needs a credential: the maker is a second swtpm.
fn answer_rounds(
    tpm: &Tpm,
    mctx: &mut Context,
    key: &bcd::tpm::TpmNodeKey,
    kind: EkKind,
    rounds: usize,
) {
    let label = kind.label();
    tpm.use_ek(kind).unwrap();
    let t = (0..rounds)
        .map(|_| {
            let start = Instant::now();
            tpm.join_evidence(&[]).unwrap();
            start.elapsed()
        })
        .collect();
    report(&format!("bcd Tpm::join_evidence ({label} EK)"), t);
    // answer_challenge needs a credential: the maker is a second swtpm.
    let evidence = tpm.join_evidence(&[]).unwrap();
    let ek_pub =
        <Public as tss_esapi::traits::UnMarshall>::unmarshall(&evidence.ek_public).unwrap();
    let mut ak_name = vec![0, 0x0B];
    ak_name.extend(Sha256::digest(&evidence.ak_public));
    let mut t = Vec::new();
    for _ in 0..rounds {
        let external = mctx
            .load_external_public(ek_pub.clone(), Hierarchy::Null)
            .unwrap();
        let (blob, secret) = mctx
            .make_credential(
                external,
                Digest::try_from(vec![3; 32]).unwrap(),
                Name::try_from(ak_name.clone()).unwrap(),
            )
            .unwrap();
        mctx.flush_context(external.into()).unwrap();
        let challenge = domain::attest::tpm::TpmChallenge {
            v: 1,
            credential_blob: blob.value().to_vec(),
            encrypted_secret: secret.value().to_vec(),
            pcrs: domain::attest::tpm::DEFAULT_QUOTE_PCRS.to_vec(),
            state: vec![0; 16],
        };
        let start = Instant::now();
        tpm.answer_challenge(&challenge, &[2; 32], Some(key))
            .unwrap();
        t.push(start.elapsed());
    }
    report(
        &format!("bcd Tpm::answer_challenge ({label} EK, PCR 0-7, node key certified)"),
        t,
    );
}
