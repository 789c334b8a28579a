// With ELDR_LIB_DIR set (an uninstalled build tree), the binary finds
// libeldr.so there at run time too (rpath), so it runs without LD_LIBRARY_PATH.
fn main() {
    println!("cargo:rerun-if-env-changed=ELDR_LIB_DIR");
    if let Ok(dir) = std::env::var("ELDR_LIB_DIR") {
        if !dir.is_empty() {
            println!("cargo:rustc-link-arg-bins=-Wl,-rpath,{}", dir);
        }
    }
}
