//! Names of the temporaries beside an output, and the cleanup of those a killed run left behind.
//!
//! A temporary is named `.{target}.tgi-{pid}-{random}.tmp` and is locked (`flock`) by the run writing it;
//! an output directory replaced with `--force` is moved aside for an instant as `.{target}.tgi-{pid}-{random}.old`.
//! One is stale when its name has exactly that shape, the process `pid` is gone, and (a `.tmp`) nobody holds
//! its lock (the lock also covers a writer in another PID namespace sharing the directory).

use std::fs::File;
use std::path::{Path, PathBuf};

/// Length of the random part of a temporary's name.
pub const RANDOM_LEN: usize = 6;

/// The prefix of this process's temporaries for `target_name` (the random part and `.tmp` follow).
pub fn prefix(target_name: &str) -> String {
    format!(".{target_name}.tgi-{}-", std::process::id())
}

/// The suffix of every temporary.
pub const SUFFIX: &str = ".tmp";

/// The extension of an old output directory moved aside (replacing `tmp`).
pub const OLD_EXTENSION: &str = "old";

/// What a temporary's name says.
#[derive(Debug, PartialEq, Eq)]
struct Temp<'a> {
    /// The output's file name.
    target: &'a str,
    /// The writer's pid.
    pid: u32,
    /// An old output moved aside rather than a new one being written.
    old: bool,
}

/// Reads a temporary's file name; `None` for a name of any other shape.
fn parse(name: &str) -> Option<Temp<'_>> {
    let (rest, old) = match name.strip_suffix(SUFFIX) {
        Some(rest) => (rest, false),
        None => (name.strip_suffix(".old")?, true),
    };
    let (rest, random) = rest.split_at_checked(rest.len().checked_sub(RANDOM_LEN)?)?;
    if !random.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return None;
    }
    let (rest, pid) = rest.strip_suffix('-')?.rsplit_once(".tgi-")?;
    let target = rest.strip_prefix('.')?;
    if target.is_empty() || pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) || pid.starts_with('0') {
        return None;
    }
    Some(Temp { target, pid: pid.parse().ok()?, old })
}

/// Whether process `pid` exists (in this PID namespace).
fn alive(pid: u32) -> bool {
    pid == std::process::id() || Path::new("/proc").join(pid.to_string()).exists()
}

/// Whether some process holds the lock of `path` (a file or a directory); unreadable counts as held.
fn locked(path: &Path) -> bool {
    match File::open(path) {
        Ok(f) => f.try_lock().is_err(),
        Err(_) => true,
    }
}

/// What the cleanup did with one stale entry.
#[derive(Debug, PartialEq, Eq)]
pub enum Cleaned {
    /// A temporary (or an old output whose replacement is in place) was removed.
    Removed(PathBuf),
    /// An old output moved aside by a run killed before its replacement was in place went back.
    Restored(PathBuf),
}

/// Cleans the stale temporaries in `dir`. Entries of another shape, symbolic links, and temporaries
/// of live or locked writers are left alone; errors skip the entry.
pub fn clean_stale(dir: &Path) -> Vec<Cleaned> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut cleaned = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(temp) = name.to_str().and_then(parse) else { continue };
        let path = entry.path();
        let Ok(kind) = std::fs::symlink_metadata(&path).map(|m| m.file_type()) else { continue };
        if !(kind.is_file() || kind.is_dir()) || alive(temp.pid) || (!temp.old && locked(&path)) {
            continue;
        }
        let target = dir.join(temp.target);
        if temp.old && kind.is_dir() && std::fs::symlink_metadata(&target).is_err() {
            if std::fs::rename(&path, &target).is_ok() {
                cleaned.push(Cleaned::Restored(target));
            }
            continue;
        }
        let gone = if kind.is_dir() { std::fs::remove_dir_all(&path) } else { std::fs::remove_file(&path) };
        if gone.is_ok() {
            cleaned.push(Cleaned::Removed(path));
        }
    }
    cleaned
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_our_exact_names_are_read() {
        assert_eq!(parse(".out.gguf.tgi-4242-aB3xY9.tmp"), Some(Temp { target: "out.gguf", pid: 4242, old: false }));
        assert_eq!(parse(".a.b.tgi-7.tgi-12-zzzzzz.tmp"), Some(Temp { target: "a.b.tgi-7", pid: 12, old: false }));
        assert_eq!(parse(".o-NF4.tgi-9-zzzzzz.old"), Some(Temp { target: "o-NF4", pid: 9, old: true }));
        for other in [
            ".out.gguf.aB3xY9.tmp",
            ".out.gguf.aB3xY9.old",
            ".out.gguf.tgi-4242-aB3xY9.tmp.old",
            ".out.gguf.tgi-4242-aB3xY.tmp",
            ".out.gguf.tgi-4242-aB3xY99.tmp",
            ".out.gguf.tgi-42x2-aB3xY9.tmp",
            ".out.gguf.tgi--aB3xY9.tmp",
            ".out.gguf.tgi-0042-aB3xY9.tmp",
            ".out.gguf.tgi-4242-aB3-Y9.tmp",
            "out.gguf.tgi-4242-aB3xY9.tmp",
            "..tgi-4242-aB3xY9.tmp",
            ".out.gguf.tgi-99999999999-aB3xY9.tmp",
            ".tmp",
            "",
        ] {
            assert_eq!(parse(other), None, "{other}");
        }
    }

    #[test]
    fn cleans_dead_unlocked_temporaries_only() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let ours = std::process::id();
        let stale_file = dir.path().join(format!(".m.gguf.tgi-{dead}-abc123.tmp"));
        let stale_dir = dir.path().join(format!(".m-NF4.tgi-{dead}-abc123.tmp"));
        let live = dir.path().join(format!(".m.gguf.tgi-{ours}-abc123.tmp"));
        let locked_file = dir.path().join(format!(".n.gguf.tgi-{dead}-def456.tmp"));
        let foreign = dir.path().join(".m.gguf.abc123.tmp");
        std::fs::write(&stale_file, b"").unwrap();
        std::fs::create_dir(&stale_dir).unwrap();
        std::fs::write(stale_dir.join("model.safetensors"), b"x").unwrap();
        std::fs::write(&live, b"").unwrap();
        std::fs::write(&locked_file, b"").unwrap();
        std::fs::write(&foreign, b"").unwrap();
        let held = File::open(&locked_file).unwrap();
        held.lock().unwrap();
        // Old outputs moved aside: one whose replacement is in place, one whose replacement never came.
        std::fs::create_dir(dir.path().join("done")).unwrap();
        let done_old = dir.path().join(format!(".done.tgi-{dead}-ghi789.old"));
        let lost_old = dir.path().join(format!(".lost.tgi-{dead}-ghi789.old"));
        std::fs::create_dir(&done_old).unwrap();
        std::fs::create_dir(&lost_old).unwrap();
        std::fs::write(lost_old.join("config.json"), b"{}").unwrap();
        let mut cleaned = clean_stale(dir.path());
        cleaned.sort_by_key(|c| format!("{c:?}"));
        let expected = vec![
            Cleaned::Removed(done_old),
            Cleaned::Removed(stale_dir),
            Cleaned::Removed(stale_file),
            Cleaned::Restored(dir.path().join("lost")),
        ];
        assert_eq!(cleaned, expected);
        assert_eq!(std::fs::read(dir.path().join("lost/config.json")).unwrap(), b"{}");
        assert!(live.exists() && locked_file.exists() && foreign.exists());
        drop(held);
        assert_eq!(clean_stale(dir.path()), vec![Cleaned::Removed(locked_file)]);
    }
}
