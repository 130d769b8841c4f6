//! llama.cpp's tokenizer test vectors (`tests/test-tokenizer-0.cpp`): every input of each
//! vocabulary must tokenize, without BOS and without parsing special tokens, to exactly the ids
//! llama.cpp produced. All mismatches of a vocabulary are reported before failing; each vocabulary is
//! its own test. Five vocabularies are committed (tests/data/tokenizers); the others come from the
//! llama-cpp-python 0.3.36 source package, which `tests/llamacpp/fetch-vocabs.sh` fetches into a cache
//! and names in `TGI_LLAMACPP_VOCABS`.

use std::path::PathBuf;

use tgi_engines::text::tokenizer::Tokenizer;
use tgi_formats::GgufFile;

const VOCABS: [&str; 5] = ["llama-spm", "llama-bpe", "qwen2", "gpt-2", "phi-3"];

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizers").join(name)
}

/// The folder of llama.cpp's vocabularies named by `TGI_LLAMACPP_VOCABS`. Without the variable the test
/// says so and passes, unless `CI` is set.
fn fetched(name: &str) -> Option<PathBuf> {
    match std::env::var_os("TGI_LLAMACPP_VOCABS") {
        Some(dir) => Some(PathBuf::from(dir).join(name)),
        None if std::env::var_os("CI").is_some() => {
            panic!("CI: set TGI_LLAMACPP_VOCABS=$(bash tests/llamacpp/fetch-vocabs.sh)")
        }
        None => {
            eprintln!("skipped: TGI_LLAMACPP_VOCABS is unset (TGI_LLAMACPP_VOCABS=$(bash tests/llamacpp/fetch-vocabs.sh) runs it)");
            None
        }
    }
}

/// The (input, expected ids) pairs of `gguf`: inputs are separated by `\n__ggml_vocab_test__\n` (which most
/// files also end with), the expected ids are one space-separated line each.
fn vectors(gguf: &std::path::Path) -> Vec<(String, Vec<u32>)> {
    let read = |ext: &str| std::fs::read_to_string(format!("{}.{ext}", gguf.display())).unwrap();
    let (inp, out) = (read("inp"), read("out"));
    let inputs: Vec<&str> =
        inp.strip_suffix("\n__ggml_vocab_test__\n").unwrap_or(&inp).split("\n__ggml_vocab_test__\n").collect();
    let outputs: Vec<Vec<u32>> =
        out.lines().map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect()).collect();
    assert_eq!(inputs.len(), outputs.len(), "{}: inputs and outputs differ in number", gguf.display());
    inputs.into_iter().map(str::to_owned).zip(outputs).collect()
}

/// Every vector of the vocabulary in `gguf` gives llama.cpp's ids.
fn check(gguf: PathBuf) {
    let start = std::time::Instant::now();
    let file = GgufFile::open(&gguf).unwrap();
    let tok = Tokenizer::from_gguf(&file).unwrap();
    // The load time, for the record (a figure, not a bound: see the README's tokenizer table).
    eprintln!("{}: {} tokens loaded in {:.0?}", gguf.display(), tok.vocab_size(), start.elapsed());
    let vectors = vectors(&gguf);
    let failures: Vec<String> = vectors
        .iter()
        .filter_map(|(input, expected)| {
            let got = tok.encode(input, false, false).unwrap();
            (&got != expected).then(|| format!("{input:?}\n  expected {expected:?}\n  got      {got:?}"))
        })
        .collect();
    assert!(vectors.len() >= 30, "only {} vectors read", vectors.len());
    assert!(failures.is_empty(), "{} of {} vectors differ:\n{}", failures.len(), vectors.len(), failures.join("\n"));
}

/// One test per vocabulary: committed ones by path, fetched ones where `TGI_LLAMACPP_VOCABS` names them.
macro_rules! vectors_test {
    ($($test:ident: $kind:ident $vocab:literal;)*) => {$(
        #[test]
        fn $test() {
            let name = concat!("ggml-vocab-", $vocab, ".gguf");
            vectors_test!(@path $kind name);
        }
    )*};
    (@path committed $name:ident) => { check(data($name)) };
    (@path fetched $name:ident) => { if let Some(path) = fetched($name) { check(path) } };
}

vectors_test! {
    llama_spm: committed "llama-spm";
    llama_bpe: committed "llama-bpe";
    qwen2: committed "qwen2";
    gpt_2: committed "gpt-2";
    phi_3: committed "phi-3";
    bert_bge: fetched "bert-bge";
    command_r: fetched "command-r";
    deepseek_coder: fetched "deepseek-coder";
    deepseek_llm: fetched "deepseek-llm";
    falcon: fetched "falcon";
    gemma_4: fetched "gemma-4";
    mpt: fetched "mpt";
    qwen35: fetched "qwen35";
    refact: fetched "refact";
    starcoder: fetched "starcoder";
}

#[test]
fn decode_round_trips_on_real_vocabularies() {
    let texts = ["Hello, y'all! How are you 😁 ?我想在apple工作1314151天～", "  \t\n x", "3333 ½ Ấ"];
    for vocab in VOCABS {
        let file = GgufFile::open(&data(&format!("ggml-vocab-{vocab}.gguf"))).unwrap();
        let tok = Tokenizer::from_gguf(&file).unwrap();
        for text in texts {
            let ids = tok.encode(text, false, false).unwrap();
            let decoded = tok.decode(&ids, true).unwrap();
            // GPT-2 and Llama 3 clean up spaces before punctuation on decoding, as llama.cpp does.
            let expected =
                if ["gpt-2", "llama-bpe"].contains(&vocab) { text.replace(" ?", "?") } else { text.to_owned() };
            assert_eq!(decoded, expected, "{vocab}: {text:?} -> {ids:?}");
        }
    }
}

#[test]
fn special_tokens_and_bos() {
    let open = |vocab: &str| {
        Tokenizer::from_gguf(&GgufFile::open(&data(&format!("ggml-vocab-{vocab}.gguf"))).unwrap()).unwrap()
    };
    let llama3 = open("llama-bpe");
    assert!(llama3.add_bos());
    assert_eq!(llama3.bos_id(), Some(128000));
    assert!(llama3.eos_ids().contains(&128001) && llama3.eos_ids().contains(&128009));
    let text = "<|start_header_id|>user<|end_header_id|>";
    assert_eq!(llama3.encode(text, true, true).unwrap(), [128000, 128006, 882, 128007]);
    let literal = llama3.encode(text, false, false).unwrap();
    assert!(literal.len() > 3 && !literal.contains(&128006));
    assert_eq!(llama3.decode(&[128000, 128006, 882, 128007], false).unwrap(), format!("<|begin_of_text|>{text}"));
    assert_eq!(llama3.decode(&[128000, 128006, 882, 128007], true).unwrap(), "user");

    let qwen2 = open("qwen2");
    assert!(!qwen2.add_bos());
    assert!(qwen2.eos_ids().contains(&151643) && qwen2.eos_ids().contains(&151645));
    assert_eq!(qwen2.encode("<|im_start|>user", false, true).unwrap()[0], 151644);

    let spm = open("llama-spm");
    assert_eq!(spm.encode("Hello", true, false).unwrap(), [1, 15043]);
    assert_eq!(spm.token_to_piece(15043), b" Hello");
    assert_eq!(spm.token_to_piece(3 + 0xE2), [0xE2]);
}

#[test]
fn wordpiece_frames_text_with_cls_and_sep() {
    let Some(path) = fetched("ggml-vocab-bert-bge.gguf") else { return };
    let bert = Tokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
    let words = bert.encode("Hello WORLD", false, false).unwrap();
    assert_eq!(words, [7592, 2088]);
    assert_eq!(bert.encode("Hello WORLD", true, false).unwrap(), [&[101][..], &words, &[102]].concat());
    // [CLS] and [SEP] are control tokens; pieces are words with the space before them, as in llama.cpp.
    assert_eq!(bert.decode(&[101, 7592, 2088, 102], true).unwrap(), " hello world");
    assert_eq!(bert.encode("[CLS]x", false, true).unwrap()[0], 101);
    assert_eq!(bert.encode("ᚠᚡᚢ", false, false).unwrap(), [100]);
}

/// A Unigram vocabulary (T5-style, with a precompiled character map) against SentencePiece itself: the ids
/// `tests/llamacpp/ugm_reference.py` recorded for the inputs of llama.cpp's Llama 3 test vectors.
#[test]
fn unigram_matches_sentencepiece() {
    let Some(path) = fetched("ggml-vocab-nomic-bert-moe.gguf") else { return };
    let start = std::time::Instant::now();
    let tok = Tokenizer::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
    eprintln!("{}: {} tokens loaded in {:.0?}", path.display(), tok.vocab_size(), start.elapsed());
    let reference = std::fs::read_to_string(data("ugm-nomic-bert-moe.jsonl")).unwrap();
    let mut failures = Vec::new();
    for line in reference.lines() {
        let case: serde_json::Value = serde_json::from_str(line).unwrap();
        let text = case["text"].as_str().unwrap();
        let want: Vec<u32> = case["ids"].as_array().unwrap().iter().map(|i| i.as_u64().unwrap() as u32).collect();
        let got = tok.encode(text, false, false).unwrap();
        if got != want {
            failures.push(format!("{text:?}\n  expected {want:?}\n  got      {got:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} differ:\n{}",
        failures.len(),
        reference.lines().count(),
        failures.join("\n")
    );
    // This vocabulary asks for BOS (<s>) and EOS (</s>); as in llama.cpp, removing the BOS keeps the space.
    let ids = tok.encode("Hello world", true, false).unwrap();
    assert_eq!(ids, [0, 35378, 8999, 2]);
    assert_eq!(tok.decode(&ids, true).unwrap(), " Hello world");
    assert_eq!(tok.decode(&ids[1..], true).unwrap(), "Hello world");
}
