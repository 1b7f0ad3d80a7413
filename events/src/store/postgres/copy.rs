//! Bulk inserts by binary `COPY` (`LogTx::insert_rows` on Postgres): one stream of rows instead
//! of multi-row `INSERT` statements, which a rebuild would otherwise send by the thousand. The
//! format is Postgres' binary copy format (its documentation, "COPY", "Binary Format"): a
//! signature, flags and a header extension length, then per row a field count and per field a
//! length (-1 for NULL) and the value in the type's binary form, then a trailer of -1.

use super::PgStoreTx;
use crate::store::{insert_statements, DeferredWrite, LogTx, Result, SqlValue, StoreError};

/// Below this many rows the two round trips of a `COPY` cost more than they save.
const COPY_FROM_ROWS: usize = 64;

/// The file header: the signature `PGCOPY\n\377\r\n\0`, 32-bit flags (none) and a 32-bit header
/// extension length (none).
const HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";

/// Appends one row in the binary format. `Int` is an `int8`, `Bool` a `bool`, `Text` UTF-8 and
/// `Bytes` raw bytes, exactly as the columns of this schema are typed.
fn encode_row(out: &mut Vec<u8>, table: &str, row: &[SqlValue]) -> Result<()> {
    let fields = i16::try_from(row.len()).map_err(|_| StoreError::TooLarge {
        table: table.to_owned(),
        why: format!("a row of {} values is too wide to copy", row.len()),
    })?;
    out.extend_from_slice(&fields.to_be_bytes());
    for value in row {
        match value {
            SqlValue::NullInt | SqlValue::NullText | SqlValue::NullBytes => {
                out.extend_from_slice(&(-1i32).to_be_bytes())
            }
            SqlValue::Int(v) => {
                out.extend_from_slice(&8i32.to_be_bytes());
                out.extend_from_slice(&v.to_be_bytes());
            }
            SqlValue::Bool(v) => {
                out.extend_from_slice(&1i32.to_be_bytes());
                out.push(u8::from(*v));
            }
            SqlValue::Text(v) => field(out, table, v.as_bytes())?,
            SqlValue::Bytes(v) => field(out, table, v)?,
        }
    }
    Ok(())
}

fn field(out: &mut Vec<u8>, table: &str, bytes: &[u8]) -> Result<()> {
    let len = i32::try_from(bytes.len()).map_err(|_| StoreError::TooLarge {
        table: table.to_owned(),
        why: format!("a value of {} bytes is too long to copy", bytes.len()),
    })?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(bytes);
    Ok(())
}

/// The `COPY` statement for `table (columns)`. The names come from the projections' code.
fn copy_statement(table: &str, columns: &[&str]) -> String {
    format!(
        "COPY {table} ({}) FROM STDIN (FORMAT binary)",
        columns.join(", ")
    )
}

impl PgStoreTx {
    /// `LogTx::insert_rows` on Postgres: a binary `COPY` from [`COPY_FROM_ROWS`] rows on;
    /// below, multi-row `INSERT`s queued as deferred writes (a join's certificate goes out in
    /// the statement that carries its other projection writes).
    pub(super) async fn copy_rows(
        &mut self,
        table: &str,
        columns: &[&str],
        rows: &[Vec<SqlValue>],
    ) -> Result<u64> {
        if rows.len() < COPY_FROM_ROWS {
            for (sql, args) in insert_statements(table, columns, rows) {
                self.defer(DeferredWrite::new(table, sql, args)).await?;
            }
            return Ok(rows.len() as u64);
        }
        self.send_deferred().await?;
        let mut data = Vec::with_capacity(HEADER.len() + rows.len() * 64);
        data.extend_from_slice(HEADER);
        for row in rows {
            encode_row(&mut data, table, row)?;
        }
        data.extend_from_slice(&(-1i16).to_be_bytes());
        self.fresh = false;
        let mut copy = self.tx.copy_in_raw(&copy_statement(table, columns)).await?;
        if let Err(e) = copy.send(data).await {
            // The server has the rows so far; end the COPY so that the error is the one reported.
            let _ = copy.abort("bulk insert failed while sending").await;
            return Err(e.into());
        }
        Ok(copy.finish().await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_encode_in_the_binary_copy_format() {
        let mut out = Vec::new();
        encode_row(
            &mut out,
            "t",
            &[
                SqlValue::Int(-2),
                SqlValue::Text("é".into()),
                SqlValue::Bytes(vec![0, 255]),
                SqlValue::Bool(true),
                SqlValue::NullText,
            ],
        )
        .unwrap();
        let expected: Vec<u8> = [
            &[0, 5][..],
            &[0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe],
            &[0, 0, 0, 2, 0xc3, 0xa9],
            &[0, 0, 0, 2, 0, 255],
            &[0, 0, 0, 1, 1],
            &[0xff, 0xff, 0xff, 0xff],
        ]
        .concat();
        assert_eq!(out, expected);
        assert_eq!(HEADER.len(), 19);

        let wide = vec![SqlValue::Int(0); 40_000];
        match encode_row(&mut Vec::new(), "t", &wide) {
            Err(StoreError::TooLarge { table, why }) => {
                assert_eq!(
                    (table.as_str(), why.as_str()),
                    ("t", "a row of 40000 values is too wide to copy")
                )
            }
            other => panic!("expected TooLarge, got {other:?}"),
        }
        assert_eq!(&HEADER[..11], b"PGCOPY\n\xff\r\n\0");
    }
}
