//! JSON numbers that always end. A schema's `number` or `integer` without bounds lets a model write digits
//! until the token limit (`30.5000000000…`); as llama.cpp's schema converter does, the digits are bounded by
//! default ([`NumberDigits`]), by rewriting the schema before llguidance compiles it: an exclusive range of
//! ±10^integer bounds the integer part (and, llguidance's range grammar having no exponent, the exponent),
//! and `multipleOf` 10^-fraction bounds the fraction. The schema's own `minimum`, `maximum`,
//! `exclusiveMinimum`, `exclusiveMaximum` and `multipleOf` take precedence, each for its side.

use serde_json::{Map, Value};

/// Most integer digits a bound can allow: llguidance reads integer bounds as `i64`, and ±10^15 are exact
/// in an `f64`.
const MAX_INTEGER_DIGITS: u32 = 15;

/// Most fractional digits a bound can allow: llguidance 1.9 reads `multipleOf` by multiplying its `f64` by
/// ten until it is whole, which lands exactly on an integer only up to 1e-10.
const MAX_FRACTION_DIGITS: u32 = 10;

/// The keywords whose values are schemas, one or a list.
const SUBSCHEMA: [&str; 8] =
    ["additionalProperties", "items", "not", "contains", "propertyNames", "if", "then", "else"];
/// The keywords whose values are lists of schemas.
const SUBSCHEMA_LISTS: [&str; 4] = ["prefixItems", "anyOf", "oneOf", "allOf"];
/// The keywords whose values are maps of names to schemas.
const SUBSCHEMA_MAPS: [&str; 4] = ["properties", "patternProperties", "$defs", "definitions"];

/// How many digits a number a schema leaves unbounded may have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NumberDigits {
    /// Before the point (1 to [`MAX_INTEGER_DIGITS`]).
    integer: u32,
    /// After the point (0 to [`MAX_FRACTION_DIGITS`]).
    fraction: u32,
}

impl Default for NumberDigits {
    /// 15 integer digits, as llama.cpp allows; 10 fractional ones, the most llguidance 1.9 can bound.
    fn default() -> Self {
        NumberDigits { integer: MAX_INTEGER_DIGITS, fraction: MAX_FRACTION_DIGITS }
    }
}

impl NumberDigits {
    /// At most `integer` digits before the point and `fraction` after; an error naming the range when out
    /// of it.
    pub fn new(integer: u32, fraction: u32) -> Result<Self, String> {
        if !(1..=MAX_INTEGER_DIGITS).contains(&integer) {
            return Err(format!("integer digits must be between 1 and {MAX_INTEGER_DIGITS}"));
        }
        if fraction > MAX_FRACTION_DIGITS {
            return Err(format!("fractional digits must be at most {MAX_FRACTION_DIGITS}"));
        }
        Ok(NumberDigits { integer, fraction })
    }

    /// The most digits before the point.
    pub fn integer(&self) -> u32 {
        self.integer
    }

    /// The most digits after the point.
    pub fn fraction(&self) -> u32 {
        self.fraction
    }

    /// Bounds every unbounded number in `schema` (walked with an explicit stack, through the keywords that
    /// hold schemas; `enum` and `const` values are left alone).
    pub fn bound(&self, schema: &mut Value) {
        let mut stack = vec![schema];
        while let Some(node) = stack.pop() {
            let Value::Object(map) = node else { continue };
            self.bound_one(map);
            for (key, value) in map.iter_mut() {
                let k = key.as_str();
                if SUBSCHEMA.contains(&k) {
                    match value {
                        Value::Array(list) => stack.extend(list.iter_mut()),
                        v => stack.push(v),
                    }
                } else if SUBSCHEMA_LISTS.contains(&k) {
                    if let Value::Array(list) = value {
                        stack.extend(list.iter_mut());
                    }
                } else if SUBSCHEMA_MAPS.contains(&k) {
                    if let Value::Object(m) = value {
                        stack.extend(m.values_mut());
                    }
                }
            }
        }
    }

    /// Adds the missing bounds to one schema whose `type` allows numbers.
    fn bound_one(&self, node: &mut Map<String, Value>) {
        let types = |t: &str| match node.get("type") {
            Some(Value::String(s)) => s == t,
            Some(Value::Array(list)) => list.iter().any(|x| x == t),
            _ => false,
        };
        let (number, integer) = (types("number"), types("integer"));
        if !(number || integer) || node.contains_key("enum") || node.contains_key("const") {
            return;
        }
        let edge = 10f64.powi(self.integer as i32);
        let value = |k: &str| node.get(k).and_then(Value::as_f64);
        let low = value("minimum").or(value("exclusiveMinimum"));
        let high = value("maximum").or(value("exclusiveMaximum"));
        let open_below = !node.contains_key("minimum") && !node.contains_key("exclusiveMinimum");
        let open_above = !node.contains_key("maximum") && !node.contains_key("exclusiveMaximum");
        if open_below && high.is_none_or(|h| h > -edge) {
            node.insert("exclusiveMinimum".into(), Value::from(-edge));
        }
        if open_above && low.is_none_or(|l| l < edge) {
            node.insert("exclusiveMaximum".into(), Value::from(edge));
        }
        if number && !node.contains_key("multipleOf") {
            // The literal `1e-N`, correctly rounded, is what llguidance reads back exactly.
            let step: f64 = format!("1e-{}", self.fraction).parse().expect("a float literal");
            node.insert("multipleOf".into(), Value::from(step));
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn bounded(mut v: Value) -> Value {
        NumberDigits::default().bound(&mut v);
        v
    }

    #[test]
    fn unbounded_numbers_get_bounds_and_explicit_ones_are_kept() {
        let v = bounded(json!({"type": "number"}));
        assert_eq!(
            v,
            json!({"type": "number", "exclusiveMinimum": -1e15, "exclusiveMaximum": 1e15, "multipleOf": 1e-10})
        );
        let v = bounded(json!({"type": ["integer", "null"], "minimum": 3}));
        assert_eq!(v, json!({"type": ["integer", "null"], "minimum": 3, "exclusiveMaximum": 1e15}));
        let v = bounded(json!({"type": "number", "maximum": 2, "multipleOf": 0.5}));
        assert_eq!(v, json!({"type": "number", "maximum": 2, "multipleOf": 0.5, "exclusiveMinimum": -1e15}));
        let v = bounded(json!({"type": "integer", "minimum": 1e16}));
        assert_eq!(v, json!({"type": "integer", "minimum": 1e16}), "no bound below the schema's own minimum");
        for kept in [json!({"type": "number", "enum": [1e20]}), json!({"type": "string"}), json!({"minimum": 1})] {
            assert_eq!(bounded(kept.clone()), kept);
        }
    }

    #[test]
    fn the_walk_follows_subschemas_only() {
        let v = bounded(json!({
            "properties": {"a": {"type": "integer"}},
            "items": [{"type": "integer"}],
            "anyOf": [{"$ref": "#/$defs/n"}],
            "$defs": {"n": {"type": "integer"}},
            "const": {"type": "integer"},
            "default": {"type": "integer"}
        }));
        for path in ["/properties/a", "/items/0", "/$defs/n"] {
            assert_eq!(v.pointer(path).unwrap()["exclusiveMaximum"], 1e15, "{path}");
        }
        assert_eq!(v["const"], json!({"type": "integer"}));
        assert_eq!(v["default"], json!({"type": "integer"}));
    }

    #[test]
    fn the_rewrite_does_not_recurse() {
        let mut v = json!({"type": "number"});
        for _ in 0..100_000 {
            v = Value::Object(serde_json::Map::from_iter([("items".to_string(), v)]));
        }
        let small = std::thread::Builder::new().stack_size(256 << 10);
        let deepest = small.spawn(move || {
            NumberDigits::default().bound(&mut v);
            let mut node = &v;
            while let Some(next) = node.get("items") {
                node = next;
            }
            let bounded = node["multipleOf"] == 1e-10;
            std::mem::forget(v); // dropping it recurses; the test is about the walk
            bounded
        });
        assert!(deepest.unwrap().join().unwrap());
    }

    #[test]
    fn digits_are_checked() {
        assert!(NumberDigits::new(0, 3).is_err());
        assert!(NumberDigits::new(16, 3).is_err());
        assert!(NumberDigits::new(15, 11).is_err());
        assert_eq!(NumberDigits::new(15, 10), Ok(NumberDigits::default()));
    }
}
