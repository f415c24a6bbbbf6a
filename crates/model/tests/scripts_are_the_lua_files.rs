//! Every command's compiled-in Lua is its file in the tree (`src/scripts/NAME.lua`), and
//! every `.lua` file there is a command's or one of the shared pieces: read here, outside
//! the model's code, which reads no file (`crates/model/src/cmd/tests.rs` checks how each
//! script reads its inputs).

use std::collections::BTreeSet;

use checkout_guard_model::cmd;

#[test]
fn every_script_is_its_lua_file_and_every_file_a_scripts() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/scripts/");
    let mut files: BTreeSet<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    for c in cmd::ALL {
        let file = format!("{}.lua", c.name);
        let on_disk = std::fs::read_to_string(format!("{dir}{file}"))
            .unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(c.lua, on_disk, "{file}: the compiled-in body is the file");
        files.remove(&file);
    }
    for (file, shared) in [
        ("carry.lua", cmd::CARRY),
        ("clock.lua", cmd::CLOCK_BLOCK),
        ("test_clock.lua", cmd::TEST_CLOCK_BLOCK),
    ] {
        let on_disk = std::fs::read_to_string(format!("{dir}{file}")).unwrap();
        assert_eq!(shared, on_disk, "{file}: the compiled-in piece is the file");
        files.remove(file);
    }
    assert!(files.is_empty(), "scripts of no command: {files:?}");
}
