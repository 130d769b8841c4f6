//! Jinja2 semantics where MiniJinja's built-ins differ in ways chat templates notice.

use minijinja::value::{Kwargs, ValueKind};
use minijinja::{Error, Value};

/// `is iterable` as Python's `iter(x)` succeeds: strings, lists, dicts, iterators and undefined
/// (Jinja2's Undefined iterates as empty), but not `none` or numbers.
pub(super) fn is_iterable(value: &Value) -> bool {
    matches!(
        value.kind(),
        ValueKind::Undefined
            | ValueKind::String
            | ValueKind::Bytes
            | ValueKind::Seq
            | ValueKind::Map
            | ValueKind::Iterable
    )
}

/// `is sequence` as Jinja2 tests it (`len(x)` and `x[...]` exist): strings, lists, dicts and
/// undefined, but not `none`, numbers or iterators.
pub(super) fn is_sequence(value: &Value) -> bool {
    matches!(
        value.kind(),
        ValueKind::Undefined | ValueKind::String | ValueKind::Bytes | ValueKind::Seq | ValueKind::Map
    )
}

/// `indent(width=4, first=False, blank=False)` as Jinja2 does it: a trailing newline is kept,
/// `width` may be a string to indent with, and lines are those of `str.splitlines` on `\n`/`\r\n`.
pub(super) fn indent(
    text: String,
    width: Option<Value>,
    first: Option<bool>,
    blank: Option<bool>,
    kwargs: Kwargs,
) -> Result<String, Error> {
    let width = match width {
        Some(width) => width,
        None => kwargs.get::<Option<Value>>("width")?.unwrap_or(Value::from(4)),
    };
    let indention = match width.as_str() {
        Some(s) => s.to_string(),
        None => " ".repeat(usize::try_from(width)?),
    };
    let first = match first {
        Some(first) => first,
        None => kwargs.get::<Option<bool>>("first")?.unwrap_or(false),
    };
    let blank = match blank {
        Some(blank) => blank,
        None => kwargs.get::<Option<bool>>("blank")?.unwrap_or(false),
    };
    kwargs.assert_all_used()?;

    let text = text + "\n";
    let mut lines = text.lines();
    let mut out = lines.next().unwrap_or_default().to_string();
    for line in lines {
        out.push('\n');
        if blank || !line.is_empty() {
            out.push_str(&indention);
        }
        out.push_str(line);
    }
    if first {
        out.insert_str(0, &indention);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use minijinja::Environment;

    fn render(template: &str) -> String {
        let mut env = Environment::new();
        env.add_filter("indent", indent);
        env.add_test("iterable", is_iterable);
        env.add_test("sequence", is_sequence);
        env.render_str(template, minijinja::context! { n => (), xs => vec![1] }).unwrap()
    }

    #[test]
    fn iterable_and_sequence_follow_python() {
        assert_eq!(
            render(
                "{{ n is iterable }}{{ xs is iterable }}{{ 's' is iterable }}{{ 1 is iterable }}{{ u is iterable }}"
            ),
            "FalseTrueTrueFalseTrue"
        );
        assert_eq!(
            render("{{ n is sequence }}{{ 's' is sequence }}{{ {} is sequence }}{{ 1 is sequence }}"),
            "FalseTrueTrueFalse"
        );
    }

    #[test]
    fn indent_keeps_a_trailing_newline_like_jinja2() {
        assert_eq!(render("{{ '{\\n' | indent(4, first=true) }}|"), "    {\n|");
        assert_eq!(render("{{ 'a\\n\\nb' | indent(2) }}|"), "a\n\n  b|");
        assert_eq!(render("{{ 'a\\n\\nb' | indent(width='> ', blank=true) }}|"), "a\n> \n> b|");
        assert_eq!(render("{{ 'a' | indent(first=true) }}|"), "    a|");
    }
}
