"""Real API clients against a running `tgi serve`: the openai SDK and huggingface_hub's
InferenceClient, stream and not, and SageMaker-style POSTs to /invocations and /chat_tokenize.
Greedy outputs must equal the expected texts (from `tgi generate`).

Usage: serve_clients.py URL EXPECTED.json
EXPECTED.json: {"prompt", "max_tokens", "completion", "chat_messages", "chat"} where "completion" is
the greedy continuation of "prompt" and "chat" the greedy reply to "chat_messages".
Exits non-zero with a message on the first mismatch.
"""

import json
import sys
import urllib.error
import urllib.request

from huggingface_hub import InferenceClient
from openai import OpenAI


def check(what, got, want):
    if got != want:
        sys.exit(f"{what}: got {got!r}, want {want!r}")
    print(f"ok {what}")


def post(url, body):
    """POSTs `body` as JSON, as SageMaker's runtime does; the status and the parsed answer."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


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

    e = client.completions.create(model=model, prompt=exp["prompt"], max_tokens=4, temperature=0, echo=True, logprobs=2)
    text, lp = e.choices[0].text, e.choices[0].logprobs
    check("echo text", text.startswith(exp["prompt"]), True)
    check("echo first prompt token has no alternatives", lp.top_logprobs[0], None)
    check("echo alternatives of the others", {len(t) for t in lp.top_logprobs[1:]}, {2})
    check("echo offsets ascend", lp.text_offset == sorted(lp.text_offset), True)
    generated = list(zip(lp.tokens, lp.text_offset))[-e.usage.completion_tokens:]
    check("echo offsets of generated tokens", all(text[o:].startswith(t) for t, o in generated), True)
    check("echo offsets after the prompt", generated[0][1], len(exp["prompt"]))

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
    last = [ch.choices[0] for ch in chunks if ch.choices][-1]
    check("chat stream finish delta", (last.delta.role, last.delta.content), ("assistant", ""))
    deltas = [ch.choices[0].delta for ch in chunks if ch.choices]
    check("chat stream content in every delta", all(d.content is not None for d in deltas), True)

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

    chunks = list(
        client.chat_completion(exp["chat_messages"], max_tokens=exp["max_tokens"], temperature=0, stream=True)
    )
    check("hf chat_completion stream", "".join(ch.choices[0].delta.content for ch in chunks), exp["chat"])
    check("hf chat_completion stream finish", chunks[-1].choices[0].finish_reason, reply.choices[0].finish_reason)

    image = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    try:
        client.chat_completion([{"role": "user", "content": [{"type": "text", "text": "What is it?"}, image]}])
        sys.exit("an image_url part was accepted")
    except Exception as e:  # huggingface_hub's HTTP error for a 422
        check("hf image_url refused", "this model takes text only" in str(e), True)


def tgi_route_checks(url, exp):
    generate = {"inputs": exp["prompt"], "parameters": {"max_new_tokens": exp["max_tokens"]}}
    status, out = post(url + "/invocations", generate)
    check("invocations generate", (status, out), (200, [{"generated_text": exp["completion"]}]))
    body = {"messages": exp["chat_messages"], "max_tokens": exp["max_tokens"], "temperature": 0}
    status, out = post(url + "/invocations", body)
    check("invocations chat", (status, out["choices"][0]["message"]["content"]), (200, exp["chat"]))
    completion = {"prompt": exp["prompt"], "max_tokens": exp["max_tokens"], "temperature": 0}
    status, out = post(url + "/invocations", completion)
    check("invocations completions", (status, out["choices"][0]["text"]), (200, exp["completion"]))
    status, out = post(url + "/invocations", {"messages": []})
    check("invocations error", (status, out["error_type"]), (422, "validation"))

    status, out = post(url + "/chat_tokenize", body)
    check("chat_tokenize status", status, 200)
    text, tokens = out["templated_text"], out["tokenize_response"]
    check("chat_tokenize text holds the message", exp["chat_messages"][0]["content"] in text, True)
    status, chat = post(url + "/v1/chat/completions", body)
    check("chat_tokenize tokens are the chat prompt's", len(tokens), chat["usage"]["prompt_tokens"])
    check("chat_tokenize spans", all(t["text"] == text[t["start"]:t["stop"]] for t in tokens), True)


def main():
    url, expected = sys.argv[1], sys.argv[2]
    with open(expected) as f:
        exp = json.load(f)
    openai_checks(url, exp)
    hf_checks(url, exp)
    tgi_route_checks(url, exp)
    print("all client checks passed")


if __name__ == "__main__":
    main()
