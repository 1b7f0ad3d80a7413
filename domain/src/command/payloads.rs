//! The built-in kinds' payload messages, package `bc.command.v1` (declared with prost, as
//! [`crate::attest::discovery::wire`] is, so the pure domain needs no build step):
//!
//! ```text
//! message InventoryRefresh {}
//! message LogsCollect { string unit = 1; uint32 lines = 2; }
//! message DiagPing    { string echo = 1; }
//! message NodeReboot  { string reason = 1; uint32 delay_seconds = 2; }
//! message DiskWipe    { string device = 1; string method = 2; }
//! message DeployImage { string image_url = 1; bytes image_sha256 = 2; string target_device = 3; }
//! message BootKexec   { string kernel_url = 1; string initrd_url = 2; string cmdline = 3; }
//! ```
//!
//! [`decode_payload`] decodes a payload by its kind's type and refuses bytes whose re-encoding
//! does not give them back (unknown fields, non-canonical encodings), so an approver is never
//! shown less than what the machine would run (spec 003 "payload-unknown-fields").

use prost::Message;

/// `bc.command.v1.InventoryRefresh`.
#[derive(Clone, PartialEq, Eq, prost::Message, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InventoryRefresh {}

/// `bc.command.v1.LogsCollect`: the last `lines` lines of a systemd unit's journal.
#[derive(Clone, PartialEq, Eq, prost::Message, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogsCollect {
    /// The unit (empty: bcd's own log).
    #[prost(string, tag = "1")]
    pub unit: String,
    /// How many lines (0: the default of 100).
    #[prost(uint32, tag = "2")]
    pub lines: u32,
}

/// `bc.command.v1.DiagPing`: answers with its echo.
#[derive(Clone, PartialEq, Eq, prost::Message, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiagPing {
    /// Echoed back in the result's output.
    #[prost(string, tag = "1")]
    pub echo: String,
}

/// `bc.command.v1.NodeReboot`.
#[derive(Clone, PartialEq, Eq, prost::Message, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeReboot {
    /// Why (shown to approvers and passed to the hook).
    #[prost(string, tag = "1")]
    pub reason: String,
    /// Delay before the reboot.
    #[prost(uint32, tag = "2")]
    pub delay_seconds: u32,
}

/// `bc.command.v1.DiskWipe`.
#[derive(Clone, PartialEq, Eq, prost::Message, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiskWipe {
    /// The block device (`/dev/nvme0n1`).
    #[prost(string, tag = "1")]
    pub device: String,
    /// How (`discard`, `zero`, `secure-erase`).
    #[prost(string, tag = "2")]
    pub method: String,
}

/// `bc.command.v1.DeployImage`.
#[derive(Clone, PartialEq, Eq, prost::Message, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DeployImage {
    /// Where the image is.
    #[prost(string, tag = "1")]
    pub image_url: String,
    /// Its SHA-256.
    #[prost(bytes = "vec", tag = "2")]
    #[serde(serialize_with = "hex_bytes", deserialize_with = "hex_from_str")]
    pub image_sha256: Vec<u8>,
    /// The device it is written to.
    #[prost(string, tag = "3")]
    pub target_device: String,
}

/// `bc.command.v1.BootKexec`.
#[derive(Clone, PartialEq, Eq, prost::Message, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BootKexec {
    /// The kernel.
    #[prost(string, tag = "1")]
    pub kernel_url: String,
    /// The initrd.
    #[prost(string, tag = "2")]
    pub initrd_url: String,
    /// The kernel command line.
    #[prost(string, tag = "3")]
    pub cmdline: String,
}

fn hex_bytes<S: serde::Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&hex::encode(bytes))
}

fn hex_from_str<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    let text = <String as serde::Deserialize>::deserialize(d)?;
    hex::decode(&text).map_err(|e| serde::de::Error::custom(format!("not hex: {e}")))
}

/// Why a payload could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PayloadError {
    /// The type is not a built-in payload type.
    #[error("payload type {0:?} is not one this build knows (opaque)")]
    Opaque(String),
    /// The bytes do not decode as the type.
    #[error("the payload does not decode as {type_name}: {error}")]
    Malformed {
        /// The payload type.
        type_name: String,
        /// The decoder's message.
        error: String,
    },
    /// The bytes decode but do not re-encode to themselves.
    #[error("payload-unknown-fields: the {0} payload carries fields or an encoding this build does not show; it is refused rather than shown in part")]
    UnknownFields(String),
}

fn canonical<M: Message + Default + serde::Serialize>(
    type_name: &str,
    bytes: &[u8],
) -> Result<serde_json::Value, PayloadError> {
    let m = M::decode(bytes).map_err(|e| PayloadError::Malformed {
        type_name: type_name.to_owned(),
        error: e.to_string(),
    })?;
    if m.encode_to_vec() != bytes {
        return Err(PayloadError::UnknownFields(type_name.to_owned()));
    }
    serde_json::to_value(&m).map_err(|e| PayloadError::Malformed {
        type_name: type_name.to_owned(),
        error: e.to_string(),
    })
}

fn from_json<M: Message + serde::de::DeserializeOwned>(
    type_name: &str,
    json: &serde_json::Value,
) -> Result<Vec<u8>, PayloadError> {
    let m: M = serde_json::from_value(json.clone()).map_err(|e| PayloadError::Malformed {
        type_name: type_name.to_owned(),
        error: e.to_string(),
    })?;
    Ok(m.encode_to_vec())
}

/// Encodes a payload given as JSON (the field names of this module's messages, bytes as hex;
/// a field left out takes its default, an unknown field is refused) as the payload type
/// `type_name`: what `bcctl command run --payload-file` sends. The inverse of [`decode_payload`].
pub fn encode_payload(type_name: &str, json: &serde_json::Value) -> Result<Vec<u8>, PayloadError> {
    match type_name {
        "bc.command.v1.InventoryRefresh" => from_json::<InventoryRefresh>(type_name, json),
        "bc.command.v1.LogsCollect" => from_json::<LogsCollect>(type_name, json),
        "bc.command.v1.DiagPing" => from_json::<DiagPing>(type_name, json),
        "bc.command.v1.NodeReboot" => from_json::<NodeReboot>(type_name, json),
        "bc.command.v1.DiskWipe" => from_json::<DiskWipe>(type_name, json),
        "bc.command.v1.DeployImage" => from_json::<DeployImage>(type_name, json),
        "bc.command.v1.BootKexec" => from_json::<BootKexec>(type_name, json),
        other => Err(PayloadError::Opaque(other.to_owned())),
    }
}

/// Decodes `bytes` as the payload type `type_name` (`bc.command.v1.NodeReboot`) into JSON, for
/// showing it: every field, camelCase-free (the protobuf field names), bytes as hex.
pub fn decode_payload(type_name: &str, bytes: &[u8]) -> Result<serde_json::Value, PayloadError> {
    match type_name {
        "bc.command.v1.InventoryRefresh" => canonical::<InventoryRefresh>(type_name, bytes),
        "bc.command.v1.LogsCollect" => canonical::<LogsCollect>(type_name, bytes),
        "bc.command.v1.DiagPing" => canonical::<DiagPing>(type_name, bytes),
        "bc.command.v1.NodeReboot" => canonical::<NodeReboot>(type_name, bytes),
        "bc.command.v1.DiskWipe" => canonical::<DiskWipe>(type_name, bytes),
        "bc.command.v1.DeployImage" => canonical::<DeployImage>(type_name, bytes),
        "bc.command.v1.BootKexec" => canonical::<BootKexec>(type_name, bytes),
        other => Err(PayloadError::Opaque(other.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_decode_by_type_and_unknown_fields_are_refused() {
        let reboot = NodeReboot {
            reason: "kernel update".into(),
            delay_seconds: 5,
        }
        .encode_to_vec();
        assert_eq!(
            decode_payload("bc.command.v1.NodeReboot", &reboot).unwrap(),
            serde_json::json!({"reason": "kernel update", "delay_seconds": 5})
        );
        let mut extra = reboot.clone();
        extra.extend_from_slice(&[0x18, 0x01]); // field 3, varint 1: not in NodeReboot
        assert_eq!(
            decode_payload("bc.command.v1.NodeReboot", &extra),
            Err(PayloadError::UnknownFields(
                "bc.command.v1.NodeReboot".into()
            ))
        );
        assert_eq!(
            decode_payload("bc.example.v1.Other", &reboot),
            Err(PayloadError::Opaque("bc.example.v1.Other".into()))
        );
        for k in super::super::kinds::BUILT_IN_KINDS {
            assert!(decode_payload(k.payload_type, &[]).is_ok(), "{}", k.name);
            assert_eq!(
                encode_payload(k.payload_type, &serde_json::json!({})).as_deref(),
                Ok(&[][..]),
                "{}",
                k.name
            );
        }
    }

    #[test]
    fn json_payloads_encode_and_round_trip_and_unknown_json_fields_are_refused() {
        let json = serde_json::json!({"image_url": "https://x/i.img", "image_sha256": "ab01", "target_device": "/dev/sda"});
        let bytes = encode_payload("bc.command.v1.DeployImage", &json).unwrap();
        assert_eq!(
            decode_payload("bc.command.v1.DeployImage", &bytes).unwrap(),
            json
        );
        let wrong = serde_json::json!({"reason": "x", "delay": 5});
        match encode_payload("bc.command.v1.NodeReboot", &wrong) {
            Err(PayloadError::Malformed { error, .. }) => {
                assert!(error.contains("unknown field `delay`"), "{error}")
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert_eq!(
            encode_payload("bc.example.v1.Other", &serde_json::json!({})),
            Err(PayloadError::Opaque("bc.example.v1.Other".into()))
        );
    }
}
