// Links libeldr.so. ELDR_LIB_DIR (optional) adds a search directory, e.g. an
// uninstalled build tree's lib/; without it the system linker paths apply.
// The bindings themselves are committed (src/bindings.rs), so building needs
// neither bindgen nor libclang; scripts/check-bindgen.sh guards against drift.
fn main() {
    println!("cargo:rerun-if-env-changed=ELDR_LIB_DIR");
    if let Ok(dir) = std::env::var("ELDR_LIB_DIR") {
        if !dir.is_empty() {
            println!("cargo:rustc-link-search=native={}", dir);
        }
    }
    println!("cargo:rustc-link-lib=dylib=eldr");
}
