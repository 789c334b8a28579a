// Compiles the C baseline loop (c/route_loop.c) into a static library with
// the `cc` crate, against the checkout's eldr.h.
fn main() {
    cc::Build::new()
        .file("c/route_loop.c")
        .include("../../../capi/include")
        .std("c11")
        .opt_level(2)
        .warnings(true)
        .extra_warnings(true)
        .compile("eldr_route_loop");
    println!("cargo:rerun-if-changed=c/route_loop.c");
    println!("cargo:rerun-if-changed=../../../capi/include/eldr/eldr.h");
}
