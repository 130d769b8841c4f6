//! The APIs a benchmark speaks (TGI's, OpenAI's completions and chat, Anthropic's Messages, OpenAI's Responses):
//! what to send for a prompt, and what each stream event means.

use serde_json::{json, Value};

/// The API and endpoint in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Api {
    /// TGI's `POST /generate_stream`.
    Tgi,
    /// OpenAI's `POST /v1/completions` (or `/v1/chat/completions` when `chat`), for `model`.
    OpenAi {
        /// The `model` field.
        model: String,
        /// Chat endpoint instead of completions.
        chat: bool,
    },
    /// Anthropic's `POST /v1/messages`, the prompt as one user message, for `model`.
    Anthropic {
        /// The `model` field.
        model: String,
    },
    /// OpenAI's `POST /v1/responses`, the prompt as the input text, for `model`.
    Responses {
        /// The `model` field.
        model: String,
    },
}

/// One request's parameters.
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    /// The prompt text.
    pub text: String,
    /// Its length in tokens, when known.
    pub input_tokens: Option<u64>,
    /// Tokens to generate.
    pub max_tokens: u64,
}

/// What one stream event told.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Event {
    /// Whether the event carries generated text or a token (a token arrival).
    pub token: bool,
    /// The stream is complete (final event, finish reason, or `[DONE]`).
    pub done: bool,
    /// Generated tokens as the server counts them (usage, details).
    pub output_tokens: Option<u64>,
    /// Prompt tokens as the server counts them.
    pub input_tokens: Option<u64>,
    /// An error reported inside the stream.
    pub error: Option<String>,
}

impl Api {
    /// The API's name in reports.
    pub fn name(&self) -> &'static str {
        match self {
            Api::Tgi => "tgi",
            Api::OpenAi { .. } => "openai",
            Api::Anthropic { .. } => "anthropic",
            Api::Responses { .. } => "responses",
        }
    }

    /// The request path.
    pub fn path(&self) -> &'static str {
        match self {
            Api::Tgi => "/generate_stream",
            Api::OpenAi { chat: false, .. } => "/v1/completions",
            Api::OpenAi { chat: true, .. } => "/v1/chat/completions",
            Api::Anthropic { .. } => "/v1/messages",
            Api::Responses { .. } => "/v1/responses",
        }
    }

    /// The JSON body for `p` (greedy decoding, streaming, token counts asked for).
    pub fn body(&self, p: &Prompt, ignore_eos: bool) -> Vec<u8> {
        let mut v = match self {
            Api::Tgi => json!({
                "inputs": p.text,
                "parameters": {"max_new_tokens": p.max_tokens, "details": true, "do_sample": false},
            }),
            Api::OpenAi { model, chat } => {
                let mut v = json!({
                    "model": model,
                    "max_tokens": p.max_tokens,
                    "temperature": 0.0,
                    "stream": true,
                    "stream_options": {"include_usage": true},
                });
                if *chat {
                    v["messages"] = json!([{"role": "user", "content": p.text}]);
                } else {
                    v["prompt"] = json!(p.text);
                }
                v
            }
            Api::Anthropic { model } => json!({
                "model": model,
                "max_tokens": p.max_tokens,
                "temperature": 0.0,
                "stream": true,
                "messages": [{"role": "user", "content": p.text}],
            }),
            Api::Responses { model } => json!({
                "model": model,
                "input": p.text,
                "max_output_tokens": p.max_tokens,
                "temperature": 0.0,
                "stream": true,
                "store": false,
            }),
        };
        if ignore_eos {
            v["ignore_eos"] = json!(true);
        }
        serde_json::to_vec(&v).expect("JSON of plain values")
    }

    /// Interprets one `data:` payload; `Err` when it is not what this API sends.
    pub fn event(&self, data: &str) -> Result<Event, String> {
        if data.trim() == "[DONE]" {
            return Ok(Event { done: true, ..Event::default() });
        }
        let v: Value = serde_json::from_str(data).map_err(|e| format!("an event is not JSON ({e}): {}", clip(data)))?;
        if let Some(err) = error_of(&v) {
            return Ok(Event { error: Some(err), done: true, ..Event::default() });
        }
        match self {
            Api::Tgi => tgi_event(&v),
            Api::OpenAi { .. } => openai_event(&v),
            Api::Anthropic { .. } => anthropic_event(&v),
            Api::Responses { .. } => responses_event(&v),
        }
        .ok_or_else(|| format!("unexpected event for the {} API: {}", self.name(), clip(data)))
    }
}

/// The message of an error event: TGI's `{"error": "..."}`, OpenAI's `{"error": {"message": ...}}`, vLLM's
/// `{"object": "error", "message": ...}`.
fn error_of(v: &Value) -> Option<String> {
    match v.get("error") {
        Some(Value::String(s)) => return Some(s.clone()),
        Some(e @ Value::Object(_)) => {
            return Some(e.get("message").and_then(Value::as_str).map_or_else(|| e.to_string(), str::to_string))
        }
        _ => {}
    }
    (v.get("object").and_then(Value::as_str) == Some("error"))
        .then(|| v.get("message").and_then(Value::as_str).unwrap_or("error").to_string())
}

fn tgi_event(v: &Value) -> Option<Event> {
    let token = v.get("token")?;
    let has_token = token.get("id").is_some() || token.get("text").is_some();
    let done = v.get("generated_text").is_some_and(|g| !g.is_null());
    let details = v.get("details").filter(|d| !d.is_null());
    Some(Event {
        token: has_token,
        done,
        output_tokens: details.and_then(|d| d.get("generated_tokens")).and_then(Value::as_u64),
        input_tokens: None,
        error: None,
    })
}

fn openai_event(v: &Value) -> Option<Event> {
    let choices = v.get("choices")?.as_array()?;
    let mut ev = Event::default();
    for c in choices {
        let text = c.get("text").or_else(|| c.get("delta").and_then(|d| d.get("content")));
        ev.token |= text.and_then(Value::as_str).is_some_and(|t| !t.is_empty());
        ev.done |= c.get("finish_reason").is_some_and(|f| !f.is_null());
    }
    if let Some(u) = v.get("usage").filter(|u| !u.is_null()) {
        ev.output_tokens = u.get("completion_tokens").and_then(Value::as_u64);
        ev.input_tokens = u.get("prompt_tokens").and_then(Value::as_u64);
    }
    Some(ev)
}

/// An event of Anthropic's stream: text and tool input deltas are tokens, `message_start` has the prompt's tokens,
/// `message_delta` the generated ones, `message_stop` ends the stream (`ping` and the others tell nothing).
fn anthropic_event(v: &Value) -> Option<Event> {
    let mut ev = Event::default();
    match v.get("type")?.as_str()? {
        "content_block_delta" => {
            let d = v.get("delta")?;
            ev.token =
                d.get("text").or_else(|| d.get("partial_json")).and_then(Value::as_str).is_some_and(|t| !t.is_empty());
        }
        "message_start" => ev.input_tokens = v.pointer("/message/usage/input_tokens").and_then(Value::as_u64),
        "message_delta" => ev.output_tokens = v.pointer("/usage/output_tokens").and_then(Value::as_u64),
        "message_stop" => ev.done = true,
        _ => {}
    }
    Some(ev)
}

/// An event of a Responses stream: text and argument deltas are tokens; `response.completed`,
/// `response.incomplete` and `response.failed` end the stream (with the usage), `error` is an error.
fn responses_event(v: &Value) -> Option<Event> {
    let mut ev = Event::default();
    match v.get("type")?.as_str()? {
        "response.output_text.delta" | "response.function_call_arguments.delta" => {
            ev.token = v.get("delta").and_then(Value::as_str).is_some_and(|t| !t.is_empty());
        }
        "response.completed" | "response.incomplete" | "response.failed" => {
            ev.done = true;
            let usage = v.pointer("/response/usage").filter(|u| !u.is_null());
            ev.output_tokens = usage.and_then(|u| u.get("output_tokens")).and_then(Value::as_u64);
            ev.input_tokens = usage.and_then(|u| u.get("input_tokens")).and_then(Value::as_u64);
            if let Some(e) = v.pointer("/response/error").filter(|e| !e.is_null()) {
                ev.error = Some(e.get("message").and_then(Value::as_str).map_or_else(|| e.to_string(), str::to_string));
            }
        }
        "error" => ev.error = Some(v.get("message").and_then(Value::as_str).unwrap_or("error").to_string()),
        _ => {}
    }
    Some(ev)
}

/// The first 200 characters of `s`.
pub fn clip(s: &str) -> String {
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tgi_events() {
        let api = Api::Tgi;
        let e = api
            .event(r#"{"index":1,"token":{"id":5,"text":"a","special":false},"generated_text":null,"details":null}"#);
        assert_eq!(e.unwrap(), Event { token: true, ..Event::default() });
        let last = r#"{"index":2,"token":{"id":2,"text":"","special":true},"generated_text":"a","details":{"generated_tokens":2}}"#;
        let e = api.event(last).unwrap();
        assert!(e.token && e.done && e.output_tokens == Some(2));
        let e = api.event(r#"{"error":"overloaded","error_type":"generation"}"#).unwrap();
        assert_eq!(e.error.as_deref(), Some("overloaded"));
        assert!(api.event(r#"{"choices":[]}"#).is_err() && api.event("nonsense").is_err());
        let body: Value = serde_json::from_slice(&api.body(&prompt(), false)).unwrap();
        assert_eq!(body["parameters"]["max_new_tokens"], 3);
    }

    #[test]
    fn openai_events() {
        let api = Api::OpenAi { model: "m".into(), chat: true };
        // llama.cpp and vLLM send a role-only first chunk and a usage-only last chunk: not tokens.
        let role = api.event(r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#).unwrap();
        assert!(!role.token && !role.done);
        let tok = api.event(r#"{"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}"#).unwrap();
        assert!(tok.token && !tok.done);
        let usage = api.event(r#"{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":9}}"#).unwrap();
        assert_eq!((usage.token, usage.output_tokens, usage.input_tokens), (false, Some(9), Some(4)));
        assert!(api.event("[DONE]").unwrap().done);
        let vllm = api.event(r#"{"object":"error","message":"too long","code":400}"#).unwrap();
        assert_eq!(vllm.error.as_deref(), Some("too long"));
        let body: Value = serde_json::from_slice(&api.body(&prompt(), true)).unwrap();
        assert_eq!((body["messages"][0]["content"].as_str(), body["ignore_eos"].as_bool()), (Some("p"), Some(true)));
        let c = Api::OpenAi { model: "m".into(), chat: false };
        assert!(c.event(r#"{"choices":[{"text":"x","finish_reason":"length"}]}"#).unwrap().done);
    }

    #[test]
    fn anthropic_events() {
        let api = Api::Anthropic { model: "m".into() };
        let start = api.event(r#"{"type":"message_start","message":{"usage":{"input_tokens":7,"output_tokens":0}}}"#);
        assert_eq!(start.unwrap(), Event { input_tokens: Some(7), ..Event::default() });
        assert_eq!(api.event(r#"{"type":"ping"}"#).unwrap(), Event::default());
        let text = r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}"#;
        assert!(api.event(text).unwrap().token);
        let args = r#"{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{"}}"#;
        assert!(api.event(args).unwrap().token);
        let delta =
            api.event(r#"{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":9}}"#);
        assert_eq!(delta.unwrap().output_tokens, Some(9));
        assert!(api.event(r#"{"type":"message_stop"}"#).unwrap().done);
        let e = api.event(r#"{"type":"error","error":{"type":"overloaded_error","message":"busy"}}"#).unwrap();
        assert_eq!(e.error.as_deref(), Some("busy"));
        assert!(api.event(r#"{"choices":[]}"#).is_err());
        let body: Value = serde_json::from_slice(&api.body(&prompt(), true)).unwrap();
        assert_eq!((body["messages"][0]["content"].as_str(), body["max_tokens"].as_u64()), (Some("p"), Some(3)));
        assert_eq!((body["stream"].as_bool(), body["ignore_eos"].as_bool()), (Some(true), Some(true)));
    }

    #[test]
    fn responses_events() {
        let api = Api::Responses { model: "m".into() };
        assert_eq!(api.event(r#"{"type":"response.created","sequence_number":0}"#).unwrap(), Event::default());
        let text = r#"{"type":"response.output_text.delta","delta":"hi","sequence_number":3}"#;
        assert!(api.event(text).unwrap().token);
        let done =
            r#"{"type":"response.completed","response":{"usage":{"input_tokens":4,"output_tokens":9},"error":null}}"#;
        let done = api.event(done).unwrap();
        assert!(done.done && done.output_tokens == Some(9) && done.input_tokens == Some(4));
        let e = api.event(r#"{"type":"error","message":"boom","code":null,"sequence_number":5}"#).unwrap();
        assert_eq!(e.error.as_deref(), Some("boom"));
        assert!(api.event(r#"{"delta":"x"}"#).is_err());
        let body: Value = serde_json::from_slice(&api.body(&prompt(), false)).unwrap();
        assert_eq!((body["input"].as_str(), body["max_output_tokens"].as_u64()), (Some("p"), Some(3)));
        assert_eq!(body["store"], false, "a benchmark keeps nothing");
    }

    fn prompt() -> Prompt {
        Prompt { text: "p".into(), input_tokens: None, max_tokens: 3 }
    }
}
