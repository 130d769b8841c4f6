//! The `json_object` grammar (any JSON object) with bounds, so that its output always ends: strings, keys,
//! arrays, objects and nesting have the maxima below, and numbers the configured digits. Without them a
//! model can write one string, array or object until the token limit. The schema is unrolled level by level
//! (no recursive `$ref`), so that nesting is bounded too.

use serde_json::{json, Map, Value};

use super::numbers::NumberDigits;

/// Most characters of a string value.
pub const MAX_STRING_CHARS: usize = 512;
/// Most characters of an object's key.
pub const MAX_KEY_CHARS: usize = 64;
/// Most items of an array.
pub const MAX_ITEMS: usize = 64;
/// Most properties of an object.
pub const MAX_PROPERTIES: usize = 64;
/// Most levels of objects and arrays, the outermost object included.
pub const MAX_DEPTH: usize = 6;

/// The schema of a JSON object within the bounds above, its numbers within `digits`.
pub fn any_object(digits: &NumberDigits) -> Value {
    let value = |level: usize| json!({"$ref": format!("#/$defs/v{level}")});
    let object = |level: usize| {
        json!({
            "type": "object",
            "patternProperties": {format!("^.{{0,{MAX_KEY_CHARS}}}$"): value(level)},
            "additionalProperties": false,
            "maxProperties": MAX_PROPERTIES,
        })
    };
    // `v{k}`: a value inside a container at level k - 1; containers only up to MAX_DEPTH.
    let mut defs = Map::new();
    for level in 2..=MAX_DEPTH + 1 {
        let mut options = vec![
            json!({"type": "null"}),
            json!({"type": "boolean"}),
            json!({"type": "number"}),
            json!({"type": "string", "maxLength": MAX_STRING_CHARS}),
        ];
        if level <= MAX_DEPTH {
            options.push(json!({"type": "array", "items": value(level + 1), "maxItems": MAX_ITEMS}));
            options.push(object(level + 1));
        }
        defs.insert(format!("v{level}"), json!({"anyOf": options}));
    }
    let mut root = object(2);
    root["$defs"] = Value::Object(defs);
    digits.bound(&mut root);
    root
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_level_is_bounded() {
        let schema = any_object(&NumberDigits::default());
        let defs = schema["$defs"].as_object().unwrap();
        assert_eq!(defs.len(), MAX_DEPTH);
        let last = &defs[&format!("v{}", MAX_DEPTH + 1)]["anyOf"];
        assert_eq!(last.as_array().unwrap().len(), 4, "scalars only at the deepest level");
        assert_eq!(defs["v2"]["anyOf"][2]["exclusiveMaximum"], 1e15, "numbers are bounded");
        assert_eq!(schema["maxProperties"], MAX_PROPERTIES);
    }
}
