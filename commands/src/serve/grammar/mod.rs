//! The grammar a request asks its output to match, read once from TGI's `parameters.grammar` or OpenAI's
//! `response_format` (which also takes TGI's shapes), and compiled against the served model into the
//! constraint its engine requests carry ([`compile`], off the HTTP threads). A grammar that does not
//! compile, uses what the engine cannot enforce or exceeds a bound is a 422: never a silently unconstrained
//! answer.

mod compile;
mod pool;

use serde_json::Value;
use tgi_engines::constraint::{Constraint, Grammar};

pub use compile::{GrammarSettings, Grammars, DEFAULT_QUEUE, DEFAULT_THREADS, DEFAULT_TIMEOUT_SECS};

use super::error::{ApiError, ValidationError};
use super::state::AppState;

/// Reads a grammar field: `param` names it in errors (`grammar` or `response_format`). Accepted shapes:
///
/// - `{"type": "text"}` (OpenAI): no grammar;
/// - `{"type": "json_object"}` (OpenAI): any JSON object; with a `value`, TGI's alias of `json`;
/// - `{"type": "json", "value": SCHEMA}` (TGI);
/// - `{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}` (OpenAI: `name` a string), or
///   with the same object under `value` (TGI: `name` optional); a missing `schema` is any JSON value;
/// - `{"type": "regex", "value": RE}` (TGI): the whole output matches the regular expression;
/// - `{"type": "lark", "value": GRAMMAR}`: a context-free grammar in llguidance's Lark dialect.
pub fn parse(param: &'static str, v: &Value) -> Result<Option<Grammar>, ValidationError> {
    let bad = |message: String| ValidationError::Grammar { param, message };
    if v.is_null() {
        return Ok(None);
    }
    let kind = v.get("type").and_then(Value::as_str).ok_or_else(|| bad("`type` must be a string".into()))?;
    // OpenAI's `json_schema` object is checked wherever it stands, as the description types it.
    let openai =
        v.get("json_schema").filter(|c| !c.is_null()).map(|c| json_schema(c, true)).transpose().map_err(bad)?;
    let value = v.get("value").filter(|x| !x.is_null());
    let text = |what: &str| match value {
        Some(Value::String(s)) => Ok(s.clone()),
        _ => Err(bad(format!("a `{kind}` grammar needs `value`: the {what} as a string"))),
    };
    let schema = |s: &Value| match s {
        Value::Object(_) => Ok(s.clone()),
        _ => Err(bad("a JSON schema must be an object".into())),
    };
    Ok(Some(match kind {
        "text" => return Ok(None),
        "json_object" => match value {
            None => Grammar::JsonObject,
            Some(s) => Grammar::JsonSchema(schema(s)?),
        },
        "json" => Grammar::JsonSchema(schema(value.ok_or_else(|| bad("a `json` grammar needs `value`".into()))?)?),
        "json_schema" => match openai {
            Some(config) => config,
            None => json_schema(value.ok_or_else(|| bad("a `json_schema` format needs `json_schema`".into()))?, false)
                .map_err(bad)?,
        },
        "regex" => Grammar::Regex(text("regular expression")?),
        "lark" => Grammar::Lark(text("grammar")?),
        other => {
            return Err(bad(format!(
                "unknown type `{other}` (expected text, json_object, json, json_schema, regex or lark)"
            )))
        }
    }))
}

/// The grammar of a `json_schema` object: OpenAI's (`openai`: `name` required) or TGI's `value`; `schema`
/// absent or null is any JSON value.
fn json_schema(config: &Value, openai: bool) -> Result<Grammar, String> {
    if !config.is_object() {
        return Err("`json_schema` must be an object".into());
    }
    match config.get("name") {
        Some(Value::String(_)) => {}
        None | Some(Value::Null) if !openai => {}
        _ => return Err("`json_schema.name` must be a string".into()),
    }
    if config.get("strict").is_some_and(|x| !x.is_boolean() && !x.is_null()) {
        return Err("`json_schema.strict` must be a boolean".into());
    }
    if config.get("description").is_some_and(|x| !x.is_string()) {
        return Err("`json_schema.description` must be a string".into());
    }
    match config.get("schema").filter(|s| !s.is_null()) {
        Some(s @ Value::Object(_)) => Ok(Grammar::JsonSchema(s.clone())),
        Some(_) => Err("a JSON schema must be an object".into()),
        None => Ok(Grammar::JsonSchema(Value::Object(Default::default()))),
    }
}

/// Compiles `grammar` for the served model (or finds it compiled), counting the time in `/metrics`.
pub async fn compile(state: &AppState, param: &'static str, grammar: Grammar) -> Result<Constraint, ApiError> {
    let (constraint, compiled) = state.grammars.compile(state.lexicon.clone(), param, grammar).await?;
    state.metrics.grammar_compiled(compiled);
    Ok(constraint)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn read(v: Value) -> Result<Option<Grammar>, String> {
        parse("response_format", &v).map_err(|e| e.to_string())
    }

    #[test]
    fn reads_openai_and_tgi_shapes() {
        let s = json!({"type": "object"});
        assert_eq!(read(json!({"type": "text"})), Ok(None));
        assert_eq!(read(Value::Null), Ok(None));
        assert_eq!(read(json!({"type": "json_object"})), Ok(Some(Grammar::JsonObject)));
        assert_eq!(read(json!({"type": "json_object", "value": s})), Ok(Some(Grammar::JsonSchema(s.clone()))));
        assert_eq!(read(json!({"type": "json", "value": s})), Ok(Some(Grammar::JsonSchema(s.clone()))));
        let openai = json!({"type": "json_schema", "json_schema": {"name": "x", "schema": s, "strict": true}});
        assert_eq!(read(openai), Ok(Some(Grammar::JsonSchema(s.clone()))));
        let tgi = json!({"type": "json_schema", "value": {"name": "x", "schema": s}});
        assert_eq!(read(tgi), Ok(Some(Grammar::JsonSchema(s.clone()))));
        let any = json!({"type": "json_schema", "json_schema": {"name": "x"}});
        assert!(read(json!({"type": "json_schema", "json_schema": {"schema": s}})).unwrap_err().contains("name"));
        assert!(read(json!({"type": "json_schema", "value": {"name": 3}})).unwrap_err().contains("name"));
        assert_eq!(read(json!({"type": "json_object", "value": null})), Ok(Some(Grammar::JsonObject)));
        assert_eq!(read(any), Ok(Some(Grammar::JsonSchema(json!({})))));
        assert_eq!(read(json!({"type": "regex", "value": "a+"})), Ok(Some(Grammar::Regex("a+".into()))));
        assert_eq!(
            read(json!({"type": "lark", "value": "start: \"a\""})),
            Ok(Some(Grammar::Lark("start: \"a\"".into())))
        );
    }

    #[test]
    fn malformed_grammars_name_the_problem() {
        let err = |v: Value| read(v).unwrap_err();
        assert!(err(json!({"type": "yaml"})).contains("unknown type `yaml`"));
        assert!(err(json!({"value": "a"})).contains("`type` must be a string"));
        assert!(err(json!({"type": "regex"})).contains("needs `value`"));
        assert!(err(json!({"type": "regex", "value": 3})).contains("needs `value`"));
        assert!(err(json!({"type": "json", "value": "x"})).contains("must be an object"));
        assert!(err(json!({"type": "json", "value": true})).contains("must be an object"));
        assert!(err(json!({"type": "json_schema"})).contains("needs `json_schema`"));
        assert!(err(json!({"type": "text", "json_schema": {"schema": {}}})).contains("name"), "checked wherever it is");
        assert!(err(json!({"type": "json"})).starts_with("`response_format`: "));
    }
}
