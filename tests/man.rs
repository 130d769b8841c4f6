//! The man pages in man/ are generated from the CLI definitions; this test fails when they
//! are out of date. Regenerate with `TGI_UPDATE_MAN=1 cargo test --release --test man`.

use std::path::Path;

#[test]
fn man_pages_match_the_cli() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("man");
    let update = std::env::var_os("TGI_UPDATE_MAN").is_some();
    let pages = tgi_commands::cli::man_pages().expect("render man pages");
    if update {
        std::fs::create_dir_all(&dir).unwrap();
        for entry in std::fs::read_dir(&dir).unwrap() {
            std::fs::remove_file(entry.unwrap().path()).unwrap();
        }
    }
    let mut stale = Vec::new();
    for (name, roff) in &pages {
        let path = dir.join(name);
        if update {
            std::fs::write(&path, roff).unwrap();
        } else if std::fs::read(&path).ok().as_deref() != Some(roff.as_slice()) {
            stale.push(name.clone());
        }
    }
    let expected: Vec<&String> = pages.iter().map(|(n, _)| n).collect();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if !expected.contains(&&name) {
            stale.push(format!("{name} (no such command)"));
        }
    }
    assert!(stale.is_empty(), "man/ is out of date: {stale:?}; run TGI_UPDATE_MAN=1 cargo test --release --test man");
}
