//! Tokenization and detokenization over a GGUF vocabulary, as llama.cpp's `llama_vocab::tokenize`,
//! `token_to_piece` and `detokenize` do them.

use super::special::{partition, Fragment};
use super::unicode::char_byte;
use super::vocab::{attr, Model, Vocab};
use super::{bpe, spm, ugm, wpm, TokenizerError};

impl Vocab {
    /// Token ids of `text`; BOS/EOS as the vocabulary asks when `add_special`; control tokens
    /// written in the text are recognised when `parse_special`.
    pub(super) fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        let mut out = Vec::new();
        // WordPiece frames the text with BOS (BERT's [CLS]) and its separator whatever the flags say.
        let (first, last) = match &self.model {
            Model::Wpm(w) => (self.bos, w.sep),
            _ => (self.bos.filter(|_| self.add_bos), self.eos.filter(|_| self.add_eos)),
        };
        if add_special {
            out.extend(first);
        }
        // SPM prefixes a space to the text at the start and after every special token.
        let mut after_special = true;
        for fragment in partition(self, text, parse_special) {
            match fragment {
                Fragment::Token(id) => {
                    out.push(id);
                    after_special = true;
                }
                Fragment::Text(range) => {
                    let text = &text[range];
                    match &self.model {
                        Model::Spm => {
                            let prefix = if self.add_space_prefix && after_special { " " } else { "" };
                            let escaped = format!("{prefix}{text}").replace(' ', "▁");
                            spm::tokenize(self, &escaped, &mut out)?;
                        }
                        Model::Bpe(pre) => bpe::tokenize(self, pre, text, &mut out),
                        Model::Wpm(w) => wpm::tokenize(self, w, text, &mut out),
                        Model::Ugm(u) => ugm::tokenize(self, u, text, self.add_space_prefix, &mut out),
                    }
                    after_special = false;
                }
            }
        }
        if add_special {
            out.extend(last);
        }
        Ok(out)
    }

    /// The bytes token `id` stands for; control and unknown tokens give their text only when
    /// `special`, unused and undefined tokens nothing.
    pub(super) fn piece(&self, id: u32, special: bool) -> Result<Vec<u8>, TokenizerError> {
        let token = self.tokens.get(id as usize).ok_or(TokenizerError::InvalidId { id, size: self.tokens.len() })?;
        let a = token.attr;
        if a & (attr::UNKNOWN | attr::CONTROL) != 0 && !special {
            return Ok(Vec::new());
        }
        let text = self.text(id);
        Ok(if a & (attr::UNKNOWN | attr::CONTROL | attr::USER_DEFINED) != 0 {
            text.as_bytes().to_vec()
        } else if a & attr::NORMAL != 0 {
            match &self.model {
                Model::Spm | Model::Wpm(_) | Model::Ugm(_) => text.replace('▁', " ").into_bytes(),
                Model::Bpe(pre) if pre.escape_whitespaces => text.replace('▁', " ").into_bytes(),
                Model::Bpe(_) => byte_decode(text),
            }
        } else if a & attr::BYTE != 0 {
            // `<0xNN>`; like C's strtol, anything unparsable reads as 0.
            let hex = text.get(3..5).unwrap_or("");
            vec![u8::from_str_radix(hex, 16).unwrap_or(0)]
        } else {
            Vec::new()
        })
    }

    /// The text of `ids`. With `skip_special`, control tokens are left out and a leading BOS and
    /// trailing EOS dropped when the vocabulary adds them; otherwise control tokens are written out.
    pub(super) fn decode(&self, mut ids: &[u32], skip_special: bool) -> Result<String, TokenizerError> {
        // The space SPM prefixed to the text is dropped again, unless a BOS was removed first.
        let mut strip_space = self.add_space_prefix;
        if skip_special && self.add_bos && ids.first().is_some_and(|&id| Some(id) == self.bos) {
            strip_space = false;
            ids = &ids[1..];
        }
        if skip_special && self.add_eos && ids.last().is_some_and(|&id| Some(id) == self.eos) {
            ids = &ids[..ids.len() - 1];
        }
        let mut out = Vec::new();
        for &id in ids {
            let piece = self.piece(id, !skip_special)?;
            let skip = usize::from(strip_space && piece.first() == Some(&b' '));
            out.extend_from_slice(&piece[skip..]);
            strip_space = false;
        }
        if self.clean_spaces {
            clean_up_spaces(&mut out);
        }
        Ok(String::from_utf8_lossy(&out).into_owned())
    }
}

/// A byte-level BPE token's bytes; characters outside GPT-2's byte map are reported in place as
/// llama.cpp does.
fn byte_decode(text: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match char_byte(c) {
            Some(b) => out.push(b),
            None => {
                let mut utf8 = [0u8; 4];
                let hex: String = c.encode_utf8(&mut utf8).bytes().map(|b| format!("{b:02x}")).collect();
                out.extend(format!("[UNK_BYTE_0x{hex}{text}]").into_bytes());
            }
        }
    }
    out
}

/// llama.cpp's `clean_up_tokenization_spaces`: drops the space before `?!.,`, around a lone `'`,
/// and before `'s`, `'m`, `'re` and `'ve`. Three in-place passes over the bytes, each reading the
/// buffer as the previous pass left it.
fn clean_up_spaces(text: &mut Vec<u8>) {
    // Pass 1: " ?", " !", " .", " ,".
    let mut n = usize::from(!text.is_empty());
    for i in 1..text.len() {
        let x = text[i];
        if text[i - 1] == b' ' && matches!(x, b'?' | b'!' | b'.' | b',') {
            n -= 1;
        }
        text[n] = x;
        n += 1;
    }
    text.truncate(n);

    // Pass 2: " ' " becomes "'".
    let len = text.len();
    let mut n = usize::from(len > 0);
    let mut i = 1;
    while i < len {
        let x = text[i];
        if x == b'\'' && i + 1 < len && text[i - 1] == b' ' && text[i + 1] == b' ' {
            n -= 1;
            i += 1;
            text[i] = 0;
        }
        text[n] = x;
        n += 1;
        i += 1;
    }
    text.truncate(n);

    // Pass 3: " 's", " 'm", " 're", " 've" lose the space.
    let len = text.len();
    let mut n = usize::from(len > 0);
    for i in 1..len {
        let x = text[i];
        if text[i - 1] == b' ' && x == b'\'' && i + 1 < len {
            let x1 = text[i + 1];
            let x2 = text.get(i + 2).copied();
            if matches!(x1, b's' | b'm') || matches!((x1, x2), (b'r' | b'v', Some(b'e'))) {
                n -= 1;
            }
        }
        text[n] = x;
        n += 1;
    }
    text.truncate(n);
}

#[cfg(test)]
mod tests {
    use super::super::testvocab::{bpe_vocab, spm_vocab};
    use super::*;

    #[test]
    fn spm_prefixes_a_space_and_adds_bos() {
        let vocab = spm_vocab();
        let id = |t: &str| vocab.id(t).unwrap();
        assert_eq!(vocab.encode("the", false, false).unwrap(), [id("▁the")]);
        assert_eq!(vocab.encode("the", true, false).unwrap(), [1, id("▁the")]);
        assert_eq!(vocab.encode("", true, false).unwrap(), [1]);
        assert!(vocab.encode("", false, false).unwrap().is_empty());
        // After a special token the text gets its own prefix space.
        assert_eq!(vocab.encode("<s>the", false, true).unwrap(), [1, id("▁the")]);
        assert_eq!(vocab.encode("<|user|>the", false, false).unwrap(), [id("<|user|>"), id("▁the")]);
    }

    #[test]
    fn metadata_flags_are_honoured() {
        use super::super::testvocab::{gguf, spm_metadata};
        use tgi_formats::gguf::Value;
        let mut meta = spm_metadata();
        meta.push(("tokenizer.ggml.add_bos_token", Value::Bool(false)));
        meta.push(("tokenizer.ggml.add_eos_token", Value::Bool(true)));
        meta.push(("tokenizer.ggml.add_space_prefix", Value::Bool(false)));
        let vocab = Vocab::from_gguf(&gguf(meta)).unwrap();
        let id = |t: &str| vocab.id(t).unwrap();
        assert_eq!(vocab.encode("the", true, false).unwrap(), [id("t"), id("he"), 2]);
        assert_eq!(vocab.encode("the", false, false).unwrap(), [id("t"), id("he")]);
    }

    #[test]
    fn control_pieces_never_come_from_plain_text() {
        for vocab in [spm_vocab(), bpe_vocab()] {
            let control: Vec<u32> = vocab
                .specials
                .iter()
                .copied()
                .filter(|&i| vocab.tokens[i as usize].attr & attr::CONTROL != 0)
                .collect();
            assert!(!control.is_empty());
            for &c in &control {
                let text = format!("a{0}{0} b", vocab.text(c));
                let plain = vocab.encode(&text, false, false).unwrap();
                assert!(plain.iter().all(|i| !control.contains(i)), "{text:?} -> {plain:?}");
                assert_eq!(vocab.encode(&text, false, true).unwrap().iter().filter(|&&i| i == c).count(), 2);
            }
        }
    }

    #[test]
    fn spm_decode_round_trips() {
        let vocab = spm_vocab();
        for text in ["the there", " the  é\n", "", "x"] {
            let ids = vocab.encode(text, false, false).unwrap();
            assert_eq!(vocab.decode(&ids, true).unwrap(), text, "{ids:?}");
            // llama.cpp keeps the prefix space when it removes a leading BOS.
            let with_bos = vocab.encode(text, true, false).unwrap();
            let expected = if text.is_empty() { String::new() } else { format!(" {text}") };
            assert_eq!(vocab.decode(&with_bos, true).unwrap(), expected);
        }
        let ids = vocab.encode("<s>the", false, true).unwrap();
        assert_eq!(vocab.decode(&ids, false).unwrap(), "<s> the");
        assert!(matches!(vocab.decode(&[9999], false), Err(TokenizerError::InvalidId { id: 9999, .. })));
    }

    #[test]
    fn pieces_by_attribute() {
        let vocab = spm_vocab();
        assert_eq!(vocab.piece(vocab.id("▁the").unwrap(), false).unwrap(), b" the");
        assert_eq!(vocab.piece(vocab.id("<0xE2>").unwrap(), false).unwrap(), [0xE2]);
        assert_eq!(vocab.piece(1, false).unwrap(), b"");
        assert_eq!(vocab.piece(1, true).unwrap(), b"<s>");
        assert_eq!(vocab.piece(vocab.id("<|user|>").unwrap(), false).unwrap(), b"<|user|>");
        let bpe = bpe_vocab();
        assert_eq!(bpe.piece(bpe.id("Ġthe").unwrap(), false).unwrap(), b" the");
    }

    #[test]
    fn bpe_decode_cleans_spaces() {
        let vocab = bpe_vocab();
        let text = "the ll , ' s 's 're 'll";
        let ids = vocab.encode(text, false, false).unwrap();
        assert_eq!(vocab.decode(&ids, true).unwrap(), "the ll,'s's're 'll");
    }

    #[test]
    fn clean_up_spaces_passes() {
        let clean = |s: &str| {
            let mut b = s.as_bytes().to_vec();
            clean_up_spaces(&mut b);
            String::from_utf8(b).unwrap()
        };
        assert_eq!(clean("a , b . c ! d ?"), "a, b. c! d?");
        assert_eq!(clean("rock ' n"), "rock'n");
        assert_eq!(clean("it 's I 'm we 're you 've I 'll I 'd"), "it's I'm we're you've I 'll I 'd");
        assert_eq!(clean(""), "");
        assert_eq!(clean(" "), " ");
    }
}
