//! A sequence's speculation state: the draft its next step verifies, its depth controller, and its counts.

use crate::speculative::{propose, Depth, SpeculationConfig};

/// Speculation state of one sequence.
#[derive(Debug, Default)]
pub(super) struct Speculation {
    /// The next step's tokens when it verifies a draft: the sequence's last token, then the draft; else empty.
    input: Vec<u32>,
    /// The token a one-token proposal would have drafted for a step that does not speculate (its acceptance
    /// is measured all the same, for free).
    shadow: Option<u32>,
    /// Measured acceptance and the depth it calls for.
    depth: Depth,
    /// Tokens drafted for the request, all steps together.
    pub drafted: usize,
    /// Drafted tokens accepted, all steps together.
    pub accepted: usize,
}

impl Speculation {
    /// Proposes the draft for the next step of a sequence holding `tokens` (the last one pending), at most
    /// `cap` tokens (the batch rule) and `room` (what the request may still generate, less the token the step
    /// samples anyway); returns its length.
    pub fn plan(&mut self, tokens: &[u32], cfg: &SpeculationConfig, cap: usize, room: usize) -> usize {
        self.input.clear();
        self.shadow = None;
        let cap = cap.min(room);
        let Some(&last) = tokens.last() else { return 0 };
        if cap == 0 {
            return 0;
        }
        let k = if cfg.adaptive { self.depth.choose(cap, cfg.token_cost) } else { cap };
        let draft = propose(tokens, cfg.ngram_min, cfg.ngram_max, k.max(1));
        if k == 0 {
            self.shadow = draft.first().copied();
            return 0;
        }
        if !draft.is_empty() {
            self.input.push(last);
            self.input.extend_from_slice(&draft);
        }
        draft.len()
    }

    /// The next step's tokens when it verifies a draft (the last token, then the draft); empty otherwise.
    pub fn input(&self) -> &[u32] {
        &self.input
    }

    /// The draft the next step verifies.
    pub fn draft(&self) -> &[u32] {
        self.input.get(1..).unwrap_or(&[])
    }

    /// Keeps the draft's first `n` tokens (those the request's grammar allows); returns the draft's length.
    pub fn keep(&mut self, n: usize) -> usize {
        self.input.truncate(if n == 0 { 0 } else { n + 1 });
        self.draft().len()
    }

    /// Drops the draft (no KV blocks for it).
    pub fn cancel(&mut self) {
        self.input.clear();
    }

    /// Starts verifying the draft: counts its tokens as drafted.
    pub fn verifying(&mut self) {
        self.drafted += self.draft().len();
    }

    /// Counts one drafted token as accepted.
    pub fn hit(&mut self) {
        self.accepted += 1;
    }

    /// Ends a verification: `decided` draft positions were checked (fewer than drafted when the request
    /// ended on the way), `accepted` of them went through.
    pub fn verified(&mut self, decided: usize, accepted: usize) {
        self.depth.observe(decided, accepted);
        self.input.clear();
    }

    /// Notes the token a step without a draft sampled (against the shadow proposal, if any).
    pub fn sampled(&mut self, token: u32) {
        if let Some(s) = self.shadow.take() {
            self.depth.observe_shadow(s == token);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_within_cap_and_room() {
        let cfg = SpeculationConfig { adaptive: false, ..SpeculationConfig::default() };
        let tokens = [1, 2, 3, 4, 5, 1, 2];
        let mut s = Speculation::default();
        assert_eq!(s.plan(&tokens, &cfg, 4, 10), 4);
        assert_eq!((s.input(), s.draft()), (&[2, 3, 4, 5, 1][..], &[3, 4, 5, 1][..]));
        assert_eq!(s.plan(&tokens, &cfg, 4, 2), 2);
        assert_eq!(s.draft(), &[3, 4]);
        assert_eq!(s.keep(1), 1);
        assert_eq!(s.input(), &[2, 3]);
        assert_eq!(s.keep(0), 0);
        assert!(s.input().is_empty());
        assert_eq!(s.plan(&tokens, &cfg, 0, 2), 0);
        assert!(s.input().is_empty());
        assert_eq!(s.plan(&[1, 2, 3], &cfg, 4, 10), 0, "no earlier occurrence");
        assert_eq!(s.plan(&tokens, &cfg, 4, 10), 4);
        s.verifying();
        s.hit();
        s.verified(2, 1);
        assert_eq!((s.drafted, s.accepted, s.input().len()), (4, 1, 0));
        // Adaptive with acceptance gone: no draft, but the shadow proposal measures acceptance.
        let adaptive = SpeculationConfig::default();
        for _ in 0..30 {
            s.depth.observe(1, 0);
        }
        assert_eq!(s.plan(&tokens, &adaptive, 4, 10), 0);
        assert_eq!(s.shadow, Some(3));
        for _ in 0..30 {
            s.plan(&tokens, &adaptive, 4, 10);
            s.sampled(3);
        }
        assert!(s.plan(&tokens, &adaptive, 4, 10) > 0, "acceptance measured without drafting brings it back");
    }
}
