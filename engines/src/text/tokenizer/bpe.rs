//! llama.cpp's byte-level BPE tokenizer (`llm_tokenizer_bpe`): text pre-tokenized into words, each
//! word's characters merged by merge rank, lowest first.

use std::cmp::Reverse;

use super::merge::merge;
use super::pretokenize::PreTokenizer;
use super::vocab::Vocab;

/// Appends the tokens of `text` to `out`.
pub(super) fn tokenize(vocab: &Vocab, pre: PreTokenizer, text: &str, out: &mut Vec<u32>) {
    let mut key = String::new();
    for word in pre.split(text) {
        if vocab.ignore_merges {
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
                // llama.cpp looks each byte of an unknown piece up as a one-byte token and drops
                // the bytes that are none.
                None => {
                    out.extend(piece.bytes().filter(u8::is_ascii).filter_map(|b| vocab.id(&char::from(b).to_string())))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testvocab::bpe_vocab;
    use super::*;

    fn pieces(text: &str) -> Vec<String> {
        let vocab = bpe_vocab();
        let mut out = Vec::new();
        tokenize(&vocab, PreTokenizer::Gpt2, text, &mut out);
        out.iter().map(|&id| vocab.tokens[id as usize].text.clone()).collect()
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
