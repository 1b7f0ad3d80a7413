//! Compiles the event schema with protox (pure Rust), so no system `protoc` is needed.

use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from("proto");
    let mut files = Vec::new();
    collect(&root, &mut files)?;
    files.sort();
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(&files, [&root])?;
    // The descriptor set itself, for `bcctl events show` (payloads as JSON by reflection).
    let out = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out.join("bc.events.v1.fds"),
        prost::Message::encode_to_vec(&fds),
    )?;
    // A node's self-report is boxed: `node.joined` stays small enough to sit unboxed in the
    // identity event enums (clippy's large_enum_variant).
    prost_build::Config::new()
        .boxed(".bc.events.v1.NodeJoined.report")
        .compile_fds(fds)?;
    Ok(())
}

fn collect(dir: &PathBuf, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "proto") {
            out.push(path);
        }
    }
    Ok(())
}
