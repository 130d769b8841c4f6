//! A per-process scratch directory for targets whose entry points read files.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// `$TMPDIR/tgi-fuzz-<pid>/`, created on first use (one process runs one input at a time).
pub fn dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("tgi-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        dir
    })
}

/// Writes `bytes` to `name` (a relative path) in the scratch directory and returns its path.
pub fn write(name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir().join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).expect("scratch directory");
    }
    std::fs::write(&path, bytes).expect("scratch file");
    path
}
