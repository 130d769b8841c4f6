//! llama.cpp's tokenizer test vectors (`tests/test-tokenizer-0.cpp`): every input of each
//! vocabulary must tokenize, without BOS and without parsing special tokens, to exactly the ids
//! llama.cpp produced. All mismatches are reported before failing.

use std::path::PathBuf;

use tgi_engines::text::tokenizer::Tokenizer;
use tgi_formats::GgufFile;

const VOCABS: [&str; 5] = ["llama-spm", "llama-bpe", "qwen2", "gpt-2", "phi-3"];

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/tokenizers").join(name)
}

/// The (input, expected ids) pairs: inputs end with `\n__ggml_vocab_test__\n`, the expected ids
/// are one space-separated line each.
fn vectors(vocab: &str) -> Vec<(String, Vec<u32>)> {
    let inp = std::fs::read_to_string(data(&format!("ggml-vocab-{vocab}.gguf.inp"))).unwrap();
    let out = std::fs::read_to_string(data(&format!("ggml-vocab-{vocab}.gguf.out"))).unwrap();
    let inputs: Vec<&str> =
        inp.strip_suffix("\n__ggml_vocab_test__\n").unwrap().split("\n__ggml_vocab_test__\n").collect();
    let outputs: Vec<Vec<u32>> =
        out.lines().map(|l| l.split_whitespace().map(|t| t.parse().unwrap()).collect()).collect();
    assert_eq!(inputs.len(), outputs.len(), "{vocab}: inputs and outputs differ in number");
    inputs.into_iter().map(str::to_owned).zip(outputs).collect()
}

#[test]
fn llama_cpp_vectors() {
    let mut failures = Vec::new();
    let mut total = 0;
    for vocab in VOCABS {
        let file = GgufFile::open(&data(&format!("ggml-vocab-{vocab}.gguf"))).unwrap();
        let tok = Tokenizer::from_gguf(&file).unwrap();
        let mut mismatches = 0;
        for (input, expected) in vectors(vocab) {
            total += 1;
            let got = tok.encode(&input, false, false).unwrap();
            if got != expected {
                mismatches += 1;
                failures.push(format!("{vocab}: {input:?}\n  expected {expected:?}\n  got      {got:?}"));
            }
        }
        eprintln!("{vocab}: {mismatches} mismatches");
    }
    assert!(total >= 5 * 46, "only {total} vectors read");
    assert!(failures.is_empty(), "{} of {total} vectors differ:\n{}", failures.len(), failures.join("\n"));
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
