//! The two APIs a benchmark speaks: what to send for a prompt, and what each stream event means.

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
        }
    }

    /// The request path.
    pub fn path(&self) -> &'static str {
        match self {
            Api::Tgi => "/generate_stream",
            Api::OpenAi { chat: false, .. } => "/v1/completions",
            Api::OpenAi { chat: true, .. } => "/v1/chat/completions",
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

    fn prompt() -> Prompt {
        Prompt { text: "p".into(), input_tokens: None, max_tokens: 3 }
    }
}
