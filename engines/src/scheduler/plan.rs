//! What one step computes, decided before it runs: every decoding sequence's next token (or the draft it
//! verifies), short prompts whole, and chunks of the others within the step's prefill budget, shared fairly.

use super::cost::StepLoad;
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

/// The prompt tokens a step may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct PrefillBudget {
    /// Most prompt tokens of a step in which nothing decodes (`max_batch_prefill_tokens`).
    pub full: usize,
    /// Most prompt tokens of a step beside decoding sequences.
    pub cap: usize,
    /// Prompts with at most this many tokens left to compute are short: each goes into a step whole when it
    /// fits.
    pub short: usize,
}

/// One step, planned.
#[derive(Clone, Debug, PartialEq)]
pub(super) struct StepPlan {
    /// The sequences it computes, in running order.
    pub slots: Vec<Slot>,
    /// Prompt tokens the step could take: the per-step cap beside decodes, the whole budget without.
    pub prefill_budget: usize,
    /// Prompt tokens it takes.
    pub prefill_tokens: usize,
    /// Their mean position in their sequences.
    pub prefill_position: f64,
    /// Sequences it decodes (or verifies a draft of).
    pub decodes: usize,
    /// Its kind.
    pub kind: StepKind,
}

impl StepPlan {
    /// Plans a step of the `running` sequences: each decoding one gets its token (and draft); the prompts
    /// share (see [`prompt_shares`]) `budget.cap` tokens when some sequence decodes, `budget.full` when none
    /// does.
    pub fn build(running: &[Sequence<'_>], budget: PrefillBudget) -> StepPlan {
        let decodes = running.iter().filter(|s| !s.is_prefilling()).count();
        let prefill_budget = if decodes > 0 { budget.cap.min(budget.full) } else { budget.full };
        let wants: Vec<usize> = running.iter().map(|s| if s.is_prefilling() { s.pending() } else { 0 }).collect();
        let shares = prompt_shares(prefill_budget, budget.short, &wants);
        let mut slots = Vec::new();
        for (seq, (s, share)) in running.iter().zip(shares).enumerate() {
            let (tokens, work) = match (s.is_prefilling(), s.spec.input().len()) {
                (true, _) => (share, Work::Prefill),
                (false, 0) => (1, Work::Decode),
                (false, n) => (n, Work::Verify),
            };
            if tokens > 0 {
                slots.push(Slot { seq, tokens, work, logits: s.logits_for(tokens) });
            }
        }
        let prefill = slots.iter().filter(|s| s.work == Work::Prefill);
        let prefill_tokens = prefill.clone().map(|s| s.tokens).sum();
        // A chunk of `n` tokens from position `c` has its tokens at `c + (n - 1) / 2` on average.
        let weighted: f64 =
            prefill.map(|s| s.tokens as f64 * (running[s.seq].computed as f64 + (s.tokens as f64 - 1.0) / 2.0)).sum();
        let prefill_position = if prefill_tokens > 0 { weighted / prefill_tokens as f64 } else { 0.0 };
        let kind = match (decodes > 0, prefill_tokens > 0) {
            (true, true) => StepKind::Mixed,
            (false, true) => StepKind::Prefill,
            _ => StepKind::Decode,
        };
        StepPlan { slots, prefill_budget, prefill_tokens, prefill_position, decodes, kind }
    }

    /// What the step computes, as the cost model sees it.
    pub fn load(&self) -> StepLoad {
        StepLoad { decodes: self.decodes, prefill: self.prefill_tokens, position: self.prefill_position }
    }
}

/// Splits a step's `budget` prompt tokens among the sequences wanting `wants[i]` of them (in admission order;
/// 0 for those not prefilling), those wanting at most `short` being short prompts. Each long prompt keeps an
/// equal share of the budget; in what is left, short prompts go in whole, oldest first, while they fit (their
/// first token does not wait for a second step). The rest of the budget is shared fairly (see [`fair_shares`])
/// between the short prompts that did not fit, each on its own, and the long prompts together, which take
/// their part oldest first (one long prompt finishes before the next gets tokens: the first one's time to
/// first token is what prefill speed allows, and the others' no later than with equal shares).
pub(super) fn prompt_shares(budget: usize, short: usize, wants: &[usize]) -> Vec<usize> {
    let prompts = wants.iter().filter(|&&n| n > 0).count();
    let long = wants.iter().filter(|&&n| n > short).count();
    let mut room = budget - long * (budget / prompts.max(1));
    let mut got: Vec<usize> = wants
        .iter()
        .map(|&n| {
            let take = if n <= short && n <= room { n } else { 0 };
            room -= take;
            take
        })
        .collect();
    // The long prompts claim together, where the oldest of them stands.
    let first_long = wants.iter().position(|&n| n > short);
    let claims: Vec<usize> = (0..wants.len())
        .map(|i| match wants[i] {
            n if n > short && Some(i) == first_long => wants.iter().filter(|&&n| n > short).sum(),
            n if n <= short && got[i] == 0 => n,
            _ => 0,
        })
        .collect();
    let shares = fair_shares(budget - got.iter().sum::<usize>(), &claims);
    let mut long_share = first_long.map_or(0, |i| shares[i]);
    for (i, (&n, share)) in wants.iter().zip(shares).enumerate() {
        if n > short {
            let take = n.min(long_share);
            long_share -= take;
            got[i] = take;
        } else {
            got[i] += share;
        }
    }
    got
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
    fn short_prompts_go_in_whole_beside_the_long_ones_share() {
        // Short prompts (at most 32 tokens) whole, oldest first, in what the long one's share (50 of 100) leaves.
        assert_eq!(prompt_shares(100, 32, &[1000, 30, 0, 20]), [50, 30, 0, 20]);
        assert_eq!(prompt_shares(100, 32, &[1000, 30, 30]), [40, 30, 30], "each prompt's share is 33");
        // Fair shares would give 20 and 20: the first goes in whole, the second gets what is left.
        assert_eq!(prompt_shares(40, 32, &[30, 30]), [30, 10]);
        assert_eq!(prompt_shares(40, 32, &[0, 30, 30, 5]), [0, 30, 5, 5], "the last fits what the first left");
        // A short prompt over the room is shared like a long one.
        assert_eq!(prompt_shares(16, 32, &[1000, 30]), [8, 8]);
        assert_eq!(prompt_shares(16, 32, &[30]), [16]);
        assert_eq!(prompt_shares(64, 32, &[300, 200]), [64, 0], "long prompts oldest first");
        assert_eq!(prompt_shares(64, 32, &[40, 0, 200]), [40, 0, 24], "the next long one gets what the first leaves");
        // Long prompts claim together: 20 for the short one that did not fit, 20 for the two long ones.
        assert_eq!(prompt_shares(40, 32, &[100, 30, 100]), [20, 20, 0]);
        assert_eq!(prompt_shares(0, 32, &[5, 300]), [0, 0]);
        assert_eq!(prompt_shares(8, 32, &[]), Vec::<usize>::new());
    }

    #[test]
    fn shares_never_exceed_the_budget_or_the_want() {
        for budget in 0..40 {
            for wants in [vec![1, 2, 3], vec![0, 50, 7, 7], vec![13], vec![2; 9]] {
                for got in [fair_shares(budget, &wants), prompt_shares(budget, 4, &wants)] {
                    let total: usize = got.iter().sum();
                    assert_eq!(total, budget.min(wants.iter().sum()), "{budget} {wants:?} {got:?}");
                    assert!(got.iter().zip(&wants).all(|(g, w)| g <= w));
                }
            }
        }
    }
}
