//! Fixed 32-byte values (kids, digests, batch ids, tree hashes) as typed newtypes.
//!
//! Spec ("The destructive-batch quorum", "Changing the approver set"): every hash an outsider
//! verifies is SHA-256, so every such value here is exactly 32 bytes. Each kind of value gets its own
//! type so a set digest can never be passed where a scope root is expected. They print and serialize
//! as lowercase hex (64 characters) and parse from hex of either case.

/// Defines a 32-byte newtype with hex `Display`, `FromStr`, serde and conversions.
macro_rules! bytes32_newtype {
    ($(#[$meta:meta])* $name:ident) => {
        $(#[$meta])*
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(pub [u8; 32]);

        impl $name {
            /// The raw 32 bytes.
            pub fn as_bytes(&self) -> &[u8; 32] {
                &self.0
            }

            /// Lowercase hex, 64 characters.
            pub fn to_hex(&self) -> String {
                hex::encode(self.0)
            }

            /// Parses 64 hex characters.
            pub fn from_hex(text: &str) -> Result<Self, $crate::quorum::bytes32::Bytes32Error> {
                $crate::quorum::bytes32::parse_hex32(text).map($name)
            }

            /// Takes exactly 32 bytes from a slice (for wire fields of unchecked length).
            pub fn from_slice(bytes: &[u8]) -> Result<Self, $crate::quorum::bytes32::Bytes32Error> {
                <[u8; 32]>::try_from(bytes)
                    .map($name)
                    .map_err(|_| $crate::quorum::bytes32::Bytes32Error::Length(bytes.len()))
            }
        }

        impl From<[u8; 32]> for $name {
            fn from(bytes: [u8; 32]) -> Self {
                $name(bytes)
            }
        }

        impl AsRef<[u8]> for $name {
            fn as_ref(&self) -> &[u8] {
                &self.0
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.to_hex())
            }
        }

        impl std::fmt::Debug for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                write!(f, "{}({})", stringify!($name), self.to_hex())
            }
        }

        impl std::str::FromStr for $name {
            type Err = $crate::quorum::bytes32::Bytes32Error;
            fn from_str(text: &str) -> Result<Self, Self::Err> {
                Self::from_hex(text)
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.to_hex())
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
                Self::from_hex(&text).map_err(serde::de::Error::custom)
            }
        }
    };
}

pub(crate) use bytes32_newtype;

/// A 32-byte value that could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Bytes32Error {
    /// Not 64 hex characters.
    #[error("expected 64 hex characters (a SHA-256 value), got {0:?}")]
    Hex(String),
    /// Not 32 bytes.
    #[error("expected 32 bytes (a SHA-256 value), got {0}")]
    Length(usize),
}

/// Parses 64 hex characters into 32 bytes.
pub(crate) fn parse_hex32(text: &str) -> Result<[u8; 32], Bytes32Error> {
    let mut out = [0u8; 32];
    hex::decode_to_slice(text, &mut out).map_err(|_| {
        let shown: String = text.chars().take(80).collect();
        Bytes32Error::Hex(shown)
    })?;
    Ok(out)
}

/// Serde for variable-length bytes as lowercase hex (`#[serde(with = "hex_bytes")]`).
pub(crate) mod hex_bytes {
    /// Writes bytes as hex.
    pub(crate) fn serialize<S: serde::Serializer>(
        bytes: &[u8],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&hex::encode(bytes))
    }

    /// Reads hex into bytes.
    pub(crate) fn deserialize<'de, D: serde::Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Vec<u8>, D::Error> {
        let text = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(deserializer)?;
        hex::decode(text.as_ref()).map_err(serde::de::Error::custom)
    }
}
