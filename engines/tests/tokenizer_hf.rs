//! The bundled stories260k model's `tokenizer.json` (run by the `tokenizers` crate) against its GGUF
//! vocabulary (llama.cpp's SentencePiece algorithm): both must tokenize alike, and decode back.

use std::path::PathBuf;

use tgi_engines::text::tokenizer::{IncrementalDecoder, Tokenizer};
use tgi_formats::GgufFile;

fn model(path: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../models/stories260k").join(path)
}

fn tokenizers() -> (Tokenizer, Tokenizer) {
    let hf = Tokenizer::from_tokenizer_json(&model("hf/tokenizer.json")).unwrap();
    let gguf = Tokenizer::from_gguf(&GgufFile::open(&model("stories260k-f32.gguf")).unwrap()).unwrap();
    (hf, gguf)
}

const TEXTS: &[&str] = &[
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.",
    "One day, Tom said: \"Mom, can I have a cookie?\" His mom smiled and said yes!",
    " leading space",
    "  two leading spaces and  double  spaces",
    "trailing spaces  ",
    "tabs\tand\t\ttabs",
    "new\nlines\n\nand\r\nCRLF\n",
    "Ünïcödé façade naïve – “quotes” …",
    "日本語のテキスト and 中文",
    "emoji 🦙🚀 😶‍🌫️ ✅",
    "a",
    " ",
    "",
    "<s> and </s> as text",
];

#[test]
fn hf_and_gguf_agree_on_stories260k() {
    let (hf, gguf) = tokenizers();
    assert_eq!(hf.vocab_size(), gguf.vocab_size());
    assert_eq!((hf.bos_id(), gguf.bos_id()), (Some(1), Some(1)));
    assert_eq!((hf.eos_ids(), gguf.eos_ids()), (&[2][..], &[2][..]));
    assert!(hf.add_bos() && gguf.add_bos());
    for text in TEXTS {
        for add_special in [false, true] {
            let a = hf.encode(text, add_special, false).unwrap();
            let b = gguf.encode(text, add_special, false).unwrap();
            assert_eq!(a, b, "{text:?} add_special={add_special}");
        }
        let a = hf.encode(text, true, true).unwrap();
        assert_eq!(a, gguf.encode(text, true, true).unwrap(), "{text:?} parsing specials");
    }
    assert_eq!(hf.encode("<s>x", false, true).unwrap()[0], 1);
    assert_ne!(hf.encode("<s>x", false, false).unwrap()[0], 1);
}

#[test]
fn decode_round_trips() {
    let (hf, gguf) = tokenizers();
    for text in TEXTS {
        let ids = hf.encode(text, true, false).unwrap();
        assert_eq!(hf.decode(&ids, true).unwrap(), *text, "{ids:?}");
        let ids = gguf.encode(text, false, false).unwrap();
        assert_eq!(gguf.decode(&ids, true).unwrap(), *text, "{ids:?}");
        for (name, tok) in [("hf", &hf), ("gguf", &gguf)] {
            let ids = tok.encode(text, false, false).unwrap();
            let mut decoder = IncrementalDecoder::new(tok);
            let mut streamed: String = ids.iter().filter_map(|&id| decoder.push(id)).collect();
            streamed.push_str(&decoder.finish());
            // Pieces keep the space SentencePiece put before the text.
            let expected = if text.is_empty() { String::new() } else { format!(" {text}") };
            assert_eq!(streamed, expected, "{name}: {text:?}");
        }
    }
    assert!(hf.decode(&[512], false).is_err());
}

#[test]
fn pieces_agree() {
    let (hf, gguf) = tokenizers();
    for id in 0..hf.vocab_size() as u32 {
        assert_eq!(hf.token_to_piece(id), gguf.token_to_piece(id), "token {id}");
    }
    assert!(hf.token_to_piece(512).is_empty() && gguf.token_to_piece(512).is_empty());
}
