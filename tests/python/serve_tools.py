"""Tool calling with real API clients against a running `tgi serve` whose chat template is Hermes-style
(tests/chat_templates/hermes_tools.jinja): the openai SDK (non-streamed, streamed through its own stream
helper) and huggingface_hub's InferenceClient, with `tool_choice` required, a named function and auto.
Forced calls must name a given tool and carry arguments valid for its schema.

Usage: serve_tools.py URL
Exits non-zero with a message on the first failed check.
"""

import json
import sys

import jsonschema
from huggingface_hub import InferenceClient
from openai import OpenAI

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
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER, "strict": True}},
    {"type": "function", "function": {"name": "get_time", "parameters": TIME, "strict": True}},
]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
MESSAGES = [{"role": "user", "content": "Weather in Paris?"}]
NAMED = {"type": "function", "function": {"name": "get_time"}}


def check(what, got, want):
    if got != want:
        sys.exit(f"{what}: got {got!r}, want {want!r}")
    print(f"ok {what}")


def valid_call(what, name, arguments, only=None):
    """A call of a given tool (or of `only`) whose arguments (a JSON string or an object) fit its schema."""
    check(f"{what}: a given tool", name in SCHEMAS and (only is None or name == only), True)
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    try:
        jsonschema.validate(args, SCHEMAS[name])
    except jsonschema.ValidationError as e:
        sys.exit(f"{what}: arguments {args!r} do not fit {name}'s schema: {e.message}")
    print(f"ok {what}: {name}({json.dumps(args)})")


def openai_checks(url):
    client = OpenAI(base_url=url + "/v1", api_key="unused")
    model = client.models.list().data[0].id
    common = dict(model=model, messages=MESSAGES, tools=TOOLS, max_tokens=100)

    r = client.chat.completions.create(**common, tool_choice="required", parallel_tool_calls=False, temperature=0)
    choice = r.choices[0]
    check("required: finish_reason", choice.finish_reason, "tool_calls")
    check("required: content", choice.message.content, None)
    check("required: one call", len(choice.message.tool_calls), 1)
    call = choice.message.tool_calls[0]
    check("required: id", call.id.startswith("call_"), True)
    valid_call("required", call.function.name, call.function.arguments)

    r = client.chat.completions.create(**common, tool_choice=NAMED, temperature=1.0, seed=3)
    calls = r.choices[0].message.tool_calls
    check("named: finish_reason", r.choices[0].finish_reason, "tool_calls")
    check("named: one call", len(calls), 1)
    valid_call("named, sampled", calls[0].function.name, calls[0].function.arguments, only="get_time")

    # Parallel calls allowed: every complete call is valid (the last may be cut by max_tokens).
    r = client.chat.completions.create(**common, tool_choice="required", temperature=1.0, seed=11)
    calls = r.choices[0].message.tool_calls
    complete = calls if r.choices[0].finish_reason == "tool_calls" else calls[:-1]
    check("parallel: at least one call", len(calls) >= 1, True)
    for i, c in enumerate(complete):
        valid_call(f"parallel call {i}", c.function.name, c.function.arguments)
    check("parallel: indices distinct ids", len({c.id for c in calls}), len(calls))

    # Streamed, through the SDK's own stream helper (which accumulates the deltas and parses arguments).
    for choice_arg, only in (("required", None), (NAMED, "get_time")):
        done = []
        with client.chat.completions.stream(
            **common, tool_choice=choice_arg, parallel_tool_calls=False, temperature=0
        ) as stream:
            for event in stream:
                if event.type == "tool_calls.function.arguments.done":
                    done.append((event.name, event.parsed_arguments))
                if event.type == "content.delta" and event.delta:
                    sys.exit(f"stream {choice_arg}: content delta {event.delta!r} in a forced call")
            final = stream.get_final_completion()
        check(f"stream {only or choice_arg}: finish_reason", final.choices[0].finish_reason, "tool_calls")
        check(f"stream {only or choice_arg}: one call done", len(done), 1)
        valid_call(f"stream {only or choice_arg} (parsed by the SDK)", done[0][0], done[0][1], only=only)
        call = final.choices[0].message.tool_calls[0]
        check(f"stream {only or choice_arg}: accumulated id", call.id.startswith("call_"), True)
        valid_call(f"stream {only or choice_arg} (accumulated)", call.function.name, call.function.arguments, only=only)

    # The same stream without the helper: OpenAI's delta shapes.
    chunks = list(client.chat.completions.create(**common, tool_choice="required", parallel_tool_calls=False,
                                                 temperature=0, stream=True))
    parts = [tc for ch in chunks if ch.choices for tc in (ch.choices[0].delta.tool_calls or [])]
    check("raw stream: first part has id, type, name", (parts[0].id is not None, parts[0].type, parts[0].function.name
                                                        is not None), (True, "function", True))
    check("raw stream: later parts carry only arguments",
          all(p.id is None and p.type is None and p.function.name is None for p in parts[1:]), True)
    valid_call("raw stream", parts[0].function.name, "".join(p.function.arguments or "" for p in parts))

    # auto: the tiny story model answers with text, which comes back as content (no calls).
    r = client.chat.completions.create(**common, tool_choice="auto", temperature=0)
    msg = r.choices[0].message
    check("auto: text content", isinstance(msg.content, str) and len(msg.content) > 0, True)
    check("auto: no calls", (msg.tool_calls, r.choices[0].finish_reason in ("stop", "length")), (None, True))

    # A conversation with an earlier call and its result renders through the template.
    history = MESSAGES + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": json.dumps({"city": "Paris", "days": 1})}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny."},
    ]
    r = client.chat.completions.create(model=model, messages=history, tools=TOOLS[:1], max_tokens=8, temperature=0)
    check("tool result turn: answered", r.choices[0].finish_reason in ("stop", "length", "tool_calls"), True)


def hf_checks(url):
    client = InferenceClient(base_url=url)
    single = {"parallel_tool_calls": False}
    out = client.chat_completion(MESSAGES, tools=TOOLS, tool_choice="required", max_tokens=100, temperature=0,
                                 tool_prompt="Tools:", extra_body=single)
    calls = out.choices[0].message.tool_calls
    check("hf required: finish_reason", out.choices[0].finish_reason, "tool_calls")
    check("hf required: one call", len(calls), 1)
    valid_call("hf required", calls[0].function.name, calls[0].function.arguments)
    pieces = list(client.chat_completion(MESSAGES, tools=TOOLS, tool_choice={"function": {"name": "get_time"}}, max_tokens=100,
                                         temperature=0, stream=True))
    parts = [tc for p in pieces if p.choices for tc in (p.choices[0].delta.tool_calls or [])]
    valid_call("hf named stream", parts[0].function.name, "".join(p.function.arguments or "" for p in parts),
               only="get_time")


def main():
    url = sys.argv[1]
    openai_checks(url)
    hf_checks(url)
    print("all tool checks passed")


if __name__ == "__main__":
    main()
