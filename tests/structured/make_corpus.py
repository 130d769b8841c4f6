"""Writes tests/structured/schemas.json: JSON schemas of real-world shapes for the structured-output test.

Usage: python3 tests/structured/make_corpus.py   (deterministic; the output is committed)

Each entry is {"name", "schema"} for a schema the engine must enforce, or {"name", "schema", "refuse"} for one
it must refuse with a 422 naming `refuse` (a keyword llguidance cannot enforce). The shapes are those of
structured-output and tool-call traffic: nested objects, arrays with min/max items, enums and consts, anyOf,
$ref/$defs (recursive too), string formats and patterns, number bounds, nullable fields, optional fields.
Variants come from a seeded generator, so the corpus is large without being random at each run.
"""

import json
import random
from pathlib import Path

OUT = Path(__file__).with_name("schemas.json")
rng = random.Random(20261201)

# Bounded strings keep a tiny story model from writing one string to the token limit; the lengths are
# those real schemas put on names, titles and codes.
def s(max_len=None, min_len=None, **kw):
    out = {"type": "string", **kw}
    if max_len is not None:
        out["maxLength"] = max_len
    if min_len is not None:
        out["minLength"] = min_len
    return out


def integer(lo=None, hi=None):
    out = {"type": "integer"}
    if lo is not None:
        out["minimum"] = lo
    if hi is not None:
        out["maximum"] = hi
    return out


def number(lo=None, hi=None, exclusive=False):
    out = {"type": "number"}
    if lo is not None:
        out["exclusiveMinimum" if exclusive else "minimum"] = lo
    if hi is not None:
        out["maximum"] = hi
    return out


def obj(props, required=None, extra=False, **kw):
    return {
        "type": "object",
        "properties": props,
        "required": list(props) if required is None else required,
        "additionalProperties": extra,
        **kw,
    }


def arr(items, lo=None, hi=None):
    out = {"type": "array", "items": items}
    if lo is not None:
        out["minItems"] = lo
    if hi is not None:
        out["maxItems"] = hi
    return out


def enum(*values):
    return {"enum": list(values)}


def nullable(schema):
    return {"anyOf": [schema, {"type": "null"}]}


NAMES = ["name", "title", "label", "city", "author", "sku", "code", "tag"]
COLORS = ["red", "green", "blue", "yellow", "black", "white"]
UNITS = ["celsius", "fahrenheit", "kelvin"]
STATUS = ["pending", "active", "done", "failed", "cancelled"]


def base_shapes():
    """About forty hand-written shapes, as agents and structured-output users send them."""
    address = obj({"street": s(30), "city": s(20), "zip": s(pattern="^[0-9]{5}$"), "country": enum("US", "FR", "DE", "JP")})
    person = obj({"name": s(20), "age": integer(0, 130), "email": s(40, format="email")}, required=["name", "age"])
    money = obj({"amount": number(0, 1e6), "currency": enum("USD", "EUR", "GBP", "JPY")})
    geo = obj({"lat": number(-90, 90), "lon": number(-180, 180)})
    shapes = {
        "person": person,
        "person_with_address": obj({"person": person, "address": address}),
        "address": address,
        "weather_query": obj({"location": s(30), "unit": enum(*UNITS)}, required=["location"]),
        "weather_report": obj({"city": s(20), "temperature": number(-90, 60), "unit": enum(*UNITS),
                               "conditions": arr(enum("sunny", "rain", "snow", "wind", "fog"), 1, 3)}),
        "product": obj({"sku": s(pattern="^[A-Z]{3}-[0-9]{4}$"), "name": s(30), "price": money,
                        "tags": arr(s(12), 0, 4), "in_stock": {"type": "boolean"}}),
        "order": obj({"id": s(format="uuid"), "items": arr(obj({"sku": s(12), "qty": integer(1, 99)}), 1, 3),
                      "status": enum(*STATUS), "total": money}),
        "invoice": obj({"number": integer(1, 99999), "date": s(format="date"), "lines": arr(obj({"text": s(20),
                        "amount": number(0, 10000)}), 1, 3), "paid": {"type": "boolean"}}),
        "event": obj({"title": s(30), "start": s(format="date-time"), "duration_minutes": integer(5, 600),
                      "attendees": arr(s(20), 0, 5)}, required=["title", "start"]),
        "log_entry": obj({"level": enum("debug", "info", "warn", "error"), "message": s(40),
                          "timestamp": s(format="date-time"), "source": s(pattern="^[a-z]+(\\.[a-z]+)*$", maxLength=24)}),
        "http_request": obj({"method": enum("GET", "POST", "PUT", "DELETE"), "path": s(pattern="^/[a-z0-9/]*$", maxLength=30),
                             "status": integer(100, 599), "host": s(format="hostname", maxLength=30), "ip": s(format="ipv4")}),
        "api_error": obj({"error": obj({"code": integer(400, 599), "message": s(40), "retry": {"type": "boolean"}})}),
        "pagination": obj({"page": integer(1, 100), "per_page": enum(10, 20, 50), "total": integer(0, 10000),
                           "items": arr(obj({"id": integer(1, 1000), "name": s(16)}), 0, 3)}),
        "recipe": obj({"title": s(30), "servings": integer(1, 12), "ingredients": arr(obj({"item": s(16),
                       "grams": number(0, 2000)}), 1, 4), "steps": arr(s(40), 1, 3)}),
        "book": obj({"title": s(30), "author": s(20), "year": integer(1450, 2026), "isbn": s(pattern="^97[89][0-9]{10}$"),
                     "genres": arr(enum("fiction", "science", "history", "poetry", "children"), 1, 2)}),
        "movie_review": obj({"movie": s(30), "rating": integer(1, 5), "summary": s(60), "spoilers": {"type": "boolean"}}),
        "sentiment": obj({"label": enum("positive", "negative", "neutral"), "score": number(0, 1)}),
        "classification": obj({"category": enum("bug", "feature", "question", "docs"), "confidence": number(0, 1),
                               "reasons": arr(s(30), 1, 2)}),
        "entities": obj({"entities": arr(obj({"text": s(20), "type": enum("PERSON", "PLACE", "ORG", "DATE")}), 0, 4)}),
        "geo_point": geo,
        "route": obj({"from": geo, "to": geo, "mode": enum("walk", "bike", "car", "train")}),
        "color": obj({"name": enum(*COLORS), "hex": s(pattern="^#[0-9a-f]{6}$")}),
        "user_profile": obj({"username": s(pattern="^[a-z][a-z0-9_]{2,11}$"), "display": s(24),
                             "bio": nullable(s(40)), "links": arr(s(40, format="uri"), 0, 2)}, required=["username", "bio"]),
        "settings": obj({"theme": enum("light", "dark", "system"), "notifications": obj({"email": {"type": "boolean"},
                         "push": {"type": "boolean"}}), "language": enum("en", "fr", "de", "ja")}),
        "search_tool_args": obj({"query": s(40), "max_results": integer(1, 10), "safe": {"type": "boolean"}},
                                required=["query"]),
        "calendar_tool_args": obj({"date": s(format="date"), "time": s(format="time"), "title": s(30)}),
        "email_tool_args": obj({"to": arr(s(40, format="email"), 1, 3), "subject": s(40), "body": s(60)}),
        "sql_tool_args": obj({"table": enum("users", "orders", "items"), "columns": arr(s(16), 1, 4),
                              "limit": integer(1, 100)}),
        "math_answer": obj({"steps": arr(s(40), 1, 4), "answer": number()}),
        "yes_no": obj({"answer": enum("yes", "no"), "why": s(40)}),
        "const_version": obj({"version": {"const": 2}, "kind": {"const": "story"}, "text": s(40)}),
        "tuple_point": {"type": "array", "prefixItems": [number(-10, 10), number(-10, 10)], "items": False,
                        "minItems": 2, "maxItems": 2},
        "shape_union": obj({"shape": {"anyOf": [obj({"kind": {"const": "circle"}, "radius": number(0, 100)}),
                                               obj({"kind": {"const": "rect"}, "w": number(0, 100), "h": number(0, 100)})]}}),
        "string_or_number": obj({"value": {"anyOf": [s(20), number(-100, 100)]}}),
        "nullable_fields": obj({"middle_name": nullable(s(16)), "age": nullable(integer(0, 120))}),
        "optional_fields": obj({"a": s(10), "b": integer(0, 9), "c": {"type": "boolean"}}, required=[]),
        "nested_three": obj({"a": obj({"b": obj({"c": s(10), "d": integer(0, 9)})})}),
        "matrix": obj({"rows": arr(arr(integer(0, 9), 2, 3), 2, 3)}),
        "tags_unbounded_items": obj({"tags": arr(enum(*COLORS), 1, 6)}),
        "integer_list": arr(integer(-1000, 1000), 1, 5),
        "enum_root": enum("alpha", "beta", "gamma"),
        "boolean_root": {"type": "boolean"},
        "defs_ref": {"$defs": {"item": obj({"id": integer(1, 99), "label": s(12)})},
                     **obj({"first": {"$ref": "#/$defs/item"}, "rest": arr({"$ref": "#/$defs/item"}, 0, 2)})},
        "recursive_tree": {"$defs": {"node": obj({"value": integer(0, 9), "children": arr({"$ref": "#/$defs/node"}, 0, 2)})},
                           "$ref": "#/$defs/node"},
        "all_of": {"allOf": [obj({"id": integer(1, 9)}, extra=True), obj({"id": integer(1, 9), "name": s(10)})]},
        "exclusive_bounds": obj({"ratio": number(0, 1, exclusive=True), "count": {"type": "integer", "exclusiveMinimum": 0,
                                 "exclusiveMaximum": 10}}),
        "multiple_of": obj({"even": {"type": "integer", "multipleOf": 2, "minimum": 0, "maximum": 100}}),
        "min_max_properties": {"type": "object", "additionalProperties": integer(0, 9), "minProperties": 1,
                               "maxProperties": 2},
        "pattern_properties": {"type": "object", "patternProperties": {"^x_[a-z]{1,3}$": integer(0, 9)},
                               "additionalProperties": False, "maxProperties": 2},
    }
    return shapes


def variants(shapes, n):
    """`n` variants of the base shapes: other enums, bounds, required sets, nesting and wrappers."""
    keys = sorted(shapes)
    out = []
    for i in range(n):
        defs = {}

        def lift(schema):
            """The schema without its $defs, which go to the variant's root (their pointers start there)."""
            schema = dict(schema)
            defs.update(schema.pop("$defs", {}))
            return schema

        base = lift(shapes[keys[i % len(keys)]])
        kind = i % 5
        if kind == 0:  # wrapped in a result envelope
            schema = obj({"ok": {"type": "boolean"}, "result": base})
        elif kind == 1:  # a short list of them
            schema = arr(base, 1, 2)
        elif kind == 2:  # with an id and a status
            schema = obj({"id": integer(1, rng.randint(10, 9999)), "status": enum(*rng.sample(STATUS, 3)), "data": base})
        elif kind == 3:  # optional or nullable
            schema = obj({"value": nullable(base), "note": s(rng.randint(5, 30))}, required=["value"])
        else:  # one of two alternatives
            other = lift(shapes[keys[(i * 7 + 3) % len(keys)]])
            schema = {"anyOf": [base, other]}
        if defs:
            schema = {"$defs": defs, **schema}
        out.append({"name": f"{keys[i % len(keys)]}_v{kind}_{i}", "schema": schema})
    return out


def refused():
    """Schemas the engine cannot enforce: each must be refused naming the keyword, never answered unconstrained."""
    return [
        {"name": "unique_items", "schema": arr(integer(0, 9), 1, 3) | {"uniqueItems": True}, "refuse": "uniqueItems"},
        {"name": "contains", "schema": arr(integer(0, 9)) | {"contains": {"const": 3}}, "refuse": "contains"},
        {"name": "if_then", "schema": {"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}},
         "refuse": "if"},
        {"name": "not", "schema": {"not": {"type": "string"}}, "refuse": "not"},
        {"name": "dependent_required", "schema": {"type": "object", "dependentRequired": {"a": ["b"]}},
         "refuse": "dependentRequired"},
        {"name": "property_names", "schema": {"type": "object", "propertyNames": {"pattern": "^a"}},
         "refuse": "propertyNames"},
        {"name": "format_unknown", "schema": s(format="credit-card"), "refuse": "credit-card"},
        {"name": "unevaluated", "schema": {"type": "object", "unevaluatedProperties": False}, "refuse": "unevaluatedProperties"},
    ]


def main():
    shapes = base_shapes()
    corpus = [{"name": k, "schema": v} for k, v in shapes.items()]
    corpus += variants(shapes, 200)
    corpus += refused()
    OUT.write_text(json.dumps(corpus, indent=1) + "\n")
    print(f"{len(corpus)} schemas -> {OUT}")


if __name__ == "__main__":
    main()
