//! Replay tests: rebuild state from logs and compare it with what the command layer built.
//!
//! Test code only; nothing ships from here.
