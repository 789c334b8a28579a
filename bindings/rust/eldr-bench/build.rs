// Compiles the C baseline loop (c/route_loop.c) with the system C compiler into
// a static library, using only std (no `cc` crate: the build is offline).
use std::path::PathBuf;
use std::process::Command;

fn run(cmd: &mut Command) {
    let status = cmd
        .status()
        .unwrap_or_else(|e| panic!("cannot run {:?}: {}", cmd, e));
    assert!(status.success(), "{:?} failed: {}", cmd, status);
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    let source = manifest.join("c/route_loop.c");
    let include = manifest.join("../../../capi/include");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let object = out.join("route_loop.o");
    run(Command::new(&cc)
        .args(["-std=c11", "-O2", "-fPIC", "-Wall", "-Wextra", "-c"])
        .arg("-I")
        .arg(&include)
        .arg(&source)
        .arg("-o")
        .arg(&object));
    let archive = out.join("libeldr_route_loop.a");
    let _ = std::fs::remove_file(&archive);
    run(Command::new("ar").arg("crs").arg(&archive).arg(&object));
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=eldr_route_loop");
    println!("cargo:rerun-if-changed=c/route_loop.c");
    println!("cargo:rerun-if-changed=../../../capi/include/eldr/eldr.h");
    println!("cargo:rerun-if-env-changed=CC");
}
