//! Streaming detokenization: token pieces are bytes, and a character may be split over several
//! byte tokens, so text is released only once its characters are complete.

use super::Tokenizer;

/// Turns a stream of token ids into UTF-8 text chunks without splitting multi-byte characters.
pub struct IncrementalDecoder<'a> {
    tokenizer: &'a Tokenizer,
    /// Bytes of an incomplete character at the end of the stream so far.
    pending: Vec<u8>,
}

impl<'a> IncrementalDecoder<'a> {
    /// A decoder for tokens of `tokenizer` (pieces as [`Tokenizer::token_to_piece`] gives them).
    pub fn new(tokenizer: &'a Tokenizer) -> Self {
        IncrementalDecoder { tokenizer, pending: Vec::new() }
    }

    /// Adds token `id`; returns the text that became complete, if any. Bytes that can never
    /// form a character come out as U+FFFD.
    pub fn push(&mut self, id: u32) -> Option<String> {
        self.pending.extend(self.tokenizer.token_to_piece(id));
        let mut out = String::new();
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(text) => {
                    out.push_str(text);
                    self.pending.clear();
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(&String::from_utf8_lossy(&self.pending[..valid]));
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            self.pending.drain(..valid + bad);
                        }
                        None => {
                            self.pending.drain(..valid);
                            break;
                        }
                    }
                }
            }
        }
        (!out.is_empty()).then_some(out)
    }

    /// Ends the stream: the bytes still held, an incomplete character as U+FFFD (the decoder is empty after).
    pub fn finish(&mut self) -> String {
        String::from_utf8_lossy(&std::mem::take(&mut self.pending)).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::super::testvocab::{gguf, spm_metadata};
    use super::*;

    #[test]
    fn holds_back_split_characters() {
        let tok = Tokenizer::from_gguf(&gguf(spm_metadata())).unwrap();
        // The test vocabulary has `<0xNN>` at id 3 + NN.
        let byte = |b: u8| 3 + u32::from(b);
        assert_eq!(tok.token_to_piece(byte(0xE2)), [0xE2]);
        let the = tok.encode("the", false, false).unwrap()[0];
        let mut dec = IncrementalDecoder::new(&tok);
        // "€" is E2 82 AC; "🦙" is F0 9F A6 99.
        assert_eq!(dec.push(the).as_deref(), Some(" the"));
        assert_eq!(dec.push(byte(0xE2)), None);
        assert_eq!(dec.push(byte(0x82)), None);
        assert_eq!(dec.push(byte(0xAC)).as_deref(), Some("€"));
        for b in [0xF0, 0x9F, 0xA6] {
            assert_eq!(dec.push(byte(b)), None);
        }
        assert_eq!(dec.push(byte(0x99)).as_deref(), Some("🦙"));
        // A broken sequence is replaced once it cannot complete; a cut one at the end too.
        assert_eq!(dec.push(byte(0xE2)), None);
        assert_eq!(dec.push(the).as_deref(), Some("\u{FFFD} the"));
        assert_eq!(dec.push(byte(0xF0)), None);
        assert_eq!(dec.finish(), "\u{FFFD}");
    }
}
