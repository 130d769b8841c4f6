//! Chat templates: the Jinja templates models ship (tokenizer_config.json's `chat_template`,
//! `chat_template.jinja`, a GGUF's `tokenizer.chat_template`) rendered with MiniJinja set up the
//! way transformers' `apply_chat_template` sets up Jinja2: `trim_blocks`, `lstrip_blocks`, loop
//! controls, Python string/dict/list methods, `tojson` as `json.dumps`, `raise_exception`,
//! `strftime_now`, `namespace`, and `{% generation %}` blocks rendered as their body.

mod builtin;
mod compat;
mod message;
mod pyjson;
mod templates;

use std::sync::LazyLock;

pub use builtin::{builtin, marked_by, BUILTIN_NAMES};
use chrono::{Local, NaiveDateTime};
pub use message::{Content, ContentPart, FunctionCall, Message, ToolCall};
use minijinja::syntax::SyntaxConfig;
use minijinja::{AutoEscape, Environment, Error, ErrorKind, Value};
use regex::Regex;

use crate::text::tokenizer::Tokenizer;
pub use templates::{ChatTemplates, TOOL_USE};

/// Why a chat template could not be compiled or rendered.
#[derive(Debug, thiserror::Error)]
pub enum ChatTemplateError {
    /// The template's syntax is not valid Jinja (or uses a tag MiniJinja lacks).
    #[error("chat template does not compile: {0}")]
    Compile(#[source] Error),
    /// The template rejected the conversation with `raise_exception(message)`.
    #[error("chat template rejected the conversation: {0}")]
    Raised(String),
    /// Rendering failed (an undefined value misused, a type error, ...).
    #[error("chat template failed to render: {0}")]
    Render(#[source] Error),
    /// `extra` is not a JSON object, or sets a variable `render` sets itself.
    #[error("invalid extra chat template context: {0}")]
    Extra(String),
}

/// A compiled Jinja chat template with the model's special tokens.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: Option<String>,
    eos_token: Option<String>,
    /// The template's source, as given.
    source: String,
    /// Whether the template reads the `tools` variable.
    takes_tools: bool,
    /// Whether it renders system messages.
    system_role: bool,
}

/// The name the template is stored under in its environment.
const NAME: &str = "chat_template";

/// The system message of the system-role check.
const SYSTEM_PROBE: &str = "System message";

/// The variables `render` sets from its own arguments.
const RESERVED: [&str; 2] = ["messages", "add_generation_prompt"];

impl ChatTemplate {
    /// Compiles `source`; `bos_token`/`eos_token` become the template variables of the same names.
    pub fn new(source: &str, bos_token: Option<String>, eos_token: Option<String>) -> Result<Self, ChatTemplateError> {
        let mut env = Environment::new();
        let syntax = SyntaxConfig::builder().trim_blocks(true).lstrip_blocks(true).build();
        env.set_syntax(syntax.expect("default delimiters are valid"));
        env.set_auto_escape_callback(|_| AutoEscape::None);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", pyjson::tojson);
        env.add_filter("indent", compat::indent);
        env.add_test("iterable", compat::is_iterable);
        env.add_test("sequence", compat::is_sequence);
        env.add_function("raise_exception", raise_exception);
        set_clock(&mut env, None);
        env.add_template_owned(NAME, generation_blocks_as_if(source)).map_err(ChatTemplateError::Compile)?;
        let template = env.get_template(NAME).map_err(ChatTemplateError::Compile)?;
        let takes_tools = template.undeclared_variables(false).contains("tools");
        let mut chat =
            ChatTemplate { env, bos_token, eos_token, source: source.to_string(), takes_tools, system_role: true };
        // llama.cpp's capability check: a template that fails on a system message, or leaves it out, has no
        // system role.
        let probe = [Message::new("system", SYSTEM_PROBE), Message::new("user", "User message")];
        chat.system_role = chat.render(&probe, false, &serde_json::Value::Null).is_ok_and(|t| t.contains(SYSTEM_PROBE));
        Ok(chat)
    }

    /// The conversation as llama.cpp hands it to the template: for a template without a system role, a
    /// leading system message goes before the next message's text (with a newline), or away when it is alone.
    pub fn with_roles_it_knows(&self, messages: Vec<Message>) -> Vec<Message> {
        let mut messages = messages;
        if self.system_role || messages.first().is_none_or(|m| m.role != "system") {
            return messages;
        }
        let system = messages.remove(0);
        if let Some(next) = messages.first_mut() {
            next.content = Some(Content::Text(format!("{}\n{}", system.text(), next.text())));
        }
        messages
    }

    /// As [`ChatTemplate::new`], with `tokenizer`'s BOS and (first) EOS tokens.
    pub fn with_tokens_of(source: &str, tokenizer: &Tokenizer) -> Result<Self, ChatTemplateError> {
        let text = |id: Option<u32>| id.map(|id| String::from_utf8_lossy(&tokenizer.token_to_piece(id)).into_owned());
        Self::new(source, text(tokenizer.bos_id()), text(tokenizer.eos_ids().first().copied()))
    }

    /// The template's source, e.g. to tell its model family.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Whether the template reads the `tools` variable (renders the tools it is given itself).
    pub fn takes_tools(&self) -> bool {
        self.takes_tools
    }

    /// Fixes the time `strftime_now` formats (local time now by default), for reproducible prompts.
    pub fn with_time(mut self, now: NaiveDateTime) -> Self {
        set_clock(&mut self.env, Some(now));
        self
    }

    /// Renders the conversation; `add_generation_prompt` as transformers' apply_chat_template; extra
    /// context (tools, documents, date_string, enable_thinking, ...) as a JSON object merged into the
    /// context. As in transformers, `tools` and `documents` are `none` unless `extra` sets them, and
    /// extra values override `bos_token`/`eos_token`.
    pub fn render(
        &self,
        messages: &[Message],
        add_generation_prompt: bool,
        extra: &serde_json::Value,
    ) -> Result<String, ChatTemplateError> {
        let extra = match extra {
            serde_json::Value::Null => &serde_json::Map::new(),
            serde_json::Value::Object(map) => map,
            other => return Err(ChatTemplateError::Extra(format!("expected a JSON object, got {other}"))),
        };
        if let Some(key) = RESERVED.iter().find(|k| extra.contains_key(**k)) {
            return Err(ChatTemplateError::Extra(format!("`{key}` is set by render's own arguments")));
        }
        let mut context: Vec<(String, Value)> = Vec::new();
        for (name, token) in [("bos_token", &self.bos_token), ("eos_token", &self.eos_token)] {
            if let Some(token) = token {
                context.push((name.into(), Value::from(token.as_str())));
            }
        }
        context.push(("tools".into(), Value::from(())));
        context.push(("documents".into(), Value::from(())));
        context.extend(extra.iter().map(|(k, v)| (k.clone(), json_value(v))));
        context.push(("messages".into(), messages.iter().map(message_value).collect()));
        context.push(("add_generation_prompt".into(), Value::from(add_generation_prompt)));

        let template = self.env.get_template(NAME).map_err(ChatTemplateError::Compile)?;
        template.render(Value::from_pairs(context)).map_err(|err| match raised_message(&err) {
            Some(message) => ChatTemplateError::Raised(message),
            None => ChatTemplateError::Render(err),
        })
    }
}

/// The message `raise_exception` put in an error, carried as its source.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Raised(String);

/// `raise_exception(message)`: fails the render with the template's message.
fn raise_exception(message: Value) -> Result<Value, Error> {
    let message = message.as_str().map_or_else(|| message.to_string(), str::to_string);
    Err(Error::new(ErrorKind::InvalidOperation, message.clone()).with_source(Raised(message)))
}

/// The message of a `raise_exception` anywhere in the error's chain.
fn raised_message(err: &Error) -> Option<String> {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        if let Some(raised) = e.downcast_ref::<Raised>() {
            return Some(raised.0.clone());
        }
        source = e.source();
    }
    None
}

/// Registers `strftime_now(format)`, formatting `fixed` or else the local time at the call.
fn set_clock(env: &mut Environment<'static>, fixed: Option<NaiveDateTime>) {
    env.add_function("strftime_now", move |format: &str| -> Result<String, Error> {
        let now = fixed.unwrap_or_else(|| Local::now().naive_local());
        let mut out = String::new();
        std::fmt::Write::write_fmt(&mut out, format_args!("{}", now.format(format))).map_err(|_| {
            Error::new(ErrorKind::InvalidOperation, format!("strftime_now: unsupported format {format:?}"))
        })?;
        Ok(out)
    });
}

/// Rewrites transformers' `{% generation %}...{% endgeneration %}` (which marks assistant text for
/// training masks and renders its body) as `{% if true %}...{% endif %}`, keeping the tags'
/// whitespace control so trimming stays the same.
fn generation_blocks_as_if(source: &str) -> String {
    static TAG: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"\{%([-+]?)\s*(end)?generation\s*([-+]?)%\}").expect("valid regex"));
    TAG.replace_all(source, |c: &regex::Captures| {
        let tag = if c.get(2).is_some() { "endif" } else { "if true" };
        format!("{{%{} {tag} {}%}}", &c[1], &c[3])
    })
    .into_owned()
}

/// A message as the template sees it: its JSON with None fields dropped and the reasoning also
/// under `thinking` (first, as transformers places it).
fn message_value(message: &Message) -> Value {
    let json = serde_json::to_value(message).expect("messages serialize to JSON");
    let reasoning = message.reasoning_content.as_deref().map(Value::from);
    let fields = json.as_object().into_iter().flatten().map(|(k, v)| (Value::from(k.as_str()), json_value(v)));
    Value::from_pairs(reasoning.map(|r| (Value::from("thinking"), r)).into_iter().chain(fields))
}

/// A JSON value as a template value, keeping object key order.
fn json_value(json: &serde_json::Value) -> Value {
    use serde_json::Value as J;
    match json {
        J::Null => Value::from(()),
        J::Bool(b) => Value::from(*b),
        J::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::from(i),
            (None, Some(u)) => Value::from(u),
            _ => Value::from(n.as_f64().unwrap_or(f64::NAN)),
        },
        J::String(s) => Value::from(s.as_str()),
        J::Array(items) => items.iter().map(json_value).collect(),
        J::Object(map) => Value::from_pairs(map.iter().map(|(k, v)| (k.as_str(), json_value(v)))),
    }
}

#[cfg(test)]
mod tests;
