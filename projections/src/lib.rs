//! Projections: SQL tables built only from events.
//!
//! One module per projection says how each event changes its table, inside the same transaction
//! as the append. A projection must never read the clock or anything outside its events, so that
//! rebuilding it from the log gives byte-identical tables; every row records the log position it
//! reflects.
