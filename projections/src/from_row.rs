//! `from_row!`: a row struct that reads itself from a Postgres or a SQLite row, column by field
//! name.
//!
//! Wrapped around a struct of named fields, it declares the struct as written and implements
//! sqlx's `FromRow` for both backends' rows: what `#[derive(sqlx::FromRow)]` generates, written
//! as a declarative macro so that the workspace does not build sqlx's proc macros (they compile
//! both database drivers, and SQLite's C sources, a second time for the compiler; see
//! docs/DECISIONS.md, 0075). Each field is read with `Row::try_get` under its own name; a
//! missing column or a mismatched type is sqlx's error, as with the derive.

macro_rules! from_row {
    (
        $(#[$meta:meta])*
        $vis:vis struct $row:ident {
            $($(#[$field_meta:meta])* $field_vis:vis $field:ident : $ty:ty),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        $vis struct $row {
            $($(#[$field_meta])* $field_vis $field: $ty),+
        }
        impl<'r> ::sqlx::FromRow<'r, ::sqlx::postgres::PgRow> for $row {
            fn from_row(row: &'r ::sqlx::postgres::PgRow) -> Result<Self, ::sqlx::Error> {
                use ::sqlx::Row as _;
                Ok(Self { $($field: row.try_get(stringify!($field))?),+ })
            }
        }
        impl<'r> ::sqlx::FromRow<'r, ::sqlx::sqlite::SqliteRow> for $row {
            fn from_row(row: &'r ::sqlx::sqlite::SqliteRow) -> Result<Self, ::sqlx::Error> {
                use ::sqlx::Row as _;
                Ok(Self { $($field: row.try_get(stringify!($field))?),+ })
            }
        }
    };
}
pub(crate) use from_row;
