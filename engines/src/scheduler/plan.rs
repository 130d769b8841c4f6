//! What one step computes, decided before it runs: every decoding sequence's next token (or the draft it
//! verifies), and prompt chunks within the step's prefill budget, shared fairly among the prompts.

use super::sequence::Sequence;
use crate::model::Logits;

/// What a sequence's tokens in a step are.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Work {
    /// A chunk of its pending (prompt, or after preemption prompt and output) tokens.
    Prefill,
    /// Its last token, to sample the next.
    Decode,
    /// Its last token and a draft to check.
    Verify,
}

/// Whether a step decoded, prefilled, or both.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StepKind {
    /// Decodes (and verifications) only.
    Decode,
    /// Decodes beside prompt tokens.
    Mixed,
    /// Prompt tokens only.
    Prefill,
}

/// One sequence's part of a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Slot {
    /// Its index in the running batch.
    pub seq: usize,
    /// Tokens the step computes for it.
    pub tokens: usize,
    /// What they are.
    pub work: Work,
    /// The logits it needs back.
    pub logits: Logits,
}

/// One step, planned.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct StepPlan {
    /// The sequences it computes, in running order.
    pub slots: Vec<Slot>,
    /// Prompt tokens the step could take: the per-step cap beside decodes, the whole budget without.
    pub prefill_budget: usize,
    /// Prompt tokens it takes.
    pub prefill_tokens: usize,
    /// Sequences it decodes (or verifies a draft of).
    pub decodes: usize,
    /// Its kind.
    pub kind: StepKind,
}

impl StepPlan {
    /// Plans a step of the `running` sequences: each decoding one gets its token (and draft); the prefilling
    /// ones share a budget of `cap` prompt tokens when some sequence decodes, `full` when none does (see
    /// [`fair_shares`]).
    pub fn build(running: &[Sequence<'_>], full: usize, cap: usize) -> StepPlan {
        let decodes = running.iter().filter(|s| !s.prefilling).count();
        let prefill_budget = if decodes > 0 { cap.min(full) } else { full };
        let wants: Vec<usize> = running.iter().map(|s| if s.prefilling { s.pending() } else { 0 }).collect();
        let shares = fair_shares(prefill_budget, &wants);
        let mut slots = Vec::new();
        for (seq, (s, share)) in running.iter().zip(shares).enumerate() {
            let (tokens, work) = match (s.prefilling, s.spec.input().len()) {
                (true, _) => (share, Work::Prefill),
                (false, 0) => (1, Work::Decode),
                (false, n) => (n, Work::Verify),
            };
            if tokens > 0 {
                slots.push(Slot { seq, tokens, work, logits: s.logits_for(tokens) });
            }
        }
        let prefill_tokens = slots.iter().filter(|s| s.work == Work::Prefill).map(|s| s.tokens).sum();
        let kind = match (decodes > 0, prefill_tokens > 0) {
            (true, true) => StepKind::Mixed,
            (false, true) => StepKind::Prefill,
            _ => StepKind::Decode,
        };
        StepPlan { slots, prefill_budget, prefill_tokens, decodes, kind }
    }
}

/// Splits `budget` prompt tokens among the sequences wanting `wants[i]` of them (in admission order; 0 for
/// those not prefilling): equal shares, and what a short prompt leaves of its share goes to the others
/// (max-min fairness), so that no long prompt takes the whole budget and a short one behind it finishes
/// soon. When the budget is smaller than the number of prompts, the oldest get one token each.
pub(super) fn fair_shares(budget: usize, wants: &[usize]) -> Vec<usize> {
    let mut got = vec![0; wants.len()];
    let mut left = budget;
    let mut open: Vec<usize> = (0..wants.len()).filter(|&i| wants[i] > 0).collect();
    while left > 0 && !open.is_empty() {
        let share = left / open.len();
        if share == 0 {
            for &i in open.iter().take(left) {
                got[i] += 1;
            }
            break;
        }
        let mut still = Vec::new();
        for &i in &open {
            let take = (wants[i] - got[i]).min(share);
            got[i] += take;
            left -= take;
            if got[i] < wants[i] {
                still.push(i);
            }
        }
        open = still;
    }
    got
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_equal_and_leftovers_go_to_the_others() {
        assert_eq!(fair_shares(16, &[1000, 1000]), [8, 8]);
        assert_eq!(
            fair_shares(16, &[1000, 3, 0, 1000]),
            [7, 3, 0, 6],
            "shares of 5, the short one's 2 left over shared"
        );
        assert_eq!(fair_shares(16, &[1000, 3, 5]), [8, 3, 5]);
        assert_eq!(fair_shares(16, &[4, 3]), [4, 3], "less wanted than the budget");
        assert_eq!(fair_shares(17, &[100, 100, 100]), [6, 6, 5], "the remainder to the oldest");
        assert_eq!(fair_shares(2, &[9, 0, 9, 9]), [1, 0, 1, 0], "a token each to the oldest");
        assert_eq!(fair_shares(0, &[9]), [0]);
        assert_eq!(fair_shares(5, &[]), Vec::<usize>::new());
    }

    #[test]
    fn shares_never_exceed_the_budget_or_the_want() {
        for budget in 0..40 {
            for wants in [vec![1, 2, 3], vec![0, 50, 7, 7], vec![13], vec![2; 9]] {
                let got = fair_shares(budget, &wants);
                let total: usize = got.iter().sum();
                assert_eq!(total, budget.min(wants.iter().sum()), "{budget} {wants:?} {got:?}");
                assert!(got.iter().zip(&wants).all(|(g, w)| g <= w));
            }
        }
    }
}
