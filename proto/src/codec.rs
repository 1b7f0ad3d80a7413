//! The gRPC codec of every service and client generated here (`codec_path` in `build.rs`):
//! prost's encoding, and decoding errors that repeat nothing of the decoder's text. A request
//! that is not valid protobuf for its method is INVALID_ARGUMENT with the fixed
//! [`UNDECODABLE_REQUEST`] (the client sent it; prost's own codec says INTERNAL with prost's
//! error, which tells a prober how far its bytes got); a response that does not decode is
//! INTERNAL with the fixed [`UNDECODABLE_RESPONSE`].
//!
//! Which side decodes a type is known from the services: `build.rs` implements
//! [`WireDirection`] for every method's input (a request) and output (a response).

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, Codec, DecodeBuf, Decoder};
use tonic::Status;
use tonic_prost::ProstEncoder;

/// The message of an undecodable request (INVALID_ARGUMENT).
pub const UNDECODABLE_REQUEST: &str = "the request is not a valid protobuf message for this method";
/// The message of an undecodable response (INTERNAL).
pub const UNDECODABLE_RESPONSE: &str =
    "the response is not a valid protobuf message for this method";

/// Whether a message type is a method's input (decoded by the server) or output (decoded by
/// the client).
pub trait WireDirection {
    const IS_REQUEST: bool;
}

include!(concat!(env!("OUT_DIR"), "/wire_directions.rs"));

/// The first capacity of a call's encode and decode buffers (tonic's default is 8 KiB each). A
/// node session holds both for as long as it lives, idle nearly all of it, and its messages are
/// a few hundred bytes (a Welcome a few KiB): a larger message grows its buffer as needed.
pub const CODEC_BUFFER_BYTES: usize = 1024;
/// tonic's default: an encoder yields after this many bytes of a stream.
const YIELD_THRESHOLD: usize = 32 * 1024;

fn buffer_settings() -> BufferSettings {
    BufferSettings::new(CODEC_BUFFER_BYTES, YIELD_THRESHOLD)
}

/// prost's encoder, and [`WireDecoder`].
pub struct WireCodec<T, U>(PhantomData<fn() -> (T, U)>);

impl<T, U> Default for WireCodec<T, U> {
    fn default() -> Self {
        WireCodec(PhantomData)
    }
}

impl<T, U> Codec for WireCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + WireDirection + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = WireDecoder<U>;

    fn encoder(&mut self) -> ProstEncoder<T> {
        ProstEncoder::new(buffer_settings())
    }

    fn decoder(&mut self) -> WireDecoder<U> {
        WireDecoder(PhantomData)
    }
}

/// Decodes `U` with prost; a failure is the fixed status of `U`'s direction.
pub struct WireDecoder<U>(PhantomData<fn() -> U>);

impl<U: Message + Default + WireDirection> Decoder for WireDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        U::decode(buf).map(Some).map_err(|_| {
            if U::IS_REQUEST {
                Status::invalid_argument(UNDECODABLE_REQUEST)
            } else {
                Status::internal(UNDECODABLE_RESPONSE)
            }
        })
    }

    fn buffer_settings(&self) -> BufferSettings {
        buffer_settings()
    }
}

// Checked at compile time: the methods' types have their directions.
const _: () = {
    assert!(<crate::JoinRequest as WireDirection>::IS_REQUEST);
    assert!(<crate::NodeMessage as WireDirection>::IS_REQUEST);
    assert!(<crate::internal::RelayedRenew as WireDirection>::IS_REQUEST);
    assert!(!<crate::SignedJoinResponse as WireDirection>::IS_REQUEST);
    assert!(!<crate::GatewayMessage as WireDirection>::IS_REQUEST);
    assert!(!<crate::internal::WelcomeTrust as WireDirection>::IS_REQUEST);
};
