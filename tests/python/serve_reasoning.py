"""Reasoning split with the openai SDK against a running `tgi serve` of the bundled stories260k model, whose answers
never close a thinking block by themselves: the budget does.

Modes (the server's flags in brackets):
  budget  [--chat-template deepseek_r1_distill.jinja --reasoning-budget 6]: the prompt opens the block; the first 6
          tokens are reasoning, then `</think>` is forced (its tokens with log-probability 0) and the answer goes
          on as content. `reasoning_content` and `reasoning` (in the SDK's `model_extra`) are those 6 tokens' text,
          trimmed; streamed deltas add up to the whole answer, reasoning before content; a forced tool call after
          the thinking parses, streamed and not. The anthropic SDK's messages carry the same reasoning as a
          `thinking` block before the text, and the openai SDK's responses as a `reasoning` item before the message
          (with its `reasoning_tokens`), whole and streamed.
  none    [same template, --reasoning-format none --reasoning-budget 6]: the answer stays whole in `content`.
  plain   [--chat-template qwen3.jinja]: the model opens no block, so everything is content and no reasoning field
          is sent; `enable_thinking: false` renders the template's empty block.

Usage: serve_reasoning.py URL MODE
Exits non-zero with a message on the first failed check.
"""

import json
import sys

import requests
from anthropic import Anthropic
from openai import OpenAI

MESSAGES = [{"role": "user", "content": "Tell me a story about a cat."}]
# A small tool, so that the thinking, the forced tag and the call fit in the 512-token context of the bundled
# model, whose tokens are mostly single characters.
WEATHER = {"type": "object", "properties": {"c": {"enum": ["P", "R"]}}, "required": ["c"],
           "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "w", "parameters": WEATHER}}]
BUDGET = 6


def check(what, got, want):
    if got != want:
        sys.exit(f"{what}: got {got!r}, want {want!r}")
    print(f"ok {what}")


def extra(obj, name):
    return (obj.model_extra or {}).get(name)


def streamed(client, **kw):
    """A streamed answer as a client adds it up: reasoning, content, tool-call parts, finish reason, and whether
    a reasoning delta came after content."""
    reasoning, reasoning_new, content, calls, finish, late = "", "", "", {}, None, False
    for ch in client.chat.completions.create(stream=True, **kw):
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        r = extra(d, "reasoning_content")
        if r:
            late |= bool(content)
            reasoning += r
        reasoning_new += extra(d, "reasoning") or ""
        content += d.content or ""
        for t in d.tool_calls or []:
            c = calls.setdefault(t.index, ["", ""])
            c[0] += t.function.name or ""
            c[1] += t.function.arguments or ""
        finish = ch.choices[0].finish_reason or finish
    check("stream: `reasoning` repeats `reasoning_content`", reasoning_new, reasoning)
    check("stream: no reasoning after content", late, False)
    return reasoning, content, calls, finish


def budget(url, client, model):
    common = dict(model=model, messages=MESSAGES, max_tokens=20, temperature=0)
    r = client.chat.completions.create(logprobs=True, **common)
    msg, tokens = r.choices[0].message, r.choices[0].logprobs.content
    pieces = [t.token for t in tokens]
    end = next(j for j in range(BUDGET, len(pieces) + 1) if "".join(pieces[BUDGET:j]) == "</think>")
    check("the budget's tokens, then the forced tag", "".join(pieces[BUDGET:end]), "</think>")
    check("forced tokens have log-probability 0", [t.logprob for t in tokens[BUDGET:end]], [0.0] * (end - BUDGET))
    check("reasoning_content is the budget's tokens", extra(msg, "reasoning_content"),
          "".join(pieces[:BUDGET]).strip())
    check("reasoning repeats it", extra(msg, "reasoning"), extra(msg, "reasoning_content"))
    check("content follows the block", isinstance(msg.content, str) and len(msg.content) > 0, True)
    check("content has no tag", "think>" in msg.content, False)
    s = streamed(client, **common)
    check("stream equals the whole answer", s[:2], (extra(msg, "reasoning_content"), msg.content))

    # A forced call after the thinking: the grammar waits for the block's end.
    tools = dict(common, max_tokens=86, tools=TOOLS, tool_choice="required", parallel_tool_calls=False)
    r = client.chat.completions.create(**tools)
    m = r.choices[0].message
    check("tools: finish_reason", r.choices[0].finish_reason, "tool_calls")
    check("tools: reasoning first", len(extra(m, "reasoning_content") or "") > 0, True)
    check("tools: no content", m.content, None)
    call = m.tool_calls[0].function
    check("tools: the call", (call.name, json.loads(call.arguments)["c"] in ("P", "R")), ("w", True))
    reasoning, content, calls, finish = streamed(client, **tools)
    check("tools stream", (reasoning, content, calls[0][0], json.loads(calls[0][1]), finish),
          (extra(m, "reasoning_content"), "", call.name, json.loads(call.arguments), "tool_calls"))


    agents(url, client, model, extra(msg, "reasoning_content"), msg.content)


def agents(url, client, model, reasoning, content):
    """The same answer through Anthropic's Messages API and OpenAI's Responses API: its thinking first."""
    claude = Anthropic(base_url=url, api_key="unused")
    kw = dict(model=model, messages=MESSAGES, max_tokens=20, extra_body={"temperature": 0})
    m = claude.messages.create(**kw)
    check("messages: blocks", [b.type for b in m.content], ["thinking", "text"])
    check("messages: thinking and text", (m.content[0].thinking, m.content[1].text), (reasoning, content))
    with claude.messages.stream(**kw) as stream:
        kinds = {e.delta.type for e in stream if e.type == "content_block_delta"}
        final = stream.get_final_message()
    check("messages stream: deltas", kinds, {"thinking_delta", "text_delta"})
    check("messages stream: the same blocks", [b.model_dump() for b in final.content],
          [b.model_dump() for b in m.content])

    kw = dict(model=model, input=MESSAGES[0]["content"], max_output_tokens=20, temperature=0)
    r = client.responses.create(**kw)
    check("responses: items", [o.type for o in r.output], ["reasoning", "message"])
    check("responses: reasoning and text", (r.output[0].content[0].text, r.output_text), (reasoning, content))
    check("responses: reasoning_tokens", r.usage.output_tokens_details.reasoning_tokens > 0, True)
    events = list(client.responses.create(stream=True, **kw))
    kinds = [e.type for e in events]
    final = events[-1].response  # `response.incomplete`: max_output_tokens cut it, as the whole one
    check("responses stream: the last event", kinds[-1], "response." + r.status)
    check("responses stream: reasoning deltas first", kinds.index("response.reasoning_text.delta")
          < kinds.index("response.output_text.delta"), True)
    check("responses stream: the same output", (final.output[0].content[0].text, final.output_text),
          (reasoning, content))


def none(url, client, model):
    r = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=20, temperature=0, logprobs=True)
    msg = r.choices[0].message
    check("none: no reasoning field", (extra(msg, "reasoning_content"), extra(msg, "reasoning")), (None, None))
    pieces = [t.token for t in r.choices[0].logprobs.content]
    check("none: content is the answer as written, tag included",
          "".join(pieces[:BUDGET]).strip() + "</think>" in msg.content.replace("\n", "").strip(), True)


def plain(url, client, model):
    r = client.chat.completions.create(model=model, messages=MESSAGES, max_tokens=12, temperature=0)
    msg = r.choices[0].message
    check("plain: no reasoning field", (extra(msg, "reasoning_content"), extra(msg, "reasoning")), (None, None))
    check("plain: content", len(msg.content) > 0, True)
    reasoning, content, _, _ = streamed(client, model=model, messages=MESSAGES, max_tokens=12, temperature=0)
    check("plain stream", (reasoning, content), ("", msg.content))
    body = {"messages": MESSAGES}
    text = requests.post(url + "/chat_tokenize", json=body).json()["templated_text"]
    check("plain: thinking on by default", text.endswith("<|im_start|>assistant\n"), True)
    body["chat_template_kwargs"] = {"enable_thinking": False}
    text = requests.post(url + "/chat_tokenize", json=body).json()["templated_text"]
    check("plain: enable_thinking false", text.endswith("<think>\n\n</think>\n\n"), True)


def main():
    url, mode = sys.argv[1], sys.argv[2]
    client = OpenAI(base_url=url + "/v1", api_key="unused")
    model = client.models.list().data[0].id
    {"budget": budget, "none": none, "plain": plain}[mode](url, client, model)
    print("all reasoning checks passed")


main()
