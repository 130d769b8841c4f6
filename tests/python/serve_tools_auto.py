"""`tool_choice: auto` through the openai SDK's own stream helper, against the serve tests' mock engine, which
answers a prompt about the weather with "Let me check." and a Hermes <tool_call> (the bundled story model never
writes a call of its own).

Usage: serve_tools_auto.py URL
"""

import json
import sys

from openai import OpenAI

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
MESSAGES = [{"role": "user", "content": "What is the weather in Paris?"}]


def check(what, got, want):
    if got != want:
        sys.exit(f"{what}: got {got!r}, want {want!r}")
    print(f"ok {what}")


def main():
    client = OpenAI(base_url=sys.argv[1] + "/v1", api_key="unused")
    common = dict(model="m", messages=MESSAGES, tools=TOOLS, tool_choice="auto", max_tokens=300)
    r = client.chat.completions.create(**common)
    msg = r.choices[0].message
    check("auto: finish_reason", r.choices[0].finish_reason, "tool_calls")
    check("auto: text before the call is content", msg.content.strip(), "Let me check.")
    check("auto: the call", (msg.tool_calls[0].function.name, json.loads(msg.tool_calls[0].function.arguments)),
          ("get_weather", {"city": "Paris"}))
    content, done = [], []
    with client.chat.completions.stream(**common) as stream:
        for event in stream:
            if event.type == "content.delta":
                content.append(event.delta)
            if event.type == "tool_calls.function.arguments.done":
                done.append((event.name, json.loads(event.arguments)))
        final = stream.get_final_completion()
    check("auto stream: content deltas", "".join(content).strip(), "Let me check.")
    check("auto stream: call read by the SDK helper", done, [("get_weather", {"city": "Paris"})])
    check("auto stream: finish_reason", final.choices[0].finish_reason, "tool_calls")
    check("auto stream: accumulated id", final.choices[0].message.tool_calls[0].id.startswith("call_"), True)
    print("all auto tool checks passed")


if __name__ == "__main__":
    main()
