//! llama.cpp's byte-level BPE tokenizer (`llm_tokenizer_bpe`): text pre-tokenized into words, each
//! word's characters merged by merge rank, lowest first.

use std::cmp::Reverse;

use super::merge::merge;
use super::pretokenize::PreTokenizer;
use super::vocab::Vocab;

/// Appends the tokens of `text` to `out`.
pub(super) fn tokenize(vocab: &Vocab, pre: &PreTokenizer, text: &str, out: &mut Vec<u32>) {
    let escaped;
    let text = if pre.escape_whitespaces {
        escaped = text.replace(' ', "▁");
        &escaped
    } else {
        text
    };
    let mut key = String::new();
    for word in pre.split(text) {
        let whole = vocab.ignore_merges || (pre.newline_tokens && word.bytes().all(|b| b == b'\n'));
        if whole {
            if let Some(id) = vocab.id(&word) {
                out.push(id);
                continue;
            }
        }
        let pieces = merge(&word, |left, right, _| vocab.merge_rank(left, right, &mut key).map(Reverse));
        for range in pieces {
            let piece = &word[range];
            match vocab.id(piece) {
                Some(id) => out.push(id),
                // llama.cpp looks each byte of an unknown piece up as a one-byte token (`<0xNN>` where
                // words are UTF-8) and drops the bytes that are none.
                None if pre.byte_encode => {
                    out.extend(piece.bytes().filter(u8::is_ascii).filter_map(|b| vocab.id(&char::from(b).to_string())))
                }
                None => out.extend(piece.bytes().filter_map(|b| vocab.id(&format!("<0x{b:02X}>")))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testvocab::bpe_vocab;
    use super::super::vocab::Model;
    use super::*;

    fn pieces(text: &str) -> Vec<String> {
        let vocab = bpe_vocab();
        let mut out = Vec::new();
        let Model::Bpe(pre) = &vocab.model else { unreachable!("a BPE vocabulary") };
        tokenize(&vocab, pre, text, &mut out);
        out.iter().map(|&id| vocab.text(id).to_owned()).collect()
    }

    #[test]
    fn merges_by_rank_within_words() {
        assert_eq!(pieces(" the"), ["Ġthe"]);
        assert_eq!(pieces("the the"), ["t", "he", "Ġthe"]);
        assert_eq!(pieces("hell"), ["he", "ll"]);
    }

    #[test]
    fn every_byte_has_a_token() {
        assert_eq!(pieces("é\n"), ["Ã", "©", "Ċ"]);
    }
}
