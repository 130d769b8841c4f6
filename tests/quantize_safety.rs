//! The output path never holds a partial file: not after Ctrl-C, not on a full disk.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{files_in, model, tgi};

/// Writes a random-weight Llama checkpoint (stories260k's tokenizer, bigger matrices) as F16
/// safetensors, big enough that quantizing it takes a noticeable time.
fn write_big_model(dir: &Path, hidden: usize, ffn: usize, layers: usize) {
    std::fs::create_dir_all(dir).unwrap();
    for f in ["tokenizer.json", "tokenizer_config.json"] {
        std::fs::copy(model("stories260k/hf").join(f), dir.join(f)).unwrap();
    }
    let cfg = std::fs::read_to_string(model("stories260k/hf/config.json")).unwrap();
    let mut cfg: serde_json::Value = serde_json::from_str(&cfg).unwrap();
    cfg["hidden_size"] = hidden.into();
    cfg["intermediate_size"] = ffn.into();
    cfg["num_hidden_layers"] = layers.into();
    cfg["num_attention_heads"] = 8.into();
    cfg["num_key_value_heads"] = 8.into();
    cfg["head_dim"] = (hidden / 8).into();
    std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
    let mut tensors: Vec<(String, Vec<usize>)> =
        vec![("model.embed_tokens.weight".into(), vec![512, hidden]), ("model.norm.weight".into(), vec![hidden])];
    for l in 0..layers {
        let p = format!("model.layers.{l}");
        tensors.push((format!("{p}.input_layernorm.weight"), vec![hidden]));
        tensors.push((format!("{p}.post_attention_layernorm.weight"), vec![hidden]));
        for m in ["q_proj", "k_proj", "v_proj", "o_proj"] {
            tensors.push((format!("{p}.self_attn.{m}.weight"), vec![hidden, hidden]));
        }
        tensors.push((format!("{p}.mlp.gate_proj.weight"), vec![ffn, hidden]));
        tensors.push((format!("{p}.mlp.up_proj.weight"), vec![ffn, hidden]));
        tensors.push((format!("{p}.mlp.down_proj.weight"), vec![hidden, ffn]));
    }
    let mut header = serde_json::Map::new();
    let mut offset = 0usize;
    for (name, shape) in &tensors {
        let n: usize = shape.iter().product::<usize>() * 2;
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": "F16", "shape": shape, "data_offsets": [offset, offset + n]}),
        );
        offset += n;
    }
    let mut h = serde_json::Value::Object(header).to_string().into_bytes();
    while !h.len().is_multiple_of(8) {
        h.push(b' ');
    }
    let mut bytes = Vec::with_capacity(8 + h.len() + offset);
    bytes.extend_from_slice(&(h.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&h);
    let mut state = 0x2545F4914F6CDD1Du64;
    for _ in 0..offset / 2 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        // f16 values of magnitude ~0.01..0.03 with random sign: exponent 0b01000-0b01001.
        let v: u16 = 0x2000 | (state as u16 & 0x87ff);
        bytes.extend_from_slice(&v.to_le_bytes());
    }
    std::fs::write(dir.join("model.safetensors"), bytes).unwrap();
}

#[test]
fn interrupt_leaves_no_file_at_the_target() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("big");
    write_big_model(&m, 1024, 4096, 2);
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let target = out_dir.join("big.gguf");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tgi"))
        .args(["quantize".as_ref(), m.as_os_str(), "--type".as_ref(), "q4_k_m".as_ref()])
        .args(["-o".as_ref(), target.as_os_str(), "--quiet".as_ref(), "--threads".as_ref(), "1".as_ref()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the temporary output to appear, then interrupt.
    let start = Instant::now();
    while files_in(&out_dir).is_empty() && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(2));
    }
    std::thread::sleep(Duration::from_millis(50));
    let pid = child.id().to_string();
    let killed = Command::new("kill").args(["-INT", &pid]).status().unwrap();
    assert!(killed.success());
    let status = child.wait().unwrap();
    assert!(!status.success(), "tgi finished before the interrupt; make the model bigger");
    assert!(!target.exists(), "partial output at the target path");
    assert!(files_in(&out_dir).is_empty(), "temporary files left: {:?}", files_in(&out_dir));
}

#[test]
fn full_disk_is_an_error_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("small");
    std::fs::create_dir(&mnt).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256k", "tmpfs"])
        .arg(&mnt)
        .stderr(Stdio::null())
        .status();
    if !mounted.map(|s| s.success()).unwrap_or(false) {
        eprintln!("cannot mount a small tmpfs here (not root?): skipping the full-disk test");
        return;
    }
    let target = mnt.join("o.gguf");
    let out = tgi(["quantize".as_ref(), model("stories260k/hf").as_os_str(), "--type".as_ref(), "f32".as_ref()]
        .into_iter()
        .chain(["-o".as_ref(), target.as_os_str(), "--quiet".as_ref()]));
    let listing = files_in(&mnt);
    let _ = Command::new("umount").arg(&mnt).status();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "stderr: {err}");
    assert!(err.contains("No space left") || err.contains("space"), "stderr: {err}");
    assert!(listing.is_empty(), "left behind: {listing:?}");
}

/// `tgi quantize MODEL FORMAT... -o TARGET --quiet --force` (not waited for).
fn spawn_quantize(model: &Path, format: &[&str], target: &Path) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_tgi"))
        .arg("quantize")
        .arg(model)
        .args(format)
        .args(["-o".as_ref(), target.as_os_str(), "--quiet".as_ref(), "--force".as_ref()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Sends `signal` (e.g. "-INT") to `pid`; false when it has exited already.
fn send(signal: &str, pid: u32) -> bool {
    Command::new("kill").args([signal, &pid.to_string()]).stderr(Stdio::null()).status().unwrap().success()
}

#[test]
fn an_interrupt_at_any_moment_leaves_no_temporary() {
    let dir = tempfile::tempdir().unwrap();
    let model = model("stories260k/hf");
    let formats: [(&[&str], &str); 2] = [(&["--type", "q8_0"], "s.gguf"), (&["--format", "nf4"], "s-nf4")];
    // From right after the spawn to past the end of a run, in steps of 0.2 ms, GGUF files and NF4
    // directories in turn, each replacing the last complete output (--force).
    for step in 0..240u64 {
        let (format, name) = formats[step as usize % 2];
        let target = dir.path().join(name);
        let existed = target.exists();
        let child = spawn_quantize(&model, format, &target);
        std::thread::sleep(Duration::from_micros(step * 200));
        send("-INT", child.id());
        let status = child.wait_with_output().unwrap().status;
        let left: Vec<String> = files_in(dir.path()).into_iter().filter(|f| f != "s.gguf" && f != "s-nf4").collect();
        assert!(left.is_empty(), "after an interrupt at {} us ({status:?}): {left:?}", step * 200);
        assert!(!existed || target.exists(), "the previous {name} is gone after an interrupt at {} us", step * 200);
    }
}

#[test]
fn the_next_run_removes_what_a_killed_run_left() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("big");
    write_big_model(&m, 1024, 4096, 2);
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let target = out_dir.join("big.gguf");
    // Q4_K_M on one thread, as in the interrupt test: the encoding goes on long after the temporary appears.
    let mut child = spawn_quantize(&m, &["--type", "q4_k_m", "--threads", "1"], &target);
    let start = Instant::now();
    while files_in(&out_dir).is_empty() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("tgi quantize ended ({status}) before its temporary output appeared");
        }
        assert!(start.elapsed() < Duration::from_secs(300), "no temporary output appeared in 300 s");
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(send("-KILL", child.id()));
    let status = child.wait().unwrap();
    assert_eq!(status.signal(), Some(9), "tgi quantize ended ({status}) before the SIGKILL; make the model bigger");
    assert!(!target.exists(), "tgi quantize had renamed its output before the SIGKILL; make the model bigger");
    let left = files_in(&out_dir);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].starts_with(&format!(".big.gguf.tgi-{}-", child.id())), "{left:?}");
    // Beside it: a live run's temporary (a running `sleep`'s pid), an AWQ temporary directory of a
    // dead run, and names that are not ours.
    let mut live = Command::new("sleep").arg("600").spawn().unwrap();
    let live_temp = format!(".other.gguf.tgi-{}-abcdef.tmp", live.id());
    std::fs::write(out_dir.join(&live_temp), b"").unwrap();
    let dead_dir = format!(".big-AWQ.tgi-{}-ghijkl.tmp", child.id());
    std::fs::create_dir(out_dir.join(&dead_dir)).unwrap();
    std::fs::write(out_dir.join(&dead_dir).join("config.json"), b"{}").unwrap();
    let foreign = [".big.gguf.abcdef.tmp", "notes.tmp", ".big.gguf.tgi-x-abcdef.tmp"];
    for f in foreign {
        std::fs::write(out_dir.join(f), b"").unwrap();
    }
    let small = out_dir.join("small.gguf");
    let out = spawn_quantize(&model("stories260k/hf"), &["--type", "q8_0"], &small).wait_with_output().unwrap();
    let _ = live.kill();
    let _ = live.wait();
    assert!(out.status.success());
    let mut expected: Vec<String> = foreign.iter().map(|s| s.to_string()).collect();
    expected.extend([live_temp, "small.gguf".to_string()]);
    expected.sort();
    assert_eq!(files_in(&out_dir), expected);
}
