#!/usr/bin/env python3
"""Writes the seed corpora under corpus/<target>/ (run from fuzz/; needs the `gguf` package).

Every seed is small and valid, so that the fuzzer starts from inputs that reach deep into each parser.
"""

import json
import struct
from pathlib import Path

import numpy as np
import gguf

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(__file__).resolve().parent / "corpus"


def seed(target: str, name: str, data: bytes) -> None:
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def gguf_bytes(build) -> bytes:
    path = CORPUS / "tmp.gguf"
    w = gguf.GGUFWriter(str(path), arch="llama")
    build(w)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    data = path.read_bytes()
    path.unlink()
    return data


def spm_vocab(w) -> None:
    pieces = ["▁", "t", "h", "e", "▁t", "he", "▁the", "re"]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces + ["<|user|>"]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * 259 + [-float(i + 1) for i in range(len(pieces))] + [0.0])
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * len(pieces) + [4])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template("{% for m in messages %}{{ m.content }}{% endfor %}")
    w.add_tensor("token_embd.weight", np.arange(8, dtype=np.float32).reshape(2, 4))


def bpe_vocab(w) -> None:
    byte_chars = [chr(c) for c in range(ord("!"), ord("~") + 1)] + [chr(c) for c in range(ord("¡"), ord("¬") + 1)]
    byte_chars += [chr(c) for c in range(ord("®"), ord("ÿ") + 1)]
    n = 0
    table = []
    for b in range(256):
        if b in [ord(c) for c in byte_chars if ord(c) < 256]:
            table.append(chr(b))
        else:
            table.append(chr(256 + n))
            n += 1
    tokens = table + ["Ġt", "he", "Ġthe", "<|endoftext|>"]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt-2")
    w.add_token_list(tokens)
    w.add_token_types([1] * 259 + [3])
    w.add_token_merges(["Ġ t", "h e", "Ġt he"])
    w.add_bos_token_id(259)
    w.add_eos_token_id(259)


def all_types(w) -> None:
    w.add_uint8("t.u8", 7)
    w.add_int8("t.i8", -7)
    w.add_uint16("t.u16", 700)
    w.add_int16("t.i16", -700)
    w.add_uint32("t.u32", 70000)
    w.add_int32("t.i32", -70000)
    w.add_float32("t.f32", 0.5)
    w.add_uint64("t.u64", 1 << 40)
    w.add_int64("t.i64", -(1 << 40))
    w.add_float64("t.f64", 0.25)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "héllo")
    w.add_array("t.arr", [1, 2, 3])
    w.add_array("t.nested", [[1, 2], [3]])
    w.add_tensor("a", np.ones((3, 5), dtype=np.float16))
    w.add_tensor("b", np.zeros(7, dtype=np.float32))


def safetensors_bytes(tensors) -> bytes:
    header, data = {"__metadata__": {"format": "pt"}}, b""
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def main() -> None:
    seed("gguf", "spm-vocab.gguf", gguf_bytes(spm_vocab))
    seed("gguf", "bpe-vocab.gguf", gguf_bytes(bpe_vocab))
    seed("gguf", "all-types.gguf", gguf_bytes(all_types))
    seed("gguf", "empty.gguf", b"GGUF" + struct.pack("<IQQ", 3, 0, 0))

    f32 = struct.pack("<6f", *range(6))
    seed("safetensors", "f32.safetensors", safetensors_bytes([("w", "F32", [2, 3], f32)]))
    seed("safetensors", "mixed.safetensors", safetensors_bytes([
        ("a", "F16", [2, 2], struct.pack("<4e", 1, 2, 3, 4)),
        ("b", "BF16", [3], b"\x80\x3f" * 3),
        ("c", "I8", [4], b"\x01\x02\x03\x04"),
        ("d", "U8", [0], b""),
        ("e", "F64", [1], struct.pack("<d", 2.5)),
    ]))
    seed("safetensors", "empty.safetensors", safetensors_bytes([]))

    for i, (model, files) in enumerate([
        ("stories260k", ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"]),
        ("stories-distill-4l", ["config.json", "generation_config.json", "tokenizer_config.json"]),
    ]):
        for name in files:
            which = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"].index(name)
            data = (ROOT / "models" / model / "hf" / name).read_bytes()
            seed("hf_json", f"{model}-{name}", bytes([which]) + data)
    llama3 = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2, "vocab_size": 512,
        "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": True,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 128},
        "sliding_window": 64, "head_dim": 16,
    }
    seed("hf_json", "llama3-config.json", b"\x00" + json.dumps(llama3).encode())
    seed("hf_json", "eos-list-generation_config.json",
         b"\x01" + json.dumps({"eos_token_id": [1, 2], "do_sample": True, "temperature": 0.7, "top_p": 0.9}).encode())

    for i, text in enumerate([
        b"\x00Hello world! <s> The quick brown fox\n\t  \xc3\xa9\xe4\xb8\xad",
        b"\x01\x01\x01 <|begin_of_text|>It's 1234567 o'clock\r\n\r\n",
        b"\x02\x00\x01<|im_start|>user\nhi<|im_end|>\x10\x20\x30\x40\x50\x60",
        b"\x05\x01\x00\xf0\x9f\x98\x80 emoji   spaces\xe2\x80\x8b",
    ]):
        seed("tokenizer", f"seed-{i}", text)

    for i, text in enumerate([
        b"\x00\x03\x00\x05Hello\x01\x02\x04world\x00\x00",
        b"\x10\x05\x02\x03sys\x01\x01\x08be brief\x02\x00\x02\x04calc\x0a{\"a\": 1}\x03\x00\x01{\"enable_thinking\": true}",
        b"\x2a\x08\x01\x01\x01a\x00\x01b\x02\x01c\x03\x01d\x04\x03xyz\x01e\x01\x01\x01\x01f{\"tools\": []}",
    ]):
        seed("chat_template", f"seed-{i}", text)

    bodies = [
        (0, {"inputs": "Once upon a time", "parameters": {"max_new_tokens": 8}, "stream": False}),
        (1, {"inputs": "Once upon a time", "parameters": {"do_sample": True, "temperature": 0.7, "top_k": 5,
                                                           "top_p": 0.9, "truncate": 4, "stop": ["."],
                                                           "best_of": 2, "details": True, "top_n_tokens": 2}}),
        (2, {"inputs": "Lily", "parameters": {"max_new_tokens": 3, "decoder_input_details": False}}),
        (3, {"inputs": "Once upon a time", "add_special_tokens": True}),
        (4, {"model": "m", "prompt": ["Once", "upon"], "max_tokens": 4, "n": 2, "logprobs": 2, "echo": True}),
        (4, {"model": "m", "prompt": [[1, 2, 3]], "max_tokens": 4, "stream": True,
             "stream_options": {"include_usage": True}}),
        (5, {"model": "m", "messages": [{"role": "system", "content": "Be brief."},
                                         {"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
             "max_tokens": 4, "logprobs": True, "top_logprobs": 2, "stop": "x", "seed": 1}),
        (5, {"messages": [{"role": "user", "content": "Hi"}], "chat_template_kwargs": {"enable_thinking": False},
             "tools": [], "response_format": {"type": "text"}, "stream": True}),
        (8, {"model": "m", "max_tokens": 8, "system": "Be brief.", "stop_sequences": ["."], "temperature": 0,
             "messages": [{"role": "user", "content": "Weather?"},
                          {"role": "assistant", "content": [
                              {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}}]},
                          {"role": "user", "content": [
                              {"type": "tool_result", "tool_use_id": "t1", "content": "Sunny"}]}],
             "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}],
             "tool_choice": {"type": "auto"}, "thinking": {"type": "enabled", "budget_tokens": 1024}, "stream": True}),
        (9, {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]}),
        (10, {"model": "m", "instructions": "Be brief.", "max_output_tokens": 8, "input": [
            {"role": "user", "content": "Weather?"},
            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "Sunny"}],
            "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}],
            "text": {"format": {"type": "json_object"}}, "store": False}),
    ]
    for i, (route, body) in enumerate(bodies):
        seed("request", f"seed-{i}.json", bytes([route]) + json.dumps(body).encode())

    tgi_stream = (
        b'data:{"token":{"id":1,"text":"a","logprob":-0.1,"special":false},"generated_text":null}\n\n'
        b'data:{"token":{"id":2,"text":"b","logprob":-0.2,"special":false},"generated_text":"ab",'
        b'"details":{"finish_reason":"length","generated_tokens":2,"input_length":3}}\n\n'
    )
    openai_stream = (
        b': keep-alive\r\n\r\ndata: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}\r\n\r\n'
        b'event: x\nid: 1\ndata: {"choices":[{"index":0,"text":"b","finish_reason":"stop"}]}\n\n'
        b'data: {"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}\n\ndata: [DONE]\n\n'
    )
    errors = b'data: {"error":"Input validation error","error_type":"validation"}\n\ndata: {"error":{"message":"x"}}\n'
    for i, (chunking, stream) in enumerate([(0, tgi_stream), (7, openai_stream), (200, errors)]):
        seed("sse", f"seed-{i}", bytes([chunking]) + stream)

    # grammar: the first byte picks a JSON schema (0), a regular expression (1) or a Lark grammar (2).
    schemas = [
        {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"},
                                          "score": {"type": "number", "minimum": 0}}, "required": ["name"]},
        {"$defs": {"node": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"},
                                                                      "maxItems": 3}}}}, "$ref": "#/$defs/node"},
        {"anyOf": [{"enum": ["a", "b", 3, None]}, {"type": "array", "prefixItems": [{"type": "boolean"}]}],
         "allOf": [{"oneOf": [{"type": "string", "pattern": "^[a-z]+$"}, {"type": "null"}]}]},
    ]
    grammars = [bytes([0]) + json.dumps(s).encode() for s in schemas] + [
        bytes([1]) + rb"(yes|no), [0-9]{3}(\.[0-9]+)?",
        bytes([1]) + rb"(a+)+$|[^\s\S]|\p{L}{2,5}",
        bytes([2]) + b'start: "n=" num ("," num)*\nnum: %json {"type": "number"}\n',
        bytes([2]) + b'start: greeting | other\ngreeting: "hi" | "hello" // a comment\nother: /[a-z]{1,4}/ "!"\n',
    ]
    for i, g in enumerate(grammars):
        seed("grammar", f"seed-{i}", g)


if __name__ == "__main__":
    main()
