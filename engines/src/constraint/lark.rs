//! What the limits and the compiler read in a Lark grammar without parsing it: its `|` alternatives and the
//! JSON schemas it embeds after `%json`, found in one pass over its tokens that skips string literals,
//! regular expressions and comments as llguidance's Lark lexer reads them.

use std::ops::Range;

use serde_json::Value;

/// The keywords llguidance's Lark reads a JSON value after.
const JSON_KEYWORDS: [&str; 3] = ["%json", "%regex", "%llguidance"];

/// A Lark grammar's parts that cost.
#[derive(Debug, Default)]
pub struct Scan {
    /// `|` outside strings, regular expressions and comments.
    pub alternatives: usize,
    /// The schemas after `%json`, in order.
    pub schemas: Vec<Embedded>,
}

/// A JSON schema inside a Lark grammar.
#[derive(Debug)]
pub struct Embedded {
    /// Where its text lies (from just after `%json`).
    pub range: Range<usize>,
    /// The schema.
    pub schema: Value,
}

/// Scans `text`; an error when the JSON after a keyword does not parse.
pub fn scan(text: &str) -> Result<Scan, String> {
    let bytes = text.as_bytes();
    let mut out = Scan::default();
    let mut i = 0;
    while i < bytes.len() {
        i = match bytes[i] {
            b'"' => past_quoted(bytes, i, b'"'),
            b'/' if bytes.get(i + 1) == Some(&b'/') => line_end(bytes, i),
            b'/' => past_quoted(bytes, i, b'/'),
            b'#' => line_end(bytes, i),
            b'|' => {
                out.alternatives += 1;
                i + 1
            }
            b'%' => match JSON_KEYWORDS.iter().find(|k| text[i..].starts_with(*k)) {
                Some(keyword) => {
                    let start = i + keyword.len();
                    let mut values = serde_json::Deserializer::from_str(&text[start..]).into_iter::<Value>();
                    let value = values
                        .next()
                        .ok_or_else(|| format!("no JSON after {keyword}"))?
                        .map_err(|e| format!("the JSON after {keyword} does not parse: {e}"))?;
                    let end = start + values.byte_offset();
                    if *keyword == "%json" {
                        out.schemas.push(Embedded { range: start..end, schema: value });
                    }
                    end
                }
                None => i + 1,
            },
            _ => i + 1,
        };
    }
    Ok(out)
}

/// `text` with every embedded schema replaced by `rewrite` of it.
pub fn rewrite_schemas(text: &str, mut rewrite: impl FnMut(Value) -> Value) -> Result<String, String> {
    let scan = scan(text)?;
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for e in scan.schemas {
        out.push_str(&text[last..e.range.start]);
        out.push(' ');
        out.push_str(&rewrite(e.schema).to_string());
        last = e.range.end;
    }
    out.push_str(&text[last..]);
    Ok(out)
}

/// The index just past the literal opened by `quote` at `start` (backslash escapes skipped), or the end.
fn past_quoted(bytes: &[u8], start: usize, quote: u8) -> usize {
    let mut j = start + 1;
    while j < bytes.len() {
        match bytes[j] {
            b'\\' => j += 2,
            b if b == quote => return j + 1,
            _ => j += 1,
        }
    }
    bytes.len()
}

/// The index of the end of the line `start` is on.
fn line_end(bytes: &[u8], start: usize) -> usize {
    bytes[start..].iter().position(|&b| b == b'\n').map_or(bytes.len(), |n| start + n)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn finds_alternatives_and_schemas_outside_literals() {
        let text = "start: a | b \"|\" /\\/|/ # a | comment\na: %json {\"type\": \"integer\"}\n\
                    b: %regex {\"substring_words\": \"x | y\"} | \"%json {\" // %json {}\n";
        let s = scan(text).unwrap();
        assert_eq!(s.alternatives, 2);
        assert_eq!(s.schemas.len(), 1);
        assert_eq!(s.schemas[0].schema, json!({"type": "integer"}));
        assert_eq!(text[s.schemas[0].range.clone()].trim(), "{\"type\": \"integer\"}");
        assert!(scan("start: %json {").unwrap_err().contains("does not parse"));
    }

    #[test]
    fn rewrites_each_embedded_schema_in_place() {
        let text = "start: a b\na: %json {\"type\": \"number\"}\nb: %json{}\n";
        let out = rewrite_schemas(text, |mut v| {
            v["x"] = json!(1);
            v
        })
        .unwrap();
        assert_eq!(out, "start: a b\na: %json {\"type\":\"number\",\"x\":1}\nb: %json {\"x\":1}\n");
    }
}
