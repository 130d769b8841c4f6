//! Every `tokenizer.ggml.pre` name llama.cpp 0c1e570 accepts, with its split regexes and the settings that come
//! with it (llama.cpp's `llm_tokenizer_bpe` and `llama_vocab::load`). Names whose regexes and settings agree
//! tokenize alike; the first of such names in [`PRE_TYPES`] is the one a converter writes.

/// GPT-2's regex (matched by hand, as llama.cpp does).
pub const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";

/// Llama 3's regex.
#[rustfmt::skip]
const LLAMA3: &[&str] = &[
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];

/// Llama 3's regex with whitespace runs cut at powers of two.
#[rustfmt::skip]
const JAIS2: &[&str] = &[
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1}",
];

/// DeepSeek LLM: line breaks, Latin and Greek-Cyrillic words, ASCII and CJK punctuation, CJK and Hangul runs, numbers.
#[rustfmt::skip]
const DEEPSEEK_LLM: &[&str] = &[
    r"[\r\n]",
    r"\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
    r"\s?[!-/:-~！-／：-～‘-‟　-。]+",
    r"\s+$",
    r"[一-龥ࠀ-一가-퟿]+",
    r"\p{N}+",
];

/// DeepSeek V3: numbers by three, kana and CJK runs, then words with their marks.
#[rustfmt::skip]
const DEEPSEEK3_LLM: &[&str] = &[
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##,
];

/// Spark 2.5: DeepSeek V3's split with single line breaks and single digits.
#[rustfmt::skip]
const SPARK2_5: &[&str] = &[
    r"\p{N}{1,3}",
    r"[一-龥぀-ゟ゠-ヿ]+",
    r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+"##,
    r"\p{N}",
];

/// Youtu: Hangul, CJK punctuation, bopomofo and CJK runs, then GPT-4o's cased words.
#[rustfmt::skip]
const YOUTU: &[&str] = &[
    r"[가-힣ㄱ-ㆎ]+|[！…“”‘’—：；，、-〿︰-﹏]+|[ㄅ-ㄯ]+|[一-龥぀-ゟ゠-ヿ]+",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];

/// DeepSeek Coder: line breaks, words, punctuation, CJK and Hangul runs, digits.
#[rustfmt::skip]
const DEEPSEEK_CODER: &[&str] = &[
    r"[\r\n]",
    r"\s?\p{L}+",
    r"\s?\p{P}+",
    r"[一-龥ࠀ-一가-퟿]+",
    r"\p{N}",
];

/// Falcon: punctuation runs, GPT-2's regex, groups of three ASCII digits.
#[rustfmt::skip]
const FALCON: &[&str] = &[
    r"[\p{P}\$\+<=>\^~\|`]+",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    r"[0-9][0-9][0-9]",
];

/// StarCoder and its kin: single digits, then GPT-2's regex.
#[rustfmt::skip]
const STARCODER: &[&str] = &[
    r"\p{N}",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
];

/// Qwen3.5's regex: Qwen2's with marks kept in words.
#[rustfmt::skip]
const QWEN35: &[&str] = &[
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];

/// Bloom's split at whitespace and sentence punctuation.
#[rustfmt::skip]
const PORO: &[&str] = &[
    r" ?[^(\s|.,!?…。，、।۔،)]+",
];

/// Viking: Bloom's split, then single digits.
#[rustfmt::skip]
const VIKING: &[&str] = &[
    r" ?[^(\s|.,!?…。，、।۔،)]+",
    r"\p{N}",
];

/// Mistral's Tekken: cased words (by lookahead), single digits.
#[rustfmt::skip]
const TEKKEN: &[&str] = &[
    r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];

/// Chameleon: sentinel and image tokens, tabs and indents, digits, punctuation, then GPT-2's regex.
#[rustfmt::skip]
const CHAMELEON: &[&str] = &[
    r"<sentinel:[0-9]+>",
    r"(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z",
    r"([\t\n]|    |  )",
    r"\p{N}",
    r"[\p{P}!-/:-@\[-`{-~]",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
];

/// GPT-4o's regex: cased words with contractions, numbers by three.
#[rustfmt::skip]
const GPT4O: &[&str] = &[
    r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];

/// Granite multilingual embeddings: GPT-4o's regex with marks kept in words.
#[rustfmt::skip]
const GRANITE_EMB_MULTI: &[&str] = &[
    r"[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))*((?=[\p{L}\p{M}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}\p{M}])([^a-z]))+((?=[\p{L}\p{M}])([^A-Z]))*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];

/// Tiny Aya: digit groups of three from the right, then GPT-4o's cased words (by category).
#[rustfmt::skip]
const TINY_AYA: &[&str] = &[
    r"\d{1,3}(?=(?:\d{3})*\b)",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];

/// Kimi K2's regex (matched by hand).
#[rustfmt::skip]
const KIMI_K2: &[&str] = &[
    r"\p{Han}+",
];

/// SuperBPE: numbers, then groups of three digits from the right.
#[rustfmt::skip]
const SUPERBPE: &[&str] = &[
    r"\p{N}+",
    r"(?=(\d{3})+(?!\d))",
];

/// Ling (BailingMoE): Qwen2's regex with single line breaks.
#[rustfmt::skip]
const BAILINGMOE: &[&str] = &[
    r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+",
];

/// Seed-Coder: Qwen2's regex with line breaks kept out of punctuation runs.
#[rustfmt::skip]
const SEED_CODER: &[&str] = &[
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+",
];

/// Qwen2's regex without English contractions (Turkish suffixes stay attached).
#[rustfmt::skip]
const UFAKZEKA: &[&str] = &[
    r"[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];

/// AFMoE: digit groups from the right, CJK and Southeast Asian runs, then DeepSeek V3's words.
#[rustfmt::skip]
const AFMOE: &[&str] = &[
    r"\p{AFMoE_digits}",
    r"[一-鿿㐀-䶿豈-﫿぀-ゟ゠-ヿ･-ﾟ⼀-⿟เ-๿຀-໿ក-៿က-႟ꩠ-ꩿꧠ-꧿가-힯ᄀ-ᇿ]+",
    r##"[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"##,
];

/// Laguna: lines, then Qwen2's regex.
#[rustfmt::skip]
const LAGUNA: &[&str] = &[
    r"[^\n]+|[\n]+",
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];

/// EXAONE MoE: words joined by single spaces, single digits.
#[rustfmt::skip]
const EXAONE_MOE: &[&str] = &[
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+",
];

/// Gemma 4 and Sarvam: lines and runs of line breaks only (SentencePiece-style BPE).
#[rustfmt::skip]
const GEMMA4: &[&str] = &[
    r"[^\n]+|[\n]+",
];

/// MiniCPM 5: numbers by three, then Qwen2's regex with whole numbers.
#[rustfmt::skip]
const MINICPM5: &[&str] = &[
    r"\p{N}{1,3}",
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];

/// Runs of non-whitespace.
#[rustfmt::skip]
const WHITESPACE: &[&str] = &[
    r"\S+",
];

/// llama.cpp's fallback: punctuation runs, GPT-2's regex, numbers, groups of three ASCII digits.
#[rustfmt::skip]
const DEFAULT: &[&str] = &[
    r"[\p{P}\$\+<=>\^~\|]+",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)",
    r"\p{N}+",
    r"[0-9][0-9][0-9]",
];

/// Qwen2's regex: Llama 3's with one digit a word.
#[rustfmt::skip]
const QWEN2: &[&str] = &[
    r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
];

/// The pre-tokenizer llama.cpp knows by `name`.
pub fn find(name: &str) -> Option<&'static PreType> {
    PRE_TYPES.iter().find(|p| p.names.contains(&name))
}

/// Every known name, comma-separated.
pub fn names() -> String {
    PRE_TYPES.iter().flat_map(|p| p.names.iter().copied()).collect::<Vec<_>>().join(", ")
}

/// What a `tokenizer.ggml.pre` name selects: llama.cpp's pre-tokenizer type and the vocabulary settings
/// that come with the name.
#[derive(Debug)]
pub struct PreType {
    /// The names llama.cpp accepts for it.
    pub names: &'static [&'static str],
    /// The split regexes, applied in turn.
    pub regexes: &'static [&'static str],
    /// Words are GPT-2 byte-encoded (else raw UTF-8, unknown bytes as `<0xNN>` tokens).
    pub byte_encode: bool,
    /// A word that is a token is not merged.
    pub ignore_merges: bool,
    /// BOS is added unless metadata says otherwise.
    pub add_bos: bool,
    /// Decoding cleans up spaces before punctuation.
    pub clean_spaces: bool,
    /// Spaces are written `▁` before merging and read back on decoding (SentencePiece-style BPE).
    pub escape_whitespaces: bool,
    /// The vocabulary has no BOS token, whatever its metadata says (ChatGLM).
    pub no_bos: bool,
}

/// A name group with llama.cpp's defaults for BPE vocabularies.
const fn pre(names: &'static [&'static str], regexes: &'static [&'static str]) -> PreType {
    PreType {
        names,
        regexes,
        byte_encode: true,
        ignore_merges: false,
        add_bos: false,
        clean_spaces: true,
        escape_whitespaces: false,
        no_bos: false,
    }
}

impl PreType {
    /// Decoding leaves spaces as they are.
    const fn raw_spaces(self) -> Self {
        PreType { clean_spaces: false, ..self }
    }

    /// Whole-word tokens are not merged.
    const fn whole_words(self) -> Self {
        PreType { ignore_merges: true, ..self }
    }

    /// BOS is added by default.
    const fn bos(self) -> Self {
        PreType { add_bos: true, ..self }
    }

    /// No BOS token.
    const fn without_bos(self) -> Self {
        PreType { no_bos: true, ..self }
    }

    /// Raw UTF-8 words with `▁` for spaces.
    const fn sentencepiece(self) -> Self {
        PreType { byte_encode: false, escape_whitespaces: true, ..self }
    }

    /// Raw UTF-8 words.
    const fn utf8(self) -> Self {
        PreType { byte_encode: false, ..self }
    }
}

/// Every name llama.cpp 0c1e570 accepts for `tokenizer.ggml.pre`, in its order but for the most common name of
/// each split first.
#[rustfmt::skip]
pub const PRE_TYPES: &[PreType] = &[
    pre(&["default"], DEFAULT),
    pre(&["minicpm5"], MINICPM5).whole_words(),
    pre(&["llama-bpe", "llama3", "llama-v3", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano"], LLAMA3)
        .whole_words().bos(),
    pre(&["deepseek-llm"], DEEPSEEK_LLM).raw_spaces(),
    pre(&["deepseek-coder"], DEEPSEEK_CODER).raw_spaces(),
    pre(&["deepseek-v3"], DEEPSEEK3_LLM).raw_spaces(),
    pre(&["spark2_5"], SPARK2_5).raw_spaces(),
    pre(&["youtu"], YOUTU).raw_spaces().whole_words(),
    pre(&["falcon"], FALCON),
    pre(&["starcoder"], STARCODER),
    pre(&["gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0", "mellum", "modern-bert",
          "jina-v1-en", "jina-v2-code", "roberta-bpe", "exaone4"], &[GPT2]),
    pre(&["mpt"], &[GPT2]),
    pre(&["jais-2"], JAIS2),
    pre(&["gemma4", "granite-embed-multi-311m"], GEMMA4).sentencepiece(),
    pre(&["sarvam-moe"], GEMMA4).sentencepiece().raw_spaces(),
    pre(&["whitespace"], WHITESPACE).utf8().raw_spaces(),
    pre(&["refact"], STARCODER),
    pre(&["smollm"], STARCODER).raw_spaces(),
    pre(&["command-r"], STARCODER).raw_spaces(),
    pre(&["qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "solar-open", "grok-2"], QWEN2).raw_spaces(),
    pre(&["qwen35"], QWEN35).raw_spaces(),
    pre(&["stablelm2", "megrez"], QWEN2),
    pre(&["olmo", "jais"], &[GPT2]),
    pre(&["dbrx", "smaug-bpe"], LLAMA3),
    pre(&["poro-chat"], PORO).raw_spaces(),
    pre(&["chatglm-bpe"], LLAMA3).without_bos(),
    pre(&["glm4", "glm5"], LLAMA3).without_bos().whole_words(),
    pre(&["viking"], VIKING).raw_spaces(),
    pre(&["tekken"], TEKKEN).raw_spaces().whole_words().bos(),
    pre(&["codeshell", "exaone", "minerva-7b", "mellum2"], STARCODER),
    pre(&["bloom", "gpt3-finnish"], PORO),
    pre(&["exaone-moe"], EXAONE_MOE),
    pre(&["chameleon"], CHAMELEON).bos().raw_spaces(),
    pre(&["gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"], GPT4O).raw_spaces(),
    pre(&["granite-embed-multi-97m"], GRANITE_EMB_MULTI).raw_spaces().whole_words(),
    pre(&["tiny_aya", "cohere2moe"], TINY_AYA).raw_spaces(),
    pre(&["superbpe"], SUPERBPE).raw_spaces(),
    pre(&["trillion", "granite-docling"], &[GPT2]).raw_spaces(),
    pre(&["bailingmoe", "bailingmoe2", "llada-moe"], BAILINGMOE).raw_spaces(),
    pre(&["seed-coder"], SEED_CODER).raw_spaces(),
    pre(&["hunyuan-dense", "hy_v4", "joyai-llm"], DEEPSEEK3_LLM).raw_spaces(),
    pre(&["kimi-k2"], KIMI_K2).raw_spaces(),
    pre(&["ufakzeka"], UFAKZEKA).raw_spaces(),
    pre(&["afmoe"], AFMOE).raw_spaces(),
    pre(&["laguna"], LAGUNA).raw_spaces(),
];
