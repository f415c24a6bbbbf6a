//! What the build needs beyond Linux. A PHP extension is a cdylib whose PHP symbols are
//! resolved by the php binary that loads it: macOS's linker must be told to allow that.
fn main() {
    // Without a rerun-if line, cargo runs a build script again (and rebuilds the extension,
    // ~16 s with thin LTO) whenever any file of the package changes: a doc, a PHP test.
    println!("cargo:rerun-if-changed=build.rs");
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "macos" {
        println!("cargo:rustc-cdylib-link-arg=-undefined");
        println!("cargo:rustc-cdylib-link-arg=dynamic_lookup");
    }
}
