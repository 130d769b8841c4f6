"""Real API clients against a running `tgi serve`: the openai SDK and huggingface_hub's
InferenceClient, stream and not. Greedy outputs must equal the expected texts (from `tgi generate`).

Usage: serve_clients.py URL EXPECTED.json
EXPECTED.json: {"prompt", "max_tokens", "completion", "chat_messages", "chat"} where "completion" is
the greedy continuation of "prompt" and "chat" the greedy reply to "chat_messages".
Exits non-zero with a message on the first mismatch.
"""

import json
import sys

from huggingface_hub import InferenceClient
from openai import OpenAI


def check(what, got, want):
    if got != want:
        sys.exit(f"{what}: got {got!r}, want {want!r}")
    print(f"ok {what}")


def openai_checks(url, exp):
    client = OpenAI(base_url=url + "/v1", api_key="unused")
    models = client.models.list()
    check("models.list has one model", len(models.data), 1)
    model = models.data[0].id

    c = client.completions.create(model=model, prompt=exp["prompt"], max_tokens=exp["max_tokens"], temperature=0)
    check("completions text", c.choices[0].text, exp["completion"])
    check("completions finish_reason", c.choices[0].finish_reason, exp["finish_reason"])
    check("completions usage.completion_tokens", c.usage.completion_tokens, exp["completion_tokens"])
    check("completions usage total", c.usage.total_tokens, c.usage.prompt_tokens + c.usage.completion_tokens)

    stream = client.completions.create(
        model=model, prompt=exp["prompt"], max_tokens=exp["max_tokens"], temperature=0, stream=True
    )
    check("completions stream text", "".join(ch.choices[0].text for ch in stream if ch.choices), exp["completion"])

    r = client.chat.completions.create(
        model=model, messages=exp["chat_messages"], max_tokens=exp["max_tokens"], temperature=0,
        logprobs=True, top_logprobs=2,
    )
    msg = r.choices[0].message
    check("chat role", msg.role, "assistant")
    check("chat content", msg.content, exp["chat"])
    lp = r.choices[0].logprobs.content
    check("chat logprobs count", len(lp), r.usage.completion_tokens)
    check("chat top_logprobs per token", {len(t.top_logprobs) for t in lp}, {2})
    # Greedy: the chosen token is the most likely one.
    check("chat greedy logprob is the top", all(abs(t.logprob - t.top_logprobs[0].logprob) < 1e-4 for t in lp), True)

    chunks = list(client.chat.completions.create(
        model=model, messages=exp["chat_messages"], max_tokens=exp["max_tokens"], temperature=0, stream=True,
        stream_options={"include_usage": True},
    ))
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    check("chat stream content", text, exp["chat"])
    check("chat stream usage last", chunks[-1].usage is not None and chunks[-1].choices == [], True)
    check("chat stream usage tokens", chunks[-1].usage.completion_tokens, r.usage.completion_tokens)
    finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    check("chat stream one finish_reason", finishes, [r.choices[0].finish_reason])

    two = client.chat.completions.create(
        model=model, messages=exp["chat_messages"], max_tokens=8, temperature=0.9, seed=7, n=2
    )
    check("chat n=2 choices", sorted(c.index for c in two.choices), [0, 1])

    try:
        client.completions.create(model=model, prompt=exp["prompt"], max_tokens=4, temperature=-1)
        sys.exit("a negative temperature was accepted")
    except Exception as e:  # openai.BadRequestError or UnprocessableEntityError
        status = getattr(e, "status_code", None)
        check("openai error status is 4xx", status is not None and 400 <= status < 500, True)


def hf_checks(url, exp):
    client = InferenceClient(base_url=url)
    text = client.text_generation(exp["prompt"], max_new_tokens=exp["max_tokens"])
    check("text_generation", text, exp["completion"])

    out = client.text_generation(exp["prompt"], max_new_tokens=exp["max_tokens"], details=True, decoder_input_details=True)
    check("details generated_text", out.generated_text, exp["completion"])
    check("details finish_reason", out.details.finish_reason, exp["tgi_finish_reason"])
    check("details generated_tokens", out.details.generated_tokens, exp["completion_tokens"])
    check("details tokens", len(out.details.tokens), exp["completion_tokens"])
    check("details prefill first logprob", out.details.prefill[0].logprob, None)

    pieces = []
    last = None
    for ev in client.text_generation(exp["prompt"], max_new_tokens=exp["max_tokens"], stream=True, details=True):
        pieces.append(ev.token.text)
        last = ev
    check("stream final generated_text", last.generated_text, exp["completion"])
    check("stream details", last.details.generated_tokens, exp["completion_tokens"])
    check("stream token count", len(pieces), exp["completion_tokens"])

    plain = list(client.text_generation(exp["prompt"], max_new_tokens=exp["max_tokens"], stream=True))
    check("stream of strings", len(plain), exp["completion_tokens"])

    reply = client.chat_completion(exp["chat_messages"], max_tokens=exp["max_tokens"], temperature=0)
    check("hf chat_completion", reply.choices[0].message.content, exp["chat"])


def main():
    url, expected = sys.argv[1], sys.argv[2]
    with open(expected) as f:
        exp = json.load(f)
    openai_checks(url, exp)
    hf_checks(url, exp)
    print("all client checks passed")


if __name__ == "__main__":
    main()
