//! Every `tokenizer.ggml.pre` name llama.cpp 0c1e570 accepts, and every vocabulary it ships, against llama.cpp itself
//! on a multilingual and code corpus (tests/llamacpp/tokenizer-corpus.jsonl, one JSON string a line). A name is
//! tested on real vocabularies with `tokenizer.ggml.pre` rewritten to it, made here at test time as
//! tests/llamacpp/tokenizer_reference.py made them for llama.cpp: Qwen2's and Llama 3's BPE vocabularies, or
//! Gemma 4's (its model made `gpt2`) for the SentencePiece-style names. Each corpus line must give the token count and ids' hash that
//! llama.cpp gave (engines/tests/data/tokenizer-families.json); a mismatch prints the line and our ids. The
//! vocabularies come from `TGI_LLAMACPP_VOCABS`, as in tokenizer_vectors.rs.

use std::path::{Path, PathBuf};

use serde_json::Value as Json;
use tgi_engines::text::tokenizer::Tokenizer;
use tgi_formats::gguf::pre::{find, PRE_TYPES};
use tgi_formats::gguf::Value;
use tgi_formats::{GgufFile, GgufWriter};

/// The folder `TGI_LLAMACPP_VOCABS` names; without it the test says so and passes, unless `CI` is set.
fn vocabs() -> Option<PathBuf> {
    match std::env::var_os("TGI_LLAMACPP_VOCABS") {
        Some(dir) => Some(PathBuf::from(dir)),
        None if std::env::var_os("CI").is_some() => {
            panic!("CI: set TGI_LLAMACPP_VOCABS=$(bash tests/llamacpp/fetch-vocabs.sh)")
        }
        None => {
            eprintln!("skipped: TGI_LLAMACPP_VOCABS is unset (TGI_LLAMACPP_VOCABS=$(bash tests/llamacpp/fetch-vocabs.sh) runs it)");
            None
        }
    }
}

/// The corpus lines.
fn corpus() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/llamacpp/tokenizer-corpus.jsonl");
    std::fs::read_to_string(path).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// llama.cpp's results: `lines` lists, and the index of each name's (`pre`) and vocabulary's (`vocabs`).
fn reference() -> Json {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizer-families.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// `count:hash` of `ids`, as tokenizer_reference.py writes it (FNV-1a 32 over the ids in decimal, space-separated).
fn digest(ids: &[u32]) -> String {
    let text = ids.iter().map(u32::to_string).collect::<Vec<_>>().join(" ");
    let hash = text.bytes().fold(0x811c_9dc5_u32, |h, b| (h ^ u32::from(b)).wrapping_mul(0x0100_0193));
    format!("{}:{hash:08x}", ids.len())
}

/// The mismatches of `tok` with llama.cpp's lines number `list` of the reference.
fn mismatches(tok: &Tokenizer, label: &str, reference: &Json, list: &Json) -> Vec<String> {
    let want = &reference["lines"][list.as_u64().unwrap() as usize];
    let corpus = corpus();
    assert_eq!(want.as_array().unwrap().len(), corpus.len(), "{label}: the reference is of another corpus");
    corpus
        .iter()
        .zip(want.as_array().unwrap())
        .filter_map(|(line, want)| {
            let ids = tok.encode(line, false, false).unwrap();
            (digest(&ids) != want.as_str().unwrap())
                .then(|| format!("{label}: {line:?}\n  llama.cpp {want}\n  ours      {} {ids:?}", digest(&ids)))
        })
        .collect()
}

/// `base` with the string keys of `strings` set, written to `dir` and loaded.
fn rewritten(base: &Path, strings: &[(&str, &str)], dir: &Path) -> Tokenizer {
    let file = GgufFile::open(base).unwrap();
    let mut meta: Vec<(String, Value)> =
        file.metadata().iter().filter(|(k, _)| strings.iter().all(|(s, _)| s != k)).cloned().collect();
    meta.extend(strings.iter().map(|&(k, v)| (k.to_owned(), Value::String(v.to_owned()))));
    let path = dir.join("vocab.gguf");
    let out = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    GgufWriter::new(out, meta, Vec::new()).unwrap().finish().unwrap();
    Tokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap()
}

/// Every name of the pre-tokenizer `name` belongs to, each on its rewritten vocabulary.
fn check_family(name: &str) {
    let Some(vocabs) = vocabs() else { return };
    let reference = reference();
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for &name in find(name).unwrap().names {
        let lists = reference["pre"][name].as_object().unwrap_or_else(|| panic!("{name}: not in the reference"));
        for (base, list) in lists {
            if list.is_null() {
                eprintln!("{name} on {base}: llama.cpp fails on this vocabulary; nothing to compare");
                continue;
            }
            // The BPE vocabularies are `gpt2` already; Gemma 4's `gemma4` model would force its own name.
            let strings = [("tokenizer.ggml.model", "gpt2"), ("tokenizer.ggml.pre", name)];
            let tok = rewritten(&vocabs.join(format!("ggml-vocab-{base}.gguf")), &strings, dir.path());
            failures.extend(mismatches(&tok, &format!("{name} on {base}"), &reference, list));
        }
    }
    assert!(failures.is_empty(), "{} lines differ:\n{}", failures.len(), failures.join("\n"));
}

/// A vocabulary llama.cpp ships, as it is.
fn check_vocab(file: &str) {
    let Some(vocabs) = vocabs() else { return };
    let reference = reference();
    let tok = Tokenizer::from_gguf(&GgufFile::open(&vocabs.join(file)).unwrap()).unwrap();
    let failures = mismatches(&tok, file, &reference, &reference["vocabs"][file]);
    assert!(failures.is_empty(), "{} lines differ:\n{}", failures.len(), failures.join("\n"));
}

/// One test per pre-tokenizer (named by its first name; its aliases in the same test) and per vocabulary.
macro_rules! tests {
    (families { $($family:ident: $name:literal;)* } vocabs { $($vocab:ident: $file:literal;)* }) => {
        /// The first name of every family tested.
        const FAMILIES: &[&str] = &[$($name),*];
        $(#[test] fn $family() { check_family($name) })*
        $(#[test] fn $vocab() { check_vocab(concat!("ggml-vocab-", $file, ".gguf")) })*
    };
}

tests! {
    families {
        default: "default";
        minicpm5: "minicpm5";
        llama_bpe: "llama-bpe";
        deepseek_llm: "deepseek-llm";
        deepseek_coder: "deepseek-coder";
        deepseek_v3: "deepseek-v3";
        spark2_5: "spark2_5";
        youtu: "youtu";
        falcon: "falcon";
        starcoder: "starcoder";
        gpt_2: "gpt-2";
        mpt: "mpt";
        jais_2: "jais-2";
        gemma4: "gemma4";
        sarvam_moe: "sarvam-moe";
        whitespace: "whitespace";
        refact: "refact";
        smollm: "smollm";
        command_r: "command-r";
        qwen2: "qwen2";
        qwen35: "qwen35";
        stablelm2: "stablelm2";
        olmo: "olmo";
        dbrx: "dbrx";
        poro_chat: "poro-chat";
        chatglm_bpe: "chatglm-bpe";
        glm4: "glm4";
        viking: "viking";
        tekken: "tekken";
        codeshell: "codeshell";
        bloom: "bloom";
        exaone_moe: "exaone-moe";
        chameleon: "chameleon";
        gpt_4o: "gpt-4o";
        granite_embed_multi_97m: "granite-embed-multi-97m";
        tiny_aya: "tiny_aya";
        superbpe: "superbpe";
        trillion: "trillion";
        bailingmoe: "bailingmoe";
        seed_coder: "seed-coder";
        hunyuan_dense: "hunyuan-dense";
        kimi_k2: "kimi-k2";
        ufakzeka: "ufakzeka";
        afmoe: "afmoe";
        laguna: "laguna";
    }
    vocabs {
        vocab_aquila: "aquila";
        vocab_baichuan: "baichuan";
        vocab_bert_bge: "bert-bge";
        vocab_command_r: "command-r";
        vocab_deepseek_coder: "deepseek-coder";
        vocab_deepseek_llm: "deepseek-llm";
        vocab_falcon: "falcon";
        vocab_gemma_4: "gemma-4";
        vocab_gpt_2: "gpt-2";
        vocab_gpt_neox: "gpt-neox";
        vocab_llama_bpe: "llama-bpe";
        vocab_llama_spm: "llama-spm";
        vocab_mpt: "mpt";
        vocab_nomic_bert_moe: "nomic-bert-moe";
        vocab_phi_3: "phi-3";
        vocab_qwen2: "qwen2";
        vocab_qwen35: "qwen35";
        vocab_refact: "refact";
        vocab_starcoder: "starcoder";
    }
}

/// The names llama.cpp accepts are the names tgi knows, and every family has its test above.
#[test]
fn every_name_is_known_and_tested() {
    let reference = reference();
    let mut theirs: Vec<&str> = reference["pre"].as_object().unwrap().keys().map(String::as_str).collect();
    let mut ours: Vec<&str> = PRE_TYPES.iter().flat_map(|p| p.names.iter().copied()).collect();
    theirs.sort_unstable();
    ours.sort_unstable();
    assert_eq!(ours, theirs);
    let mut tested: Vec<&str> = FAMILIES.iter().map(|&n| find(n).unwrap().names[0]).collect();
    tested.dedup();
    assert_eq!(tested.len(), PRE_TYPES.len(), "a family is missing from the tests");
    assert!(corpus().len() >= 200);
}
