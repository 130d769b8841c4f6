"""A forced tool call cut by `max_tokens` at every length from one token to the whole call, through the openai
SDK against a running `tgi serve` on the bundled model that reads and forces calls in FAMILY's format
(`--tool-call-parser`): every cut has one shape, in the whole answer, the raw stream and the SDK's stream helper:
no content, one call (an id, type `function`) whose name and arguments are the whole call's as far as they were
generated (the name empty before its first character), and `finish_reason` "length" until the call is complete,
"tool_calls" from then on.

Usage: serve_tools_cut.py URL FAMILY
Exits non-zero with a message on the first failed check.
"""

import sys

from openai import LengthFinishReasonError, OpenAI

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"enum": ["Paris", "Rome"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
TIME = {
    "type": "object",
    "properties": {"zone": {"enum": ["UTC", "CET"]}},
    "required": ["zone"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": TIME}},
]
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]


def check(what, got, want):
    if got != want:
        sys.exit(f"{what}: got {got!r}, want {want!r}")


def whole(client, common, n):
    """The answer cut to `n` tokens: (finish_reason, [(id, type, name, arguments)]), checked to have no content."""
    choice = client.chat.completions.create(**common, max_tokens=n).choices[0]
    check(f"{n} tokens: content", choice.message.content, None)
    calls = [(c.id, c.type, c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
    return choice.finish_reason, calls


def raw_stream(client, common, n):
    """The same streamed, accumulated from OpenAI's delta shapes, checked on the way."""
    reason, calls = None, []
    for chunk in client.chat.completions.create(**common, max_tokens=n, stream=True):
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        check(f"{n} tokens, streamed: content delta", choice.delta.content or "", "")
        for part in choice.delta.tool_calls or []:
            if part.id is not None:
                check(f"{n} tokens, streamed: a new call's index", part.index, len(calls))
                check(f"{n} tokens, streamed: its first delta", (part.type, part.function.arguments), ("function", ""))
                calls.append([part.id, part.type, part.function.name, ""])
            else:
                check(f"{n} tokens, streamed: a later delta's fields", (part.index, part.type, part.function.name),
                      (len(calls) - 1, None, None))
                calls[-1][3] += part.function.arguments
        reason = choice.finish_reason or reason
    return reason, [tuple(c) for c in calls]


def helper_stream(client, common, n):
    """The same through the SDK's stream helper, which raises LengthFinishReasonError (with what it
    accumulated) for an answer cut by its length."""
    try:
        with client.chat.completions.stream(**common, max_tokens=n) as stream:
            for event in stream:
                if event.type == "content.delta" and event.delta:
                    sys.exit(f"{n} tokens, stream helper: content delta {event.delta!r}")
            choice = stream.get_final_completion().choices[0]
    except LengthFinishReasonError as e:
        choice = e.completion.choices[0]
    calls = [(c.id, c.type, c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
    return choice.finish_reason, calls


def main():
    url, family = sys.argv[1], sys.argv[2]
    client = OpenAI(base_url=url + "/v1", api_key="unused")
    model = client.models.list().data[0].id
    common = dict(model=model, messages=MESSAGES, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
                  temperature=0)
    full = client.chat.completions.create(**common, max_tokens=100)
    check(f"{family}: the whole call's finish_reason", full.choices[0].finish_reason, "tool_calls")
    call = full.choices[0].message.tool_calls[0].function
    name, arguments = call.name, call.arguments
    tokens = full.usage.completion_tokens
    print(f"ok {family}: {name}({arguments}) in {tokens} tokens")
    complete = False
    for n in range(1, tokens + 1):
        reason, calls = whole(client, common, n)
        what = f"{family}, cut to {n} tokens: {reason} {calls}"
        check(f"{what}: one call", len(calls), 1)
        call_id, kind, got_name, got_arguments = calls[0]
        check(f"{what}: id and type", (bool(call_id), kind), (True, "function"))
        check(f"{what}: the name so far", name.startswith(got_name), True)
        check(f"{what}: the arguments so far", arguments.startswith(got_arguments), True)
        complete = complete or reason == "tool_calls"
        check(f"{what}: finish_reason", reason, "tool_calls" if complete else "length")
        if complete:
            check(f"{what}: a complete call", (got_name, got_arguments), (name, arguments))
        for how, read in (("raw stream", raw_stream), ("stream helper", helper_stream)):
            streamed_reason, streamed = read(client, common, n)
            check(f"{what}: {how}", (streamed_reason, [c[1:] for c in streamed]), (reason, [c[1:] for c in calls]))
            check(f"{what}: {how} id", bool(streamed[0][0]), True)
    check(f"{family}: complete at the whole call's length", complete, True)
    print(f"all cut tool call checks passed ({family}, {tokens} cuts)")


if __name__ == "__main__":
    main()
