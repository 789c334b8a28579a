// Finds libeldr the way libgit2-sys finds libgit2:
//   1. ELDR_LIB_DIR set: libeldr.so from that folder (an uninstalled build
//      tree's lib/, as ctest and the examples use);
//   2. else pkg-config's `eldr` (an installed libeldr, at least this crate's
//      version): its link flags, and its include folder for dependents'
//      build scripts as DEP_ELDR_INCLUDE (links = "eldr");
//   3. else `-leldr` from the linker's default paths, with a warning.
// The bindings are committed (src/bindings.rs, generated from eldr.h by
// scripts/check-bindgen.sh), so a build needs neither bindgen nor libclang.
// They carry eldr.h's version, the project's one version: the build stops
// when this crate's version (the workspace's) says otherwise.
use std::env;
use std::fs;
use std::path::Path;

fn header_version(bindings: &Path) -> String {
    let text = fs::read_to_string(bindings)
        .unwrap_or_else(|e| panic!("eldr-sys: cannot read {}: {}", bindings.display(), e));
    let part = |name: &str| -> String {
        let prefix = format!("pub const ELDR_VERSION_{}: i32 = ", name);
        text.lines()
            .find_map(|l| l.strip_prefix(prefix.as_str()))
            .and_then(|rest| rest.strip_suffix(';'))
            .unwrap_or_else(|| panic!("eldr-sys: ELDR_VERSION_{} missing from bindings.rs", name))
            .to_string()
    };
    format!("{}.{}.{}", part("MAJOR"), part("MINOR"), part("PATCH"))
}

fn main() {
    let manifest = env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let bindings = Path::new(&manifest).join("src/bindings.rs");
    println!("cargo:rerun-if-changed={}", bindings.display());
    let version = header_version(&bindings);
    let crate_version = env::var("CARGO_PKG_VERSION").expect("cargo sets CARGO_PKG_VERSION");
    assert_eq!(
        crate_version, version,
        "eldr-sys: the crate's version {} is not eldr.h's {} (ELDR_VERSION_MAJOR/MINOR/PATCH); \
         set [workspace.package] version in bindings/rust/Cargo.toml to it",
        crate_version, version
    );

    println!("cargo:rerun-if-env-changed=ELDR_LIB_DIR");
    if let Some(dir) = env::var_os("ELDR_LIB_DIR").filter(|d| !d.is_empty()) {
        println!(
            "cargo:rustc-link-search=native={}",
            Path::new(&dir).display()
        );
        println!("cargo:rustc-link-lib=dylib=eldr");
        return;
    }
    match pkg_config::Config::new()
        .atleast_version(&version)
        .probe("eldr")
    {
        Ok(library) => {
            if let Some(include) = library.include_paths.first() {
                println!("cargo:include={}", include.display());
            }
        }
        Err(error) => {
            println!(
                "cargo:warning=eldr-sys: no ELDR_LIB_DIR and no pkg-config `eldr` >= {} ({}); \
                 linking -leldr from the default paths",
                version,
                error.to_string().lines().next().unwrap_or_default()
            );
            println!("cargo:rustc-link-lib=dylib=eldr");
        }
    }
}
