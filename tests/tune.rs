//! End-to-end tests of `tgi tune` on the bundled model: a short sweep writes a configuration that
//! `tgi serve --config` and `tgi serve --profile` start with; a sweep resumes from its journal without
//! redoing finished trials; no `tgi serve` child outlives the sweep, even when it is interrupted.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::server::{get, Server};
use common::{assert_fails, model, tgi};
use serde_json::Value;

/// A tiny workload with objectives any machine meets.
const TINY: [&str; 14] = [
    "--profile",
    "auto",
    "--slo",
    "ttft=30s,tpot=10s,e2e=60s",
    "--requests",
    "3",
    "-c",
    "2",
    "--input-tokens",
    "8",
    "--output-tokens",
    "4",
    "--warmup",
    "1",
];

fn gguf() -> String {
    model("stories260k/stories260k-f32.gguf").display().to_string()
}

/// `tgi tune` with TINY, `extra`, and its config/cache directories under `home`.
fn tune(home: &Path, extra: &[&str]) -> Output {
    let m = gguf();
    Command::new(env!("CARGO_BIN_EXE_tgi"))
        .arg("tune")
        .args(["-m", &m])
        .args(TINY)
        .args(extra)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_CACHE_HOME", home.join("cache"))
        .output()
        .expect("run tgi tune")
}

fn ok(out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "stderr: {err}\nstdout: {}", String::from_utf8_lossy(&out.stdout));
    err
}

fn journal(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// Whether the process `pid` is gone (or only a zombie about to be reaped by init).
fn gone(pid: u64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

#[test]
fn sweep_writes_a_config_that_serve_starts_with() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("best.toml");
    let (json, charts) = (dir.path().join("tune.json"), dir.path().join("charts"));
    let o = tune(
        dir.path(),
        &[
            "--threads",
            "1,2",
            "--budget",
            "2",
            "--out",
            out.to_str().unwrap(),
            "--json",
            json.to_str().unwrap(),
            "--plot",
            charts.to_str().unwrap(),
        ],
    );
    let err = ok(&o);
    let table = String::from_utf8_lossy(&o.stdout);
    assert!(table.contains("threads=1") && table.contains("meets SLOs"), "{table}");
    assert!(err.contains("measured here") && err.contains("full grid"), "{err}");
    let text = std::fs::read_to_string(&out).unwrap();
    let model_line = format!("model = \"{}\"", gguf());
    assert!(text.lines().any(|l| l.starts_with("threads = ")) && text.contains(&model_line), "{text}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let trials = report["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 2);
    for t in trials {
        let m = &t["median"];
        assert_eq!(m["requests_ok"], 3, "{t}");
        assert!(m["ttft_ms"]["p99"].as_f64().unwrap() > 0.0 && m["output_tokens_per_s"].as_f64().unwrap() > 0.0);
        assert!(t["peak_rss_mib"].as_f64().unwrap() > 1.0, "{t}");
        assert!(gone(t["server_pid"].as_u64().unwrap()), "a trial's server outlived it");
    }
    assert!(charts.join("tune-pareto.png").is_file() && charts.join("tune-pareto.svg").is_file());
    assert_eq!(journal(&dir.path().join("best.jsonl")).len(), 2, "journal beside --out");

    // The written file is what `tgi serve --config` reads.
    let server = Server::start(&["--config", out.to_str().unwrap()]);
    assert_eq!(get(&server.url("/health")).0, 200);
    drop(server);
    // ... and, installed for the profile, what `tgi serve --profile auto` applies.
    let installed = dir.path().join("config/tgi/tuned/auto.toml");
    assert_eq!(std::fs::read_to_string(&installed).unwrap(), text);
    let config_home = dir.path().join("config");
    let server = Server::start_with_env(&["--profile", "auto"], &[("XDG_CONFIG_HOME", config_home.to_str().unwrap())]);
    assert_eq!(get(&server.url("/health")).0, 200);
    let log = server.log.lock().unwrap().clone();
    assert!(log.contains("applying the tuned configuration") && log.contains("auto.toml"), "{log}");
}

#[test]
fn resumes_from_the_journal_without_redoing_trials() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("best.toml");
    let j = dir.path().join("trials.jsonl");
    let args = |budget: &'static str| {
        let (o, jj) = (out.to_str().unwrap().to_string(), j.to_str().unwrap().to_string());
        move |home: &Path| {
            tune(
                home,
                &["--threads", "1,2", "--max-batch-size", "1,4", "--budget", budget, "--out", &o, "--journal", &jj],
            )
        }
    };
    // 4 configurations > budget: coordinate descent, baseline first.
    let err = ok(&args("2")(dir.path()));
    assert!(err.contains("coordinate descent") && err.contains("2 trials (0 from the journal"), "{err}");
    let first = journal(&j);
    assert_eq!(first.len(), 2);
    assert_eq!(first[0]["config"], serde_json::json!({}), "the baseline is serve's defaults");
    let err = ok(&args("3")(dir.path()));
    assert!(err.contains("3 trials (2 from the journal"), "{err}");
    let all = journal(&j);
    assert_eq!(all.len(), 3, "one new trial");
    assert_eq!(all[..2], first[..]);
    assert!(all.iter().all(|t| gone(t["server_pid"].as_u64().unwrap())));
}

/// The children of `pid` now.
fn children(pid: u32) -> Vec<u64> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().filter_map(Result::ok) {
        let Ok(child) = e.file_name().to_string_lossy().parse::<u64>() else { continue };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else { continue };
        let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or("").split_whitespace().collect();
        if fields.get(1) == Some(&pid.to_string().as_str()) {
            out.push(child);
        }
    }
    out
}

#[test]
fn an_interrupted_sweep_leaves_no_server_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let j: PathBuf = dir.path().join("trials.jsonl");
    let (out, m) = (dir.path().join("best.toml"), gguf());
    let sweep = ["--threads", "1,2", "--max-batch-size", "1,2,4", "--budget", "5", "--quiet"];
    let mut child = Command::new(env!("CARGO_BIN_EXE_tgi"))
        .arg("tune")
        .args(["-m", &m])
        .args(TINY)
        .args(sweep)
        .args(["--out", out.to_str().unwrap(), "--journal", j.to_str().unwrap()])
        .env("XDG_CONFIG_HOME", dir.path().join("config"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut seen = Vec::new();
    let t = Instant::now();
    // Interrupt once a trial is journaled and the next server is up.
    loop {
        let now = children(pid);
        for c in &now {
            if !seen.contains(c) {
                seen.push(*c);
            }
        }
        let done = std::fs::read_to_string(&j).map_or(0, |s| s.lines().count());
        if done >= 1 && !now.is_empty() {
            break;
        }
        assert!(child.try_wait().unwrap().is_none(), "the sweep ended before it could be interrupted");
        assert!(t.elapsed() < Duration::from_secs(300), "no trial finished in 300 s");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(Command::new("kill").args(["-INT", &pid.to_string()]).status().unwrap().success());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(!seen.is_empty());
    // The sweep kills and reaps its server before it exits, so each should be gone at once: poll, not pause.
    let t = Instant::now();
    for c in &seen {
        while !gone(*c) {
            assert!(t.elapsed() < Duration::from_secs(60), "server {c} outlived the interrupted sweep by 60 s");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let done = journal(&j).len();
    assert!((1..5).contains(&done), "{done}");
    // The rerun picks up where it stopped.
    let o =
        tune(dir.path(), &[&sweep[..], &["--out", out.to_str().unwrap(), "--journal", j.to_str().unwrap()]].concat());
    let err = ok(&o);
    assert!(err.contains(&format!("({done} from the journal")), "{err}");
    assert!(out.is_file());
}

#[test]
fn profiles_and_bad_input() {
    let out = tgi(["tune", "--list-profiles"]);
    let table = String::from_utf8_lossy(&out.stdout);
    for name in ["rpi5", "n5105", "x86-4c8g", "jetson-orin-nano", "apple-m2", "l4", "a10g", "h100"] {
        assert!(table.contains(name), "{name} missing from:\n{table}");
    }
    assert_fails(&tgi(["tune", "--profile", "nope"]), 2, "no profile 'nope'");
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("p.toml");
    let text = std::fs::read_to_string(common::root().join("profiles/rpi5.toml")).unwrap();
    std::fs::write(&p, format!("{text}\nturbo = true\n")).unwrap();
    assert_fails(&tgi(["tune", "--profile", p.to_str().unwrap()]), 2, "unknown field `turbo`");
    assert_fails(&tgi(["tune", "--profile", "auto", "--speculate", "ngram:0"]), 2, "--speculate");
    assert_fails(&tgi(["tune", "--profile", "auto", "--budget", "0"]), 2, "--budget");
    assert_fails(&tgi(["serve", "--profile", "nope"]), 2, "no profile 'nope'");
}
