//! A JSON value that keeps object keys in insertion order (serde_json's `Value` sorts them unless the
//! workspace-wide `preserve_order` feature is on, which this tool must not switch on for everyone).

use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};
use std::io::Write;
use std::path::Path;

/// An ordered JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum J {
    /// `null`
    Null,
    /// `true` / `false`
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float (written with serde_json's shortest round-trip form).
    Float(f64),
    /// A string.
    Str(String),
    /// An array.
    Arr(Vec<J>),
    /// An object with keys in insertion order.
    Obj(Vec<(String, J)>),
}

/// Builds an object from `(key, value)` pairs, keeping their order.
pub fn obj<K: Into<String>>(items: impl IntoIterator<Item = (K, J)>) -> J {
    J::Obj(items.into_iter().map(|(k, v)| (k.into(), v)).collect())
}

/// Builds an array.
pub fn arr(items: impl IntoIterator<Item = J>) -> J {
    J::Arr(items.into_iter().collect())
}

#[cfg(test)]
impl J {
    /// The value under `key` of an object, if any.
    pub fn get(&self, key: &str) -> Option<&J> {
        match self {
            J::Obj(items) => items.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }
}

impl From<&str> for J {
    fn from(s: &str) -> J {
        J::Str(s.to_string())
    }
}
impl From<String> for J {
    fn from(s: String) -> J {
        J::Str(s)
    }
}
impl From<bool> for J {
    fn from(b: bool) -> J {
        J::Bool(b)
    }
}
impl From<i64> for J {
    fn from(n: i64) -> J {
        J::Int(n)
    }
}
impl From<u32> for J {
    fn from(n: u32) -> J {
        J::Int(n.into())
    }
}
impl From<usize> for J {
    fn from(n: usize) -> J {
        J::Int(n as i64)
    }
}
impl From<f64> for J {
    fn from(x: f64) -> J {
        J::Float(x)
    }
}

impl Serialize for J {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            J::Null => s.serialize_unit(),
            J::Bool(b) => s.serialize_bool(*b),
            J::Int(n) => s.serialize_i64(*n),
            J::Float(x) => s.serialize_f64(*x),
            J::Str(v) => s.serialize_str(v),
            J::Arr(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            J::Obj(items) => {
                let mut map = s.serialize_map(Some(items.len()))?;
                for (k, v) in items {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

/// Writes `value` as pretty JSON (2-space indent, raw UTF-8, as `tokenizers` and transformers write).
pub fn write_pretty(path: &Path, value: &J, trailing_newline: bool) -> anyhow::Result<u64> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    serde_json::to_writer_pretty(&mut out, value)?;
    if trailing_newline {
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(std::fs::metadata(path)?.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_key_order() {
        let v = obj([("b", J::from(1i64)), ("a", arr([J::Null, J::from("x")]))]);
        assert_eq!(serde_json::to_string(&v).unwrap(), r#"{"b":1,"a":[null,"x"]}"#);
    }
}
