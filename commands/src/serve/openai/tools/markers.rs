//! The family's call markers that the model's vocabulary holds as control tokens (Mistral's
//! `[TOOL_CALLS]`, a Hermes model's `<tool_call>` where it is special), written into grammars by token id
//! (`<[5]>`) so that the model emits the token it was trained on: a control token's text is not text to
//! llguidance, which would otherwise spell the marker out of ordinary tokens.

use serde_json::Value;
use tgi_engines::text::tokenizer::Tokenizer;

use super::format::ToolCallFormat;

/// The markers of one family that are control tokens of one vocabulary.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Markers {
    /// Each marker's text and its token id.
    tokens: Vec<(&'static str, u32)>,
}

impl Markers {
    /// The markers of `format` (those that open and close its sections) that `tokenizer` reads as one control token.
    pub fn find(format: ToolCallFormat, tokenizer: &Tokenizer) -> Self {
        let syntax = format.syntax();
        let tokens = syntax
            .open
            .iter()
            .chain(syntax.close.as_slice())
            .filter_map(|&marker| match tokenizer.encode(marker, false, true).ok()?.as_slice() {
                &[id] if tokenizer.is_control(id) => Some((marker, id)),
                _ => None,
            })
            .collect();
        Markers { tokens }
    }

    /// The control token of `marker`, when the vocabulary has one.
    pub fn token(&self, marker: &str) -> Option<u32> {
        self.tokens.iter().find(|(m, _)| *m == marker).map(|&(_, id)| id)
    }

    /// `text` as a sequence of Lark items: string literals, and each marker that is a control token by id.
    pub fn lark(&self, text: &str) -> String {
        let mut items = Vec::new();
        let mut rest = text;
        while let Some((at, marker, id)) =
            self.tokens.iter().filter_map(|&(m, id)| rest.find(m).map(|at| (at, m, id))).min_by_key(|t| t.0)
        {
            items.push(literal(&rest[..at]));
            items.push(format!("<[{id}]>"));
            rest = &rest[at + marker.len()..];
        }
        items.push(literal(rest));
        items.retain(|item| !item.is_empty());
        items.join(" ")
    }
}

/// A Lark string literal of `text` (JSON string syntax); empty for empty text.
pub fn literal(text: &str) -> String {
    if text.is_empty() {
        String::new()
    } else {
        Value::from(text).to_string()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::path::{Path, PathBuf};

    use serde_json::json;

    use super::*;

    /// Markers with these token ids.
    pub fn markers(tokens: &[(&'static str, u32)]) -> Markers {
        Markers { tokens: tokens.to_vec() }
    }

    /// The bundled model's tokenizer with `[TOOL_CALLS]` added as control token 512 (as Mistral's
    /// tokenizers have it), written under `dir`.
    pub fn mistral_like(dir: &Path) -> PathBuf {
        let hf = Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/stories260k/hf");
        let mut tokenizer: Value =
            serde_json::from_str(&std::fs::read_to_string(hf.join("tokenizer.json")).unwrap()).unwrap();
        tokenizer["added_tokens"].as_array_mut().unwrap().push(json!({"id": 512, "content": "[TOOL_CALLS]",
            "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}));
        std::fs::write(dir.join("tokenizer.json"), tokenizer.to_string()).unwrap();
        std::fs::copy(hf.join("tokenizer_config.json"), dir.join("tokenizer_config.json")).unwrap();
        dir.join("tokenizer.json")
    }

    #[test]
    fn finds_the_markers_that_are_control_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let tokenizer = Tokenizer::from_tokenizer_json(&mistral_like(dir.path())).unwrap();
        assert_eq!(Markers::find(ToolCallFormat::Mistral, &tokenizer), markers(&[("[TOOL_CALLS]", 512)]));
        assert_eq!(Markers::find(ToolCallFormat::Hermes, &tokenizer), Markers::default(), "<tool_call> is text");
    }

    #[test]
    fn writes_control_markers_by_id_and_the_rest_as_literals() {
        let m = markers(&[("[TOOL_CALLS]", 5), ("</tool_call>", 9)]);
        assert_eq!(m.lark("[TOOL_CALLS]["), "<[5]> \"[\"");
        assert_eq!(m.lark("}\n</tool_call>"), "\"}\\n\" <[9]>");
        assert_eq!(m.lark("a[TOOL_CALLS]b</tool_call>"), "\"a\" <[5]> \"b\" <[9]>");
        assert_eq!(Markers::default().lark("[TOOL_CALLS]["), "\"[TOOL_CALLS][\"");
        assert_eq!(m.lark(""), "");
        assert_eq!(m.token("[TOOL_CALLS]"), Some(5));
        assert_eq!(m.token("<tool_call>"), None);
    }
}
