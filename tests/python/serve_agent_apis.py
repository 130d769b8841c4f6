"""The APIs agents call, through their official SDKs, against a running `tgi serve` with an API key and a
Hermes-style chat template (tests/chat_templates/hermes_tools.jinja): Anthropic's Messages API (the `anthropic`
SDK: messages whole and streamed through its stream helper, tool use forced and named, a tool result round
trip, stop sequences, structured output, count_tokens, errors) and OpenAI's Responses API (the `openai` SDK's
`client.responses`: whole and streamed, a function call round trip through previous_response_id, text.format,
retrieve and delete, errors). Greedy answers must equal chat completions' for the same conversation: one
generation path.

Usage: serve_agent_apis.py URL API_KEY
Exits non-zero with a message on the first failed check.
"""

import json
import sys

import anthropic
import jsonschema
import openai

# The tools and checks of the chat completions' tool tests (the same two functions and schemas).
from serve_tools import SCHEMAS, WEATHER, check, valid_call

STORY = "Tell me a story about a cat."
# The anthropic SDK no longer takes sampling parameters; the server still does (greedy here).
GREEDY = {"extra_body": {"temperature": 0}}


def expects(what, error_class, status, call):
    """`call` raises `error_class` with `status`; returns the error's body."""
    try:
        call()
    except error_class as e:
        check(f"{what}: status", e.status_code, status)
        return e.body
    sys.exit(f"{what}: no {error_class.__name__}")


def chat_reference(url, key, messages, max_tokens):
    """The greedy chat completion of `messages`: its text and prompt tokens."""
    client = openai.OpenAI(base_url=url + "/v1", api_key=key)
    r = client.chat.completions.create(model="tgi", messages=messages, max_tokens=max_tokens, temperature=0)
    return r.choices[0].message.content, r.usage.prompt_tokens


def anthropic_checks(url, key):
    client = anthropic.Anthropic(base_url=url, api_key=key)
    system, user = "You tell short stories.", [{"role": "user", "content": STORY}]
    want, prompt_tokens = chat_reference(url, key, [{"role": "system", "content": system}] + user, 24)

    m = client.messages.create(model="tgi", max_tokens=24, system=system, messages=user, **GREEDY)
    check("messages: the chat completion's greedy text", m.content[0].text, want)
    check("messages: role and stop_reason", (m.role, m.stop_reason in ("end_turn", "max_tokens")), ("assistant", True))
    check("messages: input tokens as chat's", m.usage.input_tokens, prompt_tokens)
    count = client.messages.count_tokens(model="tgi", system=system, messages=user)
    check("count_tokens", count.input_tokens, prompt_tokens)

    with client.messages.stream(model="tgi", max_tokens=24, system=system, messages=user, **GREEDY) as stream:
        streamed = "".join(stream.text_stream)
        final = stream.get_final_message()
    check("stream: text", streamed, want)
    check("stream: final message", (final.content[0].text, final.stop_reason, final.usage.output_tokens),
          (want, m.stop_reason, m.usage.output_tokens))

    # A stop sequence from the middle of the greedy answer ends it there.
    words = want.split()
    stop = words[len(words) // 2]
    cut = client.messages.create(model="tgi", max_tokens=24, system=system, messages=user, **GREEDY,
                                 stop_sequences=[stop])
    check("stop_sequences: reason and sequence", (cut.stop_reason, cut.stop_sequence), ("stop_sequence", stop))
    check("stop_sequences: the text before it", cut.content[0].text if cut.content else "", want[:want.index(stop)])

    tools = [{"name": name, "description": f"{name}.", "input_schema": schema} for name, schema in SCHEMAS.items()]
    ask = [{"role": "user", "content": "Weather in Paris?"}]
    r = client.messages.create(model="tgi", max_tokens=100, messages=ask, tools=tools, **GREEDY,
                               tool_choice={"type": "any", "disable_parallel_tool_use": True})
    calls = [b for b in r.content if b.type == "tool_use"]
    check("any: stop_reason", r.stop_reason, "tool_use")
    check("any: one call", len(calls), 1)
    valid_call("any", calls[0].name, calls[0].input)

    with client.messages.stream(model="tgi", max_tokens=100, messages=ask, tools=tools, **GREEDY,
                                tool_choice={"type": "tool", "name": "get_time"}) as stream:
        json_events = [e for e in stream if e.type == "input_json"]
        final = stream.get_final_message()
    named = [b for b in final.content if b.type == "tool_use"]
    check("tool, streamed: input_json events", len(json_events) > 0, True)
    check("tool, streamed: stop_reason", final.stop_reason, "tool_use")
    valid_call("tool, streamed (accumulated by the SDK)", named[0].name, named[0].input, only="get_time")

    # The call's result goes back as a tool_result; the model answers with text.
    history = ask + [{"role": "assistant", "content": [b.model_dump() for b in r.content]},
                     {"role": "user", "content": [{"type": "tool_result", "tool_use_id": calls[0].id,
                                                   "content": "Sunny, 24 C."}]}]
    after = client.messages.create(model="tgi", max_tokens=8, messages=history, tools=tools, **GREEDY,
                                   tool_choice={"type": "none"})
    j = client.messages.create(model="tgi", max_tokens=100, messages=ask, **GREEDY,
                               output_config={"format": {"type": "json_schema", "schema": WEATHER}})
    try:
        jsonschema.validate(json.loads(j.content[0].text), WEATHER)
    except (ValueError, jsonschema.ValidationError) as e:
        sys.exit(f"output_config.format: {j.content[0].text!r} does not fit the schema: {e}")
    print(f"ok output_config.format: {j.content[0].text}")

    check("tool result: answered with text", ({b.type for b in after.content} <= {"text"},
                                               after.stop_reason in ("end_turn", "max_tokens")), (True, True))

    body = expects("empty messages", anthropic.BadRequestError, 400,
                   lambda: client.messages.create(model="tgi", max_tokens=4, messages=[]))
    check("error shape", (body["type"], body["error"]["type"]), ("error", "invalid_request_error"))
    wrong = anthropic.Anthropic(base_url=url, api_key="wrong")
    body = expects("wrong key", anthropic.AuthenticationError, 401,
                   lambda: wrong.messages.create(model="tgi", max_tokens=4, messages=user))
    check("wrong key: error type", body["error"]["type"], "authentication_error")


def responses_checks(url, key):
    client = openai.OpenAI(base_url=url + "/v1", api_key=key)
    want, prompt_tokens = chat_reference(url, key, [{"role": "user", "content": STORY}], 24)

    r = client.responses.create(model="tgi", input=STORY, max_output_tokens=24, temperature=0)
    check("responses: the chat completion's greedy text", r.output_text, want)
    check("responses: status", r.status in ("completed", "incomplete"), True)
    check("responses: input tokens as chat's", r.usage.input_tokens, prompt_tokens)

    with client.responses.stream(model="tgi", input=STORY, max_output_tokens=24, temperature=0) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        streamed = stream.get_final_response() if r.status == "completed" else None
    check("stream: text", "".join(deltas), want)
    if streamed is not None:
        check("stream: final response", streamed.output_text, want)
    raw = list(client.responses.create(model="tgi", input=STORY, max_output_tokens=24, temperature=0, stream=True))
    check("raw stream: first events", [e.type for e in raw[:2]], ["response.created", "response.in_progress"])
    check("raw stream: sequence numbers", [e.sequence_number for e in raw], list(range(len(raw))))
    check("raw stream: last event", raw[-1].type, f"response.{r.status}")

    # A function call, its output sent back through previous_response_id.
    tools = [{"type": "function", "name": n, "parameters": schema, "strict": True} for n, schema in SCHEMAS.items()]
    first = client.responses.create(model="tgi", input="Weather in Paris?", tools=tools, tool_choice="required",
                                    parallel_tool_calls=False, max_output_tokens=100, temperature=0)
    calls = [o for o in first.output if o.type == "function_call"]
    check("function call: one call", len(calls), 1)
    valid_call("function call", calls[0].name, calls[0].arguments)
    again = client.responses.retrieve(first.id)
    check("retrieve: the stored response", again.model_dump(), first.model_dump())
    output = [{"type": "function_call_output", "call_id": calls[0].call_id, "output": "Sunny, 24 C."}]
    second = client.responses.create(model="tgi", previous_response_id=first.id, tools=tools, tool_choice="none",
                                     max_output_tokens=8, temperature=0, input=output)
    only_text = {o.type for o in second.output} <= {"message"}
    check("round trip: answered with text", (second.previous_response_id, only_text), (first.id, True))
    alone = client.responses.create(model="tgi", tools=tools, tool_choice="none", max_output_tokens=1, temperature=0,
                                    input=output, store=False)
    check("round trip: the earlier turns are in the prompt", second.usage.input_tokens > alone.usage.input_tokens, True)

    done = []
    with client.responses.stream(model="tgi", input="Weather in Paris?", tools=tools,
                                 tool_choice={"type": "function", "name": "get_time"},
                                 max_output_tokens=100, temperature=0) as stream:
        for event in stream:
            if event.type == "response.function_call_arguments.done":
                done.append(event.arguments)
        final = stream.get_final_response()
    check("named, streamed: arguments done once", len(done), 1)
    call = [o for o in final.output if o.type == "function_call"][0]
    valid_call("named, streamed", call.name, call.arguments, only="get_time")
    check("named, streamed: done event equals the final call", done[0], call.arguments)

    fmt = {"format": {"type": "json_schema", "name": "weather", "schema": WEATHER, "strict": True}}
    j = client.responses.create(model="tgi", input="Weather in Paris?", text=fmt, max_output_tokens=100, temperature=0)
    try:
        jsonschema.validate(json.loads(j.output_text), WEATHER)
    except (ValueError, jsonschema.ValidationError) as e:
        sys.exit(f"text.format: {j.output_text!r} does not fit the schema: {e}")
    print(f"ok text.format: {j.output_text}")

    client.responses.delete(first.id)
    expects("retrieve after delete", openai.NotFoundError, 404, lambda: client.responses.retrieve(first.id))
    body = expects("unknown previous_response_id", openai.NotFoundError, 404,
                   lambda: client.responses.create(model="tgi", input="x", previous_response_id=first.id))
    check("error shape", sorted(body), ["code", "message", "param", "type"])
    expects("a tool of another type", openai.UnprocessableEntityError, 422,
            lambda: client.responses.create(model="tgi", input="x", tools=[{"type": "web_search"}]))


def main():
    url, key = sys.argv[1], sys.argv[2]
    anthropic_checks(url, key)
    responses_checks(url, key)
    print("all agent API checks passed")


if __name__ == "__main__":
    main()
