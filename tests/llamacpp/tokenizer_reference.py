"""llama.cpp's tokenization of tests/llamacpp/tokenizer-corpus.jsonl for every `tokenizer.ggml.pre` name it accepts
and every vocabulary tests/llamacpp/fetch-vocabs.sh fetches, the reference of engines/tests/tokenizer_families.rs.

A name's vocabularies are real ones from the cache with `tokenizer.ggml.pre` rewritten to the name (Qwen2's 151k and
Llama 3's 128k BPE vocabularies; Gemma 4's, its model made `gpt2`, for the SentencePiece-style names), so llama.cpp runs that name's
regexes and settings; the test makes the same files at test time. tokenize_inputs.cpp is compiled against a build
of the llama.cpp that fetch-vocabs.sh fetches (0c1e570, vendored in llama-cpp-python 0.3.36; LLAMACPP_SRC and
LLAMACPP_BUILD name its source and build folders, by default ~/.cache/tgi-llamacpp/src and .../build).

Each line of an input's ids is recorded as `count:hash`, the hash FNV-1a 32 over the ids written as decimal
numbers separated by spaces; names with the same lines share one list, and a name llama.cpp fails on (it aborts
on `whitespace` with a `gpt2` vocabulary) has null. Writes JSON {"lines": [[...], ...],
"pre": {name: {vocabulary: list index}}, "vocabs": {file: list index}} to stdout.

    python3 tests/llamacpp/tokenizer_reference.py > engines/tests/data/tokenizer-families.json
"""
import json
import os
import pathlib
import re
import struct
import subprocess
import sys
import tempfile

HERE = pathlib.Path(__file__).resolve().parent
CACHE = pathlib.Path.home() / ".cache/tgi-llamacpp"
SRC = pathlib.Path(os.environ.get("LLAMACPP_SRC", CACHE / "src"))
BUILD = pathlib.Path(os.environ.get("LLAMACPP_BUILD", CACHE / "build")) / "bin"
# The vocabularies every other name is tested on: Qwen2's has single digits only, Llama 3's numbers to 999.
BYTE_LEVEL = ["qwen2", "llama-bpe"]
# Names whose words are SentencePiece-style (`▁` for spaces, UTF-8 pieces): tested on Gemma 4's vocabulary.
SENTENCEPIECE = {"gemma4", "granite-embed-multi-311m", "sarvam-moe"}


def fnv1a(text):
    h = 0x811C9DC5
    for b in text.encode():
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def read_string(data, at):
    (n,) = struct.unpack_from("<Q", data, at)
    return data[at + 8:at + 8 + n].decode(), at + 8 + n


SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def skip_value(data, at, ty):
    if ty == 8:
        return read_string(data, at)[1]
    if ty == 9:
        item, n = struct.unpack_from("<IQ", data, at)
        at += 12
        if item in SCALAR:
            return at + SCALAR[item] * n
        for _ in range(n):
            at = skip_value(data, at, item)
        return at
    return at + SCALAR[ty]


def string_kv(key, value):
    k, v = key.encode(), value.encode()
    return struct.pack("<Q", len(k)) + k + struct.pack("<I", 8) + struct.pack("<Q", len(v)) + v


def rewrite(src, dst, strings):
    """Copies the tensor-less GGUF `src` to `dst` with the string keys of `strings` set."""
    data = src.read_bytes()
    magic, version, n_tensors, n_kv = struct.unpack_from("<4sIQQ", data, 0)
    assert magic == b"GGUF" and n_tensors == 0, src
    at, kvs = 24, []
    for _ in range(n_kv):
        start = at
        key, at = read_string(data, at)
        (ty,) = struct.unpack_from("<I", data, at)
        at = skip_value(data, at + 4, ty)
        if key not in strings:
            kvs.append(data[start:at])
    kvs += [string_kv(k, v) for k, v in strings.items()]
    out = struct.pack("<4sIQQ", magic, version, 0, len(kvs)) + b"".join(kvs)
    dst.write_bytes(out + b"\0" * (-len(out) % 32))


def pre_names():
    source = (SRC / "src/llama-vocab.cpp").read_text()
    names = []
    for name in re.findall(r'tokenizer_pre == "([^"]+)"', source):
        if name not in names:
            names.append(name)
    return names


def main():
    vocabs = pathlib.Path(subprocess.run(["bash", str(HERE / "fetch-vocabs.sh")], check=True, capture_output=True,
                                         text=True).stdout.strip())
    inputs = [json.loads(line) for line in (HERE / "tokenizer-corpus.jsonl").read_text().splitlines()]
    stdin = b"".join(b"%d\n%s" % (len(t.encode()), t.encode()) for t in inputs)
    lists, index = [], {}
    result = {"lines": lists, "pre": {}, "vocabs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        driver = tmp / "driver"
        subprocess.run(["g++", "-std=c++17", "-O1", f"-I{SRC / 'include'}", f"-I{SRC / 'ggml/include'}",
                        str(HERE / "tokenize_inputs.cpp"), f"-L{BUILD}", "-lllama", f"-Wl,-rpath,{BUILD}", "-o",
                        str(driver)], check=True)

        def tokenize(gguf):
            run = subprocess.run([str(driver), str(gguf)], input=stdin, capture_output=True)
            if run.returncode != 0:
                print(f"{gguf.name}: llama.cpp failed (exit {run.returncode}): {run.stderr.decode()[-300:]}",
                      file=sys.stderr)
                return None
            out = run.stdout
            lines = [f"{len(ids.split())}:{fnv1a(ids):08x}" for ids in out.decode().split("\n")[:-1]]
            assert len(lines) == len(inputs), gguf
            return index.setdefault(tuple(lines), len(index))

        for name in pre_names():
            result["pre"][name] = {}
            for base in (["gemma-4"] if name in SENTENCEPIECE else BYTE_LEVEL):
                strings = {"tokenizer.ggml.model": "gpt2"} if name in SENTENCEPIECE else {}
                gguf = tmp / f"{name}.gguf"
                rewrite(vocabs / f"ggml-vocab-{base}.gguf", gguf, {**strings, "tokenizer.ggml.pre": name})
                result["pre"][name][base] = tokenize(gguf)
        for gguf in sorted(vocabs.glob("ggml-vocab-*.gguf")):
            result["vocabs"][gguf.name] = tokenize(gguf)
    lists.extend(list(lines) for lines in index)
    json.dump(result, sys.stdout, indent=0)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
