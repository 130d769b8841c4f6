#!/usr/bin/env python3
"""Render every template in this folder with Jinja2 set up as transformers' apply_chat_template does,
and write the results to expected.json for the Rust tests (engines/tests/chat_templates.rs).

Usage: pip install jinja2 && python3 make_expected.py

The environment follows transformers' `_cached_compile_jinja_template` and `render_jinja_template`
(transformers 5.x): ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with loop
controls, the `tojson` filter through json.dumps(ensure_ascii=False, ...), `raise_exception`,
`strftime_now`, `namespace`, messages with None keys dropped, reasoning aliased to `thinking` and
`reasoning_content`, `tools` and `documents` passed as None unless given, special tokens passed as
`bos_token`/`eos_token`. `strftime_now` reads a FIXED time so the output is reproducible.
"""

import json
import pathlib
from datetime import datetime

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = pathlib.Path(__file__).resolve().parent
FIXED_NOW = datetime(2025, 3, 14, 10, 30, 0)  # the Rust tests fix the same time
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")

# Real special tokens for the templates the tests single out; "<s>"/"</s>" for the rest.
SPECIAL_TOKENS = {
    "meta-llama-Llama-3.1-8B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.2-3B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "meta-llama-Llama-3.3-70B-Instruct": ("<|begin_of_text|>", "<|eot_id|>"),
    "Qwen-Qwen2.5-7B-Instruct": (None, "<|im_end|>"),
    "Qwen-Qwen3-0.6B": (None, "<|im_end|>"),
    "mistralai-Mistral-Nemo-Instruct-2407": ("<s>", "</s>"),
    "google-gemma-2-2b-it": ("<bos>", "<eos>"),
    "microsoft-Phi-3.5-mini-instruct": ("<s>", "<|endoftext|>"),
    "deepseek-ai-DeepSeek-R1-Distill-Llama-8B": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "HuggingFaceTB-SmolLM3-3B": (None, "<|im_end|>"),
    "openai-gpt-oss-120b": ("<|startoftext|>", "<|return|>"),
    "ibm-granite-granite-3.3-2B-Instruct": ("<|end_of_text|>", "<|end_of_text|>"),
}

SYSTEM = {"role": "system", "content": "You are a helpful assistant."}
USER1 = {"role": "user", "content": "Hello!"}
ASSISTANT1 = {"role": "assistant", "content": "Hi there! How can I help you today?"}
USER2 = {"role": "user", "content": "What is 2+2? Answer in one word, “four” or ‘4’."}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7, "default": 1},
                "threshold": {"type": "number", "default": 0.5},
            },
            "required": ["city"],
        },
    },
}
TOOL_CALL = {
    "id": "call12345",
    "type": "function",
    "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}},
}
ASK_WEATHER = {"role": "user", "content": "What's the weather in Paris?"}

# Context some templates cannot render without (merged over each case's extra, winning).
TEMPLATE_EXTRA = {
    # tool_use variants iterate `tools` unconditionally
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": {"tools": [WEATHER_TOOL]},
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": {"tools": [WEATHER_TOOL]},
    # Cohere's tool_use template wants its own tool format: name, description, parameter_definitions
    "CohereForAI-c4ai-command-r-plus-tool_use": {
        "tools": [
            {
                "name": "get_weather",
                "description": "Get the current weather in a city.",
                "parameter_definitions": {
                    "city": {"description": "City name, e.g. Paris", "type": "str", "required": True},
                },
            }
        ]
    },
    # firefunction-v2 reads the tool list as a JSON string named `functions`, and the date as `datetime`
    "fireworks-ai-llama-3-firefunction-v2": {
        "functions": json.dumps([WEATHER_TOOL["function"]], indent=2),
        "datetime": "2025-03-14",
    },
}

# Message keys are in the order the Rust `Message` serializes them, for templates that iterate them.
CASES = {
    "basic": dict(messages=[SYSTEM, USER1, ASSISTANT1, USER2], add_generation_prompt=True),
    "no_system": dict(messages=[USER1, ASSISTANT1, USER2], add_generation_prompt=True),
    "no_generation_prompt": dict(messages=[SYSTEM, USER1, ASSISTANT1, USER2], add_generation_prompt=False),
    "content_parts": dict(
        messages=[
            {"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "world!"}]},
        ],
        add_generation_prompt=True,
    ),
    "reasoning": dict(
        messages=[
            USER1,
            {"role": "assistant", "content": "Hi!", "reasoning_content": "The user greets me."},
            USER2,
            {"role": "assistant", "content": "Four.", "reasoning_content": "2+2=4."},
        ],
        add_generation_prompt=False,
    ),
    "no_thinking": dict(messages=[USER1], add_generation_prompt=True, extra={"enable_thinking": False}),
    "tools": dict(messages=[SYSTEM, ASK_WEATHER], add_generation_prompt=True, extra={"tools": [WEATHER_TOOL]}),
    "tool_call": dict(
        messages=[
            ASK_WEATHER,
            {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
            {"role": "tool", "content": "{\"temp\": 18}", "name": "get_weather", "tool_call_id": "call12345"},
        ],
        add_generation_prompt=True,
        extra={"tools": [WEATHER_TOOL]},
    ),
}


class Generation(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`: transformers' assistant-mask tag, rendered as its body."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(format):
        return FIXED_NOW.strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["namespace"] = jinja2.utils.Namespace
    return env


def alias_reasoning(message):
    reasoning = next((message[k] for k in REASONING_FIELDS if message.get(k) is not None), None)
    if reasoning is not None:
        message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
    return message


def render(env, source, bos, eos, case, template_extra):
    special = {k: v for k, v in (("bos_token", bos), ("eos_token", eos)) if v is not None}
    kwargs = {**special, **case.get("extra", {}), **template_extra}
    tools = kwargs.pop("tools", None)
    documents = kwargs.pop("documents", None)
    messages = [alias_reasoning({k: v for k, v in m.items() if v is not None}) for m in case["messages"]]
    template = env.from_string(source)
    return template.render(
        messages=messages,
        tools=tools,
        documents=documents,
        add_generation_prompt=case["add_generation_prompt"],
        **kwargs,
    )


def main():
    env = make_env()
    out = {
        "fixed_now": FIXED_NOW.isoformat(),
        "jinja2_version": jinja2.__version__,
        "cases": {name: {"extra": {}, **case} for name, case in CASES.items()},
        "templates": [],
    }
    for path in sorted(HERE.glob("*.jinja")):
        name = path.stem
        source = path.read_text(encoding="utf-8")
        bos, eos = SPECIAL_TOKENS.get(name, ("<s>", "</s>"))
        template_extra = TEMPLATE_EXTRA.get(name, {})
        entry = {"name": name, "bos_token": bos, "eos_token": eos, "extra": template_extra, "results": {}}
        for case_name, case in CASES.items():
            try:
                result = {"expected": render(env, source, bos, eos, case, template_extra)}
            except Exception as e:  # noqa: BLE001 - raise_exception's TemplateError, UndefinedError, TypeError, ...
                result = {"error": {"kind": type(e).__name__, "message": str(e)}}
            entry["results"][case_name] = result
        out["templates"].append(entry)
    (HERE / "expected.json").write_text(json.dumps(out, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    for entry in out["templates"]:
        errors = [f"{case}:{r['error']['kind']}" for case, r in entry["results"].items() if "error" in r]
        print(entry["name"], "ok" if not errors else errors)


if __name__ == "__main__":
    main()
