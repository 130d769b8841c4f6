//! Quantized copies of the model for the quantization dimension: made on demand by this
//! executable's `tgi quantize` and cached under `$XDG_CACHE_HOME/tgi/tune` (else `~/.cache/tgi/tune`),
//! keyed by the source's path, size and modification time and the type.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::UNIX_EPOCH;

use anyhow::{Context, Result};

/// The cache directory.
pub fn cache_dir() -> PathBuf {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").filter(|v| !v.is_empty()).map(|h| PathBuf::from(h).join(".cache")));
    base.unwrap_or_else(std::env::temp_dir).join("tgi").join("tune")
}

/// Where the `preset` copy of `source` is cached (its name changes whenever the source does).
pub fn cached_path(dir: &Path, source: &str, preset: &str) -> PathBuf {
    let path = Path::new(source);
    let (canon, stamp) = match (path.canonicalize(), std::fs::metadata(path)) {
        (Ok(c), Ok(m)) => {
            let mtime = m.modified().ok().and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map_or(0, |d| d.as_nanos());
            (c.display().to_string(), format!("{}:{mtime}", m.len()))
        }
        _ => (source.to_string(), String::new()),
    };
    let key = format!("{canon}|{stamp}|{preset}");
    let hash = key.bytes().fold(0xcbf29ce484222325u64, |h, b| (h ^ b as u64).wrapping_mul(0x100000001b3));
    let stem = path.file_stem().map_or("model".into(), |s| s.to_string_lossy().into_owned());
    dir.join(format!("{stem}-{preset}-{hash:016x}.gguf"))
}

/// The `preset` copy of `source`, made with `tgi quantize` when not cached yet.
pub fn quantized(source: &str, preset: &str) -> Result<PathBuf> {
    let dir = cache_dir();
    let out = cached_path(&dir, source, preset);
    if out.is_file() {
        return Ok(out);
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let exe = std::env::current_exe().context("cannot find the tgi executable")?;
    let result = Command::new(exe)
        .args(["quantize", source, "--type", preset, "--quiet", "--force", "-o"])
        .arg(&out)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .context("cannot run tgi quantize")?;
    if !result.status.success() {
        let err = String::from_utf8_lossy(&result.stderr);
        anyhow::bail!("tgi quantize --type {preset} failed: {}", err.trim());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_follows_source_and_type() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("m.gguf");
        std::fs::write(&src, b"one").unwrap();
        let s = src.to_str().unwrap();
        let a = cached_path(dir.path(), s, "q8_0");
        assert_eq!(a, cached_path(dir.path(), s, "q8_0"));
        assert_ne!(a, cached_path(dir.path(), s, "q4_k_m"));
        assert!(a.file_name().unwrap().to_str().unwrap().starts_with("m-q8_0-"));
        std::fs::write(&src, b"longer").unwrap();
        assert_ne!(a, cached_path(dir.path(), s, "q8_0"), "a changed source is quantized again");
    }
}
