//! The model's vocabulary as llguidance sees it: every token id's bytes in a trie, control tokens (BOS,
//! EOS, chat markers, unknown) marked special so that no text grammar can produce them, and the model's
//! end-of-sequence tokens as the trie's EOS set.

use std::sync::Arc;

use llguidance::toktrie::{ApproximateTokEnv, TokEnv, TokRxInfo, TokTrie};

use super::ConstraintError;
use crate::text::tokenizer::Tokenizer;

/// The token environment for a model whose logits have `vocab` entries (at least the tokenizer's size;
/// ids past the tokenizer's are never allowed) and whose generation ends at `eos`.
pub fn token_env(tokenizer: &Tokenizer, vocab: usize, eos: &[u32]) -> Result<TokEnv, ConstraintError> {
    let Some(&first_eos) = eos.first() else {
        return Err(ConstraintError::Vocabulary("it has no end-of-sequence token".into()));
    };
    let words = token_bytes(tokenizer, vocab);
    let info = TokRxInfo { tok_bos: tokenizer.bos_id(), ..TokRxInfo::new(vocab as u32, first_eos) };
    let trie = TokTrie::from(&info, &words).with_eos_tokens(eos);
    Ok(Arc::new(ApproximateTokEnv::new(trie)))
}

/// Each id's bytes: its text for ordinary tokens, the special marker and its name for control tokens,
/// nothing for ids the tokenizer lacks or a lone 0xFF byte (which would read as the marker and is never
/// valid UTF-8 text anyway).
fn token_bytes(tokenizer: &Tokenizer, vocab: usize) -> Vec<Vec<u8>> {
    let known = tokenizer.vocab_size().min(vocab) as u32;
    let mut words: Vec<Vec<u8>> = (0..known)
        .map(|id| {
            let piece = tokenizer.token_to_piece(id);
            let special =
                tokenizer.is_control(id) || tokenizer.bos_id() == Some(id) || tokenizer.eos_ids().contains(&id);
            if special {
                let mut marked = vec![TokTrie::SPECIAL_TOKEN_MARKER];
                marked.extend(if piece.is_empty() { format!("<[{id}]>").into_bytes() } else { piece });
                marked
            } else if piece.first() == Some(&TokTrie::SPECIAL_TOKEN_MARKER) {
                Vec::new()
            } else {
                piece
            }
        })
        .collect();
    words.resize(vocab, Vec::new());
    words
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::constraint::testing::stories;

    #[test]
    fn control_tokens_are_special_and_padding_is_empty() {
        let tok = stories();
        let env = token_env(&tok, 520, tok.eos_ids()).unwrap();
        let trie = env.tok_trie();
        assert_eq!(trie.vocab_size(), 520);
        for &id in tok.eos_ids() {
            assert!(trie.is_special_token(id), "EOS {id} is special");
            assert!(trie.eos_tokens().contains(&id));
        }
        assert!(trie.is_special_token(tok.bos_id().unwrap()));
        assert!(trie.token(515).is_empty());
        let the = tok.encode("the end", false, false).unwrap();
        let pieces: Vec<u8> = the.iter().flat_map(|&id| tok.token_to_piece(id)).collect();
        assert_eq!(trie.decode(&the), pieces);
    }

    #[test]
    fn a_vocabulary_without_eos_is_refused() {
        let tok = stories();
        assert!(matches!(token_env(&tok, 512, &[]), Err(ConstraintError::Vocabulary(_))));
    }
}
