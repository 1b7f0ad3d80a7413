//! The challenge state (spec 000 "tpm", two rounds, stateless server): what round 2 needs to
//! check the answer, sealed with AES-256-GCM under the deployment's challenge key so that any
//! replica can open it and no agent can forge or read it. The nonce (12 random bytes, drawn by
//! the caller from the shell's entropy) leads;
//! the plaintext is a fixed binary layout of version 1:
//!
//! ```text
//! v(1) csr_sha256(32) not_after_us(8, i64 BE) ek_sha256(32) secret(32) n(1) pcrs(n) ak_public(rest)
//! ```

use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};

/// The plaintext layout's version.
pub const STATE_VERSION: u8 = 1;
/// Bound into every seal: a state of another purpose never opens as one.
const AAD: &[u8] = b"bc tpm challenge state v1";

/// What a challenge committed to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChallengeState {
    /// The CSR the challenge is for.
    pub csr_sha256: [u8; 32],
    /// Answers after this (µs) are refused.
    pub not_after_us: i64,
    /// SHA-256 of the EK's TPMT_PUBLIC.
    pub ek_sha256: [u8; 32],
    /// The AK's TPMT_PUBLIC, as round 1 checked it.
    pub ak_public: Vec<u8>,
    /// The secret MakeCredential protected.
    pub secret: [u8; 32],
    /// The PCRs the quote must cover, ascending.
    pub pcrs: Vec<u32>,
}

/// Why a state does not open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum StateError {
    /// Not sealed under this key, altered, or of another layout.
    #[error("the challenge state does not open under this deployment's key")]
    Invalid,
}

fn key(challenge_key: &[u8; 32]) -> Result<LessSafeKey, StateError> {
    UnboundKey::new(&AES_256_GCM, challenge_key)
        .map(LessSafeKey::new)
        .map_err(|_| StateError::Invalid)
}

impl ChallengeState {
    /// `nonce || AES-256-GCM(plaintext)`; `nonce` must be random (never reused under one key).
    pub fn seal(
        &self,
        challenge_key: &[u8; 32],
        nonce: [u8; NONCE_LEN],
    ) -> Result<Vec<u8>, StateError> {
        let mut plain = vec![STATE_VERSION];
        plain.extend_from_slice(&self.csr_sha256);
        plain.extend_from_slice(&self.not_after_us.to_be_bytes());
        plain.extend_from_slice(&self.ek_sha256);
        plain.extend_from_slice(&self.secret);
        // A PCR index past 255 is no TPM's (they have 24): refused, never silently dropped.
        let pcrs = self
            .pcrs
            .iter()
            .map(|p| u8::try_from(*p))
            .collect::<Result<Vec<u8>, _>>()
            .map_err(|_| StateError::Invalid)?;
        plain.push(u8::try_from(pcrs.len()).map_err(|_| StateError::Invalid)?);
        plain.extend_from_slice(&pcrs);
        plain.extend_from_slice(&self.ak_public);
        key(challenge_key)?
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(AAD),
                &mut plain,
            )
            .map_err(|_| StateError::Invalid)?;
        let mut out = nonce.to_vec();
        out.extend(plain);
        Ok(out)
    }

    /// Opens a sealed state.
    pub fn open(sealed: &[u8], challenge_key: &[u8; 32]) -> Result<ChallengeState, StateError> {
        if sealed.len() < NONCE_LEN {
            return Err(StateError::Invalid);
        }
        let (nonce, body) = sealed.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).map_err(|_| StateError::Invalid)?;
        let mut body = body.to_vec();
        let plain = key(challenge_key)?
            .open_in_place(nonce, Aad::from(AAD), &mut body)
            .map_err(|_| StateError::Invalid)?;
        let fixed = 1 + 32 + 8 + 32 + 32 + 1;
        if plain.len() < fixed || plain[0] != STATE_VERSION {
            return Err(StateError::Invalid);
        }
        let arr32 = |at: usize| {
            let mut a = [0u8; 32];
            a.copy_from_slice(&plain[at..at + 32]);
            a
        };
        let mut ts = [0u8; 8];
        ts.copy_from_slice(&plain[33..41]);
        let n = usize::from(plain[fixed - 1]);
        if plain.len() < fixed + n {
            return Err(StateError::Invalid);
        }
        Ok(ChallengeState {
            csr_sha256: arr32(1),
            not_after_us: i64::from_be_bytes(ts),
            ek_sha256: arr32(41),
            secret: arr32(73),
            pcrs: plain[fixed..fixed + n]
                .iter()
                .map(|p| u32::from(*p))
                .collect(),
            ak_public: plain[fixed + n..].to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ChallengeState {
        ChallengeState {
            csr_sha256: [1; 32],
            not_after_us: 1_700_000_000_000_000,
            ek_sha256: [2; 32],
            ak_public: vec![3, 4, 5],
            secret: [6; 32],
            pcrs: vec![0, 7, 23],
        }
    }

    #[test]
    fn round_trips_and_refuses_another_key_or_a_flipped_bit() {
        let sealed = sample().seal(&[9; 32], [5; 12]).expect("seals");
        assert_eq!(sealed.len(), 12 + 1 + 32 + 8 + 32 + 32 + 1 + 3 + 3 + 16);
        assert_eq!(ChallengeState::open(&sealed, &[9; 32]), Ok(sample()));
        assert_eq!(
            ChallengeState::open(&sealed, &[8; 32]),
            Err(StateError::Invalid)
        );
        let mut flipped = sealed.clone();
        flipped[20] ^= 1;
        assert_eq!(
            ChallengeState::open(&flipped, &[9; 32]),
            Err(StateError::Invalid)
        );
        assert_eq!(
            ChallengeState::open(&sealed[..11], &[9; 32]),
            Err(StateError::Invalid)
        );
    }
}
