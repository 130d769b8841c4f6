//! Small vocabularies written as metadata-only GGUF files and loaded back, for unit tests.

use tgi_formats::gguf::Value;
use tgi_formats::{GgufFile, GgufWriter};

use super::unicode::byte_char;
use super::vocab::Vocab;

/// Writes `metadata` as a GGUF file without tensors and opens it.
pub(super) fn gguf(metadata: Vec<(&str, Value)>) -> GgufFile {
    let file = tempfile::NamedTempFile::new().unwrap();
    let metadata = metadata.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    let writer = GgufWriter::new(std::io::BufWriter::new(file.reopen().unwrap()), metadata, vec![]).unwrap();
    writer.finish().unwrap();
    GgufFile::open(file.path()).unwrap()
}

/// A SentencePiece vocabulary: `<unk>`, `<s>`, `</s>`, the 256 byte tokens, a few scored pieces,
/// a user-defined `<|user|>` and a control `<|ctrl|>`.
pub(super) fn spm_metadata() -> Vec<(&'static str, Value)> {
    let pieces: [(&str, f32); 11] = [
        ("▁", -1.0),
        ("t", -2.0),
        ("h", -3.0),
        ("e", -4.0),
        ("r", -5.0),
        ("▁t", -6.0),
        ("he", -7.0),
        ("▁the", -8.0),
        ("re", -9.0),
        ("er", -10.0),
        ("▁▁", -11.0),
    ];
    let mut tokens = vec!["<unk>".to_owned(), "<s>".to_owned(), "</s>".to_owned()];
    let mut scores = vec![0.0, 0.0, 0.0];
    let mut types = vec![2, 3, 3];
    for b in 0..=255u8 {
        tokens.push(format!("<0x{b:02X}>"));
        scores.push(0.0);
        types.push(6);
    }
    for (text, score) in pieces {
        tokens.push(text.to_owned());
        scores.push(score);
        types.push(1);
    }
    for (text, ty) in [("<|user|>", 4), ("<|ctrl|>", 3)] {
        tokens.push(text.to_owned());
        scores.push(0.0);
        types.push(ty);
    }
    vec![
        ("general.name", Value::String("test".into())),
        ("tokenizer.ggml.model", Value::String("llama".into())),
        ("tokenizer.ggml.tokens", Value::strings(tokens)),
        ("tokenizer.ggml.scores", Value::f32s(scores)),
        ("tokenizer.ggml.token_type", Value::i32s(types)),
        ("tokenizer.ggml.bos_token_id", Value::U32(1)),
        ("tokenizer.ggml.eos_token_id", Value::U32(2)),
    ]
}

/// [`spm_metadata`] loaded.
pub(super) fn spm_vocab() -> Vocab {
    Vocab::from_gguf(&gguf(spm_metadata())).unwrap()
}

/// A byte-level BPE vocabulary (GPT-2 pre-tokenizer): the 256 byte characters, `Ġt`, `he`,
/// `Ġthe`, `ll` and a control `<|endoftext|>` (BOS and EOS).
pub(super) fn bpe_metadata() -> Vec<(&'static str, Value)> {
    let mut tokens: Vec<String> = (0..=255u8).map(|b| byte_char(b).to_string()).collect();
    let mut types = vec![1; 256];
    for text in ["Ġt", "he", "Ġthe", "ll"] {
        tokens.push(text.to_owned());
        types.push(1);
    }
    tokens.push("<|endoftext|>".to_owned());
    types.push(3);
    let eot = tokens.len() as u32 - 1;
    vec![
        ("general.name", Value::String("test".into())),
        ("tokenizer.ggml.model", Value::String("gpt2".into())),
        ("tokenizer.ggml.pre", Value::String("gpt-2".into())),
        ("tokenizer.ggml.tokens", Value::strings(tokens)),
        ("tokenizer.ggml.token_type", Value::i32s(types)),
        ("tokenizer.ggml.merges", Value::strings(["Ġ t", "h e", "Ġt he", "l l"])),
        ("tokenizer.ggml.bos_token_id", Value::U32(eot)),
        ("tokenizer.ggml.eos_token_id", Value::U32(eot)),
    ]
}

/// [`bpe_metadata`] loaded.
pub(super) fn bpe_vocab() -> Vocab {
    Vocab::from_gguf(&gguf(bpe_metadata())).unwrap()
}
