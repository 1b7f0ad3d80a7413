//! Portable SQL parameter values, so a projection can write one statement for both backends.

/// A value bound to a `$n` parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SqlValue {
    /// NULL of an integer column.
    NullInt,
    /// NULL of a text column.
    NullText,
    /// NULL of a bytes column.
    NullBytes,
    Int(i64),
    Text(String),
    Bytes(Vec<u8>),
    Bool(bool),
}

impl From<i64> for SqlValue {
    fn from(v: i64) -> Self {
        SqlValue::Int(v)
    }
}

impl From<&str> for SqlValue {
    fn from(v: &str) -> Self {
        SqlValue::Text(v.to_string())
    }
}

impl From<String> for SqlValue {
    fn from(v: String) -> Self {
        SqlValue::Text(v)
    }
}

impl From<Vec<u8>> for SqlValue {
    fn from(v: Vec<u8>) -> Self {
        SqlValue::Bytes(v)
    }
}

impl From<&[u8]> for SqlValue {
    fn from(v: &[u8]) -> Self {
        SqlValue::Bytes(v.to_vec())
    }
}

impl From<bool> for SqlValue {
    fn from(v: bool) -> Self {
        SqlValue::Bool(v)
    }
}

impl From<Option<i64>> for SqlValue {
    fn from(v: Option<i64>) -> Self {
        v.map_or(SqlValue::NullInt, SqlValue::Int)
    }
}

impl From<Option<String>> for SqlValue {
    fn from(v: Option<String>) -> Self {
        v.map_or(SqlValue::NullText, SqlValue::Text)
    }
}

impl From<Option<Vec<u8>>> for SqlValue {
    fn from(v: Option<Vec<u8>>) -> Self {
        v.map_or(SqlValue::NullBytes, SqlValue::Bytes)
    }
}

macro_rules! bind_all {
    ($query:expr, $args:expr) => {{
        let mut q = $query;
        for a in $args {
            q = match a {
                SqlValue::NullInt => q.bind(None::<i64>),
                SqlValue::NullText => q.bind(None::<String>),
                SqlValue::NullBytes => q.bind(None::<Vec<u8>>),
                SqlValue::Int(v) => q.bind(*v),
                SqlValue::Text(v) => q.bind(v.as_str()),
                SqlValue::Bytes(v) => q.bind(v.as_slice()),
                SqlValue::Bool(v) => q.bind(*v),
            };
        }
        q
    }};
}
pub(crate) use bind_all;
