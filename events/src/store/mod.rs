//! The append-only log store.
//!
//! [`LogStore`] is the contract both backends keep: append to a stream with an expected version,
//! atomically with the caller's projection writes in the same transaction; idempotent by event
//! id; read one stream; read everything from a position in batches; tail. [`postgres`] and
//! [`sqlite`] implement it; [`EventStore`] picks one from a URL and is what the rest of the
//! workspace holds. The exact tailer lives in [`tailer`].

mod contract;
mod cursor;
mod db_time;
mod deferred;
mod error;
mod event_store;
pub mod hub;
mod insert;
pub mod leader;
pub mod postgres;
mod query;
pub mod recorder;
pub mod sqlite;
mod status;
pub mod tailer;
#[cfg(feature = "testkit")]
pub mod testkit;
#[cfg(feature = "testkit")]
pub mod testkit_tamper;
mod value;
mod version;

pub(crate) use contract::{append_one_by_one, recorded};
pub use contract::{Appended, Backend, LogStore, LogTx, StreamAppend};
pub use cursor::TailCursor;
pub use deferred::{DeferredWrite, ExpectRows};
pub(crate) use error::map_append_error;
pub use error::{Result, StoreError};
pub use event_store::{AllEvents, EventStore, StoreTx, DEFAULT_POOL_SIZE};
pub use hub::{HubOptions, HubReceiver, LogHub};
pub(crate) use insert::insert_statements;
pub use insert::push_groups;
pub use leader::{LeaderError, LeaderLock, Leading};
pub use postgres::{PgLogStore, PgStoreTx};
pub use query::BothBackendsRow;
pub use recorder::{RecordedWrite, WriteRecorder};
pub use sqlite::{SqliteLogStore, SqliteStoreTx};
pub use status::StoreStatus;
pub use tailer::{Tailer, TailerOptions};
pub use value::SqlValue;
pub use version::ExpectedVersion;
