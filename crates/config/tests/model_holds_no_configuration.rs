//! The model is the decision only: configuration (URLs, TLS and its file reads, the INI
//! table, options from PHP values) lives in this crate, and the model never depends on it
//! (docs/architecture.md, "The crates"). The Valkey module links the model alone, so what
//! the model holds is what the module carries.

use std::path::{Path, PathBuf};

fn model_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../model")
}

/// The `[dependencies]` of the model's manifest, by name.
fn model_dependencies() -> Vec<String> {
    let manifest = std::fs::read_to_string(model_dir().join("Cargo.toml")).unwrap();
    let mut in_deps = false;
    let mut names = Vec::new();
    for line in manifest.lines().map(str::trim) {
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
        } else if in_deps && !line.is_empty() && !line.starts_with('#') {
            names.push(line.split(['=', ' ']).next().unwrap().to_string());
        }
    }
    names
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_model_depends_on_no_url_parser_no_pem_reader_and_not_on_config() {
    let deps = model_dependencies();
    assert!(!deps.is_empty(), "no [dependencies] read");
    for banned in ["url", "rustls-pki-types", "webpki", "checkout-guard-config"] {
        assert!(
            !deps.iter().any(|d| d == banned),
            "crates/model depends on {banned}: {deps:?}"
        );
    }
}

#[test]
fn the_models_code_reads_no_file_and_holds_no_c_string() {
    let mut files = Vec::new();
    rust_files(&model_dir().join("src"), &mut files);
    assert!(files.len() > 5, "the model's sources not found: {files:?}");
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        // What a test reads (the `.lua` files, say) is not what the crate does.
        let code = text.split("#[cfg(test)]").next().unwrap();
        for banned in ["std::fs", "CStr", "url::", "checkout_guard_config"] {
            assert!(
                !code.contains(banned),
                "{} uses {banned} outside its tests",
                file.display()
            );
        }
    }
}
