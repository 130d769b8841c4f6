//! The GGUF vocabulary (`tokenizer.ggml.*`) from a Hugging Face `tokenizer.json` and
//! `tokenizer_config.json`, following what llama.cpp's `convert_hf_to_gguf.py` writes.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Deserialize;
use serde_json::Value;

use super::json::{read_json, Obj};
use super::HfError;
use crate::gguf::pre;

/// GGUF token types (`tokenizer.ggml.token_type`).
pub mod token_type {
    /// An ordinary token.
    pub const NORMAL: i32 = 1;
    /// The unknown token.
    pub const UNKNOWN: i32 = 2;
    /// A control (special) token such as `<s>`.
    pub const CONTROL: i32 = 3;
    /// An added token that is matched verbatim but is not special.
    pub const USER_DEFINED: i32 = 4;
    /// A placeholder filling an id no token uses.
    pub const UNUSED: i32 = 5;
    /// A byte-fallback token `<0xNN>`.
    pub const BYTE: i32 = 6;
}
use token_type::*;

/// The vocabulary as GGUF's tokenizer.ggml.* keys describe it.
#[derive(Clone, Debug, PartialEq)]
pub struct GgufVocab {
    /// `"llama"` (SentencePiece-style BPE with byte fallback) or `"gpt2"` (byte-level BPE).
    pub model: String,
    /// The gpt2 pre-tokenizer name (`llama-bpe`, `qwen2`, `tekken`, `gpt-2`); `None` when unknown or SPM.
    pub pre: Option<String>,
    /// Token texts by id, padded with `[PAD{id}]` up to the model's vocab size.
    pub tokens: Vec<String>,
    /// Merge priorities for the `llama` model (see [`GgufVocab::from_hf_files`]); `None` for gpt2.
    pub scores: Option<Vec<f32>>,
    /// Token types by id (see [`token_type`]).
    pub token_types: Vec<i32>,
    /// Merges as `"a b"` strings, for the gpt2 model only.
    pub merges: Option<Vec<String>>,
    /// Beginning-of-sequence token id.
    pub bos_token_id: Option<u32>,
    /// End-of-sequence token id.
    pub eos_token_id: Option<u32>,
    /// Unknown token id.
    pub unknown_token_id: Option<u32>,
    /// Padding token id.
    pub padding_token_id: Option<u32>,
    /// Whether tokenization prepends BOS.
    pub add_bos_token: Option<bool>,
    /// Whether tokenization appends EOS.
    pub add_eos_token: Option<bool>,
    /// The Jinja chat template.
    pub chat_template: Option<String>,
    /// The other templates of a `[{name, template}]` list (`tool_use`, `rag`, ...) by name, each name with
    /// every character but ASCII letters and digits made `_`, as gguf-py writes them.
    pub named_chat_templates: BTreeMap<String, String>,
}

#[derive(Deserialize)]
struct TokenizerJson {
    #[serde(default)]
    added_tokens: Vec<AddedToken>,
    #[serde(default)]
    pre_tokenizer: Option<Value>,
    #[serde(default)]
    post_processor: Option<Value>,
    #[serde(default)]
    decoder: Option<Value>,
    model: Value,
}

#[derive(Deserialize)]
struct AddedToken {
    id: u32,
    content: String,
    #[serde(default)]
    special: bool,
}

#[derive(Deserialize)]
struct BpeModel {
    #[serde(default)]
    byte_fallback: bool,
    /// A word that is a token is taken whole (Llama 3), where the file says.
    #[serde(default)]
    ignore_merges: Option<bool>,
    vocab: HashMap<String, u32>,
    #[serde(default)]
    merges: Vec<Merge>,
    #[serde(default)]
    unk_token: Option<String>,
}

/// A merge: `"a b"` (older tokenizers) or `["a", "b"]` (tokenizers >= 0.20).
#[derive(Deserialize)]
#[serde(untagged)]
enum Merge {
    Joined(String),
    Pair(String, String),
}

/// tokenizer.json Split regexes that llama.cpp runs in another, equivalent form: (tokenizer.json's, llama.cpp's).
/// The `(?i:...)` contractions, which llama.cpp writes out case by case, are rewritten separately.
#[rustfmt::skip]
const REWRITTEN: [(&str, &str); 3] = [
    // Tekken: cased words by category, which llama.cpp reads by lookahead.
    (
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    // GPT-4o (Llama 4): the same, with contractions and numbers by three.
    (
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
        r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    ),
    // Ling (BailingMoE): possessive quantifiers as greedy ones.
    (
        r"'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
        r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
    ),
];

/// English contractions as tokenizer.json writes them, and as llama.cpp does.
const CONTRACTIONS: (&str, &str) =
    ("(?i:'s|'t|'re|'ve|'m|'ll|'d)", "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])");

impl GgufVocab {
    /// Builds the GGUF vocabulary from `tokenizer.json`, `tokenizer_config.json` and the model's
    /// `vocab_size` (config.json), as llama.cpp's converter does.
    ///
    /// - A BPE model with a ByteLevel pre-tokenizer or decoder is `gpt2`: merges are kept, added
    ///   tokens are control (3) when `special` or shaped `<|...|>`, else user-defined (4).
    /// - A BPE model with `byte_fallback` is `llama` (SentencePiece-style): `<0xNN>` is byte (6),
    ///   the unknown token 2, special added tokens 3, other added tokens 4, the rest normal (1).
    ///   llama.cpp's SPM tokenizer repeatedly merges the adjacent pair whose concatenation has the
    ///   highest score, while tokenizer.json ranks merges by position; transformers writes a
    ///   SentencePiece model's merges sorted by the merged piece's score. So each normal token's
    ///   rank is the position of the first merge producing it (tokens no merge produces, such as
    ///   single characters, after all of those), ties broken by id, and the k-th normal token in
    ///   that order (k from 0) scores `-k`. When ids follow SentencePiece scores this is `-k` in id
    ///   order; it also keeps pieces such as Llama 2's `▁▁` (early id, score -1e9, merges listed
    ///   last) at the low priority SentencePiece gave them. Control, byte and unknown tokens score
    ///   0, user-defined -1000 and padding -10000, as in llama.cpp's converter.
    /// - Ids below `vocab_size` that no token uses become `[PAD{id}]`, unused (5).
    /// - Special ids come from tokenizer_config's `bos_token`, `eos_token`, `unk_token` and
    ///   `pad_token` (strings or `{content}` objects), else from the `*_token_id` fields of the
    ///   `config.json` beside tokenizer.json (first of an `eos_token_id` list); ids outside the
    ///   vocabulary are dropped. `add_bos_token`/`add_eos_token` come from tokenizer_config, else
    ///   from a TemplateProcessing post-processor. The chat template is tokenizer_config's
    ///   `chat_template` (the `default` entry of a list, whose other entries are the named templates),
    ///   else `chat_template.jinja` or `chat_template.json` beside tokenizer.json.
    pub fn from_hf_files(
        tokenizer_json: &Path,
        tokenizer_config: Option<&Path>,
        vocab_size: usize,
    ) -> Result<Self, HfError> {
        let invalid = |problem: String| HfError::Invalid { path: tokenizer_json.to_path_buf(), problem };
        let json_err = |source| HfError::Json { path: tokenizer_json.to_path_buf(), source };
        let text = std::fs::read_to_string(tokenizer_json)
            .map_err(|source| HfError::Io { path: tokenizer_json.to_path_buf(), source })?;
        let tok: TokenizerJson = serde_json::from_str(&text).map_err(json_err)?;
        let model_type = tok.model.get("type").and_then(Value::as_str).unwrap_or("BPE").to_string();
        if model_type != "BPE" {
            return Err(invalid(format!(
                "unsupported tokenizer model '{model_type}'; only BPE (byte-level, or SentencePiece-style \
                 with byte_fallback) converts to GGUF"
            )));
        }
        let bpe: BpeModel = serde_json::from_value(tok.model).map_err(json_err)?;
        let byte_level = parts(tok.pre_tokenizer.as_ref(), "pretokenizers")
            .chain(parts(tok.decoder.as_ref(), "decoders"))
            .any(|p| type_of(p) == Some("ByteLevel"));
        if !byte_level && !bpe.byte_fallback {
            return Err(invalid(
                "unsupported BPE tokenizer: neither byte-level (ByteLevel pre-tokenizer) nor \
                 SentencePiece-style (byte_fallback)"
                    .into(),
            ));
        }

        // Tokens by id; added tokens override the model vocabulary.
        let entries =
            || bpe.vocab.iter().map(|(t, &id)| (t, id)).chain(tok.added_tokens.iter().map(|a| (&a.content, a.id)));
        if let Some((text, id)) = entries().filter(|&(_, id)| id as usize >= vocab_size).max_by_key(|&(_, id)| id) {
            return Err(invalid(format!("token '{text}' has id {id}, outside the model's vocab_size {vocab_size}")));
        }
        let mut tokens: Vec<Option<String>> = vec![None; vocab_size];
        for (text, id) in entries() {
            tokens[id as usize] = Some(text.clone());
        }
        let added: HashMap<u32, bool> = tok.added_tokens.iter().map(|a| (a.id, a.special)).collect();
        let unk_id = bpe.unk_token.as_deref().and_then(|u| bpe.vocab.get(u).copied());

        let token_types: Vec<i32> = (0..vocab_size as u32)
            .map(|id| match tokens[id as usize].as_deref() {
                None => UNUSED,
                Some(t) if !byte_level && is_byte_token(t) => BYTE,
                Some(_) if !byte_level && Some(id) == unk_id => UNKNOWN,
                Some(t) => match added.get(&id) {
                    Some(true) => CONTROL,
                    Some(false) if byte_level && t.starts_with("<|") && t.ends_with("|>") => CONTROL,
                    Some(false) => USER_DEFINED,
                    None => NORMAL,
                },
            })
            .collect();
        let tokens: Vec<String> =
            tokens.into_iter().enumerate().map(|(id, t)| t.unwrap_or_else(|| format!("[PAD{id}]"))).collect();
        let merges: Vec<(String, String)> = bpe
            .merges
            .into_iter()
            .map(|m| match m {
                Merge::Pair(a, b) => Ok((a, b)),
                Merge::Joined(s) => match s.split_once(' ') {
                    Some((a, b)) => Ok((a.to_string(), b.to_string())),
                    None => Err(invalid(format!("merge '{s}' is not two space-separated tokens"))),
                },
            })
            .collect::<Result<_, _>>()?;

        let (model, pre, scores, merges) = if byte_level {
            // A space inside a merge part is written as U+0120, as llama.cpp's converter does.
            let join =
                |(a, b): (String, String)| format!("{} {}", a.replace(' ', "\u{120}"), b.replace(' ', "\u{120}"));
            let ignore_merges = bpe.ignore_merges;
            let clean_spaces = tokenizer_config.and_then(clean_up_spaces);
            let pre = byte_level_pre(tok.pre_tokenizer.as_ref(), ignore_merges, clean_spaces).map(str::to_string);
            ("gpt2", pre, None, Some(merges.into_iter().map(join).collect()))
        } else {
            ("llama", None, Some(spm_scores(&tokens, &token_types, &merges)), None)
        };

        let mut vocab = GgufVocab {
            model: model.to_string(),
            pre,
            tokens,
            scores,
            token_types,
            merges,
            bos_token_id: None,
            eos_token_id: None,
            unknown_token_id: None,
            padding_token_id: None,
            add_bos_token: None,
            add_eos_token: None,
            chat_template: None,
            named_chat_templates: BTreeMap::new(),
        };
        let dir = tokenizer_json.parent().unwrap_or(Path::new("."));
        vocab.set_specials(tokenizer_config, dir, tok.post_processor.as_ref(), bpe.unk_token.as_deref())?;
        Ok(vocab)
    }

    /// The id of a token text; a text used twice resolves to the higher id (the added token).
    fn id_of(&self, text: &str) -> Option<u32> {
        self.tokens.iter().rposition(|t| t == text).map(|i| i as u32)
    }

    /// Special ids, add_bos/add_eos and the chat template from tokenizer_config.json, the
    /// post-processor and the config.json in `dir`.
    fn set_specials(
        &mut self,
        tokenizer_config: Option<&Path>,
        dir: &Path,
        post_processor: Option<&Value>,
        model_unk: Option<&str>,
    ) -> Result<(), HfError> {
        let tc_value = tokenizer_config.map(read_json).transpose()?;
        let tc = match (&tc_value, tokenizer_config) {
            (Some(v), Some(path)) => Some(Obj::root(path, v)?),
            _ => None,
        };
        let token_text = |field: &str| -> Result<Option<String>, HfError> {
            let Some(tc) = tc else { return Ok(None) };
            match tc.get(field) {
                None => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(Value::Object(_)) => match tc.object(field)?.map(|o| o.str("content")).transpose()? {
                    Some(Some(content)) => Ok(Some(content.to_string())),
                    _ => Err(tc.error(field, "expected a string or an object with 'content'")),
                },
                Some(_) => Err(tc.error(field, "expected a string or an object with 'content'")),
            }
        };
        let (first, last) = template_ends(post_processor);
        let bos = token_text("bos_token")?.or_else(|| first.clone());
        let eos = token_text("eos_token")?.or_else(|| last.clone());
        let unk = token_text("unk_token")?.or_else(|| model_unk.map(str::to_string));
        let pad = token_text("pad_token")?;

        let config_path = dir.join("config.json");
        let config_value = if config_path.is_file() { Some(read_json(&config_path)?) } else { None };
        let config = config_value.as_ref().map(|v| Obj::root(&config_path, v)).transpose()?;
        let config_id = |field: &str| -> Result<Option<u32>, HfError> {
            Ok(match config {
                Some(c) => c.u32_list(field)?.first().copied(),
                None => None,
            })
        };
        let n = self.tokens.len() as u32;
        let pick = |text: &Option<String>, fallback: Option<u32>| {
            text.as_deref().and_then(|t| self.id_of(t)).or(fallback).filter(|&id| id < n)
        };
        let ids = [
            pick(&bos, config_id("bos_token_id")?),
            pick(&eos, config_id("eos_token_id")?),
            pick(&unk, config_id("unk_token_id")?),
            pick(&pad, config_id("pad_token_id")?),
        ];
        [self.bos_token_id, self.eos_token_id, self.unknown_token_id, self.padding_token_id] = ids;

        let flag = |field: &str| tc.map(|tc| tc.bool(field)).transpose().map(Option::flatten);
        self.add_bos_token = flag("add_bos_token")?.or(first.map(|f| Some(f) == bos));
        self.add_eos_token = flag("add_eos_token")?.or(last.map(|l| Some(l) == eos));

        let mut templates = tc.map(|tc| chat_templates(&tc)).transpose()?.flatten().unwrap_or_default();
        self.chat_template = match templates.remove("default") {
            Some(t) => Some(t),
            None => sibling_chat_templates(dir)?.and_then(|mut t| t.remove("default")),
        };
        self.named_chat_templates = templates;
        Ok(())
    }
}

/// `<0xNN>`, a SentencePiece byte-fallback token.
fn is_byte_token(t: &str) -> bool {
    t.len() == 6 && t.starts_with("<0x") && t.ends_with('>') && t[3..5].bytes().all(|b| b.is_ascii_hexdigit())
}

/// A component's `type`.
fn type_of(v: &Value) -> Option<&str> {
    v.get("type").and_then(Value::as_str)
}

/// The components of a pre-tokenizer/decoder/post-processor: the members of a `Sequence`
/// (listed under `list_key`), else the value itself.
fn parts<'a>(v: Option<&'a Value>, list_key: &str) -> impl Iterator<Item = &'a Value> {
    let list = v.and_then(|v| match type_of(v) {
        Some("Sequence") => v.get(list_key).and_then(Value::as_array).map(|a| a.iter().collect::<Vec<_>>()),
        _ => Some(vec![v]),
    });
    list.unwrap_or_default().into_iter()
}

/// llama.cpp's pre-tokenizer name for a byte-level tokenizer. llama.cpp's converter hashes a test tokenization;
/// here the pre-tokenizer sequence (Split regexes, Digits, ByteLevel's own regex) is matched against the regexes
/// of every known name, and among names with the same regexes the one whose whole-word lookup (tokenizer.json's
/// `ignore_merges`) and space clean-up (tokenizer_config's `clean_up_tokenization_spaces`) agree, where the files
/// say, is taken: those tokenize alike in llama.cpp. `None` when no name has this split.
fn byte_level_pre(
    pre_tokenizer: Option<&Value>,
    ignore_merges: Option<bool>,
    clean_spaces: Option<bool>,
) -> Option<&'static str> {
    let mut regexes: Vec<String> = Vec::new();
    for p in parts(pre_tokenizer, "pretokenizers") {
        let flag = |key: &str, default: bool| p.get(key).and_then(Value::as_bool).unwrap_or(default);
        match type_of(p)? {
            "Split" => {
                let isolated = p.get("behavior").and_then(Value::as_str).is_none_or(|b| b == "Isolated");
                if !isolated || flag("invert", false) {
                    return None;
                }
                let regex = p.pointer("/pattern/Regex").and_then(Value::as_str)?;
                let regex = REWRITTEN.iter().find(|(hf, _)| *hf == regex).map_or(regex, |&(_, llama)| llama);
                regexes.push(regex.replace(CONTRACTIONS.0, CONTRACTIONS.1));
            }
            "Digits" => regexes.push(if flag("individual_digits", false) { r"\p{N}" } else { r"\p{N}+" }.into()),
            "ByteLevel" if flag("use_regex", true) => regexes.push(pre::GPT2.into()),
            "ByteLevel" => {}
            _ => return None,
        }
    }
    let same_split: Vec<&pre::PreType> =
        pre::PRE_TYPES.iter().filter(|t| t.byte_encode && t.regexes.iter().eq(regexes.iter())).collect();
    let agrees = |t: &&&pre::PreType| {
        ignore_merges.is_none_or(|m| m == t.ignore_merges) && clean_spaces.is_none_or(|c| c == t.clean_spaces)
    };
    same_split.iter().find(agrees).or(same_split.first()).map(|t| t.names[0])
}

/// tokenizer_config.json's `clean_up_tokenization_spaces`, where it says.
fn clean_up_spaces(path: &Path) -> Option<bool> {
    let text = std::fs::read_to_string(path).ok()?;
    serde_json::from_str::<Value>(&text).ok()?.get("clean_up_tokenization_spaces")?.as_bool()
}

/// The special tokens a TemplateProcessing post-processor puts first and last in a single
/// sequence (only for templates with more than the sequence itself).
fn template_ends(post_processor: Option<&Value>) -> (Option<String>, Option<String>) {
    let special = |item: Option<&Value>| {
        item.and_then(|i| i.pointer("/SpecialToken/id")).and_then(Value::as_str).map(str::to_string)
    };
    parts(post_processor, "processors")
        .filter(|p| type_of(p) == Some("TemplateProcessing"))
        .find_map(|p| p.get("single").and_then(Value::as_array).filter(|s| s.len() > 1))
        .map(|single| (special(single.first()), special(single.last())))
        .unwrap_or_default()
}

/// Scores for the `llama` model; the rule is documented on [`GgufVocab::from_hf_files`].
fn spm_scores(tokens: &[String], types: &[i32], merges: &[(String, String)]) -> Vec<f32> {
    let mut first_rank: HashMap<String, usize> = HashMap::new();
    for (rank, (a, b)) in merges.iter().enumerate() {
        first_rank.entry(format!("{a}{b}")).or_insert(rank);
    }
    let mut normal: Vec<usize> = (0..tokens.len()).filter(|&id| types[id] == NORMAL).collect();
    normal.sort_by_key(|&id| (first_rank.get(&tokens[id]).copied().unwrap_or(usize::MAX), id));
    let mut scores: Vec<f32> = types
        .iter()
        .map(|&t| match t {
            USER_DEFINED => -1000.0,
            UNUSED => -10000.0,
            _ => 0.0,
        })
        .collect();
    for (k, id) in normal.into_iter().enumerate() {
        scores[id] = -(k as f32);
    }
    scores
}

/// tokenizer_config's `chat_template` by name: a string is the `default` one; in a `[{name, template}]` list,
/// entries without a name or a template are skipped and names are made ASCII alphanumeric.
fn chat_templates(tc: &Obj) -> Result<Option<BTreeMap<String, String>>, HfError> {
    let default = |s: &String| BTreeMap::from([("default".to_owned(), s.clone())]);
    match tc.get("chat_template") {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(default(s))),
        Some(Value::Array(list)) => Ok(Some(
            list.iter()
                .filter_map(|e| {
                    let name = e.get("name")?.as_str()?;
                    let template = e.get("template")?.as_str()?;
                    let name: String = name.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
                    (!name.is_empty()).then(|| (name, template.to_owned()))
                })
                .collect(),
        )),
        Some(_) => Err(tc.error("chat_template", "expected a string or a list of {name, template}")),
    }
}

/// The chat templates transformers >= 4.47 saves beside the tokenizer: `chat_template.jinja`,
/// or `chat_template.json` with a `chat_template` field.
fn sibling_chat_templates(dir: &Path) -> Result<Option<BTreeMap<String, String>>, HfError> {
    let jinja = dir.join("chat_template.jinja");
    if jinja.is_file() {
        let text = std::fs::read_to_string(&jinja).map_err(|source| HfError::Io { path: jinja, source })?;
        return Ok(Some(BTreeMap::from([("default".to_owned(), text)])));
    }
    let json = dir.join("chat_template.json");
    if !json.is_file() {
        return Ok(None);
    }
    let value = read_json(&json)?;
    chat_templates(&Obj::root(&json, &value)?)
}

#[cfg(test)]
mod tests;
