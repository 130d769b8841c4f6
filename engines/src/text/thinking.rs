//! A reasoning model's thinking block (`<think>…</think>`) followed token by token while it generates: whether
//! the output is inside the block (a grammar waits until it ends), and a budget of tokens it may think for, after
//! which its end is forced token by token (llama.cpp's reasoning budget). The block is found in the tokens' text,
//! so a tag spelled over several tokens counts like a tag that is one token.

/// How one request's thinking block is followed (set for chat templates that think).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Thinking {
    /// The text that opens the block (`<think>`).
    pub start: String,
    /// The text that closes it (`</think>`).
    pub end: String,
    /// Whether the prompt ends inside the block (a generation prompt that opens it, as DeepSeek-R1's does).
    pub open: bool,
    /// Most tokens the model generates inside the block before its end is forced; `None`: no limit.
    pub budget: Option<usize>,
    /// The tokens forced when the budget is spent (the end text, tokenized).
    pub forced: Vec<u32>,
}

/// Where the output stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// The block has not started (it may, or the answer comes without one).
    Before,
    /// Inside the block, after `spent` tokens there.
    Inside { spent: usize },
    /// The budget is spent: the `next`-th forced token comes next.
    Forcing { next: usize },
    /// The block is over.
    After,
}

/// Most tokens the end waits for a UTF-8 character to complete once the budget is spent.
const UTF8_WAIT: usize = 3;

/// One sequence's thinking block as its tokens come.
#[derive(Clone, Debug)]
pub struct ThinkingState {
    cfg: Thinking,
    phase: Phase,
    /// The latest text, enough to find a tag that ends in the next piece.
    tail: String,
}

impl ThinkingState {
    /// The state before the first generated token.
    pub fn new(cfg: Thinking) -> Self {
        let phase = if cfg.open { Self::entered(&cfg) } else { Phase::Before };
        ThinkingState { cfg, phase, tail: String::new() }
    }

    /// The phase on entering the block: forcing its end at once with a budget of 0.
    fn entered(cfg: &Thinking) -> Phase {
        if cfg.budget == Some(0) {
            Phase::Forcing { next: 0 }
        } else {
            Phase::Inside { spent: 0 }
        }
    }

    /// Whether the output is inside the block (its end being forced included).
    pub fn inside(&self) -> bool {
        matches!(self.phase, Phase::Inside { .. } | Phase::Forcing { .. })
    }

    /// The token the next one must be while the block's end is forced.
    pub fn forced(&self) -> Option<u32> {
        match self.phase {
            Phase::Forcing { next } => self.cfg.forced.get(next).copied(),
            _ => None,
        }
    }

    /// Takes a generated token with its text (empty while a UTF-8 character is incomplete).
    pub fn accept(&mut self, piece: &str) {
        self.tail.push_str(piece);
        let Thinking { start, end, budget, forced, .. } = &self.cfg;
        let ended = |tail: &str| !end.is_empty() && tail.contains(end.as_str());
        self.phase = match self.phase {
            Phase::Before => match self.tail.rfind(start.as_str()).filter(|_| !start.is_empty()) {
                Some(at) => {
                    self.tail.drain(..at + start.len());
                    if ended(&self.tail) {
                        Phase::After
                    } else {
                        Self::entered(&self.cfg)
                    }
                }
                None => Phase::Before,
            },
            Phase::Inside { .. } | Phase::Forcing { .. } if ended(&self.tail) => Phase::After,
            Phase::Inside { spent } => {
                let spent = spent + 1;
                let whole = !piece.is_empty() || spent >= budget.unwrap_or(0) + UTF8_WAIT;
                match budget {
                    Some(b) if spent >= *b && whole => Phase::Forcing { next: 0 },
                    _ => Phase::Inside { spent },
                }
            }
            Phase::Forcing { next } if next + 1 < forced.len() => Phase::Forcing { next: next + 1 },
            Phase::Forcing { .. } | Phase::After => Phase::After,
        };
        let longest = self.cfg.start.len().max(self.cfg.end.len());
        if self.phase == Phase::After {
            self.tail.clear();
        } else if self.tail.len() >= longest {
            let mut cut = self.tail.len() + 1 - longest;
            while !self.tail.is_char_boundary(cut) {
                cut += 1;
            }
            self.tail.drain(..cut);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thinking(open: bool, budget: Option<usize>) -> ThinkingState {
        let cfg = Thinking { start: "<think>".into(), end: "</think>".into(), open, budget, forced: vec![7, 8] };
        ThinkingState::new(cfg)
    }

    /// Feeds `pieces`; returns after each whether the output is inside and the forced token.
    fn run(s: &mut ThinkingState, pieces: &[&str]) -> Vec<(bool, Option<u32>)> {
        pieces
            .iter()
            .map(|p| {
                s.accept(p);
                (s.inside(), s.forced())
            })
            .collect()
    }

    #[test]
    fn a_block_opened_by_the_model_in_pieces_and_closed() {
        let mut s = thinking(false, None);
        assert!(!s.inside());
        let seen = run(&mut s, &["<", "think", ">", "hm", "</th", "ink>", "Hi"]);
        let inside: Vec<bool> = seen.iter().map(|s| s.0).collect();
        assert_eq!(inside, [false, false, true, true, true, false, false]);
        // A later block is text.
        run(&mut s, &["<think>"]);
        assert!(!s.inside());
    }

    #[test]
    fn an_open_prompt_starts_inside() {
        let mut s = thinking(true, None);
        assert!(s.inside());
        assert_eq!(run(&mut s, &["x", "</think>"]), [(true, None), (false, None)]);
    }

    #[test]
    fn the_budget_forces_the_end_after_its_tokens() {
        let mut s = thinking(true, Some(2));
        assert_eq!(run(&mut s, &["a", "b"]), [(true, None), (true, Some(7))]);
        assert_eq!(run(&mut s, &["</th"]), [(true, Some(8))]);
        assert_eq!(run(&mut s, &["ink>"]), [(false, None)]);
        // Zero: forced at once, when the prompt opens the block or when the model does.
        let s = thinking(true, Some(0));
        assert_eq!(s.forced(), Some(7));
        let mut s = thinking(false, Some(0));
        assert_eq!(run(&mut s, &["<think>"]), [(true, Some(7))]);
        // The natural end before the budget.
        let mut s = thinking(true, Some(5));
        assert_eq!(run(&mut s, &["a", "</think>", "b", "c", "d", "e"])[1..], [(false, None); 5]);
    }

    #[test]
    fn the_forced_end_waits_for_a_whole_character() {
        let mut s = thinking(true, Some(1));
        // An incomplete character (empty piece) holds the end back, for a few tokens at most.
        assert_eq!(run(&mut s, &["", "é"]), [(true, None), (true, Some(7))]);
        let mut s = thinking(true, Some(1));
        let seen = run(&mut s, &["", "", "", ""]);
        assert_eq!(seen.last(), Some(&(true, Some(7))));
        assert_eq!(seen[..3], [(true, None); 3]);
    }
}
