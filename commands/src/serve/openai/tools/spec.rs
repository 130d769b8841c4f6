//! OpenAI's `tools`, `tool_choice` and `parallel_tool_calls` and TGI's `tool_prompt` as sent, validated
//! once into [`Tools`]: functions with a name and a parameters schema, and what the model must do with them.

use serde::Deserialize;
use serde_json::{json, Value};

/// Why `tools` or `tool_choice` was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ToolError {
    /// `tools` is not a list, or an entry is not a tool object.
    #[error("`{at}` is not a tool (`{{\"type\": \"function\", \"function\": {{\"name\": ...}}}}`): {message}")]
    Shape {
        /// Where: `tools` or `tools[i]`.
        at: String,
        /// What serde said.
        message: String,
    },
    /// A tool of another type than `function`.
    #[error("`tools[{index}].type` must be \"function\". Given: {kind:?}")]
    Kind {
        /// The tool's position.
        index: usize,
        /// Its type.
        kind: String,
    },
    /// A function name that is empty, too long or not of `a-z A-Z 0-9 _ -`.
    #[error("`tools[{index}].function.name` must be 1 to 64 characters of a-z, A-Z, 0-9, _ and -. Given: {name:?}")]
    Name {
        /// The tool's position.
        index: usize,
        /// The name.
        name: String,
    },
    /// Two tools with one name.
    #[error("`tools` names the function {0:?} twice")]
    Duplicate(String),
    /// `parameters` that is not a JSON schema object.
    #[error("`tools[{index}].function.parameters` must be a JSON schema object")]
    Parameters {
        /// The tool's position.
        index: usize,
    },
    /// `tool_choice` of an unknown shape.
    #[error(
        "`tool_choice` must be \"none\", \"auto\", \"required\" or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}. Given: {0}"
    )]
    Choice(String),
    /// `tool_choice` names a function that `tools` lacks.
    #[error("`tool_choice` names the function {0:?}, which is not in `tools`")]
    UnknownFunction(String),
    /// `tool_choice` asks for a call without `tools`.
    #[error("`tool_choice` {0:?} needs `tools`")]
    NoTools(String),
    /// A forced call (`required`, a named function) and a `response_format` grammar: one answer cannot follow both.
    #[error("`tool_choice` \"required\" or a named function cannot be combined with a `response_format` grammar")]
    WithGrammar,
}

impl ToolError {
    /// The request field the error is about, for OpenAI's `param`.
    pub fn param(&self) -> &'static str {
        match self {
            Self::Shape { .. }
            | Self::Kind { .. }
            | Self::Name { .. }
            | Self::Duplicate(_)
            | Self::Parameters { .. } => "tools",
            Self::Choice(_) | Self::UnknownFunction(_) | Self::NoTools(_) | Self::WithGrammar => "tool_choice",
        }
    }
}

/// A function the model may call.
#[derive(Clone, Debug, PartialEq)]
pub struct Function {
    /// Its name.
    pub name: String,
    /// What it does, for the model.
    pub description: Option<String>,
    /// The JSON schema of its arguments (an object schema; `{"type": "object", "properties": {}}` when not given).
    pub parameters: Value,
}

impl Function {
    /// The tool as chat templates and the default prompt show it: `{"type": "function", "function": {...}}`.
    pub fn as_tool(&self) -> Value {
        let mut function = json!({"name": self.name});
        if let Some(d) = &self.description {
            function["description"] = Value::from(d.as_str());
        }
        function["parameters"] = self.parameters.clone();
        json!({"type": "function", "function": function})
    }
}

/// What the model must do with the tools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Answer with text or calls, as it chooses (`auto`, the default).
    Auto,
    /// Call one or more of the tools (`required`).
    Required,
    /// Call this function (its index in [`Tools::functions`]).
    Named(usize),
}

/// The tools of a chat request that offers them (`tool_choice` not `none`).
#[derive(Clone, Debug, PartialEq)]
pub struct Tools {
    /// The functions, in the request's order.
    pub functions: Vec<Function>,
    /// What the model must do.
    pub choice: Choice,
    /// Whether several calls may be made in one answer (`parallel_tool_calls`, default true).
    pub parallel: bool,
    /// TGI's `tool_prompt`: the text before the tools in the default prompt.
    pub prompt: Option<String>,
}

impl Tools {
    /// Whether the answer must be calls (`required`, a named function), not text or calls (`auto`).
    pub fn forced(&self) -> bool {
        self.choice != Choice::Auto
    }
}

/// The request fields about tools, as sent.
#[derive(Debug, Default, Deserialize)]
pub struct ToolFields {
    /// OpenAI `tools`: a list of `{"type": "function", "function": {...}}`.
    #[serde(default)]
    pub tools: Option<Value>,
    /// OpenAI `tool_choice`.
    #[serde(default)]
    pub tool_choice: Option<Value>,
    /// OpenAI `parallel_tool_calls`.
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// TGI `tool_prompt`.
    #[serde(default)]
    pub tool_prompt: Option<String>,
}

/// A tool as sent.
#[derive(Deserialize)]
struct ToolWire {
    #[serde(rename = "type")]
    kind: String,
    function: FunctionWire,
}

/// A function as sent (`strict` and other fields are ignored: forced calls always follow the schema).
#[derive(Deserialize)]
struct FunctionWire {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<Value>,
}

impl ToolFields {
    /// The tools the model is offered; `None` without tools or with `tool_choice: "none"`.
    pub fn check(&self) -> Result<Option<Tools>, ToolError> {
        let functions = match &self.tools {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(list)) => {
                list.iter().enumerate().map(|(i, t)| function(i, t)).collect::<Result<_, _>>()?
            }
            Some(other) => {
                return Err(ToolError::Shape { at: "tools".into(), message: format!("not a list: {other}") })
            }
        };
        for (i, f) in functions.iter().enumerate() {
            if functions[..i].iter().any(|g| g.name == f.name) {
                return Err(ToolError::Duplicate(f.name.clone()));
            }
        }
        let choice = match self.tool_choice.as_ref().filter(|c| !c.is_null()) {
            None => Choice::Auto,
            Some(Value::String(s)) if s == "none" => return Ok(None),
            Some(Value::String(s)) if s == "auto" => Choice::Auto,
            Some(Value::String(s)) if s == "required" => Choice::Required,
            Some(Value::String(s)) => return Err(ToolError::Choice(format!("{s:?}"))),
            Some(named) => Choice::Named(named_choice(named, &functions)?),
        };
        if functions.is_empty() {
            return match choice {
                Choice::Required => Err(ToolError::NoTools("required".into())),
                _ => Ok(None),
            };
        }
        Ok(Some(Tools {
            functions,
            choice,
            parallel: self.parallel_tool_calls.unwrap_or(true),
            prompt: self.tool_prompt.clone(),
        }))
    }
}

/// Tool `index` of the list, checked.
fn function(index: usize, raw: &Value) -> Result<Function, ToolError> {
    let wire = ToolWire::deserialize(raw)
        .map_err(|e| ToolError::Shape { at: format!("tools[{index}]"), message: e.to_string() })?;
    if wire.kind != "function" {
        return Err(ToolError::Kind { index, kind: wire.kind });
    }
    let name = wire.function.name;
    let valid = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    if name.is_empty() || name.len() > 64 || !name.chars().all(valid) {
        return Err(ToolError::Name { index, name });
    }
    let parameters = match wire.function.parameters {
        None | Some(Value::Null) => json!({"type": "object", "properties": {}}),
        Some(p @ Value::Object(_)) => p,
        Some(_) => return Err(ToolError::Parameters { index }),
    };
    Ok(Function { name, description: wire.function.description, parameters })
}

/// The index of the function a named `tool_choice` picks.
fn named_choice(raw: &Value, functions: &[Function]) -> Result<usize, ToolError> {
    #[derive(Deserialize)]
    struct Named {
        #[serde(rename = "type", default)]
        kind: Option<String>,
        function: NamedFunction,
    }
    #[derive(Deserialize)]
    struct NamedFunction {
        name: String,
    }
    let named = Named::deserialize(raw).map_err(|_| ToolError::Choice(raw.to_string()))?;
    if named.kind.as_deref().is_some_and(|k| k != "function") {
        return Err(ToolError::Choice(raw.to_string()));
    }
    if functions.is_empty() {
        return Err(ToolError::NoTools(named.function.name));
    }
    functions.iter().position(|f| f.name == named.function.name).ok_or(ToolError::UnknownFunction(named.function.name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(tools: Value, choice: Value) -> Result<Option<Tools>, ToolError> {
        ToolFields { tools: Some(tools), tool_choice: Some(choice), ..ToolFields::default() }.check()
    }

    fn f(name: &str) -> Value {
        json!({"type": "function", "function": {"name": name}})
    }

    #[test]
    fn validates_once_into_functions_and_a_choice() {
        let t = check(json!([f("a"), f("b-2")]), Value::Null).unwrap().unwrap();
        assert_eq!((t.choice, t.parallel, t.prompt), (Choice::Auto, true, None));
        assert_eq!(t.functions[0].parameters, json!({"type": "object", "properties": {}}));
        assert_eq!(
            t.functions[1].as_tool(),
            json!({"type": "function", "function": {"name": "b-2",
            "parameters": {"type": "object", "properties": {}}}})
        );
        assert_eq!(check(json!([f("a")]), json!("required")).unwrap().unwrap().choice, Choice::Required);
        let named = check(json!([f("a"), f("b")]), json!({"function": {"name": "b"}})).unwrap().unwrap();
        assert_eq!(named.choice, Choice::Named(1));
        // `none`, and no tools with `auto`, offer nothing.
        assert_eq!(check(json!([f("a")]), json!("none")), Ok(None));
        assert_eq!(check(json!([]), json!("auto")), Ok(None));
        assert_eq!(check(Value::Null, Value::Null), Ok(None));
    }

    #[test]
    fn refusals_name_the_param() {
        let err = |tools: Value, choice: Value| check(tools, choice).unwrap_err();
        let e = err(json!([f("a"), f("a")]), Value::Null);
        assert_eq!((e.param(), e.to_string()), ("tools", "`tools` names the function \"a\" twice".into()));
        assert_eq!(err(json!([f("")]), Value::Null), ToolError::Name { index: 0, name: String::new() });
        assert_eq!(err(json!([f(&"x".repeat(65))]), Value::Null).param(), "tools");
        assert!(matches!(err(json!([{"function": {"name": "a"}}]), Value::Null), ToolError::Shape { .. }));
        assert_eq!(err(json!("a"), Value::Null).param(), "tools");
        let e = err(json!([f("a")]), json!({"type": "function", "function": {"name": "b"}}));
        assert_eq!((e.param(), e), ("tool_choice", ToolError::UnknownFunction("b".into())));
        assert_eq!(err(json!([]), json!("required")), ToolError::NoTools("required".into()));
        assert_eq!(err(json!([f("a")]), json!("any")), ToolError::Choice("\"any\"".into()));
        assert_eq!(err(json!([f("a")]), json!({"type": "x", "function": {"name": "a"}})).param(), "tool_choice");
    }
}
