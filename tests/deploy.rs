//! Deployment, end to end: replicas behind Debian's HAProxy in network namespaces
//! (tests/deploy/scale_out.py), the container image built with podman from the release binary
//! (tests/deploy/image.sh), and the Kubernetes manifests against the Kubernetes schemas
//! (tests/deploy/manifests.sh). Each needs tools a bare machine may lack (root, haproxy, podman,
//! kubernetes-validate; `.ci/run` installs them): without them a script prints `skipped: REASON`,
//! which fails the test under `CI=true` and passes it elsewhere.

mod common;

use std::process::Command;

/// Runs `program tests/deploy/SCRIPT ARGS` and asserts it ended with `done` (or skipped, outside CI).
fn run(program: &str, script: &str, args: &[&str], done: &str) {
    let path = common::root().join("tests/deploy").join(script);
    let out = Command::new(program).arg(&path).args(args).output().expect("run the deployment script");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{script} failed:\n{stdout}\n{stderr}");
    if let Some(reason) = stdout.lines().find_map(|l| l.strip_prefix("skipped: ")) {
        assert_ne!(std::env::var("CI").as_deref(), Ok("true"), "{script} cannot run under CI=true: {reason}");
        eprintln!("{script} skipped: {reason}");
        return;
    }
    assert!(stdout.contains(done), "{script} did not finish:\n{stdout}\n{stderr}");
    print!("{stdout}");
}

#[test]
fn replicas_behind_haproxy_survive_a_drain_and_a_kill_and_keep_prefixes_together() {
    run("python3", "scale_out.py", &[env!("CARGO_BIN_EXE_tgi")], "scale-out ok");
}

#[test]
fn the_container_image_builds_from_the_release_binary_and_serves_as_its_user() {
    run("bash", "image.sh", &[env!("CARGO_BIN_EXE_tgi")], "image ok");
}

#[test]
fn the_kubernetes_manifests_are_valid_and_match_tgi() {
    run("python3", "manifests.py", &[env!("CARGO_BIN_EXE_tgi")], "manifests ok");
}
