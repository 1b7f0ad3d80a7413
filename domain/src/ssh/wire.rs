//! The SSH wire encoding (RFC 4251 §5) the certificate, key and KRL formats are built from:
//! `uint32`, `uint64`, `string` (a length-prefixed byte string) and `mpint` (a two's-complement
//! big-endian integer, here only ever non-negative), written into a buffer and read back from a
//! slice. Pure: no IO.

/// Appends a `uint32`.
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Appends a `uint64`.
pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Appends a `string`: its length as `uint32`, then its bytes. The formats written here never
/// hold a string of 4 GiB; a longer one is truncated in its length (never reached).
pub fn put_string(out: &mut Vec<u8>, bytes: &[u8]) {
    put_u32(out, u32::try_from(bytes.len()).unwrap_or(u32::MAX));
    out.extend_from_slice(bytes);
}

/// Appends a non-negative `mpint` from its unsigned big-endian magnitude: leading zero bytes
/// dropped, one zero byte put back when the top bit is set.
pub fn put_mpint(out: &mut Vec<u8>, magnitude: &[u8]) {
    let start = magnitude
        .iter()
        .position(|b| *b != 0)
        .unwrap_or(magnitude.len());
    let digits = &magnitude[start..];
    let mut v = Vec::with_capacity(digits.len() + 1);
    if digits.first().is_some_and(|b| b & 0x80 != 0) {
        v.push(0);
    }
    v.extend_from_slice(digits);
    put_string(out, &v);
}

/// A reader over wire-encoded bytes; every read fails (`None`) at a short input.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Reads from the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader { rest: bytes }
    }

    /// Whether every byte was read.
    pub fn is_empty(&self) -> bool {
        self.rest.is_empty()
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.rest.len() < n {
            return None;
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Some(head)
    }

    /// Reads a `uint32`.
    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_be_bytes(self.take(4)?.try_into().ok()?))
    }

    /// Reads a `uint64`.
    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_be_bytes(self.take(8)?.try_into().ok()?))
    }

    /// Reads a `string`.
    pub fn string(&mut self) -> Option<&'a [u8]> {
        let n = usize::try_from(self.u32()?).ok()?;
        self.take(n)
    }

    /// Reads an `mpint` that must be non-negative, answering its magnitude without leading
    /// zero bytes.
    pub fn positive_mpint(&mut self) -> Option<&'a [u8]> {
        let v = self.string()?;
        if v.first().is_some_and(|b| b & 0x80 != 0) {
            return None;
        }
        let start = v.iter().position(|b| *b != 0).unwrap_or(v.len());
        Some(&v[start..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mpint_keeps_the_sign_bit_clear_and_reads_back() {
        let mut out = Vec::new();
        put_mpint(&mut out, &[0, 0, 0x80, 1]);
        assert_eq!(out, [0, 0, 0, 3, 0, 0x80, 1]);
        let mut r = Reader::new(&out);
        assert_eq!(r.positive_mpint(), Some(&[0x80, 1][..]));
        assert!(r.is_empty());
        let mut short = Reader::new(&[0, 0, 0, 5, 1]);
        assert_eq!(short.string(), None);
    }
}
