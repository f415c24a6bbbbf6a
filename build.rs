//! What the build needs beyond Linux. A PHP extension is a cdylib whose PHP symbols are
//! resolved by the php binary that loads it: macOS's linker must be told to allow that.
fn main() {
    // Only this file decides what the script prints. Without the line, cargo reruns the
    // script whenever any file in the package changes, e.g. modules/checkout_guard.so,
    // which `make` copies out after every build of the phpize path (config.m4).
    println!("cargo:rerun-if-changed=build.rs");
    let target_os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target_os == "macos" {
        println!("cargo:rustc-cdylib-link-arg=-undefined");
        println!("cargo:rustc-cdylib-link-arg=dynamic_lookup");
    }
}
