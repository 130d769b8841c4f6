//! The `tojson` filter as transformers defines it for chat templates: Python's
//! `json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`, with the
//! same keyword arguments, spacing, key order, string escapes and float spelling.

use std::fmt::Write;

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, ErrorKind, Value};

/// Options of `json.dumps` that the filter accepts as keyword arguments.
struct Style {
    ensure_ascii: bool,
    indent: Option<String>,
    item_sep: String,
    key_sep: String,
    sort_keys: bool,
}

/// `{{ x | tojson(ensure_ascii=False, indent=None, separators=None, sort_keys=False) }}`.
pub(super) fn tojson(value: &Value, kwargs: Kwargs) -> Result<String, Error> {
    let indent = match kwargs.get::<Option<Value>>("indent")? {
        None => None,
        Some(v) if v.is_none() => None,
        Some(v) => Some(match v.as_str() {
            Some(s) => s.to_string(),
            None => " ".repeat(usize::try_from(v)?),
        }),
    };
    let (item_sep, key_sep) = match kwargs.get::<Option<Vec<String>>>("separators")? {
        Some(seps) => match <[String; 2]>::try_from(seps) {
            Ok([item, key]) => (item, key),
            Err(_) => return Err(Error::new(ErrorKind::InvalidOperation, "separators must be a pair")),
        },
        None if indent.is_some() => (",".into(), ": ".into()),
        None => (", ".into(), ": ".into()),
    };
    let style = Style {
        ensure_ascii: kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false),
        indent,
        item_sep,
        key_sep,
        sort_keys: kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false),
    };
    kwargs.assert_all_used()?;
    let mut out = String::new();
    write_value(&mut out, value, &style, 0)?;
    Ok(out)
}

fn not_serializable(value: &Value) -> Error {
    Error::new(ErrorKind::InvalidOperation, format!("object of type {} is not JSON serializable", value.kind()))
}

fn write_value(out: &mut String, value: &Value, style: &Style, depth: usize) -> Result<(), Error> {
    match value.kind() {
        ValueKind::None => out.push_str("null"),
        ValueKind::Bool => out.push_str(if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => out.push_str(&number(value)),
        ValueKind::String => write_str(out, value.as_str().unwrap_or_default(), style.ensure_ascii),
        ValueKind::Seq => {
            let items: Vec<Value> = value.try_iter()?.collect();
            write_container(out, ('[', ']'), items.len(), style, depth, |out, i| {
                write_value(out, &items[i], style, depth + 1)
            })?;
        }
        ValueKind::Map => {
            let mut entries = Vec::new();
            for key in value.try_iter()? {
                let item = value.get_item(&key)?;
                entries.push((map_key(&key)?, item));
            }
            if style.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(&b.0));
            }
            write_container(out, ('{', '}'), entries.len(), style, depth, |out, i| {
                write_str(out, &entries[i].0, style.ensure_ascii);
                out.push_str(&style.key_sep);
                write_value(out, &entries[i].1, style, depth + 1)
            })?;
        }
        _ => return Err(not_serializable(value)),
    }
    Ok(())
}

/// Writes `n` items between `open` and `close`, one per line when indenting, as `json.dumps` does.
fn write_container(
    out: &mut String,
    (open, close): (char, char),
    n: usize,
    style: &Style,
    depth: usize,
    mut item: impl FnMut(&mut String, usize) -> Result<(), Error>,
) -> Result<(), Error> {
    out.push(open);
    if n == 0 {
        out.push(close);
        return Ok(());
    }
    let newline = |out: &mut String, level: usize| {
        if let Some(indent) = &style.indent {
            out.push('\n');
            out.push_str(&indent.repeat(level));
        }
    };
    for i in 0..n {
        if i > 0 {
            out.push_str(&style.item_sep);
        }
        newline(out, depth + 1);
        item(out, i)?;
    }
    newline(out, depth);
    out.push(close);
    Ok(())
}

/// A dict key as `json.dumps` turns it into a string.
fn map_key(key: &Value) -> Result<String, Error> {
    match key.kind() {
        ValueKind::String => Ok(key.as_str().unwrap_or_default().to_string()),
        ValueKind::Bool => Ok(if key.is_true() { "true" } else { "false" }.to_string()),
        ValueKind::None => Ok("null".to_string()),
        ValueKind::Number => Ok(number(key)),
        _ => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("keys must be str, int, float, bool or None, not {}", key.kind()),
        )),
    }
}

/// An integer as is, a float as Python's `repr` (and `NaN`/`Infinity` as `json.dumps`).
fn number(value: &Value) -> String {
    if value.is_integer() {
        return value.to_string();
    }
    match f64::try_from(value.clone()) {
        Ok(f) => py_float(f),
        Err(_) => value.to_string(),
    }
}

/// Python's `repr(float)`: the shortest round-trip digits, in fixed notation for exponents in
/// -4..16 and otherwise as `1.5e-05` / `1e+16`.
fn py_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').expect("{:e} has an exponent");
    let exp: i32 = exp.parse().expect("{:e} exponent is an integer");
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => ("-", m),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if (-4..16).contains(&exp) {
        if exp < 0 {
            return format!("{sign}0.{}{digits}", "0".repeat((-exp - 1) as usize));
        }
        let int_len = exp as usize + 1;
        if digits.len() <= int_len {
            return format!("{sign}{digits}{}.0", "0".repeat(int_len - digits.len()));
        }
        return format!("{sign}{}.{}", &digits[..int_len], &digits[int_len..]);
    }
    let (first, rest) = digits.split_at(1);
    let frac = if rest.is_empty() { String::new() } else { format!(".{rest}") };
    let exp_sign = if exp < 0 { '-' } else { '+' };
    format!("{sign}{first}{frac}e{exp_sign}{:02}", exp.abs())
}

/// A JSON string literal with `json.dumps`' escapes (`ensure_ascii` escapes all non-ASCII).
fn write_str(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (ensure_ascii && !c.is_ascii()) => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    write!(out, "\\u{unit:04x}").expect("writing to a String");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use minijinja::Environment;

    fn render(template: &str, value: serde_json::Value) -> Result<String, Error> {
        let mut env = Environment::new();
        env.add_filter("tojson", tojson);
        env.render_str(template, minijinja::context! { x => super::super::json_value(&value) })
    }

    #[test]
    fn default_style_matches_json_dumps() {
        let x = serde_json::json!({"b": [1, 2.5, null, true], "a": "é\"\n\u{1}", "c": {}});
        assert_eq!(
            render("{{ x | tojson }}", x).unwrap(),
            r#"{"b": [1, 2.5, null, true], "a": "é\"\n\u0001", "c": {}}"#
        );
    }

    #[test]
    fn indent_sort_keys_separators_and_ascii() {
        let x = serde_json::json!({"b": [1, []], "a": "😀é"});
        assert_eq!(
            render("{{ x | tojson(indent=2, sort_keys=true, ensure_ascii=true) }}", x.clone()).unwrap(),
            "{\n  \"a\": \"\\ud83d\\ude00\\u00e9\",\n  \"b\": [\n    1,\n    []\n  ]\n}"
        );
        assert_eq!(render("{{ x | tojson(separators=(',', ':')) }}", x).unwrap(), r#"{"b":[1,[]],"a":"😀é"}"#);
    }

    #[test]
    fn floats_spell_like_python_repr() {
        for (f, want) in [
            (1.0, "1.0"),
            (0.5, "0.5"),
            (-0.0, "-0.0"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (123456.789, "123456.789"),
            (1e15, "1000000000000000.0"),
            (1e16, "1e+16"),
            (1.5e300, "1.5e+300"),
            (f64::NAN, "NaN"),
            (f64::NEG_INFINITY, "-Infinity"),
        ] {
            assert_eq!(py_float(f), want, "{f}");
        }
    }

    #[test]
    fn undefined_is_not_serializable() {
        let err = render("{{ missing | tojson }}", serde_json::json!(null)).unwrap_err();
        assert!(err.to_string().contains("not JSON serializable"), "{err}");
    }
}
