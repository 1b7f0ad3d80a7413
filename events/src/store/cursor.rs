//! Where a tailer is ([`TailCursor`]): a pair of Postgres snapshots or an SQLite position, as
//! plain text so a consumer can store it and resume (see [`super::tailer`] for how it is read).

use std::fmt;
use std::str::FromStr;

use super::error::{Result, StoreError};

/// Where a tailer is. Resumable: store `to_string()` and parse it back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TailCursor {
    Postgres {
        /// Every transaction visible in this snapshot is delivered.
        floor: String,
        /// The snapshot being delivered, when a step stopped in the middle of it.
        ceiling: Option<String>,
        /// The last (tx id, position) delivered from the floor..ceiling difference.
        after: (u64, i64),
    },
    Sqlite {
        /// Every position up to this one is delivered.
        after: i64,
    },
}

impl TailCursor {
    pub(crate) fn backend_name(&self) -> &'static str {
        match self {
            TailCursor::Postgres { .. } => "postgres",
            TailCursor::Sqlite { .. } => "sqlite",
        }
    }
}

impl fmt::Display for TailCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TailCursor::Postgres {
                floor,
                ceiling,
                after,
            } => write!(
                f,
                "pg1;{floor};{};{};{}",
                ceiling.as_deref().unwrap_or("-"),
                after.0,
                after.1
            ),
            TailCursor::Sqlite { after } => write!(f, "sqlite1;{after}"),
        }
    }
}

impl FromStr for TailCursor {
    type Err = StoreError;

    fn from_str(s: &str) -> Result<Self> {
        let bad = |why| StoreError::BadCursor {
            cursor: s.to_string(),
            why,
        };
        let parts: Vec<&str> = s.split(';').collect();
        match parts.as_slice() {
            ["sqlite1", after] => Ok(TailCursor::Sqlite {
                after: after.parse().map_err(|_| bad("position is not a number"))?,
            }),
            ["pg1", floor, ceiling, tx, position] => {
                let snapshot_ok = |v: &str| {
                    let f: Vec<&str> = v.split(':').collect();
                    f.len() == 3
                        && f[0].parse::<u64>().is_ok()
                        && f[1].parse::<u64>().is_ok()
                        && (f[2].is_empty() || f[2].split(',').all(|x| x.parse::<u64>().is_ok()))
                };
                if !snapshot_ok(floor) {
                    return Err(bad("floor is not a pg_snapshot (xmin:xmax:xip,...)"));
                }
                let ceiling = match *ceiling {
                    "-" => None,
                    c if snapshot_ok(c) => Some(c.to_string()),
                    _ => return Err(bad("ceiling is not a pg_snapshot")),
                };
                Ok(TailCursor::Postgres {
                    floor: floor.to_string(),
                    ceiling,
                    after: (
                        tx.parse().map_err(|_| bad("tx id is not a number"))?,
                        position
                            .parse()
                            .map_err(|_| bad("position is not a number"))?,
                    ),
                })
            }
            _ => Err(bad(
                "expected pg1;FLOOR;CEILING;TX;POSITION or sqlite1;POSITION",
            )),
        }
    }
}
