"""Reference ids for the Unigram (T5-style) tokenizer: SentencePiece itself, over a model built from a
GGUF vocabulary (its pieces, scores, types and precompiled character map), encoding every input of a
llama.cpp test-vector file. Writes JSON lines {"text": ..., "ids": [...]}.

    pip install sentencepiece protobuf gguf
    python3 tests/llamacpp/ugm_reference.py VOCAB.gguf INPUTS.inp > OUT.jsonl
"""
import json
import sys

import gguf
from sentencepiece import SentencePieceProcessor
from sentencepiece import sentencepiece_model_pb2 as pb


def field(reader, key):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def model_proto(path):
    r = gguf.GGUFReader(path)
    tokens = field(r, "tokenizer.ggml.tokens")
    scores = field(r, "tokenizer.ggml.scores")
    types = field(r, "tokenizer.ggml.token_type")
    kinds = {1: pb.ModelProto.SentencePiece.NORMAL, 2: pb.ModelProto.SentencePiece.UNKNOWN,
             3: pb.ModelProto.SentencePiece.CONTROL, 4: pb.ModelProto.SentencePiece.USER_DEFINED,
             5: pb.ModelProto.SentencePiece.UNUSED, 6: pb.ModelProto.SentencePiece.BYTE}
    m = pb.ModelProto()
    for text, score, kind in zip(tokens, scores, types):
        p = m.pieces.add()
        p.piece, p.score, p.type = text, score, kinds[kind]
    m.trainer_spec.model_type = pb.TrainerSpec.UNIGRAM
    m.trainer_spec.unk_id = field(r, "tokenizer.ggml.unknown_token_id")
    m.trainer_spec.bos_id = field(r, "tokenizer.ggml.bos_token_id")
    m.trainer_spec.eos_id = field(r, "tokenizer.ggml.eos_token_id")
    m.trainer_spec.pad_id = field(r, "tokenizer.ggml.padding_token_id")
    n = m.normalizer_spec
    n.name = "precompiled"
    n.precompiled_charsmap = bytes(field(r, "tokenizer.ggml.precompiled_charsmap"))
    n.add_dummy_prefix = bool(field(r, "tokenizer.ggml.add_space_prefix"))
    n.remove_extra_whitespaces = bool(field(r, "tokenizer.ggml.remove_extra_whitespaces"))
    n.escape_whitespaces = True
    return m.SerializeToString()


def main(vocab, inputs):
    sp = SentencePieceProcessor(model_proto=model_proto(vocab))
    text = open(inputs, encoding="utf-8").read()
    sep = "\n__ggml_vocab_test__\n"
    cases = text[: -len(sep)].split(sep) if text.endswith(sep) else text.split(sep)
    for case in cases:
        print(json.dumps({"text": case, "ids": sp.encode(case)}, ensure_ascii=False))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
