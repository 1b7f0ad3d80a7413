//! Compiles every `.proto` under `proto/` (bc.wire.v1, bc.internal.v1, bc.attestor.v1; a new
//! file is picked up by itself) with protox (pure Rust), so no system `protoc` is needed. Every
//! service and client uses `crate::codec::WireCodec`, which needs to know whether a type is a
//! method's request or response: this writes `wire_directions.rs` from the services.

use std::collections::{BTreeMap, BTreeSet};
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
    write_directions(&fds)?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .codec_path("crate::codec::WireCodec")
        .compile_fds(fds)?;
    Ok(())
}

/// `impl WireDirection for <type>` for every method input (a request) and output (a response).
fn write_directions(
    fds: &protox::prost_reflect::prost_types::FileDescriptorSet,
) -> Result<(), Box<dyn std::error::Error>> {
    // ".package.Message" -> "crate::package::Message" for every top-level message.
    let mut rust_path = BTreeMap::new();
    for file in &fds.file {
        let package = file.package();
        for message in &file.message_type {
            rust_path.insert(
                format!(".{package}.{}", message.name()),
                format!("crate::{}::{}", package.replace('.', "::"), message.name()),
            );
        }
    }
    let mut requests = BTreeSet::new();
    let mut responses = BTreeSet::new();
    for file in &fds.file {
        for service in &file.service {
            for method in &service.method {
                requests.insert(method.input_type().to_owned());
                responses.insert(method.output_type().to_owned());
            }
        }
    }
    let mut out = String::from("// Written by build.rs from the services' methods.\n");
    for name in requests.union(&responses) {
        let path = rust_path
            .get(name)
            .ok_or_else(|| format!("{name} is a method's type but not a top-level message"))?;
        out.push_str(&format!(
            "impl WireDirection for {path} {{\n    const IS_REQUEST: bool = {};\n}}\n",
            requests.contains(name)
        ));
    }
    let dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(dir.join("wire_directions.rs"), out)?;
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
