//! llama.cpp's SentencePiece-style tokenizer (`llm_tokenizer_spm`): characters merged pairwise,
//! the pair whose joined text is the highest-scoring token first; what is left unmatched falls
//! back to byte tokens.

use super::merge::merge;
use super::vocab::Vocab;
use super::TokenizerError;

/// Appends the tokens of `text` (spaces already escaped as `▁`) to `out`.
pub(super) fn tokenize(vocab: &Vocab, text: &str, out: &mut Vec<u32>) -> Result<(), TokenizerError> {
    let pieces = merge(text, |_, _, joined| vocab.id(joined).map(|id| vocab.tokens[id as usize].score));
    for range in pieces {
        let piece = &text[range];
        // Merged pieces are tokens by construction; a single character that is not one is spelt
        // in bytes (llama.cpp's resegment finds no merge history for it).
        match vocab.id(piece) {
            Some(id) => out.push(id),
            None => {
                for b in piece.bytes() {
                    out.push(vocab.byte_token(b).ok_or(TokenizerError::NoByteToken(b))?);
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::testvocab::spm_vocab;
    use super::*;

    fn ids(text: &str) -> Vec<u32> {
        let vocab = spm_vocab();
        let mut out = Vec::new();
        tokenize(&vocab, text, &mut out).unwrap();
        out
    }

    #[test]
    fn merges_by_score() {
        let vocab = spm_vocab();
        let id = |t: &str| vocab.id(t).unwrap();
        // "▁the" outscores "▁t"+"he" splits; "re" beats "er" in "▁there".
        assert_eq!(ids("▁the"), [id("▁the")]);
        assert_eq!(ids("▁there"), [id("▁the"), id("re")]);
    }

    #[test]
    fn unknown_characters_fall_back_to_bytes() {
        let vocab = spm_vocab();
        let bytes: Vec<u32> = "é".bytes().map(|b| vocab.byte_token(b).unwrap()).collect();
        assert_eq!(ids("é"), bytes);
        assert_eq!(ids("\n"), [vocab.id("<0x0A>").unwrap()]);
    }
}
