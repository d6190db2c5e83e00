//! Compiles `meshd/v1/*.proto` with protox (a pure-Rust protobuf compiler), so
//! no system `protoc` is needed on any machine, and keeps the encoded
//! descriptor set for gRPC server reflection.

use std::path::PathBuf;

use prost::Message;

const PROTOS: &[&str] = &[
    "meshd/v1/common.proto",
    "meshd/v1/alarm.proto",
    "meshd/v1/observation.proto",
    "meshd/v1/facts.proto",
    "meshd/v1/jobs.proto",
    "meshd/v1/status.proto",
    "meshd/v1/events.proto",
    "meshd/v1/history.proto",
    "meshd/v1/report.proto",
    "meshd/v1/hostfile.proto",
    "meshd/v1/service.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=meshd");
    let descriptors = protox::compile(PROTOS, ["."])?;
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("meshd_v1_descriptor.bin"),
        descriptors.encode_to_vec(),
    )?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .compile_fds(descriptors)?;
    Ok(())
}
