//! `cargo bench -p tgi-engines --bench tokenize`: per pre-tokenizer family, the tokenization throughput of tgi's
//! tokenizer next to the `tokenizers` crate's (Hugging Face) on the same vocabulary, pipeline and text, and the load
//! time of every vocabulary llama.cpp ships. A family is Qwen2's vocabulary (from `TGI_LLAMACPP_VOCABS`, see
//! tests/llamacpp/fetch-vocabs.sh) with `tokenizer.ggml.pre` rewritten to its first name; the text is
//! tests/llamacpp/tokenizer-corpus.jsonl, line by line, `TOK_REPEAT` times (default 30, about 320 KB). Both
//! tokenizers run on one thread; MB/s is by the process's CPU time, steadier than the wall clock on a shared
//! machine. `tokenizers` gets the family's regexes as `Split` stages, byte-level encoding and the BPE model with the
//! same merges; families it cannot express (a hand-written matcher, SentencePiece-style words) show "-". The "same"
//! column counts the corpus lines both tokenize to the same ids. `TGI_GEMMA3_GGUF` adds Gemma 3's 262k vocabulary
//! to the load times. Prints a Markdown table (docs/tokenizers.md).

use std::path::{Path, PathBuf};
use std::time::Instant;

use tgi_engines::text::tokenizer::Tokenizer;
use tgi_formats::gguf::pre::{PreType, PRE_TYPES};
use tgi_formats::gguf::{Array, Value};
use tgi_formats::{GgufFile, GgufWriter};
use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::SplitDelimiterBehavior;

/// CPU seconds used by this process so far (every thread).
fn cpu_seconds() -> f64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a valid timespec to write into.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
    assert_eq!(rc, 0, "clock_gettime");
    t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
}

/// The first value of `field` in /proc/cpuinfo.
fn cpuinfo(field: &str) -> String {
    let info = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let line = info.lines().find(|l| l.split(':').next().is_some_and(|k| k.trim() == field));
    line.and_then(|l| l.split_once(':')).map(|(_, v)| v.trim().to_owned()).unwrap_or_default()
}

/// MB/s of `encode` over `lines`, by CPU time; and the ids of each line.
fn throughput<F: FnMut(&str) -> Vec<u32>>(lines: &[String], repeat: usize, mut encode: F) -> (f64, Vec<Vec<u32>>) {
    let ids: Vec<Vec<u32>> = lines.iter().map(|l| encode(l)).collect();
    let bytes: usize = lines.iter().map(String::len).sum::<usize>() * repeat;
    let start = cpu_seconds();
    for _ in 0..repeat {
        for line in lines {
            std::hint::black_box(encode(line));
        }
    }
    (bytes as f64 / 1e6 / (cpu_seconds() - start), ids)
}

/// `base` with `tokenizer.ggml.pre` set to `name`, written to `path`.
fn rewrite(base: &GgufFile, name: &str, path: &Path) {
    let mut meta: Vec<(String, Value)> =
        base.metadata().iter().filter(|(k, _)| k != "tokenizer.ggml.pre").cloned().collect();
    meta.push(("tokenizer.ggml.pre".into(), Value::String(name.into())));
    let out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    GgufWriter::new(out, meta, Vec::new()).unwrap().finish().unwrap();
}

/// The `tokenizers` pipeline of `pre` over the BPE vocabulary of `file`, when it can express it.
fn hf_tokenizer(file: &GgufFile, pre: &PreType) -> Option<tokenizers::Tokenizer> {
    // AFMoE's digit groups and Kimi K2's split are hand-written matchers, not regexes `tokenizers` could run.
    if !pre.byte_encode || pre.regexes.iter().any(|r| r.contains("AFMoE") || *r == r"\p{Han}+") {
        return None;
    }
    let strings = |key: &str| match file.get(key).and_then(Value::as_array) {
        Some(Array::String(s)) => s.clone(),
        _ => panic!("{key} missing"),
    };
    let vocab: serde_json::Map<String, serde_json::Value> =
        strings("tokenizer.ggml.tokens").into_iter().zip(0..).map(|(t, i): (String, u32)| (t, i.into())).collect();
    let merges: Vec<[String; 2]> = strings("tokenizer.ggml.merges")
        .into_iter()
        .filter_map(|m| {
            m.char_indices().skip(1).find(|&(_, c)| c == ' ').map(|(i, _)| [m[..i].into(), m[i + 1..].into()])
        })
        .collect();
    // As a tokenizer.json's model says it (the builder wants the crate's own hash map type; no "type", which
    // the crate reads as a borrowed string).
    let model = serde_json::json!({"vocab": vocab, "merges": merges, "ignore_merges": pre.ignore_merges});
    let bpe: BPE = serde_json::from_value(model).ok()?;
    let mut stages: Vec<PreTokenizerWrapper> = Vec::new();
    for regex in pre.regexes {
        let split = Split::new(SplitPattern::Regex((*regex).into()), SplitDelimiterBehavior::Isolated, false).ok()?;
        stages.push(split.into());
    }
    stages.push(ByteLevel::new(false, false, false).into());
    let mut tok = tokenizers::Tokenizer::new(bpe);
    tok.with_pre_tokenizer(Some(Sequence::new(stages)));
    Some(tok)
}

/// Loads `path`'s tokenizer: (seconds, vocabulary size).
fn load(path: &Path) -> (f64, usize) {
    let start = Instant::now();
    let tok = Tokenizer::from_gguf(&GgufFile::open(path).unwrap()).unwrap();
    (start.elapsed().as_secs_f64(), tok.vocab_size())
}

fn main() {
    let Some(vocabs) = std::env::var_os("TGI_LLAMACPP_VOCABS").map(PathBuf::from) else {
        eprintln!("set TGI_LLAMACPP_VOCABS=$(bash tests/llamacpp/fetch-vocabs.sh)");
        return;
    };
    let repeat: usize = std::env::var("TOK_REPEAT").ok().and_then(|r| r.parse().ok()).unwrap_or(30);
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/llamacpp/tokenizer-corpus.jsonl");
    let lines: Vec<String> =
        std::fs::read_to_string(corpus).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    println!("CPU: {}, family {}, model {}", cpuinfo("model name"), cpuinfo("cpu family"), cpuinfo("model"));
    let flags = cpuinfo("flags");
    let simd: Vec<&str> = flags.split(' ').filter(|f| f.starts_with("avx") || f.starts_with("sse4")).collect();
    println!("flags: {}", simd.join(" "));
    println!(
        "corpus: {} lines x {repeat}, {} KB\n",
        lines.len(),
        lines.iter().map(String::len).sum::<usize>() * repeat / 1000
    );

    println!("| family (first name) | tgi MB/s | tokenizers MB/s | same ids |");
    println!("|---|---:|---:|---:|");
    let base = GgufFile::open(&vocabs.join("ggml-vocab-qwen2.gguf")).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for pre in PRE_TYPES.iter().filter(|p| p.byte_encode) {
        let name = pre.names[0];
        let path = dir.path().join("vocab.gguf");
        rewrite(&base, name, &path);
        let file = GgufFile::open(&path).unwrap();
        let ours = Tokenizer::from_gguf(&file).unwrap();
        let (mbs, our_ids) = throughput(&lines, repeat, |l| ours.encode(l, false, false).unwrap());
        let (hf, same) = match hf_tokenizer(&file, pre) {
            Some(hf) => {
                let encode = |l: &str| hf.encode(l, false).unwrap().get_ids().to_vec();
                let (hf_mbs, ids) = throughput(&lines, repeat, encode);
                let same = ids.iter().zip(&our_ids).filter(|(a, b)| a == b).count();
                (format!("{hf_mbs:.1}"), format!("{same}/{}", lines.len()))
            }
            None => ("-".into(), "-".into()),
        };
        println!("| {name} | {mbs:.1} | {hf} | {same} |");
    }

    println!("\n| vocabulary | tokens | load ms |");
    println!("|---|---:|---:|");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&vocabs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "gguf"))
        .collect();
    files.sort();
    files.extend(std::env::var_os("TGI_GEMMA3_GGUF").map(PathBuf::from));
    for path in files {
        let (seconds, n) = load(&path);
        println!("| {} | {n} | {:.0} |", path.file_name().unwrap().to_string_lossy(), seconds * 1e3);
    }
}
