//! One completion's output text and its end: each accepted token is detokenized incrementally and checked
//! against EOS, the stop strings and the token limit; the text that became final is handed out, and when the
//! completion ends, the decoder's incomplete bytes and the text held back as a possible stop-string start are
//! flushed. The scheduler (and so `tgi generate`, `serve`, `bench`) decides every token's text here.

use crate::sampling::{FinishReason, StopMatcher};
use crate::text::tokenizer::{IncrementalDecoder, Tokenizer};

/// What ends a completion: a stop string, an end-of-sequence token (unless ignored), or its token limit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EndRules {
    /// Stop strings; the output ends right before the earliest match.
    pub stop: Vec<String>,
    /// Most tokens to generate, already clamped to the room the context leaves (one is always generated).
    pub max_tokens: usize,
    /// Keep generating past end-of-sequence tokens (they are then ordinary text).
    pub ignore_eos: bool,
}

/// What one accepted token adds to the output.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TokenText {
    /// The token's own text from incremental decoding (empty while a UTF-8 character is incomplete); for an
    /// end-of-sequence token that ends the completion, its piece (which is not part of the output).
    pub piece: String,
    /// Output text that became final with this token; the concatenation over all tokens is the output.
    pub text: String,
    /// Why the completion ended with this token, when it did.
    pub finish: Option<FinishReason>,
}

/// A completion's detokenizer, stop matcher, output text so far and end rules.
pub struct Completion<'t> {
    tokenizer: &'t Tokenizer,
    /// The model's end-of-sequence tokens.
    eos: &'t [u32],
    rules: EndRules,
    decoder: IncrementalDecoder<'t>,
    stops: StopMatcher,
    /// The output so far.
    text: String,
    /// Tokens accepted.
    generated: usize,
    /// Set once the completion ended.
    finish: Option<FinishReason>,
    /// The stop string that ended it, when one did.
    stop_sequence: Option<String>,
}

impl<'t> Completion<'t> {
    /// An empty completion for tokens of `tokenizer`, ended by `eos` tokens and `rules`.
    pub fn new(tokenizer: &'t Tokenizer, eos: &'t [u32], rules: EndRules) -> Self {
        Completion {
            tokenizer,
            eos,
            stops: StopMatcher::new(rules.stop.clone()),
            rules,
            decoder: IncrementalDecoder::new(tokenizer),
            text: String::new(),
            generated: 0,
            finish: None,
            stop_sequence: None,
        }
    }

    /// Takes the next generated token: its text, the output that became final, and the end when this token
    /// is it (then the rest of the output is flushed with it). Once ended, tokens add nothing.
    pub fn accept(&mut self, token: u32) -> TokenText {
        if self.finish.is_some() {
            return TokenText { finish: self.finish, ..TokenText::default() };
        }
        self.generated += 1;
        let mut out = TokenText::default();
        if !self.rules.ignore_eos && self.eos.contains(&token) {
            out.piece = String::from_utf8_lossy(&self.tokenizer.token_to_piece(token)).into_owned();
            out.finish = Some(FinishReason::EosToken);
        } else if let Some(piece) = self.decoder.push(token) {
            let r = self.stops.push(&piece);
            (out.piece, out.text) = (piece, r.text);
            out.finish = r.stop.is_some().then_some(FinishReason::StopSequence);
            self.stop_sequence = r.stop;
        }
        if out.finish.is_none() && self.generated >= self.rules.max_tokens {
            out.finish = Some(FinishReason::Length);
        }
        if let Some(reason) = out.finish.filter(|&f| f != FinishReason::StopSequence) {
            // The decoder's incomplete bytes may still complete a stop string; what is held back then is final.
            let r = self.stops.push(&self.decoder.finish());
            out.text.push_str(&r.text);
            out.text.push_str(&self.stops.flush());
            out.finish = Some(if r.stop.is_some() { FinishReason::StopSequence } else { reason });
            self.stop_sequence = r.stop;
        }
        self.text.push_str(&out.text);
        self.finish = out.finish;
        out
    }

    /// Tokens accepted so far.
    pub fn generated(&self) -> usize {
        self.generated
    }

    /// Takes the output so far (the whole output once the completion ended).
    pub fn take_text(&mut self) -> String {
        std::mem::take(&mut self.text)
    }

    /// Takes the stop string that ended the completion, when one did.
    pub fn take_stop_sequence(&mut self) -> Option<String> {
        self.stop_sequence.take()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::OnceLock;

    use tgi_formats::GgufFile;

    use super::*;

    /// The bundled stories260k model's tokenizer (SentencePiece with byte fallback `<0xNN>` at id 3 + NN).
    fn tokenizer() -> &'static Tokenizer {
        static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
        TOKENIZER.get_or_init(|| {
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../models/stories260k/stories260k-f32.gguf");
            Tokenizer::from_gguf(&GgufFile::open(path.as_ref()).unwrap()).unwrap()
        })
    }

    /// One byte token per byte of `text`.
    fn bytes(text: &str) -> Vec<u32> {
        text.bytes().map(byte).collect()
    }

    fn byte(b: u8) -> u32 {
        3 + u32::from(b)
    }

    fn piece(token: u32) -> String {
        String::from_utf8_lossy(&tokenizer().token_to_piece(token)).into_owned()
    }

    const EOS: [u32; 1] = [2];

    fn completion(stop: &[&str], max_tokens: usize, ignore_eos: bool) -> Completion<'static> {
        let stop = stop.iter().map(|s| s.to_string()).collect();
        Completion::new(tokenizer(), &EOS, EndRules { stop, max_tokens, ignore_eos })
    }

    /// Feeds `tokens`; returns each token's final text and the finish, which must come with the last token.
    fn run(c: &mut Completion, tokens: &[u32]) -> (Vec<String>, Option<FinishReason>) {
        let mut texts = Vec::new();
        let mut finish = None;
        for (i, &t) in tokens.iter().enumerate() {
            let out = c.accept(t);
            assert_eq!(out.finish.is_some(), i + 1 == tokens.len(), "token {i} of {tokens:?}: {out:?}");
            texts.push(out.text);
            finish = out.finish;
        }
        (texts, finish)
    }

    #[test]
    fn bundled_tokenizer_has_byte_tokens() {
        assert_eq!(tokenizer().token_to_piece(byte(0xE2)), [0xE2]);
        assert_eq!(piece(byte(b'a')), "a");
        assert_eq!(tokenizer().eos_ids(), EOS);
    }

    #[test]
    fn end_of_sequence_ends_and_flushes() {
        let mut c = completion(&["cat!"], 100, false);
        let mut tokens = bytes("the ca");
        tokens.push(EOS[0]);
        let (texts, finish) = run(&mut c, &tokens);
        assert_eq!(finish, Some(FinishReason::EosToken));
        // "ca" was held back as a possible start of "cat!"; EOS makes it final, in the EOS token's text.
        assert_eq!(texts.concat(), "the ca");
        assert_eq!(texts.last().unwrap(), "ca");
        assert_eq!(c.generated(), tokens.len());
        assert_eq!(c.take_text(), "the ca");
        // The EOS token's piece is reported, its text is not output; later tokens add nothing.
        let mut c = completion(&[], 100, false);
        let out = c.accept(EOS[0]);
        assert_eq!(out.piece, piece(EOS[0]));
        assert_eq!((out.text.as_str(), out.finish), ("", Some(FinishReason::EosToken)));
        let after = c.accept(byte(b'a'));
        assert_eq!(after, TokenText { finish: Some(FinishReason::EosToken), ..TokenText::default() });
        assert_eq!(c.generated(), 1);
    }

    #[test]
    fn ignore_eos_keeps_going_to_the_length() {
        let mut c = completion(&[], 3, true);
        let (texts, finish) = run(&mut c, &[byte(b'h'), EOS[0], byte(b'i')]);
        assert_eq!(finish, Some(FinishReason::Length));
        // The EOS token is ordinary text then.
        assert_eq!(texts.concat(), format!("h{}i", piece(EOS[0])));
        assert_eq!(c.take_text(), texts.concat());
    }

    #[test]
    fn stop_string_across_token_boundaries() {
        let tokens = tokenizer().encode("Once upon a time, there was a little girl", false, false).unwrap();
        let decoded: String = tokens.iter().map(|&t| piece(t)).collect();
        let stop = "me, th";
        let at = decoded.find(stop).unwrap();
        // The stop string ends within the first token whose pieces reach its end.
        let mut len = 0;
        let last = tokens.iter().position(|&t| {
            len += piece(t).len();
            len >= at + stop.len()
        });
        let last = last.unwrap();
        assert!(len - piece(tokens[last]).len() > at, "the stop string spans several tokens");
        let mut c = completion(&[stop], 100, false);
        let (texts, finish) = run(&mut c, &tokens[..=last]);
        assert_eq!(finish, Some(FinishReason::StopSequence));
        assert_eq!(texts.concat(), decoded[..at]);
        assert_eq!(c.take_text(), decoded[..at]);
        assert_eq!(c.take_stop_sequence().as_deref(), Some(stop));
        // Text that may start a stop string is held back until it cannot; nothing is lost.
        let mut c = completion(&["time!"], 100, false);
        let outs: Vec<TokenText> = tokens.iter().map(|&t| c.accept(t)).collect();
        assert!(outs.iter().all(|o| o.finish.is_none()));
        assert!(outs.iter().any(|o| o.piece.ends_with("time") && !o.text.contains("time")));
        assert_eq!(outs.iter().map(|o| o.text.as_str()).collect::<String>(), decoded);
    }

    #[test]
    fn length_flushes_held_back_text() {
        let tokens = bytes("the ti");
        let mut c = completion(&["time!"], tokens.len(), false);
        let (texts, finish) = run(&mut c, &tokens);
        assert_eq!(finish, Some(FinishReason::Length));
        assert_eq!((texts.concat().as_str(), texts.last().unwrap().as_str()), ("the ti", "ti"));
        assert_eq!((c.take_text().as_str(), c.take_stop_sequence()), ("the ti", None));
        // At least one token, even with no room.
        let mut c = completion(&[], 0, false);
        assert_eq!(c.accept(tokens[0]).finish, Some(FinishReason::Length));
    }

    #[test]
    fn stop_string_completed_by_the_final_flush() {
        // "é" is C3 A9: cut after C3 by the limit, it flushes as U+FFFD, which completes the stop string.
        let mut c = completion(&["a\u{FFFD}"], 2, false);
        let (texts, finish) = run(&mut c, &[byte(b'a'), byte(0xC3)]);
        assert_eq!((texts.concat().as_str(), finish), ("", Some(FinishReason::StopSequence)));
        assert_eq!((c.take_text().as_str(), c.take_stop_sequence().as_deref()), ("", Some("a\u{FFFD}")));
    }

    #[test]
    fn utf8_split_across_tokens() {
        let mut c = completion(&[], 100, false);
        let out = c.accept(byte(0xE2));
        assert_eq!((out.piece.as_str(), out.text.as_str(), out.finish), ("", "", None));
        assert_eq!(c.accept(byte(0x82)).text, "");
        let out = c.accept(byte(0xAC));
        assert_eq!((out.piece.as_str(), out.text.as_str()), ("€", "€"));
        // A character cut by the limit comes out as U+FFFD with the last token.
        let mut c = completion(&[], 2, false);
        assert_eq!(c.accept(byte(0xF0)).text, "");
        let out = c.accept(byte(0x9F));
        assert_eq!((out.text.as_str(), out.finish), ("\u{FFFD}", Some(FinishReason::Length)));
        // A stop string split inside a character.
        let mut c = completion(&["€x"], 100, false);
        let (texts, finish) = run(&mut c, &bytes("a€x"));
        assert_eq!((texts.concat().as_str(), finish), ("a", Some(FinishReason::StopSequence)));
    }
}
