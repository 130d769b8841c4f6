"""Schemathesis checks for `tests/schemathesis.sh`: the positive and negative data checks, less the
cases a JSON schema cannot state.

A schema-valid request may still be refused (422) for a rule that depends on the prompt's tokens or
on two fields together (the token budget, `best_of` with sampling, seed or streaming, `top_logprobs`
without `logprobs`, the chat template, unique tool names and a `tool_choice` among the `tools`) or on a grammar's type and compiler (the shape of its value, whether it compiles); `/generate_stream` (and `POST /` with `stream: true`) reports a
refusal as the stream's error event, TGI's behaviour, under status 200; and serde reads an object from
the array of its fields and an enum tag from its index, so a value of another JSON type can be accepted
in these forms; and the server reads sampling parameters as 32-bit floats, so a number that is not an
f32 (e.g. `top_p: 1.0000000000000002`) is read as the nearest f32, which may be the bound itself.
Everything else is the built-in check.
"""

import json
import re

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
    """Schema-valid data is accepted, or refused only for a rule no schema can express."""
    try:
        return positive_data_acceptance(ctx, response, case)
    except AssertionError:
        message = _error_message(response) if response.status_code == 422 else None
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


# Number bounds (and `format: float`, and the `anyOf` of a nullable number) are what rounding to the
# nearest f32 can move a value across.
_NUMBER_KEYWORDS = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "format", "anyOf"}


def _value_at(body, schema_path):
    """The request value a schema path such as `/properties/parameters/properties/top_p/anyOf/0` names."""
    keys = re.findall(r"/properties/([^/]+)", schema_path)
    value = body
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def _f32_rounded(violation, case):
    """Whether a violation is a number bound on a value that is not an f32, which the server reads as the
    nearest f32 (within the bound)."""
    found = re.search(r"violates (.+?) at (/\S+)", violation)
    keywords = set(re.findall(r"`([^`]+)`", found.group(1))) if found else {"?"}
    if not keywords <= _NUMBER_KEYWORDS:
        return False
    value = _value_at(case.body, found.group(2))
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    with numpy.errstate(over="ignore"):
        nearest = float(numpy.float32(value))
    if keywords == {"format"}:
        # `format: float` holds for any value within f32's range (it is read as the nearest f32); the
        # mutation is reported on values it left within it too.
        return bool(numpy.isfinite(nearest))
    # An f32 itself, or beyond f32's range (read as infinity, which must be refused): no exemption.
    return nearest != value and bool(numpy.isfinite(nearest))


def _only_exempt_violations(failure, case):
    """Whether every violation a negative case reports is a changed JSON type serde accepts or an f32
    rounding (alone or together, as a case may mutate two fields)."""
    parts = _violations(failure)
    return bool(parts) and all(_TYPE_CHANGE.search(p) or _f32_rounded(p, case) for p in parts)


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
