//! Measuring a grammar against [`GrammarLimits`] without recursing on it: a JSON schema is walked with an
//! explicit stack, a Lark grammar scanned once (with the schemas it embeds walked the same way), and the
//! walk stops at the first bound exceeded. A `$ref` that leads back to itself through `$ref`s alone is found
//! too: no value matches it, which llguidance notices only when generation reaches it.

use std::collections::HashSet;

use serde_json::Value;

use super::lark;
use super::limits::{Bound, GrammarLimits};

/// Keywords that constrain nothing: a schema of `$ref` and these is the schema it refers to.
const ANNOTATIONS: [&str; 9] =
    ["$ref", "title", "description", "$comment", "default", "examples", "deprecated", "readOnly", "writeOnly"];

/// Why a grammar is refused before compiling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// It exceeds this bound.
    Over(Bound),
    /// This `$ref` leads back to itself through `$ref`s alone.
    RefCycle(String),
}

impl From<Bound> for Refusal {
    fn from(b: Bound) -> Self {
        Refusal::Over(b)
    }
}

/// What the grammar measured so far costs.
#[derive(Debug, Default)]
pub struct Census {
    /// About the grammar's size in bytes (compact JSON for schemas).
    bytes: usize,
    /// Choices offered (see [`GrammarLimits::max_choices`]).
    choices: usize,
    /// The `$ref` targets seen.
    refs: HashSet<String>,
}

impl Census {
    /// Counts `bytes` more bytes and `choices` more choices; the bound they exceed, if any.
    fn add(&mut self, bytes: usize, choices: usize, limits: &GrammarLimits) -> Result<(), Bound> {
        self.bytes = self.bytes.saturating_add(bytes);
        self.choices = self.choices.saturating_add(choices);
        if self.bytes > limits.max_bytes {
            return Err(Bound::Bytes);
        }
        if self.choices > limits.max_choices {
            return Err(Bound::Choices);
        }
        Ok(())
    }
}

/// Measures the schema `root` (and everything in it: choices are counted in any object, which can only
/// over-count); why it is refused, if it is.
pub fn schema(root: &Value, limits: &GrammarLimits, census: &mut Census) -> Result<(), Refusal> {
    let targets = walk(root, limits, census)?;
    match targets.into_iter().find(|t| loops(root, t)) {
        Some(target) => Err(Refusal::RefCycle(target.to_string())),
        None => Ok(()),
    }
}

/// Whether following `target` through schemas that are only a `$ref` (and annotations) comes back to one.
fn loops(root: &Value, target: &str) -> bool {
    let mut seen = HashSet::new();
    let mut next = target;
    while seen.insert(next) {
        let Some(pointer) = next.strip_prefix('#') else { return false };
        let Some(Value::Object(node)) = root.pointer(pointer) else { return false };
        match node.get("$ref") {
            Some(Value::String(t)) if node.keys().all(|k| ANNOTATIONS.contains(&k.as_str())) => next = t,
            _ => return false,
        }
    }
    true
}

/// The walk of [`schema`]: sizes, depth, choices and `$ref` targets; the targets in `root`.
fn walk<'a>(root: &'a Value, limits: &GrammarLimits, census: &mut Census) -> Result<HashSet<&'a str>, Bound> {
    let mut targets = HashSet::new();
    let mut stack = vec![(root, 1usize)];
    while let Some((value, depth)) = stack.pop() {
        if depth > limits.max_depth {
            return Err(Bound::Depth);
        }
        match value {
            Value::Object(map) => {
                let keys: usize = map.keys().map(|k| k.len() + 4).sum();
                census.add(2 + keys, choices(value), limits)?;
                if let Some(Value::String(target)) = map.get("$ref") {
                    if targets.insert(target.as_str()) {
                        census.refs.insert(target.clone());
                    }
                    if census.refs.len() > limits.max_refs {
                        return Err(Bound::Refs);
                    }
                }
                stack.extend(map.values().map(|v| (v, depth + 1)));
            }
            Value::Array(items) => {
                census.add(2 + items.len(), 0, limits)?;
                stack.extend(items.iter().map(|v| (v, depth + 1)));
            }
            Value::String(s) => census.add(s.len() + 2, 0, limits)?,
            Value::Number(n) => census.add(n.to_string().len(), 0, limits)?,
            Value::Bool(_) | Value::Null => census.add(5, 0, limits)?,
        }
    }
    Ok(targets)
}

/// Measures the Lark grammar `text`: its bytes, its `|` alternatives and the schemas after `%json`. A
/// grammar the scan cannot read is left to the compiler, which refuses it with its own message.
pub fn lark(text: &str, limits: &GrammarLimits, census: &mut Census) -> Result<(), Refusal> {
    census.add(text.len(), 0, limits)?;
    let Ok(scan) = lark::scan(text) else { return Ok(()) };
    census.add(0, scan.alternatives, limits)?;
    for embedded in &scan.schemas {
        census.bytes = census.bytes.saturating_sub(embedded.range.len());
        schema(&embedded.schema, limits, census)?;
    }
    Ok(())
}

/// The choices one schema object offers by its own keywords. Branches inside `allOf` multiply, since
/// llguidance distributes an intersection over their unions.
fn choices(node: &Value) -> usize {
    let len = |key: &str| match node.get(key) {
        Some(Value::Array(a)) => a.len(),
        Some(Value::Object(o)) => o.len(),
        _ => 0,
    };
    let own = ["properties", "patternProperties", "enum", "anyOf", "oneOf", "allOf", "type"].map(len);
    let refs = usize::from(node.get("$ref").is_some_and(Value::is_string));
    let mut total = own.iter().sum::<usize>() + refs;
    if let Some(Value::Array(members)) = node.get("allOf") {
        let unions = |n: &Value| ["anyOf", "oneOf"].map(|k| n.get(k).and_then(Value::as_array).map_or(0, Vec::len));
        let product = std::iter::once(node)
            .chain(members)
            .map(|n| unions(n).iter().sum::<usize>().max(1))
            .fold(1usize, usize::saturating_mul);
        total = total.saturating_add(product);
    }
    total
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn measure(v: &Value) -> Result<Census, Refusal> {
        let mut c = Census::default();
        schema(v, &GrammarLimits::default(), &mut c).map(|()| c)
    }

    #[test]
    fn a_ref_that_leads_back_to_itself_is_found() {
        let cycle = json!({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b", "title": "A"}, "b": {"$ref": "#/$defs/a"}}});
        assert!(matches!(measure(&cycle), Err(Refusal::RefCycle(_))));
        assert!(matches!(measure(&json!({"$ref": "#"})), Err(Refusal::RefCycle(t)) if t == "#"));
        let tree = json!({"$defs": {"n": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/n"}}}}}, "$ref": "#/$defs/n"});
        assert!(measure(&tree).is_ok(), "a recursive schema with content is fine");
    }

    #[test]
    fn counts_bytes_choices_and_refs() {
        let v = json!({"type": "object", "properties": {"a": {"enum": [1, 2]}, "b": {"$ref": "#/$defs/x"}}});
        let c = measure(&v).unwrap();
        assert_eq!((c.choices, c.refs.len()), (2 + 2 + 1, 1));
        let compact = serde_json::to_string(&v).unwrap().len();
        assert!(c.bytes >= compact / 2 && c.bytes <= compact * 2, "{} vs {compact}", c.bytes);
        let product = json!({"allOf": [{"anyOf": [{}, {}, {}]}, {"oneOf": [{}, {}]}]});
        assert_eq!(choices(&product), 2 + 6, "the branches multiply");
    }

    #[test]
    fn a_schema_deeper_than_any_stack_is_measured_without_recursion() {
        let mut v = json!({"type": "integer"});
        for _ in 0..100_000 {
            v = Value::Object(serde_json::Map::from_iter([("items".to_string(), v)]));
        }
        let small = std::thread::Builder::new().stack_size(256 << 10);
        let bound = small.spawn(move || {
            let b = measure(&v).err();
            std::mem::forget(v); // dropping it recurses; the test is about the walk
            b
        });
        assert_eq!(bound.unwrap().join().unwrap(), Some(Refusal::Over(Bound::Depth)));
    }

    #[test]
    fn a_lark_grammar_counts_its_alternatives_and_embedded_schemas() {
        let l = GrammarLimits { max_choices: 5, ..GrammarLimits::default() };
        let lark_text = |n: usize| {
            let alts: Vec<String> = (0..n).map(|i| format!("\"w{i}\"")).collect();
            format!("start: {} | x\nx: %json {{\"enum\": [1, 2]}}\n", alts.join(" | "))
        };
        assert_eq!(lark(&lark_text(2), &l, &mut Census::default()), Ok(()));
        assert_eq!(lark(&lark_text(4), &l, &mut Census::default()), Err(Refusal::Over(Bound::Choices)));
        let quoted = "start: \"|||||||\" /[|]+/ // ||||||\n";
        assert_eq!(lark(quoted, &l, &mut Census::default()), Ok(()), "strings, regexes and comments are skipped");
    }
}
