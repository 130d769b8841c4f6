//! A model's chat templates by use: its default template and the one llama.cpp renders requests that
//! offer tools with (`tool_use`: tokenizer_config's named entry, a GGUF's `tokenizer.chat_template.tool_use`).

use tgi_formats::hf::GgufVocab;

use super::{ChatTemplate, ChatTemplateError};

/// The name of the template for requests that offer tools.
pub const TOOL_USE: &str = "tool_use";

/// The templates a model ships.
#[derive(Default)]
pub struct ChatTemplates {
    default: Option<ChatTemplate>,
    tool_use: Option<ChatTemplate>,
}

impl ChatTemplates {
    /// From the default and the tool-use template; a model with only the latter renders everything with it,
    /// as llama.cpp does.
    pub fn new(default: Option<ChatTemplate>, tool_use: Option<ChatTemplate>) -> Self {
        match default {
            Some(default) => ChatTemplates { default: Some(default), tool_use },
            None => ChatTemplates { default: tool_use, tool_use: None },
        }
    }

    /// One template for every request (`--chat-template`).
    pub fn only(template: ChatTemplate) -> Self {
        ChatTemplates { default: Some(template), tool_use: None }
    }

    /// The templates a vocabulary carries (tokenizer_config.json's `chat_template` or `chat_template.jinja`)
    /// with its BOS and EOS tokens.
    pub fn from_vocab(vocab: &GgufVocab) -> Result<Self, ChatTemplateError> {
        let token = |id: Option<u32>| id.and_then(|id| vocab.tokens.get(id as usize)).cloned();
        let compile = |source: Option<&String>| {
            source.map(|s| ChatTemplate::new(s, token(vocab.bos_token_id), token(vocab.eos_token_id))).transpose()
        };
        Ok(Self::new(compile(vocab.chat_template.as_ref())?, compile(vocab.named_chat_templates.get(TOOL_USE))?))
    }

    /// The template for a request: the tool-use one when the request offers tools and the model has one.
    pub fn get(&self, tools: bool) -> Option<&ChatTemplate> {
        match (tools, &self.tool_use) {
            (true, Some(t)) => Some(t),
            _ => self.default.as_ref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::chat::Message;
    use serde_json::json;

    fn vocab(default: Option<&str>, tool_use: Option<&str>) -> GgufVocab {
        GgufVocab {
            model: "gpt2".into(),
            pre: None,
            tokens: vec!["<bos>".into(), "<eos>".into()],
            scores: None,
            token_types: vec![3, 3],
            merges: None,
            bos_token_id: Some(0),
            eos_token_id: Some(1),
            unknown_token_id: None,
            padding_token_id: None,
            add_bos_token: None,
            add_eos_token: None,
            chat_template: default.map(Into::into),
            named_chat_templates: tool_use.map(|t| (TOOL_USE.to_owned(), t.to_owned())).into_iter().collect(),
        }
    }

    fn render(t: Option<&ChatTemplate>) -> Option<String> {
        t.map(|t| t.render(&[Message::new("user", "x")], false, &json!({})).unwrap())
    }

    #[test]
    fn requests_with_tools_get_the_tool_use_template() {
        let both = ChatTemplates::from_vocab(&vocab(
            Some("{{ bos_token }}{{ messages[0].content }}"),
            Some("T{{ eos_token }}"),
        ))
        .unwrap();
        assert_eq!(render(both.get(false)).as_deref(), Some("<bos>x"));
        assert_eq!(render(both.get(true)).as_deref(), Some("T<eos>"));
        let only_tools = ChatTemplates::from_vocab(&vocab(None, Some("T"))).unwrap();
        assert_eq!((render(only_tools.get(false)), render(only_tools.get(true))), (Some("T".into()), Some("T".into())));
        let only_default = ChatTemplates::from_vocab(&vocab(Some("D"), None)).unwrap();
        assert_eq!(render(only_default.get(true)).as_deref(), Some("D"));
        assert!(ChatTemplates::from_vocab(&vocab(None, None)).unwrap().get(true).is_none());
        let replaced = ChatTemplates::only(ChatTemplate::new("R", None, None).unwrap());
        assert_eq!(render(replaced.get(true)).as_deref(), Some("R"));
    }
}
