//! Unit tests of the GGUF vocabulary builder.

use super::*;
use gguf_rs_lib::prelude::{GGUFFileReader, MetadataValue};
use std::fs;

const STORIES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/stories260k");
const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/hf");

fn fixture(name: &str, vocab_size: usize) -> GgufVocab {
    let dir = Path::new(DATA).join(name);
    let config = dir.join("tokenizer_config.json");
    let config = config.is_file().then_some(config);
    GgufVocab::from_hf_files(&dir.join("tokenizer.json"), config.as_deref(), vocab_size).unwrap()
}

fn stories(vocab_size: usize) -> GgufVocab {
    let hf = Path::new(STORIES).join("hf");
    let config = hf.join("tokenizer_config.json");
    GgufVocab::from_hf_files(&hf.join("tokenizer.json"), Some(&config), vocab_size).unwrap()
}

/// A tokenizer.json (and optional tokenizer_config.json) in a fresh directory.
fn write(tokenizer: &str, tokenizer_config: Option<&str>) -> (tempfile::TempDir, Result<GgufVocab, HfError>) {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("tokenizer.json"), tokenizer).unwrap();
    let tc = tokenizer_config.map(|text| {
        let path = dir.path().join("tokenizer_config.json");
        fs::write(&path, text).unwrap();
        path
    });
    let vocab = GgufVocab::from_hf_files(&dir.path().join("tokenizer.json"), tc.as_deref(), 8);
    (dir, vocab)
}

/// A SentencePiece-style tokenizer with 8 tokens and the given merges.
fn spm(merges: &str, added: &str) -> String {
    format!(
        r#"{{"added_tokens": [{{"id": 0, "content": "<unk>", "special": true}}{added}],
            "decoder": {{"type": "Sequence", "decoders": []}},
            "model": {{"type": "BPE", "byte_fallback": true, "unk_token": "<unk>",
              "vocab": {{"<unk>": 0, "<0x0A>": 1, "▁▁": 2, "▁t": 3, "he": 4, "▁the": 5, "▁": 6, "t": 7}},
              "merges": {merges}}}}}"#
    )
}

fn gguf_array<'a>(reader: &'a GGUFFileReader<std::io::BufReader<fs::File>>, key: &str) -> &'a [MetadataValue] {
    match reader.metadata().get(key) {
        Some(MetadataValue::Array(a)) => &a.values,
        other => panic!("{key}: {other:?}"),
    }
}

#[test]
fn stories260k_matches_reference_gguf() {
    let reader =
        gguf_rs_lib::reader::file_reader::open_gguf_file(Path::new(STORIES).join("stories260k-f32.gguf")).unwrap();
    let v = stories(512);
    let tokens: Vec<&str> = gguf_array(&reader, "tokenizer.ggml.tokens").iter().map(|t| t.as_str().unwrap()).collect();
    assert_eq!(v.tokens, tokens);
    let scores: Vec<u32> = gguf_array(&reader, "tokenizer.ggml.scores")
        .iter()
        .map(|s| match s {
            MetadataValue::F32(f) => f.to_bits(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(v.scores.as_ref().unwrap().iter().map(|s| s.to_bits()).collect::<Vec<_>>(), scores);
    let types: Vec<i32> =
        gguf_array(&reader, "tokenizer.ggml.token_type").iter().map(|t| t.as_i64().unwrap() as i32).collect();
    assert_eq!(v.token_types, types);
    let id = |key: &str| reader.metadata().get(key).and_then(|v| v.as_u64()).map(|v| v as u32);
    assert_eq!(v.bos_token_id, id("tokenizer.ggml.bos_token_id"));
    assert_eq!(v.eos_token_id, id("tokenizer.ggml.eos_token_id"));
    assert_eq!(v.unknown_token_id, id("tokenizer.ggml.unknown_token_id"));
    assert_eq!(reader.metadata().get("tokenizer.ggml.model").and_then(|m| m.as_str()), Some("llama"));
    assert_eq!((v.model.as_str(), v.pre.as_deref(), v.merges.as_ref()), ("llama", None, None));
    assert_eq!((v.padding_token_id, v.add_bos_token, v.add_eos_token), (None, Some(true), Some(false)));
    assert_eq!(v.chat_template, None);
}

#[test]
fn stories260k_padded_to_config_vocab() {
    let v = stories(515);
    assert_eq!(v.tokens[512..], ["[PAD512]", "[PAD513]", "[PAD514]"]);
    assert_eq!(v.token_types[512..], [UNUSED; 3]);
    assert_eq!(v.scores.unwrap()[511..], [-252.0, -10000.0, -10000.0, -10000.0]);
    let hf = Path::new(STORIES).join("hf/tokenizer.json");
    let msg = GgufVocab::from_hf_files(&hf, None, 500).unwrap_err().to_string();
    assert_eq!(msg, format!("{}: token '\u{200a}' has id 511, outside the model's vocab_size 500", hf.display()));
}

#[test]
fn spm_scores_follow_merge_order_not_ids() {
    // "▁▁" has an early id but its merge comes last (Llama 2 gives it score -1e9).
    let (_dir, v) = write(&spm(r#"[["▁", "t"], ["h", "e"], ["▁t", "he"], ["▁", "▁"]]"#, ""), None);
    let v = v.unwrap();
    assert_eq!(v.token_types, [UNKNOWN, BYTE, NORMAL, NORMAL, NORMAL, NORMAL, NORMAL, NORMAL]);
    // Order: ▁t (merge 0), he (1), ▁the (2), ▁▁ (3), then unmerged ▁ and t by id.
    assert_eq!(v.scores.unwrap(), [0.0, 0.0, -3.0, -0.0, -1.0, -2.0, -4.0, -5.0]);
    assert_eq!((v.unknown_token_id, v.bos_token_id, v.add_bos_token), (Some(0), None, None));
}

#[test]
fn spm_added_tokens() {
    let added = r#", {"id": 7, "content": "<|user|>", "special": false}, {"id": 6, "content": "<s>", "special": true}"#;
    let (_dir, v) =
        write(&spm(r#"["▁ t", "h e", "▁t he", "▁ ▁"]"#, added), Some(r#"{"bos_token": {"content": "<s>"}}"#));
    let v = v.unwrap();
    assert_eq!(v.tokens[6..], ["<s>", "<|user|>"]);
    assert_eq!(v.token_types[6..], [CONTROL, USER_DEFINED]);
    assert_eq!(v.scores.unwrap()[6..], [0.0, -1000.0]);
    assert_eq!(v.bos_token_id, Some(6));
}

#[test]
fn llama3_style_fixture() {
    let v = fixture("llama3", 58);
    assert_eq!((v.model.as_str(), v.pre.as_deref(), v.scores.as_ref()), ("gpt2", Some("llama-bpe"), None));
    assert_eq!(v.tokens.len(), 58);
    assert_eq!(
        v.tokens[53..],
        ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
    );
    assert!(v.token_types[..53].iter().all(|&t| t == NORMAL));
    assert_eq!(v.token_types[53..], [CONTROL; 5]);
    let merges = v.merges.unwrap();
    assert_eq!(merges.len(), 46);
    assert_eq!(merges[..3], ["o r", "Ġ w", "i c"]);
    assert_eq!(
        (v.bos_token_id, v.eos_token_id, v.unknown_token_id, v.padding_token_id),
        (Some(53), Some(57), None, None)
    );
    // add_bos_token from the TemplateProcessing post-processor.
    assert_eq!((v.add_bos_token, v.add_eos_token), (Some(true), None));
    assert!(v.chat_template.unwrap().starts_with("{{- bos_token }}"));
}

#[test]
fn qwen2_style_fixture() {
    let v = fixture("qwen2", 61);
    assert_eq!((v.model.as_str(), v.pre.as_deref()), ("gpt2", Some("qwen2")));
    assert_eq!(v.tokens[53..58], ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|fim_prefix|>", "<tool_call>"]);
    assert_eq!(v.tokens[58..], ["[PAD58]", "[PAD59]", "[PAD60]"]);
    // <|fim_prefix|> is not marked special but looks it; <tool_call> stays user-defined.
    assert_eq!(v.token_types[53..], [CONTROL, CONTROL, CONTROL, CONTROL, USER_DEFINED, UNUSED, UNUSED, UNUSED]);
    assert_eq!(v.merges.unwrap()[..2], ["o r", "Ġ w"]);
    // bos from config.json (bos_token is null in tokenizer_config), eos/pad from tokenizer_config.
    assert_eq!((v.bos_token_id, v.eos_token_id, v.padding_token_id), (Some(53), Some(55), Some(53)));
    assert_eq!((v.add_bos_token, v.add_eos_token), (None, None));
    assert!(v.chat_template.unwrap().starts_with("{% for m in messages %}"));
}

#[test]
fn gpt2_fixture_without_tokenizer_config() {
    let v = fixture("gpt2", 53);
    assert_eq!((v.model.as_str(), v.pre.as_deref()), ("gpt2", Some("gpt-2")));
    assert_eq!((v.tokens[52].as_str(), v.token_types[52]), ("<|endoftext|>", CONTROL));
    assert_eq!((v.bos_token_id, v.eos_token_id), (Some(52), Some(52)));
    assert_eq!((v.add_bos_token, v.chat_template), (None, None));
}

#[test]
fn byte_level_pre_names() {
    let pre = |json: &str| byte_level_pre(Some(&serde_json::from_str(json).unwrap()), None, None);
    let splits = |regexes: &[&str], byte_level: &str| {
        let splits: Vec<String> = regexes
            .iter()
            .map(|r| {
                format!(
                    r#"{{"type": "Split", "pattern": {{"Regex": {}}}, "behavior": "Isolated"}},"#,
                    serde_json::to_string(r).unwrap()
                )
            })
            .collect();
        format!(r#"{{"type": "Sequence", "pretokenizers": [{} {byte_level}]}}"#, splits.concat())
    };
    let split = |regex: &str| splits(&[regex], r#"{"type": "ByteLevel", "use_regex": false}"#);
    // The regexes as the families' tokenizer.json files write them.
    let llama3 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    let qwen2 = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
    assert_eq!(pre(&split(llama3)), Some("llama-bpe"));
    assert_eq!(pre(&split(qwen2)), Some("qwen2"));
    for (hf, _) in REWRITTEN {
        assert!(pre(&split(hf)).is_some(), "{hf}");
    }
    assert_eq!(pre(&split(REWRITTEN[0].0)), Some("tekken"));
    assert_eq!(pre(&split(REWRITTEN[1].0)), Some("gpt-4o"));
    // DeepSeek V3: three splits before the byte-level step.
    let deepseek_v3 = [
        r"\p{N}{1,3}",
        r"[一-龥぀-ゟ゠-ヿ]+",
        r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##,
    ];
    assert_eq!(pre(&splits(&deepseek_v3, r#"{"type": "ByteLevel", "use_regex": false}"#)), Some("deepseek-v3"));
    // StarCoder's kin: single digits, then ByteLevel's own regex; told apart by the space clean-up.
    let digits = r#"{"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": true}, {"type": "ByteLevel"}]}"#;
    let value: Value = serde_json::from_str(digits).unwrap();
    assert_eq!(byte_level_pre(Some(&value), None, Some(true)), Some("starcoder"));
    assert_eq!(byte_level_pre(Some(&value), None, Some(false)), Some("smollm"));
    // Llama 3's split without whole-word lookup is DBRX's.
    let value: Value = serde_json::from_str(&split(llama3)).unwrap();
    assert_eq!(byte_level_pre(Some(&value), Some(false), None), Some("dbrx"));
    assert_eq!(byte_level_pre(Some(&value), Some(true), None), Some("llama-bpe"));
    assert_eq!(pre(&split(r"\p{N}+")), None);
    assert_eq!(pre(r#"{"type": "ByteLevel", "use_regex": true}"#), Some("gpt-2"));
    assert_eq!(pre(r#"{"type": "ByteLevel"}"#), Some("gpt-2"));
    assert_eq!(pre(r#"{"type": "ByteLevel", "use_regex": false}"#), None);
    assert_eq!(pre(r#"{"type": "Whitespace"}"#), None);
    assert_eq!(byte_level_pre(None, None, None), None);
}

#[test]
fn merges_with_spaces_are_encoded() {
    let tok = r#"{"pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE",
        "vocab": {"a b": 0, "c": 1, "a bc": 2}, "merges": [["a b", "c"]]}}"#;
    let (_dir, v) = write(tok, None);
    assert_eq!(v.unwrap().merges.unwrap(), ["a\u{120}b c"]);
    let bad = r#"{"pre_tokenizer": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": {}, "merges": ["ab"]}}"#;
    let (_dir, v) = write(bad, None);
    assert!(v.unwrap_err().to_string().ends_with("merge 'ab' is not two space-separated tokens"));
}

#[test]
fn chat_template_sources() {
    let tok = spm("[]", "");
    let list = r#"{"chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}]}"#;
    let v = write(&tok, Some(list)).1.unwrap();
    assert_eq!(v.chat_template.as_deref(), Some("D"));
    assert_eq!(v.named_chat_templates, BTreeMap::from([("tool_use".to_owned(), "T".to_owned())]));
    let odd =
        r#"{"chat_template": [{"name": "tool use!", "template": "T"}, {"name": "", "template": "E"}, {"name": "x"}]}"#;
    assert_eq!(write(&tok, Some(odd)).1.unwrap().named_chat_templates.keys().collect::<Vec<_>>(), ["tool_use_"]);
    let (dir, v) = write(&tok, Some(r#"{"chat_template": [{"name": "rag", "template": "R"}]}"#));
    assert_eq!(v.unwrap().chat_template, None);
    fs::write(dir.path().join("chat_template.jinja"), "J").unwrap();
    let tc = dir.path().join("tokenizer_config.json");
    let v = GgufVocab::from_hf_files(&dir.path().join("tokenizer.json"), Some(&tc), 8).unwrap();
    assert_eq!(v.chat_template.as_deref(), Some("J"));
    let (dir, _) = write(&tok, None);
    fs::write(dir.path().join("chat_template.json"), r#"{"chat_template": "C"}"#).unwrap();
    let v = GgufVocab::from_hf_files(&dir.path().join("tokenizer.json"), None, 8).unwrap();
    assert_eq!(v.chat_template.as_deref(), Some("C"));
}

#[test]
fn errors() {
    let unigram = r#"{"model": {"type": "Unigram", "vocab": [["a", 0.0]]}}"#;
    let msg = write(unigram, None).1.unwrap_err().to_string();
    assert!(msg.ends_with("unsupported tokenizer model 'Unigram'; only BPE (byte-level, or SentencePiece-style with byte_fallback) converts to GGUF"), "{msg}");
    let plain = r#"{"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}}"#;
    assert!(write(plain, None).1.unwrap_err().to_string().contains("unsupported BPE tokenizer"));
    let (_dir, v) = write(&spm("[]", ""), Some(r#"{"bos_token": 1}"#));
    let msg = v.unwrap_err().to_string();
    assert!(
        msg.ends_with("tokenizer_config.json: field 'bos_token': expected a string or an object with 'content'"),
        "{msg}"
    );
    let (_dir, v) = write(&spm("[]", ""), Some(r#"{"add_bos_token": "yes"}"#));
    assert!(v.unwrap_err().to_string().contains("field 'add_bos_token': expected a boolean"));
    let (_dir, v) = write(r#"{"model": {"type": "BPE", "vocab": 3}}"#, None);
    assert!(v.unwrap_err().to_string().contains("tokenizer.json: invalid JSON"));
    let msg = GgufVocab::from_hf_files(Path::new("/nonexistent/tokenizer.json"), None, 8).unwrap_err().to_string();
    assert!(msg.starts_with("/nonexistent/tokenizer.json: "), "{msg}");
}
