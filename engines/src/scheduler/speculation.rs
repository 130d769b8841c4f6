//! A sequence's speculation state: the draft its next step verifies, its depth controller, and its counts.

use crate::speculative::{probe_interval, Depth, DraftCache, Proposal, SpeculationConfig};

/// Speculation state of one sequence.
#[derive(Debug, Default)]
pub(super) struct Speculation {
    /// The next step's tokens when it verifies a draft: the sequence's last token, then the draft; else empty.
    input: Vec<u32>,
    /// The distribution each drafted token was sampled from; empty for a deterministic draft (point masses).
    dists: Vec<Vec<(u32, f32)>>,
    /// The token a one-token proposal would have drafted for a step that does not speculate (its acceptance
    /// is measured all the same, for free).
    shadow: Option<u32>,
    /// Measured acceptance and the depth it calls for.
    depth: Depth,
    /// Steps without a draft since the last one (for probing with a costly method).
    idle: u32,
    /// Tokens drafted for the request, all steps together.
    pub drafted: usize,
    /// Drafted tokens accepted, all steps together.
    pub accepted: usize,
    /// The target's final hidden state at the row that gave the pending token (for Medusa; else empty).
    pub hidden: Vec<f32>,
    /// The sequence's place in the draft model's cache (draft-model speculation).
    pub draft_cache: DraftCache,
}

impl Speculation {
    /// Starts the depth controller from `depth` (the acceptance measured on earlier sequences).
    pub fn start_from(&mut self, depth: Depth) {
        self.depth = depth;
    }

    /// The depth controller's state, for carrying it to later sequences.
    pub fn depth(&self) -> Depth {
        self.depth
    }

    /// The number of tokens to draft in the next step of a sequence, at most `cap` (the batch rule) and
    /// `room` (what the request may still generate, less the token the step samples anyway): the adaptive
    /// rule's depth at `token_cost`, or `cap` with a fixed depth. A sequence the rule keeps from speculating
    /// drafts one token every [`probe_interval`] steps when the method's proposals are not free. `catch_up` is
    /// what the draft model's catching up on the sequence costs first, in the units of `token_cost` summed over
    /// its tokens: the rule drafts only where the predicted gain over the `room` tokens left pays it back, and
    /// probes only where the best gain any draft could have (every token accepted, for free) would.
    pub fn want(&mut self, cfg: &SpeculationConfig, cap: usize, room: usize, token_cost: f32, catch_up: f32) -> usize {
        self.cancel();
        self.shadow = None;
        let cap = cap.min(room);
        if cap == 0 {
            return 0;
        }
        if !cfg.adaptive {
            return cap;
        }
        let k = self.depth.choose(cap, token_cost);
        let pays = |gain: f32| catch_up <= room as f32 * (1.0 - 1.0 / gain).max(0.0);
        if cfg.method.free() || (k > 0 && pays(self.depth.gain(k, token_cost))) {
            self.idle = 0;
            return k;
        }
        self.idle += 1;
        // A probe re-measures the cost as well as the acceptance, so it is bounded by what drafting `cap` tokens
        // could save at best (all accepted, at no cost), not by the cost it is there to correct.
        if self.idle >= probe_interval(token_cost) && pays((cap + 1) as f32) {
            self.idle = 0;
            return 1;
        }
        0
    }

    /// The predicted speed-up of drafting `k` tokens at `token_cost`, from the measured acceptance.
    pub fn gain(&self, k: usize, token_cost: f32) -> f32 {
        self.depth.gain(k, token_cost)
    }

    /// Takes the proposal for a step that wanted `k` tokens after the pending token `last`: its first `k`
    /// tokens become the draft, or, with `k` = 0, its first token the shadow. Returns the draft's length.
    pub fn install(&mut self, last: u32, k: usize, proposal: Proposal) -> usize {
        if k == 0 {
            self.shadow = proposal.tokens.first().copied();
            return 0;
        }
        let draft = &proposal.tokens[..proposal.tokens.len().min(k)];
        if !draft.is_empty() {
            self.input.push(last);
            self.input.extend_from_slice(draft);
            self.dists = proposal.dists;
            self.dists.truncate(draft.len());
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

    /// The distribution the draft's token `i` was sampled from; `None` for a deterministic draft.
    pub fn dist(&self, i: usize) -> Option<&[(u32, f32)]> {
        self.dists.get(i).map(Vec::as_slice)
    }

    /// Keeps the draft's first `n` tokens (those the request's grammar allows); returns the draft's length. A
    /// sampled draft keeps the first token past them too: verification rejects it (the grammar leaves it no
    /// probability) and draws the replacement from the residual, as the target distribution requires.
    pub fn keep(&mut self, n: usize) -> usize {
        let n = if self.dists.is_empty() { n } else { (n + 1).min(self.draft().len()) };
        self.input.truncate(if n == 0 { 0 } else { n + 1 });
        self.dists.truncate(n);
        self.draft().len()
    }

    /// Drops the draft.
    pub fn cancel(&mut self) {
        self.input.clear();
        self.dists.clear();
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
        self.cancel();
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
    use crate::speculative::PROBE_EVERY;

    #[test]
    fn wants_within_cap_and_room_and_installs_proposals() {
        let cfg = SpeculationConfig { adaptive: false, ..SpeculationConfig::default() };
        let mut s = Speculation::default();
        assert_eq!(s.want(&cfg, 4, 10, 0.1, 0.0), 4);
        assert_eq!(s.want(&cfg, 4, 2, 0.1, 0.0), 2);
        assert_eq!(s.want(&cfg, 0, 2, 0.1, 0.0), 0);
        assert_eq!(s.install(2, 4, vec![3, 4, 5, 1, 9].into()), 4);
        assert_eq!((s.input(), s.draft()), (&[2, 3, 4, 5, 1][..], &[3, 4, 5, 1][..]));
        assert_eq!(s.keep(1), 1);
        assert_eq!(s.input(), &[2, 3]);
        assert_eq!(s.keep(0), 0);
        assert!(s.input().is_empty());
        assert_eq!(s.install(2, 4, Proposal::default()), 0, "no proposal");
        assert!(s.input().is_empty());
        assert_eq!(s.install(2, 4, vec![3, 4].into()), 2);
        s.verifying();
        s.hit();
        s.verified(2, 1);
        assert_eq!((s.drafted, s.accepted, s.input().len()), (2, 1, 0));
        // Adaptive with acceptance gone: no draft, but the shadow proposal measures acceptance.
        let adaptive = SpeculationConfig::default();
        for _ in 0..30 {
            s.depth.observe(1, 0);
        }
        assert_eq!(s.want(&adaptive, 4, 10, 0.1, 0.0), 0);
        s.install(2, 0, vec![3].into());
        assert_eq!(s.shadow, Some(3));
        for _ in 0..30 {
            let k = s.want(&adaptive, 4, 10, 0.1, 0.0);
            s.install(2, k, vec![3].into());
            s.sampled(3);
        }
        assert!(s.want(&adaptive, 4, 10, 0.1, 0.0) > 0, "acceptance measured without drafting brings it back");
    }

    #[test]
    fn a_sampled_draft_keeps_its_distributions_and_its_first_disallowed_token() {
        let cfg = SpeculationConfig { adaptive: false, ..SpeculationConfig::default() };
        let mut s = Speculation::default();
        let dist = |t: u32| vec![(t, 0.5), (t + 1, 0.5)];
        let sampled = Proposal { tokens: vec![3, 4, 5], dists: vec![dist(3), dist(4), dist(5)] };
        assert_eq!(s.want(&cfg, 2, 10, 0.1, 0.0), 2);
        assert_eq!(s.install(2, 2, sampled.clone()), 2);
        assert_eq!((s.dist(1), s.dist(2)), (Some(&dist(4)[..]), None));
        // The grammar allows one token: the second stays, to be rejected with the residual drawn.
        assert_eq!(s.keep(1), 2);
        assert_eq!(s.keep(0), 1);
        assert_eq!((s.draft(), s.dist(0)), (&[3][..], Some(&dist(3)[..])));
        s.want(&cfg, 4, 10, 0.1, 0.0);
        assert_eq!((s.draft().len(), s.dist(0)), (0, None), "a new step starts without the old distributions");
        s.install(2, 4, vec![3, 4].into());
        assert_eq!((s.keep(1), s.dist(0)), (1, None), "a deterministic draft is cut to what the grammar allows");
    }

    /// A costly method's settings (the bundled Medusa heads: proposals that are not free).
    fn costly() -> SpeculationConfig {
        let m = crate::speculative::Medusa::load(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../models/stories-distill-4l/medusa"),
            256,
            512,
        )
        .unwrap();
        SpeculationConfig { method: crate::speculative::Method::Medusa(m.into()), ..Default::default() }
    }

    #[test]
    fn a_draft_that_must_catch_up_first_drafts_only_where_the_tokens_left_pay_for_it() {
        let (cfg, mut s) = (costly(), Speculation::default());
        for _ in 0..30 {
            s.depth.observe(4, 4);
        }
        let k = s.want(&cfg, 4, 100, 0.1, 0.0);
        let gain = s.gain(k, 0.1);
        assert!(k > 0 && gain > 1.5, "{k} {gain}");
        // 100 tokens left at this gain save 100 * (1 - 1/gain) sequence-steps: a catch-up costing less drafts.
        let saved = 100.0 * (1.0 - 1.0 / gain);
        assert_eq!(s.want(&cfg, 4, 100, 0.1, saved * 0.9), k);
        assert_eq!(s.want(&cfg, 4, 100, 0.1, saved * 1.1), 0);
        // The same catch-up with few tokens left: neither drafts nor probes.
        let ks: Vec<usize> = (0..2 * PROBE_EVERY).map(|_| s.want(&cfg, 4, 5, 0.1, saved * 0.9)).collect();
        assert!(ks.iter().all(|&k| k == 0), "{ks:?}");
        // Acceptance gone: no drafts, but probes go on where the tokens left could pay for their catch-up.
        for _ in 0..30 {
            s.depth.observe(1, 0);
        }
        let ks: Vec<usize> = (0..2 * PROBE_EVERY).map(|_| s.want(&cfg, 4, 100, 0.1, 10.0)).collect();
        assert_eq!(ks.iter().filter(|&&k| k == 1).count(), 2, "{ks:?}");
    }

    #[test]
    fn a_costly_method_probes_while_off() {
        let cfg = costly();
        let mut s = Speculation::default();
        for _ in 0..30 {
            s.depth.observe(1, 0);
        }
        let ks: Vec<usize> = (0..2 * PROBE_EVERY).map(|_| s.want(&cfg, 4, 10, 0.1, 0.0)).collect();
        assert_eq!(ks.iter().filter(|&&k| k == 1).count(), 2, "{ks:?}");
        assert!(ks.iter().all(|&k| k <= 1));
    }
}
