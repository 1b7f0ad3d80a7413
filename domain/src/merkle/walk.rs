//! The `(fn, sn)` bookkeeping of RFC 9162 §2.1.3.2 and §2.1.4.2, shared by both verifiers and
//! the consistency proof's length.
//!
//! `fn` is the index of the node the verifier holds at the current level and `sn` the index of
//! the last node of that level. Which side each proof hash goes on, and when a level is skipped,
//! depends on these two numbers only, never on hash values.

/// The RFC's `fn` and `sn` at one level of the tree.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Walk {
    fn_: u64,
    sn: u64,
}

impl Walk {
    /// `fn = index`, `sn = last` (§2.1.3.2 step 2; §2.1.4.2 step 3 with `first - 1`, `second - 1`).
    pub(crate) fn new(index: u64, last: u64) -> Self {
        Walk {
            fn_: index,
            sn: last,
        }
    }

    /// `sn` is 0: the walk reached the root (§2.1.3.2 steps 4a and 5, §2.1.4.2 steps 6a and 7).
    pub(crate) fn at_root(&self) -> bool {
        self.sn == 0
    }

    /// The next proof hash is a left sibling: `LSB(fn)` is set or `fn == sn`
    /// (§2.1.3.2 step 4b, §2.1.4.2 step 6b).
    pub(crate) fn sibling_is_left(&self) -> bool {
        self.fn_ & 1 == 1 || self.fn_ == self.sn
    }

    /// After a left sibling: "if LSB(fn) is not set, then right-shift both fn and sn equally
    /// until either LSB(fn) is set or fn is 0" (§2.1.3.2 step 4b.ii, §2.1.4.2 step 6b.ii).
    pub(crate) fn skip_lone_levels(&mut self) {
        if self.fn_ & 1 == 0 {
            while self.fn_ & 1 == 0 && self.fn_ != 0 {
                self.up();
            }
        }
    }

    /// "If LSB(fn) is set, then right-shift both fn and sn equally until LSB(fn) is not set"
    /// (§2.1.4.2 step 4).
    pub(crate) fn skip_set_bits(&mut self) {
        while self.fn_ & 1 == 1 {
            self.up();
        }
    }

    /// "Finally, right-shift both fn and sn one time" (§2.1.3.2 step 4c, §2.1.4.2 step 6c).
    pub(crate) fn up(&mut self) {
        self.fn_ >>= 1;
        self.sn >>= 1;
    }
}
