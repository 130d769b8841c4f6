//! `tgi quantize` on bad input: a clear message, exit code 2, no panic, no output file.

mod common;

use common::{assert_fails, assert_ok, files_in, model, tgi};

fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
}

#[test]
fn missing_model_is_an_input_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = tgi(["quantize", "/nonexistent/model", "-o"]);
    assert_eq!(out.status.code(), Some(2), "a missing option value is a usage error");
    let out =
        tgi(["quantize".as_ref(), "./no/such/dir".as_ref(), "-o".as_ref(), dir.path().join("x.gguf").as_os_str()]);
    assert_fails(&out, 2, "no/such/dir");
    assert!(files_in(dir.path()).is_empty());
}

#[test]
fn unknown_type_lists_the_choices() {
    let out = tgi(["quantize", "x", "--type", "q4_k_xl"]);
    assert_fails(&out, 2, "q4_k_m");
}

#[test]
fn unsupported_architecture_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("m");
    copy_dir(&model("stories260k/hf"), &m);
    let cfg = std::fs::read_to_string(m.join("config.json")).unwrap().replace("LlamaForCausalLM", "GPT2LMHeadModel");
    std::fs::write(m.join("config.json"), cfg).unwrap();
    let out = tgi(["quantize".as_ref(), m.as_os_str(), "-o".as_ref(), dir.path().join("o.gguf").as_os_str()]);
    assert_fails(&out, 2, "GPT2LMHeadModel");
    assert!(!dir.path().join("o.gguf").exists());
}

#[test]
fn truncated_safetensors_leaves_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("m");
    copy_dir(&model("stories260k/hf"), &m);
    let st = m.join("model.safetensors");
    let bytes = std::fs::read(&st).unwrap();
    std::fs::write(&st, &bytes[..bytes.len() / 2]).unwrap();
    let target = dir.path().join("o.gguf");
    let out = tgi(["quantize".as_ref(), m.as_os_str(), "-o".as_ref(), target.as_os_str()]);
    assert_fails(&out, 2, "model.safetensors");
    assert_eq!(files_in(dir.path()), vec!["m".to_string()]);
}

#[test]
fn bad_config_json_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("m");
    copy_dir(&model("stories260k/hf"), &m);
    std::fs::write(m.join("config.json"), "{ not json").unwrap();
    let out = tgi(["quantize".as_ref(), m.as_os_str(), "-o".as_ref(), dir.path().join("o.gguf").as_os_str()]);
    assert_fails(&out, 2, "config.json");
}

#[test]
fn existing_output_needs_force_and_input_is_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("o.gguf");
    std::fs::write(&target, b"keep").unwrap();
    let hf = model("stories260k/hf");
    let out = tgi(["quantize".as_ref(), hf.as_os_str(), "-o".as_ref(), target.as_os_str(), "--quiet".as_ref()]);
    assert_fails(&out, 2, "--force");
    assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    let out = tgi([
        "quantize".as_ref(),
        hf.as_os_str(),
        "-o".as_ref(),
        target.as_os_str(),
        "--force".as_ref(),
        "-q".as_ref(),
    ]);
    assert_ok(&out);
    // The input GGUF as output, through a symlink too.
    let link = dir.path().join("link.gguf");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let before = std::fs::read(&target).unwrap();
    let out = tgi(["quantize".as_ref(), target.as_os_str(), "-o".as_ref(), link.as_os_str(), "--force".as_ref()]);
    assert_fails(&out, 2, "is the input");
    assert_eq!(std::fs::read(&target).unwrap(), before);
}

#[test]
fn malformed_gguf_input_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.gguf");
    let mut bytes = std::fs::read(model("stories260k/stories260k-f32.gguf")).unwrap();
    bytes.truncate(5000);
    std::fs::write(&bad, &bytes).unwrap();
    let out = tgi(["quantize".as_ref(), bad.as_os_str(), "-o".as_ref(), dir.path().join("o.gguf").as_os_str()]);
    assert_fails(&out, 2, "bad.gguf");
    std::fs::write(&bad, b"not a gguf file at all").unwrap();
    let out = tgi(["quantize".as_ref(), bad.as_os_str(), "-o".as_ref(), dir.path().join("o.gguf").as_os_str()]);
    assert_fails(&out, 2, "bad.gguf");
    assert_eq!(files_in(dir.path()), vec!["bad.gguf".to_string()]);
}

#[test]
fn override_type_that_does_not_fit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let hf = model("stories260k/hf");
    let target = dir.path().join("o.gguf");
    let out = tgi([
        "quantize".as_ref(),
        hf.as_os_str(),
        "--token-embedding-type".as_ref(),
        "q4_k".as_ref(),
        "-o".as_ref(),
        target.as_os_str(),
    ]);
    assert_fails(&out, 2, "token_embd.weight");
    assert!(!target.exists());
}

#[test]
fn hub_id_resolves_from_the_local_cache_offline() {
    let home = tempfile::tempdir().unwrap();
    let repo = home.path().join("hub/models--tgi-test--stories260k");
    let rev = "0123456789abcdef0123456789abcdef01234567";
    copy_dir(&model("stories260k/hf"), &repo.join("snapshots").join(rev));
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), rev).unwrap();
    let target = home.path().join("o.gguf");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tgi"))
        .args(["quantize", "tgi-test/stories260k", "--type", "q8_0", "--quiet", "-o"])
        .arg(&target)
        .env("HF_HOME", home.path())
        .env("HF_HUB_OFFLINE", "1")
        .env_remove("HF_HUB_CACHE")
        .output()
        .unwrap();
    assert_ok(&out);
    assert!(target.exists());
    // A repository that is not cached, offline: a clear error naming it.
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tgi"))
        .args(["quantize", "tgi-test/missing", "-o"])
        .arg(home.path().join("m.gguf"))
        .env("HF_HOME", home.path())
        .env("HF_HUB_OFFLINE", "1")
        .env_remove("HF_HUB_CACHE")
        .output()
        .unwrap();
    assert_fails(&out, 2, "tgi-test/missing");
}

#[test]
fn a_safetensors_file_path_uses_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("o.gguf");
    let st = model("stories260k/hf/model.safetensors");
    let out = tgi([
        "quantize".as_ref(),
        st.as_os_str(),
        "--type".as_ref(),
        "q8_0".as_ref(),
        "-q".as_ref(),
        "-o".as_ref(),
        target.as_os_str(),
    ]);
    assert_ok(&out);
    assert!(target.exists());
}
