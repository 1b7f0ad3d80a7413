//! Recorded projection writes: a stand-in transaction that keeps the writes it is given, in
//! order, to be replayed on a real transaction later.
//!
//! A rebuild applies thousands of events per page. On Postgres, applying a page is our CPU
//! (decoding payloads, building rows) followed by the server's (storing them), and the two took
//! turns. With a [`WriteRecorder`] the projections apply page N+1 while page N's writes are
//! being stored: the rebuild hands the projections a recorder, and a writer replays each page's
//! recording on the real transaction ([`replay`]).
//!
//! A recorder takes only the writes whose results nobody reads: [`LogTx::defer`],
//! [`LogTx::insert_rows`] and [`LogTx::flush`] (what projections that declare `only_writes`
//! use). Replaying calls the same methods with the same arguments in the same order, so the
//! tables come out the same as if the projections had written directly; only the errors come
//! later, from the replay. Appends, statements with a result, and commits are refused.

use super::deferred::DeferredWrite;
use super::value::SqlValue;
use super::{Appended, Backend, ExpectedVersion, LogTx, Result, StoreError, StreamAppend};
use crate::envelope::NewEvent;

/// One write, as a projection made it.
#[derive(Clone, Debug)]
pub enum RecordedWrite {
    Defer(DeferredWrite),
    InsertRows {
        table: String,
        columns: Vec<String>,
        rows: Vec<Vec<SqlValue>>,
    },
    Flush,
}

/// Keeps projection writes for a transaction on `backend` (projections pick their SQL by it).
#[derive(Debug)]
pub struct WriteRecorder {
    backend: Backend,
    writes: Vec<RecordedWrite>,
}

impl WriteRecorder {
    pub fn new(backend: Backend) -> WriteRecorder {
        WriteRecorder {
            backend,
            writes: Vec::new(),
        }
    }

    /// The backend the writes will be replayed on.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The writes recorded since the last call, in order.
    pub fn take(&mut self) -> Vec<RecordedWrite> {
        std::mem::take(&mut self.writes)
    }

    fn refuse<T>(op: &'static str) -> Result<T> {
        Err(StoreError::RecordingOnly { op })
    }
}

/// Makes `writes` on `tx`, in order, exactly as the projections asked for them.
pub async fn replay<T: LogTx + ?Sized>(tx: &mut T, writes: Vec<RecordedWrite>) -> Result<()> {
    for write in writes {
        match write {
            RecordedWrite::Defer(w) => tx.defer(w).await?,
            RecordedWrite::InsertRows {
                table,
                columns,
                rows,
            } => {
                let columns: Vec<&str> = columns.iter().map(String::as_str).collect();
                tx.insert_rows(&table, &columns, rows).await?;
            }
            RecordedWrite::Flush => tx.flush().await?,
        }
    }
    Ok(())
}

impl LogTx for WriteRecorder {
    async fn append(
        &mut self,
        _stream: &str,
        _expected: ExpectedVersion,
        _events: &[NewEvent],
    ) -> Result<Appended> {
        Self::refuse("an append")
    }

    async fn append_streams(&mut self, _appends: &[StreamAppend<'_>]) -> Result<Vec<Appended>> {
        Self::refuse("an append")
    }

    async fn execute(&mut self, _sql: &str, _args: &[SqlValue]) -> Result<u64> {
        Self::refuse("a statement whose row count is read")
    }

    async fn defer(&mut self, write: DeferredWrite) -> Result<()> {
        self.writes.push(RecordedWrite::Defer(write));
        Ok(())
    }

    async fn flush(&mut self) -> Result<()> {
        // Consecutive flushes send nothing the first did not.
        if !matches!(self.writes.last(), Some(RecordedWrite::Flush)) {
            self.writes.push(RecordedWrite::Flush);
        }
        Ok(())
    }

    async fn insert_rows(
        &mut self,
        table: &str,
        columns: &[&str],
        rows: Vec<Vec<SqlValue>>,
    ) -> Result<u64> {
        if rows.is_empty() {
            return Ok(0);
        }
        let count = rows.len() as u64;
        self.writes.push(RecordedWrite::InsertRows {
            table: table.to_string(),
            columns: columns.iter().map(|c| c.to_string()).collect(),
            rows,
        });
        Ok(count)
    }

    async fn commit(self) -> Result<()> {
        Self::refuse("a commit")
    }

    async fn rollback(self) -> Result<()> {
        Ok(())
    }
}
