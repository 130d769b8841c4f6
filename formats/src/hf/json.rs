//! Typed access to the fields of a JSON object, with errors that name the file and the field.

use std::path::Path;

use serde_json::{Map, Value};

use super::HfError;

/// Reads and parses a JSON file.
pub(crate) fn read_json(path: &Path) -> Result<Value, HfError> {
    let text = std::fs::read_to_string(path).map_err(|source| HfError::Io { path: path.to_path_buf(), source })?;
    parse_json(&text, path)
}

/// Parses JSON text; `path` labels errors.
pub(crate) fn parse_json(text: &str, path: &Path) -> Result<Value, HfError> {
    serde_json::from_str(text).map_err(|source| HfError::Json { path: path.to_path_buf(), source })
}

/// A JSON object of a file; a nested object carries its dotted field prefix.
#[derive(Clone, Copy)]
pub(crate) struct Obj<'a> {
    path: &'a Path,
    prefix: Option<&'a str>,
    map: &'a Map<String, Value>,
}

/// How a JSON value's kind reads in an error message.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl<'a> Obj<'a> {
    /// The top-level object of a file; an error when the document is not an object.
    pub(crate) fn root(path: &'a Path, value: &'a Value) -> Result<Self, HfError> {
        match value {
            Value::Object(map) => Ok(Obj { path, prefix: None, map }),
            other => Err(HfError::Invalid {
                path: path.to_path_buf(),
                problem: format!("expected a JSON object, found {}", kind(other)),
            }),
        }
    }

    /// The file this object comes from.
    pub(crate) fn path(&self) -> &'a Path {
        self.path
    }

    /// An error about `field` of this object.
    pub(crate) fn error(&self, field: &str, problem: impl Into<String>) -> HfError {
        let field = match self.prefix {
            Some(prefix) => format!("{prefix}.{field}"),
            None => field.to_string(),
        };
        HfError::Field { path: self.path.to_path_buf(), field, problem: problem.into() }
    }

    /// The raw value of `field`; `None` when absent or null.
    pub(crate) fn get(&self, field: &str) -> Option<&'a Value> {
        self.map.get(field).filter(|v| !v.is_null())
    }

    /// Whether `field` is present (even if null).
    pub(crate) fn has(&self, field: &str) -> bool {
        self.map.contains_key(field)
    }

    fn wrong(&self, field: &str, expected: &str, found: &Value) -> HfError {
        self.error(field, format!("expected {expected}, found {}", kind(found)))
    }

    /// A nested object, with `field` as the prefix of its field names in errors.
    pub(crate) fn object(&self, field: &'a str) -> Result<Option<Obj<'a>>, HfError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Object(map)) => Ok(Some(Obj { path: self.path, prefix: Some(field), map })),
            Some(other) => Err(self.wrong(field, "an object", other)),
        }
    }

    /// The fields of this object.
    pub(crate) fn entries(&self) -> impl Iterator<Item = (&'a String, &'a Value)> {
        self.map.iter()
    }

    /// An optional string.
    pub(crate) fn str(&self, field: &str) -> Result<Option<&'a str>, HfError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(other) => Err(self.wrong(field, "a string", other)),
        }
    }

    /// An optional boolean.
    pub(crate) fn bool(&self, field: &str) -> Result<Option<bool>, HfError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(other) => Err(self.wrong(field, "a boolean", other)),
        }
    }

    /// An optional number.
    pub(crate) fn f64(&self, field: &str) -> Result<Option<f64>, HfError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::Number(n)) => Ok(n.as_f64()),
            Some(other) => Err(self.wrong(field, "a number", other)),
        }
    }

    /// An optional number, narrowed to f32.
    pub(crate) fn f32(&self, field: &str) -> Result<Option<f32>, HfError> {
        Ok(self.f64(field)?.map(|v| v as f32))
    }

    fn int_value(&self, field: &str, value: &Value) -> Result<u64, HfError> {
        value.as_u64().ok_or_else(|| self.wrong(field, "a non-negative integer", value))
    }

    /// An optional non-negative integer.
    pub(crate) fn usize(&self, field: &str) -> Result<Option<usize>, HfError> {
        self.get(field)
            .map(|v| {
                let n = self.int_value(field, v)?;
                usize::try_from(n).map_err(|_| self.error(field, format!("{n} is too large")))
            })
            .transpose()
    }

    /// A required non-negative integer.
    pub(crate) fn req_usize(&self, field: &str) -> Result<usize, HfError> {
        self.usize(field)?.ok_or_else(|| self.error(field, "missing"))
    }

    /// An optional token id.
    pub(crate) fn u32(&self, field: &str) -> Result<Option<u32>, HfError> {
        self.get(field).map(|v| self.token_id(field, v)).transpose()
    }

    fn token_id(&self, field: &str, value: &Value) -> Result<u32, HfError> {
        let n = self.int_value(field, value)?;
        u32::try_from(n).map_err(|_| self.error(field, format!("{n} does not fit in 32 bits")))
    }

    /// Token ids given as one integer or a list of integers (`eos_token_id`); empty when absent.
    /// A required list of finite numbers.
    pub(crate) fn req_f32_list(&self, field: &str) -> Result<Vec<f32>, HfError> {
        match self.get(field) {
            None => Err(self.error(field, "missing")),
            Some(Value::Array(items)) => items
                .iter()
                .map(|v| {
                    v.as_f64()
                        .map(|x| x as f32)
                        .filter(|x| x.is_finite())
                        .ok_or_else(|| self.wrong(field, "a list of numbers", v))
                })
                .collect(),
            Some(v) => Err(self.wrong(field, "a list of numbers", v)),
        }
    }

    pub(crate) fn u32_list(&self, field: &str) -> Result<Vec<u32>, HfError> {
        match self.get(field) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items.iter().map(|v| self.token_id(field, v)).collect(),
            Some(v) => Ok(vec![self.token_id(field, v)?]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with<T>(json: &str, f: impl FnOnce(Obj) -> T) -> T {
        let value: Value = serde_json::from_str(json).unwrap();
        f(Obj::root(Path::new("x.json"), &value).unwrap())
    }

    #[test]
    fn typed_fields_and_nulls() {
        with(r#"{"a": 3, "b": null, "c": "s", "d": true, "e": 1e-5, "f": [1, 2], "g": {"h": 4}}"#, |o| {
            assert_eq!(o.usize("a").unwrap(), Some(3));
            assert_eq!(o.usize("b").unwrap(), None);
            assert!(o.has("b") && !o.has("z"));
            assert_eq!(o.str("c").unwrap(), Some("s"));
            assert_eq!(o.bool("d").unwrap(), Some(true));
            assert_eq!(o.f32("e").unwrap(), Some(1e-5));
            assert_eq!(o.f64("a").unwrap(), Some(3.0));
            assert_eq!(o.u32_list("f").unwrap(), vec![1, 2]);
            assert_eq!(o.u32_list("a").unwrap(), vec![3]);
            assert_eq!(o.u32_list("b").unwrap(), Vec::<u32>::new());
            assert_eq!(o.object("g").unwrap().unwrap().usize("h").unwrap(), Some(4));
        });
    }

    #[test]
    fn errors_name_file_and_field() {
        with(r#"{"a": "3", "g": {"h": -1}, "n": 5000000000}"#, |o| {
            let msg = o.usize("a").unwrap_err().to_string();
            assert_eq!(msg, "x.json: field 'a': expected a non-negative integer, found a string");
            let g = o.object("g").unwrap().unwrap();
            let msg = g.req_usize("h").unwrap_err().to_string();
            assert_eq!(msg, "x.json: field 'g.h': expected a non-negative integer, found a number");
            let msg = o.req_usize("missing").unwrap_err().to_string();
            assert_eq!(msg, "x.json: field 'missing': missing");
            let msg = o.u32("n").unwrap_err().to_string();
            assert_eq!(msg, "x.json: field 'n': 5000000000 does not fit in 32 bits");
            assert!(o.object("a").is_err());
        });
        let value: Value = serde_json::from_str("[1]").unwrap();
        let msg = Obj::root(Path::new("x.json"), &value).err().unwrap().to_string();
        assert_eq!(msg, "x.json: expected a JSON object, found an array");
    }
}
