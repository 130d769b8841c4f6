//! Stop strings on streamed text: matched across token boundaries, with text that could still
//! become a stop string held back so it is never streamed; and why a sequence finished.

/// Why a sequence finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FinishReason {
    /// The token limit (`max_new_tokens`, `max_tokens`) was reached.
    Length,
    /// The model produced an end-of-sequence token.
    EosToken,
    /// A stop string matched.
    StopSequence,
}

impl FinishReason {
    /// TGI's `finish_reason`: "length", "eos_token" or "stop_sequence".
    pub fn as_tgi(self) -> &'static str {
        match self {
            Self::Length => "length",
            Self::EosToken => "eos_token",
            Self::StopSequence => "stop_sequence",
        }
    }

    /// OpenAI's `finish_reason`: "length", or "stop" for an end-of-sequence token or stop string.
    pub fn as_openai(self) -> &'static str {
        match self {
            Self::Length => "length",
            Self::EosToken | Self::StopSequence => "stop",
        }
    }
}

/// What [`StopMatcher::push`] lets through.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StopResult {
    /// Text that can be streamed now; never contains (part of) a stop string.
    pub text: String,
    /// The stop string that matched, when one did: the sequence is finished.
    pub stop: Option<String>,
}

/// Matches stop strings on generated text, also across token boundaries, and holds back text
/// that might be the start of a stop string so it is never streamed. Output excludes the stop
/// string and everything after it, as OpenAI does; the earliest match in the text wins.
#[derive(Debug, Clone)]
pub struct StopMatcher {
    /// The stop strings, empty ones dropped.
    stops: Vec<String>,
    /// Received text not emitted yet: a suffix that is a prefix of some stop string.
    pending: String,
    /// The length in bytes of the longest stop string.
    longest: usize,
    /// Whether a stop string matched; later text is discarded.
    stopped: bool,
}

impl StopMatcher {
    /// A matcher for these stop strings (empty strings never match).
    pub fn new(stops: Vec<String>) -> Self {
        let stops: Vec<String> = stops.into_iter().filter(|s| !s.is_empty()).collect();
        let longest = stops.iter().map(String::len).max().unwrap_or(0);
        Self { stops, pending: String::new(), longest, stopped: false }
    }

    /// Feeds newly decoded text; returns what can be emitted now and the stop string if one matched
    /// (the emitted text then ends right before it). After a match, input is ignored.
    pub fn push(&mut self, text: &str) -> StopResult {
        if self.stopped {
            return StopResult::default();
        }
        self.pending.push_str(text);
        let earliest =
            self.stops.iter().filter_map(|s| self.pending.find(s.as_str()).map(|at| (at, s))).min_by_key(|&(at, _)| at);
        if let Some((at, stop)) = earliest {
            let stop = stop.clone();
            let mut text = std::mem::take(&mut self.pending);
            text.truncate(at);
            self.stopped = true;
            return StopResult { text, stop: Some(stop) };
        }
        let held = self.held_back();
        let rest = self.pending.split_off(held);
        StopResult { text: std::mem::replace(&mut self.pending, rest), stop: None }
    }

    /// Returns the held-back text when generation ends for another reason (length, EOS).
    pub fn flush(&mut self) -> String {
        std::mem::take(&mut self.pending)
    }

    /// Where the longest suffix of `pending` that begins some stop string starts (its length when none).
    fn held_back(&self) -> usize {
        let p = &self.pending;
        let from = p.len().saturating_sub(self.longest.saturating_sub(1));
        (from..p.len())
            .filter(|&i| p.is_char_boundary(i))
            .find(|&i| self.stops.iter().any(|s| s.starts_with(&p[i..])))
            .unwrap_or(p.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matcher(stops: &[&str]) -> StopMatcher {
        StopMatcher::new(stops.iter().map(|s| s.to_string()).collect())
    }

    fn out(text: &str, stop: Option<&str>) -> StopResult {
        StopResult { text: text.into(), stop: stop.map(Into::into) }
    }

    #[test]
    fn across_token_boundaries() {
        let mut m = matcher(&["o w"]);
        assert_eq!(m.push("Hel"), out("Hel", None));
        assert_eq!(m.push("lo wor"), out("l", Some("o w")));
        assert_eq!(m.push("ld"), out("", None));
        assert_eq!(m.flush(), "");

        let mut m = matcher(&["o w"]);
        assert_eq!(m.push("Hel"), out("Hel", None));
        assert_eq!(m.push("lo"), out("l", None));
        assert_eq!(m.push(" "), out("", None));
        assert_eq!(m.push("wor"), out("", Some("o w")));
    }

    #[test]
    fn holds_back_partial_matches_then_releases() {
        let mut m = matcher(&["</s>"]);
        assert_eq!(m.push("a <"), out("a ", None));
        assert_eq!(m.push("/"), out("", None));
        assert_eq!(m.push("x"), out("</x", None));
        assert_eq!(m.push("b</"), out("b", None));
        assert_eq!(m.flush(), "</");
        assert_eq!(m.flush(), "");
    }

    #[test]
    fn multiple_stops_earliest_wins() {
        let mut m = matcher(&["world", "lo"]);
        assert_eq!(m.push("hello world"), out("hel", Some("lo")));
        let mut m = matcher(&["abc", "bcd"]);
        assert_eq!(m.push("xab"), out("x", None));
        assert_eq!(m.push("cd"), out("", Some("abc")));
        let mut m = matcher(&["abcd", "bx"]);
        assert_eq!(m.push("abc"), out("", None));
        assert_eq!(m.push("x"), out("abcx", None));
        let mut m = matcher(&["abcd", "cz"]);
        assert_eq!(m.push("abc"), out("", None));
        assert_eq!(m.push("z!"), out("ab", Some("cz")));
    }

    #[test]
    fn empty_and_unicode() {
        let mut m = matcher(&[]);
        assert_eq!(m.push("anything"), out("anything", None));
        let mut m = matcher(&[""]);
        assert_eq!(m.push("x"), out("x", None));
        assert_eq!(m.push(""), out("", None));
        let mut m = matcher(&["é😀"]);
        assert_eq!(m.push("café"), out("caf", None));
        assert_eq!(m.push("😀 more"), out("", Some("é😀")));
        let mut m = matcher(&["日本"]);
        assert_eq!(m.push("日"), out("", None));
        assert_eq!(m.push("日本語"), out("日", Some("日本")));
    }

    #[test]
    fn finish_reason_names() {
        assert_eq!(FinishReason::Length.as_tgi(), "length");
        assert_eq!(FinishReason::EosToken.as_tgi(), "eos_token");
        assert_eq!(FinishReason::StopSequence.as_tgi(), "stop_sequence");
        assert_eq!(FinishReason::Length.as_openai(), "length");
        assert_eq!(FinishReason::EosToken.as_openai(), "stop");
        assert_eq!(FinishReason::StopSequence.as_openai(), "stop");
    }
}
