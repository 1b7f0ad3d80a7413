//! PLACEHOLDER of the client helper's file table (its `cli/src/admin/files.rs` replaces this
//! file at the merge): which flags of which verb name files on the caller's machine. Flags are
//! clap ids (the field name: `payload_file`). Until then no verb takes input files.

/// The flags of `verb` naming files it reads on the caller's machine.
pub fn input_flags(verb: &str) -> &'static [&'static str] {
    let _ = verb;
    &[]
}
