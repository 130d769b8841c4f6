//! A vocabulary from GGUF `tokenizer.ggml.*` metadata, set up as llama.cpp's `llama_vocab` loads
//! it: token attributes, special ids, end-of-generation tokens and the special-token order.

use std::collections::HashMap;

use tgi_formats::gguf::{Array, Value};
use tgi_formats::GgufFile;

use super::pretokenize::{self, PreTokenizer};
use super::text_index::TextIndex;
use super::token_texts::TokenTexts;
use super::ugm::Ugm;
use super::wpm::Wpm;
use super::TokenizerError;

/// Token attribute bits (llama.cpp's `llama_token_attr`, the ones tokenization looks at).
pub(super) mod attr {
    /// An ordinary token.
    pub const NORMAL: u8 = 1;
    /// The unknown token.
    pub const UNKNOWN: u8 = 2;
    /// A control token (BOS, EOS, chat markers); matched in text only when parsing specials.
    pub const CONTROL: u8 = 4;
    /// An added token matched verbatim in text.
    pub const USER_DEFINED: u8 = 8;
    /// A byte-fallback token `<0xNN>`.
    pub const BYTE: u8 = 16;
    /// Whitespace after the token is dropped when it is matched in text.
    pub const RSTRIP: u8 = 32;
    /// A token no text is tokenized to but Unigram's search.
    pub const UNUSED: u8 = 64;
}

/// Which merge algorithm the vocabulary uses (`tokenizer.ggml.model`).
#[derive(Debug)]
pub(super) enum Model {
    /// `llama`: SentencePiece-style BPE over characters, by piece score, with byte fallback.
    Spm,
    /// `gpt2` (and `gemma4`): BPE by merge rank after pre-tokenization.
    Bpe(PreTokenizer),
    /// `bert`: WordPiece, the longest tokens first.
    Wpm(Wpm),
    /// `t5`: Unigram, the tokenization with the best score.
    Ugm(Ugm),
}

/// One vocabulary entry; its text is in [`Vocab::text`].
#[derive(Clone, Debug)]
pub(super) struct Token {
    /// The SPM merge score.
    pub score: f32,
    /// [`attr`] bits.
    pub attr: u8,
}

/// A loaded vocabulary.
#[derive(Debug)]
pub(super) struct Vocab {
    /// The merge algorithm.
    pub model: Model,
    /// Entries by id.
    pub tokens: Vec<Token>,
    /// Texts by id, as stored (`▁` for spaces in SPM, GPT-2 byte characters in BPE).
    texts: TokenTexts,
    /// Ids by text.
    ids: TextIndex,
    /// BPE merge ranks keyed `"left right"`.
    merges: HashMap<String, u32>,
    /// Control, user-defined and unknown tokens, longest text first: the order text is searched for them.
    pub specials: Vec<u32>,
    /// Beginning of sequence.
    pub bos: Option<u32>,
    /// End of sequence.
    pub eos: Option<u32>,
    /// End-of-generation tokens, ascending.
    pub eog: Vec<u32>,
    /// Encoding with specials starts with BOS.
    pub add_bos: bool,
    /// Encoding with specials ends with EOS.
    pub add_eos: bool,
    /// SPM puts a space before text at the start and after special tokens.
    pub add_space_prefix: bool,
    /// A whole word that is a token is taken as is (Llama 3).
    pub ignore_merges: bool,
    /// Detokenization removes spaces before punctuation and contractions.
    pub clean_spaces: bool,
}

/// Texts marking end-of-generation tokens (made control tokens).
#[rustfmt::skip]
const EOG_TEXTS: &[&str] = &[
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~[",
];

/// Fill-in-the-middle roles found by token text when metadata names none: the metadata keys
/// (current and deprecated), the texts, and whether the role ends generation.
#[rustfmt::skip]
const FIM_ROLES: &[(&[&str], &[&str], bool)] = &[
    (
        &["fim_pre_token_id", "prefix_token_id"],
        &["<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>", "<|prefix|>"],
        false,
    ),
    (
        &["fim_suf_token_id", "suffix_token_id"],
        &["<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>", "<|suffix|>"],
        false,
    ),
    (
        &["fim_mid_token_id", "middle_token_id"],
        &["<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>", "<|middle|>"],
        false,
    ),
    (&["fim_pad_token_id"], &["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"], true),
    (&["fim_rep_token_id"], &["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"], true),
    (&["fim_sep_token_id"], &["<|file_sep|>"], true),
];

/// The end-of-turn role: metadata key and texts (an end-of-generation token as well).
#[rustfmt::skip]
const EOT_ROLE: (&str, &[&str]) = (
    "eot_token_id",
    &["<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
      "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"],
);

/// The end-of-message role.
const EOM_ROLE: (&str, &[&str]) = ("eom_token_id", &["<|eom_id|>"]);

/// gpt-oss chat markers that llama.cpp always renders as text.
const RENDERED_MARKERS: &[&str] = &["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

/// The `tokenizer.ggml.` key for `name`.
fn key(name: &str) -> String {
    format!("tokenizer.ggml.{name}")
}

/// Metadata access with errors naming the key.
struct Meta<'a>(&'a GgufFile);

impl Meta<'_> {
    /// An error about key `name`.
    fn bad(name: &str, problem: &str) -> TokenizerError {
        TokenizerError::Metadata { key: key(name), problem: problem.to_owned() }
    }

    /// The value of key `name`.
    fn get(&self, name: &str) -> Option<&Value> {
        self.0.get(&key(name))
    }

    /// A string value, if present.
    fn string(&self, name: &str) -> Result<Option<&str>, TokenizerError> {
        self.get(name).map(|v| v.as_str().ok_or_else(|| Self::bad(name, "is not a string"))).transpose()
    }

    /// A bool value, if present.
    fn boolean(&self, name: &str) -> Result<Option<bool>, TokenizerError> {
        self.get(name).map(|v| v.as_bool().ok_or_else(|| Self::bad(name, "is not a bool"))).transpose()
    }

    /// An array value, if present.
    fn array(&self, name: &str) -> Option<&Array> {
        self.get(name).and_then(Value::as_array)
    }

    /// A token id if present and inside the vocabulary (llama.cpp ignores others).
    fn id(&self, name: &str, n_tokens: usize) -> Option<u32> {
        self.get(name).and_then(Value::as_u32).filter(|&id| (id as usize) < n_tokens)
    }

    /// As [`Meta::id`], else the model's default id, dropped when outside the vocabulary.
    fn id_or(&self, name: &str, default: Option<u32>, n_tokens: usize) -> Option<u32> {
        self.id(name, n_tokens).or(default.filter(|&id| (id as usize) < n_tokens))
    }
}

impl Vocab {
    /// Loads the vocabulary from `tokenizer.ggml.*` metadata.
    pub(super) fn from_gguf(file: &GgufFile) -> Result<Vocab, TokenizerError> {
        let meta = Meta(file);
        let model_name = meta.string("model")?.ok_or_else(|| Meta::bad("model", "is missing"))?;
        let pre_name = meta.string("pre")?;
        let (tokens, texts, ids) = read_tokens(&meta)?;
        let bpe = |name: &str| {
            let pre =
                pretokenize::find(name).ok_or_else(|| TokenizerError::UnsupportedPreTokenizer(name.to_owned()))?;
            let split = PreTokenizer::new(pre).map_err(|e| Meta::bad("pre", &e))?;
            Ok::<_, TokenizerError>((Model::Bpe(split), pre))
        };
        let (model, pre) = match model_name {
            "llama" => (Model::Spm, None),
            "gpt2" => {
                let name = pre_name.unwrap_or_else(|| {
                    tracing::warn!(
                        "tokenizer.ggml.pre is missing: using the default pre-tokenizer, which may degrade the output"
                    );
                    "default"
                });
                let (model, pre) = bpe(name)?;
                (model, Some(pre))
            }
            // Gemma 4's SentencePiece-style BPE, whatever `pre` says.
            "gemma4" => {
                let (model, pre) = bpe("gemma4")?;
                (model, Some(pre))
            }
            // WordPiece whatever `pre` says; its ids and options are read with the vocabulary's.
            "bert" => (Model::Wpm(read_wpm(&meta, &texts)?), None),
            // Unigram whatever `pre` says.
            "t5" => (Model::Ugm(read_ugm(&meta, &tokens, &texts)?), None),
            other => return Err(TokenizerError::UnsupportedModel(other.to_owned())),
        };
        let spm = matches!(model, Model::Spm);
        let ugm = matches!(model, Model::Ugm(_));
        let ignore_merges = pre.is_some_and(|p| p.ignore_merges);
        let clean_spaces = pre.is_none_or(|p| p.clean_spaces) && !spm && !ugm;
        let no_bos = pre.is_some_and(|p| p.no_bos);
        let mut add_bos = pre.is_none_or(|p| p.add_bos) && !ugm;
        let add_space_prefix = meta.boolean("add_space_prefix")?.unwrap_or(spm);
        let n = tokens.len();
        let merges = if pre.is_some() { read_merges(&meta)? } else { HashMap::new() };

        // Special ids: model defaults (dropped when outside the vocabulary), then metadata.
        // Gemma 4 has none: its metadata names them.
        let defaults = match model_name {
            "llama" => (Some(1), Some(2)),
            "gpt2" => (Some(11), Some(11)),
            "bert" => (Some(101), None),
            "t5" => (None, Some(1)),
            _ => (None, None),
        };
        let bos = meta.id_or("bos_token_id", defaults.0, n).filter(|_| !no_bos);
        let eos = meta.id_or("eos_token_id", defaults.1, n);
        add_bos = meta.boolean("add_bos_token")?.unwrap_or(add_bos);
        let add_eos = meta.boolean("add_eos_token")?.unwrap_or(ugm);
        if add_bos && bos.is_none() {
            return Err(Meta::bad("add_bos_token", "is true, but there is no BOS token"));
        }
        if add_eos && eos.is_none() {
            return Err(Meta::bad("add_eos_token", "is true, but there is no EOS token"));
        }

        let mut vocab = Vocab {
            model,
            tokens,
            texts,
            ids,
            merges,
            specials: Vec::new(),
            bos,
            eos,
            eog: Vec::new(),
            add_bos,
            add_eos,
            add_space_prefix,
            ignore_merges,
            clean_spaces,
        };
        vocab.find_end_of_generation(&meta, n);
        vocab.specials = (0..n as u32)
            .filter(|&id| vocab.tokens[id as usize].attr & (attr::CONTROL | attr::USER_DEFINED | attr::UNKNOWN) != 0)
            .collect();
        let texts = &vocab.texts;
        vocab.specials.sort_by_key(|&id| std::cmp::Reverse(texts.get(id).len()));
        let name = file.get("general.name").and_then(Value::as_str).unwrap_or("");
        vocab.apply_phi3_rstrip(&name.to_lowercase());
        Ok(vocab)
    }

    /// llama.cpp's end-of-generation set: roles from metadata or found by text, every token whose
    /// text marks an end, EOS, and `tokenizer.ggml.eog_token_ids`; the tokens found by text become control tokens.
    fn find_end_of_generation(&mut self, meta: &Meta, n: usize) {
        let mut eog = Vec::new();
        let by_text = |vocab: &mut Vocab, texts: &[&str]| {
            let id = (0..n as u32).find(|&i| texts.contains(&vocab.text(i)))?;
            vocab.tokens[id as usize].attr |= attr::CONTROL;
            Some(id)
        };
        for (role, texts) in [EOT_ROLE, EOM_ROLE] {
            let id = meta.id(role, n).or_else(|| by_text(self, texts));
            eog.extend(id);
        }
        for &(keys, texts, ends) in FIM_ROLES {
            let id = keys.iter().find_map(|k| meta.id(k, n)).or_else(|| by_text(self, texts));
            if ends {
                eog.extend(id);
            }
        }
        for (id, token) in self.tokens.iter_mut().enumerate() {
            let text = self.texts.get(id as u32);
            if EOG_TEXTS.contains(&text) {
                token.attr |= attr::CONTROL;
                eog.push(id as u32);
            }
            if RENDERED_MARKERS.contains(&text) {
                token.attr = attr::USER_DEFINED;
            }
        }
        eog.extend(self.eos);
        // An explicit list (newer converters write one); ids outside the vocabulary are ignored, as for the roles.
        let listed: Vec<i64> = match meta.array("eog_token_ids") {
            Some(Array::U32(ids)) => ids.iter().map(|&id| i64::from(id)).collect(),
            Some(Array::I32(ids)) => ids.iter().map(|&id| i64::from(id)).collect(),
            _ => Vec::new(),
        };
        eog.extend(listed.into_iter().filter(|&id| (0..n as i64).contains(&id)).map(|id| id as u32));
        eog.sort_unstable();
        eog.dedup();
        // gpt-oss and solar-open end turns with <|return|>/<|call|> (or <|calls|>/<|flush|>);
        // their <|end|> only closes a message.
        let has = |text: &str| eog.iter().any(|&id| self.text(id) == text);
        let call = has("<|call|>") || has("<|calls|>");
        if call && (has("<|return|>") || has("<|flush|>")) && has("<|end|>") {
            if let Some(end) = self.id("<|end|>") {
                eog.retain(|&id| id != end);
                self.tokens[end as usize].attr = attr::USER_DEFINED;
            }
        }
        self.eog = eog;
    }

    /// Phi-3 drops whitespace after its special tokens (llama.cpp keys this on the model name).
    fn apply_phi3_rstrip(&mut self, model_name: &str) {
        if !(model_name.contains("phi-3") || model_name.contains("phi3")) {
            return;
        }
        for &id in &self.specials {
            self.tokens[id as usize].attr |= attr::RSTRIP;
        }
        for (text, rstrip) in [("</s>", true), ("<unk>", false), ("<s>", false), ("<|endoftext|>", false)] {
            if let Some(id) = self.id(text) {
                let a = &mut self.tokens[id as usize].attr;
                *a = if rstrip { *a | attr::RSTRIP } else { *a & !attr::RSTRIP };
            }
        }
    }

    /// The text of token `id`, as stored; panics past the end, like indexing `tokens`.
    pub(super) fn text(&self, id: u32) -> &str {
        self.texts.get(id)
    }

    /// The id of the token with exactly this text.
    pub(super) fn id(&self, text: &str) -> Option<u32> {
        self.ids.get(text, |id| self.texts.get(id))
    }

    /// The rank of merging `left` and `right`; `key` is a scratch buffer.
    pub(super) fn merge_rank(&self, left: &str, right: &str, key: &mut String) -> Option<u32> {
        key.clear();
        key.push_str(left);
        key.push(' ');
        key.push_str(right);
        self.merges.get(key.as_str()).copied()
    }

    /// The token for one byte: `<0xNN>`, else the byte as a one-character token (ASCII only).
    pub(super) fn byte_token(&self, b: u8) -> Option<u32> {
        self.id(&format!("<0x{b:02X}>")).or_else(|| b.is_ascii().then(|| self.id(&char::from(b).to_string()))?)
    }
}

/// Token entries, their texts and the text-to-id map from `tokens`, `scores` and `token_type`.
fn read_tokens(meta: &Meta) -> Result<(Vec<Token>, TokenTexts, TextIndex), TokenizerError> {
    let Some(Array::String(texts)) = meta.array("tokens") else {
        return Err(Meta::bad("tokens", "is missing or not a string array"));
    };
    let n = texts.len();
    let scores: Vec<f32> = match meta.array("scores") {
        None => vec![0.0; n],
        Some(Array::F32(s)) if s.len() >= n => s[..n].to_vec(),
        Some(Array::I32(s)) if s.len() >= n => s[..n].iter().map(|&s| s as f32).collect(),
        Some(_) => return Err(Meta::bad("scores", "is not an f32 or i32 array of one score a token")),
    };
    let types: Vec<i32> = match meta.array("token_type") {
        None => vec![1; n],
        Some(Array::I32(t)) if t.len() >= n => t[..n].to_vec(),
        Some(_) => return Err(Meta::bad("token_type", "is not an i32 array of one type a token")),
    };

    let mut tokens = Vec::with_capacity(n);
    let mut all = TokenTexts::with_capacity(n);
    for (i, ((text, score), ty)) in texts.iter().zip(scores).zip(types).enumerate() {
        let pushed = if text.is_empty() { all.push(&format!("[EMPTY_{i}]")) } else { all.push(text) };
        if !pushed {
            return Err(Meta::bad("tokens", "holds more than 4 GiB of text"));
        }
        let attr = match ty {
            1 => attr::NORMAL,
            2 => attr::UNKNOWN,
            3 => attr::CONTROL,
            4 => attr::USER_DEFINED,
            5 => attr::UNUSED,
            6 => attr::BYTE,
            _ => 0, // undefined types
        };
        tokens.push(Token { score, attr });
    }
    all.shrink_to_fit();
    let ids = TextIndex::new(n, |id| all.get(id)).map_err(|(first, second)| TokenizerError::DuplicateToken {
        text: all.get(second).to_owned(),
        first,
        second,
    })?;
    Ok((tokens, all, ids))
}

/// A WordPiece vocabulary's unknown and separator tokens (by default 100 and 102, BERT's) and its
/// normalizer options.
fn read_wpm(meta: &Meta, texts: &TokenTexts) -> Result<Wpm, TokenizerError> {
    let n = texts.len();
    let unk = meta
        .id_or("unknown_token_id", Some(100), n)
        .ok_or_else(|| Meta::bad("unknown_token_id", "is missing, and a WordPiece vocabulary needs one"))?;
    let sep = meta.id_or("seperator_token_id", Some(102), n);
    let lowercase = meta.boolean("normalizer.lowercase")?.unwrap_or(true);
    let strip_accents = meta.boolean("normalizer.strip_accents")?.unwrap_or(lowercase);
    Ok(Wpm { unk, sep, lowercase, strip_accents, max_len: texts.longest(0..n as u32) })
}

/// A Unigram vocabulary's unknown token (by default 2, T5's), character map and space handling.
fn read_ugm(meta: &Meta, tokens: &[Token], texts: &TokenTexts) -> Result<Ugm, TokenizerError> {
    let unk = meta
        .id_or("unknown_token_id", Some(2), tokens.len())
        .ok_or_else(|| Meta::bad("unknown_token_id", "is missing, and a Unigram vocabulary needs one"))?;
    let charsmap = match meta.array("precompiled_charsmap") {
        None => None,
        Some(Array::U8(bytes)) => Some(bytes.clone()),
        Some(Array::I8(bytes)) => Some(bytes.iter().map(|&b| b as u8).collect()),
        Some(_) => return Err(Meta::bad("precompiled_charsmap", "is not an array of bytes")),
    };
    let merge_spaces = meta.boolean("remove_extra_whitespaces")?.unwrap_or(false);
    Ugm::new(tokens, texts, charsmap.as_deref(), unk, merge_spaces)
}

/// BPE merge ranks from `merges`.
fn read_merges(meta: &Meta) -> Result<HashMap<String, u32>, TokenizerError> {
    let Some(Array::String(list)) = meta.array("merges") else {
        return Err(Meta::bad("merges", "is missing or not a string array"));
    };
    let mut merges = HashMap::with_capacity(list.len());
    for (rank, merge) in list.iter().enumerate() {
        // llama.cpp splits "left right" at the first space after the first byte; the key is the
        // merge text itself, and one without such a space can never match.
        if merge.bytes().skip(1).any(|b| b == b' ') {
            merges.entry(merge.clone()).or_insert(rank as u32);
        }
    }
    Ok(merges)
}

#[cfg(test)]
mod tests {
    use super::super::testvocab::{bpe_metadata, gguf};
    use super::*;

    /// The test BPE vocabulary with `extra` tokens (text, GGUF type) appended.
    fn with_tokens(extra: &[(&str, i32)]) -> Result<Vocab, TokenizerError> {
        let mut meta = bpe_metadata();
        for (key, value) in &mut meta {
            match (*key, value) {
                ("tokenizer.ggml.tokens", Value::Array(Array::String(t))) => {
                    t.extend(extra.iter().map(|(text, _)| text.to_string()))
                }
                ("tokenizer.ggml.token_type", Value::Array(Array::I32(t))) => t.extend(extra.iter().map(|&(_, ty)| ty)),
                _ => {}
            }
        }
        Vocab::from_gguf(&gguf(meta))
    }

    #[test]
    fn end_of_generation_tokens_found_by_text() {
        let vocab =
            with_tokens(&[("<|im_end|>", 1), ("<|fim_pad|>", 1), ("<|fim_prefix|>", 1), ("<|channel|>", 3)]).unwrap();
        let id = |t: &str| vocab.id(t).unwrap();
        let eos = vocab.eos.unwrap();
        assert_eq!(vocab.eog, [eos, id("<|im_end|>"), id("<|fim_pad|>")]);
        for t in ["<|im_end|>", "<|fim_pad|>", "<|fim_prefix|>"] {
            assert_eq!(vocab.tokens[id(t) as usize].attr, attr::NORMAL | attr::CONTROL, "{t}");
        }
        assert_eq!(vocab.tokens[id("<|channel|>") as usize].attr, attr::USER_DEFINED);
        // Longest first.
        assert_eq!(vocab.text(vocab.specials[0]), "<|fim_prefix|>");
    }

    #[test]
    fn end_of_generation_ids_from_metadata() {
        // Plain tokens named end of turn, end of message and in the explicit list all end generation.
        let mut meta = bpe_metadata();
        meta.push(("tokenizer.ggml.eot_token_id", Value::U32(1)));
        meta.push(("tokenizer.ggml.eom_token_id", Value::U32(2)));
        meta.push(("tokenizer.ggml.eog_token_ids", Value::Array(Array::I32(vec![3, 4, -1, 1 << 20]))));
        let vocab = Vocab::from_gguf(&gguf(meta)).unwrap();
        assert_eq!(vocab.eog, [1, 2, 3, 4, vocab.eos.unwrap()]);
    }

    #[test]
    fn gpt_oss_end_is_not_end_of_generation() {
        let vocab = with_tokens(&[("<|return|>", 3), ("<|call|>", 3), ("<|end|>", 3)]).unwrap();
        let end = vocab.id("<|end|>").unwrap();
        assert!(!vocab.eog.contains(&end));
        assert_eq!(vocab.tokens[end as usize].attr, attr::USER_DEFINED);
        assert_eq!(vocab.eog.len(), 3);
    }

    #[test]
    fn special_ids_default_and_validate() {
        let strip = |keys: &[&str]| {
            let mut meta = bpe_metadata();
            meta.retain(|(k, _)| !keys.contains(k));
            meta
        };
        // Without ids BPE falls back to llama.cpp's default 11; an id past the end is ignored.
        let mut meta = strip(&["tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"]);
        meta.push(("tokenizer.ggml.eos_token_id", Value::U32(u32::MAX)));
        let vocab = Vocab::from_gguf(&gguf(meta)).unwrap();
        assert_eq!((vocab.bos, vocab.eos), (Some(11), Some(11)));
        // add_bos needs a BOS.
        let mut meta = strip(&["tokenizer.ggml.bos_token_id", "tokenizer.ggml.tokens", "tokenizer.ggml.merges"]);
        meta.push(("tokenizer.ggml.tokens", Value::strings(["a", "b"])));
        meta.push(("tokenizer.ggml.merges", Value::strings(["a b"])));
        meta.push(("tokenizer.ggml.add_bos_token", Value::Bool(true)));
        let err = Vocab::from_gguf(&gguf(meta)).unwrap_err().to_string();
        assert_eq!(err, "GGUF tokenizer metadata 'tokenizer.ggml.add_bos_token' is true, but there is no BOS token");
    }

    #[test]
    fn merge_keys_split_after_the_first_byte() {
        let vocab = with_tokens(&[]).unwrap();
        let mut key = String::new();
        assert_eq!(vocab.merge_rank("Ġ", "t", &mut key), Some(0));
        assert_eq!(vocab.merge_rank("Ġt", "he", &mut key), Some(2));
        assert_eq!(vocab.merge_rank("t", "h", &mut key), None);
    }
}
