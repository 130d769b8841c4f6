"""Schemathesis checks for `tests/schemathesis.sh`: the positive and negative data checks, less the
cases a JSON schema cannot state.

A schema-valid request may still be refused (422; 400 under Anthropic's /v1/messages) for a rule that depends on
the prompt's tokens or
on two fields together (the token budget, `best_of` with sampling, seed or streaming, `top_logprobs`
without `logprobs`, the chat template, unique tool names and a `tool_choice` among the `tools`) or on a grammar's type and compiler (the shape of its value, whether it compiles); `/generate_stream` (and `POST /` with `stream: true`) reports a
refusal as the stream's error event, TGI's behaviour, under status 200; and serde reads an object from
the array of its fields and an enum tag from its index, so a value of another JSON type can be accepted
in these forms; and `format: float` is a number within f32's range, which the server reads as the
nearest f32 (its range checks run on the number as sent, so `top_p: 1.0000000000000002` is refused).
Everything else is the built-in check.
"""

import json
import pathlib
import re

import jsonschema
import numpy

import schemathesis
from hypothesis.internal import lambda_sources
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance

# CPython 3.11.7's AST constructor miscounts its recursion depth when `ast.parse` runs deep inside a
# strategy's recursion ("SystemError: AST constructor recursion depth mismatch", fixed in 3.11.8), and
# hypothesis parses a lambda's source there only to describe it: such a lambda is described as unknown.
_describe_lambda = lambda_sources._lambda_description


def _lambda_description(f):
    try:
        return _describe_lambda(f)
    except SystemError:
        return "lambda: <unknown>"


lambda_sources._lambda_description = _lambda_description

# Messages of the refusals no schema can express (commands/src/serve/error.rs).
CROSS_FIELD = (
    "`inputs` tokens + `max_new_tokens` must be <=",
    "`inputs` must have less than",
    "you must use sampling when `best_of` is > 1",
    "`seed` must not be set when `best_of` > 1",
    "`best_of` != 1 is not supported when streaming tokens",
    "`decoder_input_details` == true is not supported when streaming tokens",
    "`best_of` must be >= `n`",
    "`logprobs` must be true when `top_logprobs` is set",
    "Template error:",
    # Chat's `max_tokens` may be 0 when `max_completion_tokens` is set, which replaces it.
    "`max_new_tokens` must be strictly positive",
    # A grammar's value depends on its type (the description says how; one flat schema keeps the
    # generator's recursion shallow), and whether it compiles (a JSON schema that is unsatisfiable, a
    # regex or Lark grammar that does not parse) is the grammar compiler's to say.
    "`grammar`: ",
    "`response_format`: ",
    # Tool names are unique, and `tool_choice` names one of `tools` (or needs some).
    "`tools` names the function",
    "which is not in `tools`",
    "needs `tools`",
    # A tool's parameters schema that the grammar engine refuses once a call is forced (unsatisfiable, or a
    # keyword it cannot enforce): the description only says "an object".
    "`tools`: invalid lark grammar",
    # A forced call (`required`, a named tool) and an output format at once (the Messages and Responses APIs).
    "cannot be combined with a `response_format` grammar",
    # A Responses input of reasoning items only, without a previous response.
    "`input`: the conversation is empty",
    # Embeddings: token ids below the served model's vocabulary, and `dimensions` equal to its hidden size (the
    # description names both; the document is the same for every model).
    "outside the vocabulary of",
    "`dimensions` is not supported",
    # LoRA adapters: whether a path holds an adapter for this model, and which names are loaded, are the server's
    # state (422 for an adapter that cannot be loaded, 404 for a name that is not loaded).
    "LoRA adapter: ",
    "is neither the served model nor a loaded LoRA adapter",
)


def _error_message(response):
    """The error message of a TGI or OpenAI error body, or None."""
    try:
        body = json.loads(response.content)
    except ValueError:
        return None
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    if isinstance(error, dict):
        error = error.get("message")
    return error if isinstance(error, str) else None


def _stream_error(response):
    """Whether an event stream's first event is an error."""
    if not response.headers.get("content-type", [""])[0].startswith("text/event-stream"):
        return False
    # Split on newlines only: `splitlines` also splits on U+0085 and friends, which an error message may echo.
    for line in response.content.decode("utf-8", "replace").split("\n"):
        if line.startswith("data:"):
            try:
                event = json.loads(line[5:])
            except ValueError:
                return False
            return isinstance(event, dict) and "error" in event
    return False


@schemathesis.check
def positive_data_acceptance_tgi(ctx, response, case):
    """Schema-valid data is accepted, or refused only for a rule no schema can express (422, or 400 under
    Anthropic's /v1/messages, which answers a refused input as Anthropic does)."""
    try:
        return positive_data_acceptance(ctx, response, case)
    except AssertionError:
        refused = response.status_code in (404, 422) or (
            response.status_code == 400 and case.path.startswith("/v1/messages")
        )
        message = _error_message(response) if refused else None
        if message and any(m in message for m in CROSS_FIELD):
            return None
        raise


# A changed JSON type, as the coverage phase names it and as the fuzzing phase does
# (`violates `type` at /properties/stream_options/anyOf/0 (was object, became array)`).
_TYPE_CHANGE = re.compile(r"(Incorrect type|violates `type` at \S+ \(was \w+, became \w+\))$")


def _violations(failure):
    """The violation lines a negative case reports."""
    lines = str(getattr(failure, "message", "")).splitlines()
    return [line.rstrip() for line in lines if line.startswith("  - ")] or [
        line.rstrip() for line in lines if line.startswith("Invalid component")
    ]


def _value_at(body, schema_path):
    """The request value a schema path such as `/properties/parameters/properties/top_p/format` names."""
    keys = re.findall(r"/properties/([^/]+)", schema_path)
    value = body
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _f32_format(violation, case):
    """Whether a violation is `format: float` alone on a number within f32's range: the mutation is
    reported on values it left within that range too, and the server reads them as the nearest f32."""
    found = re.search(r"violates `format` at (/\S+)", violation)
    if not found:
        return False
    value = _value_at(case.body, found.group(1))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    with numpy.errstate(over="ignore"):
        return bool(numpy.isfinite(numpy.float32(value)))


# The bundled description, to look up what a violation's schema path expects.
_SPEC = json.loads((pathlib.Path(__file__).parents[2] / "commands/src/serve/openapi.json").read_text())


def _resolve(schema):
    """`schema` with its `$ref` followed."""
    while isinstance(schema, dict) and "$ref" in schema:
        schema = _SPEC["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    return schema


def _schema_at(case, schema_path):
    """The body schema of the case's operation at a path such as `/anyOf/1/properties/stream_options`
    (schemathesis writes `nullable` as an `anyOf` of the schema and null), or None."""
    try:
        operation = _SPEC["paths"][case.path][case.method.lower()]
        schema = _resolve(operation["requestBody"]["content"]["application/json"]["schema"])
    except (KeyError, AttributeError):
        return None
    parts = [p for p in schema_path.split("/") if p]
    while parts:
        key = parts.pop(0)
        if key in ("anyOf", "oneOf") and key not in schema and schema.get("nullable") and parts:
            schema = schema if parts.pop(0) == "0" else {"type": "null"}
        elif isinstance(schema, dict) and key in schema:
            schema = schema[key]
        elif isinstance(schema, list) and key.isdigit() and int(key) < len(schema):
            schema = schema[int(key)]
        else:
            return None
        schema = _resolve(schema)
    return schema


def _takes_object(schema):
    """Whether a schema (or one of its `anyOf`/`oneOf` branches) is an object."""
    if not isinstance(schema, dict):
        return False
    branches = [_resolve(b) for b in schema.get("anyOf", []) + schema.get("oneOf", [])]
    return schema.get("type") == "object" or any(_takes_object(b) for b in branches)


def _array_for_object(violation, case):
    """Whether a violation is an array where the schema takes an object, which serde reads as the
    object's fields in order (`"stream_options": []` is the default options)."""
    found = re.search(r"violates (.+?) at (/\S+)", violation)
    if not found or not set(re.findall(r"`([^`]+)`", found.group(1))) <= {"anyOf", "oneOf", "type"}:
        return False
    return isinstance(_value_at(case.body, found.group(2)), list) and _takes_object(_schema_at(case, found.group(2)))


def _has_value_at(body, schema_path):
    """Whether the request sets the value a schema path names (to anything, null included)."""
    for key in re.findall(r"/properties/([^/]+)", schema_path):
        if not isinstance(body, dict) or key not in body:
            return False
        body = body[key]
    return True


class _TooDeep(Exception):
    """A schema nests too deep to convert (a recursive one)."""


def _json_schema(schema, depth=0):
    """An OpenAPI 3.0 schema as JSON Schema draft 4: `$ref`s inlined and `nullable` as an `anyOf` with null."""
    if depth > 16:
        raise _TooDeep
    schema = _resolve(schema)
    if isinstance(schema, list):
        return [_json_schema(s, depth + 1) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key in ("properties", "patternProperties"):
            out[key] = {k: _json_schema(v, depth + 1) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not", "anyOf", "oneOf", "allOf"):
            out[key] = _json_schema(value, depth + 1)
        elif key != "nullable":
            out[key] = value
    return {"anyOf": [out, {"type": "null"}]} if schema.get("nullable") else out


def _still_valid(violation, case):
    """Whether a violation's property holds a value its whole schema accepts: schemathesis targets one branch
    of an `anyOf` and may land on a value another branch takes (`violates `oneOf` at /properties/stop/anyOf/0`
    for `"stop": null`, which `nullable` allows), and lists it beside the case's real mutation."""
    found = re.search(r"violates .+? at ((?:/\S*)?/properties/[^/]+)", violation)
    if not found or not _has_value_at(case.body, found.group(1)):
        return False
    schema = _schema_at(case, found.group(1))
    try:
        converted = _json_schema(schema)
    except _TooDeep:
        return False
    return schema is not None and jsonschema.Draft4Validator(converted).is_valid(_value_at(case.body, found.group(1)))


def _only_exempt_violations(failure, case):
    """Whether every violation a negative case reports is a changed JSON type serde accepts (an array
    for an object, however it is reported), a `format: float` within f32's range, or a value the property's
    whole schema accepts (alone or together, as a case may mutate two fields)."""
    parts = _violations(failure)
    exempt = (
        _TYPE_CHANGE.search,
        lambda p: _f32_format(p, case),
        lambda p: _array_for_object(p, case),
        lambda p: _still_valid(p, case),
    )
    return bool(parts) and all(any(e(p) for e in exempt) for p in parts)


@schemathesis.check
def negative_data_rejection_tgi(ctx, response, case):
    """Schema-violating data is refused: by its status, or by a stream's first event. A value of another
    JSON type is refused except in serde's generic forms (an object read from an array of its fields
    in order, an enum tag from its index, e.g. `"parameters": [null, 1.0]`), which are accepted."""
    try:
        return negative_data_rejection(ctx, response, case)
    except AssertionError as failure:
        if response.status_code == 200 and (
            _stream_error(response) or _only_exempt_violations(failure, case)
        ):
            return None
        raise
