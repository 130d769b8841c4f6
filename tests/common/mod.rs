//! Helpers shared by the end-to-end tests: run the `tgi` binary, find the bundled models.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A bundled model directory under models/.
pub fn model(rel: &str) -> PathBuf {
    root().join("models").join(rel)
}

/// Runs `tgi` with `args`, capturing its output.
pub fn tgi<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<std::ffi::OsStr>,
{
    Command::new(env!("CARGO_BIN_EXE_tgi")).args(args).output().expect("run tgi")
}

/// Asserts a run failed with `code` and that stderr mentions `needle`.
pub fn assert_fails(out: &Output, code: i32, needle: &str) {
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "stderr: {err}");
    assert!(err.contains(needle), "expected '{needle}' in stderr: {err}");
    assert!(!err.contains("panicked"), "panic: {err}");
}

/// Asserts a run succeeded, returning stdout.
pub fn assert_ok(out: &Output) -> String {
    assert!(out.status.success(), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The files in a directory (names).
pub fn files_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// `tgi quantize INPUT --type PRESET -o OUT --json`, asserting success; returns the JSON summary.
pub fn quantize(input: &Path, preset: &str, out: &Path) -> serde_json::Value {
    let o = tgi([
        "quantize".as_ref(),
        input.as_os_str(),
        "--type".as_ref(),
        preset.as_ref(),
        "-o".as_ref(),
        out.as_os_str(),
        "--json".as_ref(),
    ]);
    serde_json::from_str(&assert_ok(&o)).unwrap()
}
