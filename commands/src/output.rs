//! Safe output files and directories: written beside the target under a temporary name, fsynced,
//! then renamed into place, so the target path never holds a partial output. Temporaries carry the
//! writer's pid and are locked while written; the stale ones of killed runs are removed by the next
//! output created in the same directory.

mod stale;

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result};

use crate::error::InputError;

/// Temporary files and directories in flight, removed by the Ctrl-C handler.
static IN_FLIGHT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// Cleanups the Ctrl-C handler runs first (e.g. stopping a child server).
static HOOKS: Mutex<Vec<fn()>> = Mutex::new(Vec::new());

/// Registers `hook` to run when the process is interrupted (before exiting 130).
pub fn add_interrupt_hook(hook: fn()) {
    HOOKS.lock().unwrap_or_else(|e| e.into_inner()).push(hook);
}

/// Installs a SIGINT/SIGTERM handler that runs the interrupt hooks, deletes in-flight temporary files and
/// directories and exits 130.
pub fn install_interrupt_cleanup() {
    let _ = ctrlc::set_handler(|| {
        let hooks = HOOKS.lock().map(|h| h.clone()).unwrap_or_default();
        for hook in hooks {
            hook();
        }
        // Temporaries are created and registered under this lock, and the process exits holding it:
        // none can appear between the cleanup and the exit.
        let paths = IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner());
        for p in paths.iter() {
            remove(p);
        }
        std::process::exit(130);
    });
}

/// Removes a temporary file or directory. A directory is removed again while it exists (a bounded
/// number of times): the main thread may still be creating files in it.
fn remove(path: &Path) {
    if !path.is_dir() {
        let _ = std::fs::remove_file(path);
        return;
    }
    for _ in 0..100 {
        if std::fs::remove_dir_all(path).is_ok() || !path.exists() {
            return;
        }
    }
}

/// Creates a temporary with `create` and registers it for the interrupt handler, both under the
/// registry's lock, after removing the stale temporaries in `dir`.
fn in_flight<T>(
    dir: &Path,
    create: impl FnOnce() -> std::io::Result<T>,
    path: impl Fn(&T) -> &Path,
) -> std::io::Result<T> {
    for cleaned in stale::clean_stale(dir) {
        match cleaned {
            stale::Cleaned::Removed(p) => eprintln!("removed {}, left by a killed run", p.display()),
            stale::Cleaned::Restored(p) => eprintln!("restored {}, moved aside by a killed run", p.display()),
        }
    }
    let mut registry = IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner());
    let temp = create()?;
    registry.push(path(&temp).to_path_buf());
    Ok(temp)
}

/// The prefix of this process's temporaries for `target` (see [`stale`]).
fn temp_prefix(target: &Path) -> String {
    stale::prefix(&target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default())
}

/// A file being written; becomes the target only on `commit`.
pub struct AtomicFile {
    target: PathBuf,
    temp: Option<tempfile::NamedTempFile>,
    force: bool,
}

impl AtomicFile {
    /// Starts writing `target`. Refuses an existing target unless `force`, and a target that
    /// is one of `inputs` (same file, through links too).
    pub fn create(target: &Path, force: bool, inputs: &[PathBuf]) -> Result<AtomicFile> {
        if let Ok(meta) = std::fs::metadata(target) {
            if meta.is_dir() {
                return Err(InputError(format!("{}: is a directory", target.display())).into());
            }
            for input in inputs {
                if same_file(target, input) {
                    return Err(InputError(format!(
                        "{}: the output is the input file {}; choose another output path",
                        target.display(),
                        input.display()
                    ))
                    .into());
                }
            }
            if !force {
                return Err(
                    InputError(format!("{}: already exists (use --force to overwrite)", target.display())).into()
                );
            }
        }
        let dir = existing_parent(target)?;
        let prefix = temp_prefix(target);
        let create = || {
            let temp = temp_builder(&prefix)
                .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666))
                .tempfile_in(&dir)?;
            temp.as_file().lock()?;
            Ok(temp)
        };
        let temp = in_flight(&dir, create, |t: &tempfile::NamedTempFile| t.path())
            .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
        Ok(AtomicFile { target: target.to_path_buf(), temp: Some(temp), force })
    }

    /// A buffered writer into the temporary file.
    pub fn writer(&self) -> Result<BufWriter<File>> {
        let temp = self.temp.as_ref().expect("not committed");
        Ok(BufWriter::with_capacity(1 << 20, temp.as_file().try_clone()?))
    }

    /// Flushes to disk and renames into place.
    pub fn commit(mut self) -> Result<()> {
        let temp = self.temp.take().expect("not committed");
        temp.as_file().sync_all().context("fsync of the output failed")?;
        let temp_path = temp.path().to_path_buf();
        let result = if self.force {
            temp.persist(&self.target).map(|_| ())
        } else {
            temp.persist_noclobber(&self.target).map(|_| ())
        };
        forget(&temp_path);
        result
            .map_err(|e| e.error)
            .with_context(|| format!("cannot move the output into {}", self.target.display()))?;
        if let Some(dir) = self.target.parent().filter(|p| !p.as_os_str().is_empty()) {
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
        }
        Ok(())
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        if let Some(t) = &self.temp {
            forget(t.path());
        }
    }
}

fn forget(path: &Path) {
    if let Ok(mut v) = IN_FLIGHT.lock() {
        v.retain(|p| p != path);
    }
}

/// A directory being written; becomes the target only on `commit`.
pub struct AtomicDir {
    target: PathBuf,
    temp: Option<tempfile::TempDir>,
    /// The temporary directory's lock, held while it is written (see [`stale`]).
    _lock: File,
    force: bool,
}

impl AtomicDir {
    /// Starts writing directory `target`. Refuses an existing target unless `force` (and then only a
    /// directory), and a target that is one of `inputs` or contains one.
    pub fn create(target: &Path, force: bool, inputs: &[PathBuf]) -> Result<AtomicDir> {
        if let Ok(meta) = std::fs::metadata(target) {
            if !meta.is_dir() {
                return Err(InputError(format!("{}: exists and is not a directory", target.display())).into());
            }
            if let Some(input) = inputs.iter().find(|i| i.ancestors().any(|a| same_file(target, a))) {
                return Err(InputError(format!(
                    "{}: the output directory holds the input {}; choose another output path",
                    target.display(),
                    input.display()
                ))
                .into());
            }
            if !force {
                return Err(
                    InputError(format!("{}: already exists (use --force to overwrite)", target.display())).into()
                );
            }
        }
        let parent = existing_parent(target)?;
        let prefix = temp_prefix(target);
        let create = || {
            let temp = temp_builder(&prefix).tempdir_in(&parent)?;
            let lock = File::open(temp.path())?;
            lock.lock()?;
            Ok((temp, lock))
        };
        let (temp, lock) = in_flight(&parent, create, |t: &(tempfile::TempDir, File)| t.0.path())
            .with_context(|| format!("cannot create a temporary directory in {}", parent.display()))?;
        Ok(AtomicDir { target: target.to_path_buf(), temp: Some(temp), _lock: lock, force })
    }

    /// The temporary directory to write into.
    pub fn path(&self) -> &Path {
        self.temp.as_ref().expect("not committed").path()
    }

    /// Fsyncs every file (made world-readable, as a copied model directory would be) and renames the directory into place (replacing an old target with `force`).
    pub fn commit(mut self) -> Result<()> {
        let temp = self.temp.take().expect("not committed");
        let temp_path = temp.path().to_path_buf();
        for entry in std::fs::read_dir(&temp_path)? {
            let path = entry?.path();
            File::open(&path)
                .and_then(|f| f.sync_all())
                .with_context(|| format!("fsync of {} failed", path.display()))?;
            let _ = std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o644));
        }
        let _ = std::fs::set_permissions(&temp_path, std::os::unix::fs::PermissionsExt::from_mode(0o755));
        let kept = temp.keep();
        // The swap runs under the registry's lock: an interrupt waits for it to end, so it never
        // leaves the old output aside or the target missing.
        let mut registry = IN_FLIGHT.lock().unwrap_or_else(|e| e.into_inner());
        let old = if self.force && self.target.exists() {
            let old = kept.with_extension(stale::OLD_EXTENSION);
            if let Err(e) = std::fs::rename(&self.target, &old) {
                remove(&kept);
                registry.retain(|p| p != &temp_path);
                return Err(e).with_context(|| format!("cannot move the old {} aside", self.target.display()));
            }
            Some(old)
        } else {
            None
        };
        let moved = std::fs::rename(&kept, &self.target);
        registry.retain(|p| p != &temp_path);
        if let Err(e) = moved {
            if let Some(old) = &old {
                let _ = std::fs::rename(old, &self.target);
            }
            remove(&kept);
            return Err(e).with_context(|| format!("cannot move the output into {}", self.target.display()));
        }
        if let Some(old) = old {
            remove(&old);
        }
        drop(registry);
        if let Ok(d) = File::open(parent_dir(&self.target)) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

impl Drop for AtomicDir {
    fn drop(&mut self) {
        if let Some(t) = &self.temp {
            forget(t.path());
        }
    }
}

/// The directory `target` will be written in, which must exist.
fn existing_parent(target: &Path) -> Result<PathBuf> {
    let dir = parent_dir(target);
    if !dir.is_dir() {
        return Err(InputError(format!("{}: directory does not exist", dir.display())).into());
    }
    Ok(dir)
}

/// A builder of temporaries named after `prefix` in the pattern stale-temporary cleanup knows.
fn temp_builder(prefix: &str) -> tempfile::Builder<'_, 'static> {
    let mut b = tempfile::Builder::new();
    b.prefix(prefix).suffix(stale::SUFFIX).rand_bytes(stale::RANDOM_LEN);
    b
}

/// The directory holding `path` (`.` for a bare name).
fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Whether two paths name the same file (device and inode), following links.
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// Writes all of `w` and flushes it, for callers that hold a `BufWriter`.
pub fn finish_writer(mut w: BufWriter<File>) -> Result<()> {
    w.flush().context("writing the output failed")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_commit_force_and_refusals() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out");
        let d = AtomicDir::create(&target, false, &[]).unwrap();
        std::fs::write(d.path().join("a.txt"), b"one").unwrap();
        assert!(!target.exists());
        d.commit().unwrap();
        assert_eq!(std::fs::read(target.join("a.txt")).unwrap(), b"one");
        assert!(AtomicDir::create(&target, false, &[]).is_err());
        let d = AtomicDir::create(&target, true, &[]).unwrap();
        std::fs::write(d.path().join("b.txt"), b"two").unwrap();
        d.commit().unwrap();
        assert!(!target.join("a.txt").exists() && target.join("b.txt").exists());
        // An output directory holding the input, a plain file as target: refused.
        let input = target.join("b.txt");
        assert!(AtomicDir::create(&target, true, &[input]).is_err());
        assert!(AtomicDir::create(&target.join("b.txt"), true, &[]).is_err());
        // Dropped without commit: nothing left behind.
        drop(AtomicDir::create(&dir.path().join("never"), false, &[]).unwrap());
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("out")]);
    }

    #[test]
    fn commit_and_refusals() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("out.bin");
        let f = AtomicFile::create(&target, false, &[]).unwrap();
        let mut w = f.writer().unwrap();
        w.write_all(b"hello").unwrap();
        finish_writer(w).unwrap();
        assert!(!target.exists());
        f.commit().unwrap();
        assert_eq!(std::fs::read(&target).unwrap(), b"hello");
        assert!(AtomicFile::create(&target, false, &[]).is_err());
        assert!(AtomicFile::create(&target, true, std::slice::from_ref(&target)).is_err());
        let link = dir.path().join("link.bin");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(AtomicFile::create(&link, true, std::slice::from_ref(&target)).is_err());
        // Dropped without commit: nothing left behind.
        let other = dir.path().join("other.bin");
        drop(AtomicFile::create(&other, false, &[]).unwrap());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
    }
}
