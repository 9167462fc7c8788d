//! Compiles the one C function of the library: jia_error is variadic, which stable Rust cannot
//! define.

fn main() {
    println!("cargo:rerun-if-changed=csrc/jia_error.c");
    println!("cargo:rerun-if-changed=include/jia.h");
    cc::Build::new()
        .file("csrc/jia_error.c")
        .include("include")
        .warnings(true)
        .compile("jia_error");
}
