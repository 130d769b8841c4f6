//! `tgi serve` with a draft model and with Medusa heads, end to end on stories-distill-4l (stories260k
//! drafting for it; its heads found from the Medusa directory given as --model): concurrent greedy requests
//! give `tgi generate`'s text, details and /metrics report the drafts and their acceptance, and a draft model
//! whose vocabulary differs is refused at startup with exit 2. Where `TGI_GEMMA3_GGUF` names the published Gemma 3
//! 270M GGUF: its weights dequantized to F16 as the target, drafted by the same weights quantized to Q4_0 at load.

mod common;

use std::thread;

use common::server::{post_json, Server};
use common::{assert_fails, assert_ok, model, tgi};
use serde_json::{json, Value};

const PROMPTS: [&str; 4] =
    ["Once upon a time", "Lily and Ben were playing in the", "The cat", "One day, a little bird"];

/// Four concurrent greedy /generate requests with details against `server`, each checked against `tgi
/// generate` on `target`; returns the tokens drafted and accepted in all.
fn check_greedy(server: &Server, target: &str) -> (u64, u64) {
    let answers: Vec<Value> = thread::scope(|s| {
        let jobs: Vec<_> = PROMPTS
            .iter()
            .map(|p| {
                let body = json!({"inputs": p, "parameters": {"max_new_tokens": 48, "details": true}});
                let url = server.url("/generate");
                s.spawn(move || post_json(&url, &body, 200))
            })
            .collect();
        jobs.into_iter().map(|j| j.join().unwrap()).collect()
    });
    let (mut drafted, mut accepted) = (0, 0);
    for (p, a) in PROMPTS.iter().zip(&answers) {
        let alone: Value = serde_json::from_str(&assert_ok(&tgi([
            "generate",
            "-m",
            target,
            "--temperature",
            "0",
            "-n",
            "48",
            "--json",
            p,
        ])))
        .unwrap();
        assert_eq!(a["generated_text"], alone["text"], "{p}");
        let d = &a["details"];
        drafted += d["speculated_tokens"].as_u64().unwrap();
        accepted += d["accepted_tokens"].as_u64().unwrap();
    }
    (drafted, accepted)
}

#[test]
fn medusa_from_its_directory_and_a_draft_model_keep_greedy_output() {
    let target = model("stories-distill-4l/hf");
    let target = target.to_str().unwrap();
    let medusa = model("stories-distill-4l/medusa");
    let draft = model("stories260k/stories260k-f32.gguf");
    for (args, what) in [
        (vec!["-m", medusa.to_str().unwrap(), "--speculate-fixed"], "Medusa"),
        (vec!["-m", target, "--draft-model", draft.to_str().unwrap(), "--speculate-fixed"], "draft model"),
        (
            vec![
                "-m",
                target,
                "--draft-model",
                draft.to_str().unwrap(),
                "--draft-quantize",
                "q8_0",
                "--speculate-token-cost",
                "0.1",
            ],
            "adaptive q8_0 draft",
        ),
    ] {
        let server = Server::start(&args);
        let (drafted, accepted) = check_greedy(&server, target);
        assert!(drafted > 0 && accepted > 0 && accepted <= drafted, "{what}: {accepted} of {drafted}");
        assert!(server.metric("tgi_speculative_accepted_tokens") >= accepted as f64, "{what}");
        let metrics = common::server::get(&server.url("/metrics")).1;
        assert!(metrics.contains("tgi_speculative_accepted_tokens_by_position{position=\"1\"}"), "{what}");
        assert!(metrics.contains("tgi_speculation_token_cost "), "{what}");
        assert!(metrics.contains("tgi_speculation_held_steps "), "{what}");
        assert_eq!(server.metric("tgi_kv_blocks_used"), 0.0, "{what}: every block, the draft's too, is back once idle");
        let log = server.log.lock().unwrap().clone();
        let named = if what == "Medusa" { "Medusa (4 heads)" } else { "draft model (" };
        assert!(log.contains(named), "{what}: the startup log names the method: {log}");
        let shared = log.contains("bytes are the draft model's, in the same blocks");
        assert_eq!(shared, what != "Medusa", "{what}: the pool holds the draft's KV too: {log}");
    }
}

/// Gemma 3 270M in F16 (`tgi quantize --type f16 --allow-requantize` of the published Q4_K_M file) drafting for
/// itself from its own weights quantized to Q4_0 at load, over the whole vocabulary and over its first 32768 ids
/// and single characters (`--draft-vocab`): `tgi generate`'s greedy text, most drafts accepted.
#[test]
fn gemma3_f16_with_a_q4_0_self_draft_keeps_greedy_output() {
    let Some(file) = common::gemma3_file() else { return };
    let dir = tempfile::tempdir().unwrap();
    let f16 = dir.path().join("gemma-f16.gguf");
    let to_f16: [&std::ffi::OsStr; 7] = [
        "quantize".as_ref(),
        file.as_os_str(),
        "--type".as_ref(),
        "f16".as_ref(),
        "--allow-requantize".as_ref(),
        "-o".as_ref(),
        f16.as_os_str(),
    ];
    assert_ok(&tgi(to_f16));
    let target = f16.to_str().unwrap();
    let draft = ["--draft-model", target, "--draft-quantize", "q4_0", "--speculate-fixed"];
    for vocab in [None, Some("32768")] {
        let mut args = vec!["-m", target];
        args.extend(draft);
        args.extend(vocab.iter().flat_map(|&n| ["--draft-vocab", n]));
        let server = Server::start(&args);
        let (drafted, accepted) = check_greedy(&server, target);
        assert!(2 * accepted > drafted, "{vocab:?}: {accepted} of {drafted} drafts accepted");
        assert_eq!(server.metric("tgi_kv_blocks_used"), 0.0, "every block, the draft's too, is back once idle");
        if vocab.is_some() {
            assert!(server.log.lock().unwrap().contains("frequent tokens)"));
        }
    }
}

#[test]
fn a_draft_model_with_another_vocabulary_is_refused_at_startup() {
    let dir = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir(model("stories260k/hf")).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, dir.path().join(f.file_name().unwrap())).unwrap();
    }
    let tj = dir.path().join("tokenizer.json");
    let text = std::fs::read_to_string(&tj).unwrap().replace("\"<0x61>\": 100", "\"<0x7A7A>\": 100");
    std::fs::write(&tj, text).unwrap();
    let target = model("stories-distill-4l/hf");
    let out = tgi(["serve", "-m", target.to_str().unwrap(), "--draft-model", dir.path().to_str().unwrap()]);
    assert_fails(&out, 2, "the draft model's tokenizer is not the target's: token 100 differs");
    let out = tgi(["serve", "--medusa", model("stories-distill-4l/medusa").to_str().unwrap()]);
    assert_fails(&out, 2, "--medusa");
}
