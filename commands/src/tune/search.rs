//! The search over a [`Space`]: the full grid when it fits the trial budget, else coordinate descent
//! from the baseline, one parameter at a time. Trials run through [`Objective`], so the search is
//! tested without servers; differences within the median absolute deviation are ties.

use std::collections::HashMap;

use anyhow::Result;

use super::space::{Config, Space};

/// The least relative difference of the objective counted as real when the repeats cannot tell (one repeat, or
/// repeats that happen to agree): a server's goodput varies by about this much from run to run.
pub const NOISE_FLOOR: f64 = 0.05;

/// A configuration's objective over its repeats.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Measured {
    /// Median of the objective (higher is better; `-inf` for a failed trial).
    pub score: f64,
    /// Median absolute deviation of the objective over the repeats.
    pub spread: f64,
}

impl Measured {
    /// Whether `self` beats `other` by more than the noise: the spread of either, and at least
    /// [`NOISE_FLOOR`] of `other`.
    pub fn beats(&self, other: &Measured) -> bool {
        if !other.score.is_finite() {
            return self.score.is_finite();
        }
        self.score - other.score > self.spread.max(other.spread).max(NOISE_FLOOR * other.score.abs())
    }
}

/// Runs (or recalls) a trial.
pub trait Objective {
    /// Measures `cfg`; failures are scored `-inf`, errors abort the search.
    fn measure(&mut self, cfg: &Config) -> Result<Measured>;
}

/// How the space was searched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// Every configuration.
    Grid,
    /// One parameter at a time from the baseline.
    CoordinateDescent,
}

/// The search's result: the configurations measured, in order, and the best by the search's rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// How.
    pub strategy: Strategy,
    /// Every configuration measured, first to last.
    pub trials: Vec<(Config, Measured)>,
    /// Whether the budget ran out before the search ended.
    pub budget_exhausted: bool,
}

/// Searches `space` from `base` with at most `budget` distinct trials.
pub fn search(space: &Space, base: &Config, budget: usize, obj: &mut dyn Objective) -> Result<Outcome> {
    let mut run = Runner { obj, budget, seen: HashMap::new(), trials: Vec::new(), exhausted: false };
    let strategy = if space.grid_size() <= budget { Strategy::Grid } else { Strategy::CoordinateDescent };
    match strategy {
        Strategy::Grid => {
            for c in space.grid(base) {
                run.eval(&c)?;
            }
        }
        Strategy::CoordinateDescent => descend(space, base, &mut run)?,
    }
    Ok(Outcome { strategy, trials: run.trials, budget_exhausted: run.exhausted })
}

fn descend(space: &Space, base: &Config, run: &mut Runner) -> Result<()> {
    let mut cur = base.clone();
    let Some(mut cur_m) = run.eval(&cur)? else { return Ok(()) };
    loop {
        let mut changed = false;
        for (p, values) in &space.0 {
            let (mut best, mut best_m) = (cur.clone(), cur_m);
            for v in values {
                let c = cur.with(*p, v);
                if c == cur {
                    continue;
                }
                let Some(m) = run.eval(&c)? else { return Ok(()) };
                if m.beats(&best_m) {
                    (best, best_m) = (c, m);
                }
            }
            if best != cur {
                (cur, cur_m, changed) = (best, best_m, true);
            }
        }
        if !changed {
            return Ok(());
        }
    }
}

struct Runner<'a> {
    obj: &'a mut dyn Objective,
    budget: usize,
    seen: HashMap<Config, Measured>,
    trials: Vec<(Config, Measured)>,
    exhausted: bool,
}

impl Runner<'_> {
    /// The configuration's measure, `None` once the budget is spent.
    fn eval(&mut self, c: &Config) -> Result<Option<Measured>> {
        if let Some(m) = self.seen.get(c) {
            return Ok(Some(*m));
        }
        if self.seen.len() >= self.budget {
            self.exhausted = true;
            return Ok(None);
        }
        let m = self.obj.measure(c)?;
        self.seen.insert(c.clone(), m);
        self.trials.push((c.clone(), m));
        Ok(Some(m))
    }
}

/// The median of `v` (0 when empty).
pub fn median(v: &[f64]) -> f64 {
    let mut s: Vec<f64> = v.iter().copied().filter(|x| !x.is_nan()).collect();
    if s.is_empty() {
        return 0.0;
    }
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// The median absolute deviation of `v` from its median.
pub fn mad(v: &[f64]) -> f64 {
    let m = median(v);
    median(&v.iter().map(|x| (x - m).abs()).collect::<Vec<_>>())
}

#[cfg(test)]
mod tests {
    use super::super::space::{parse_list, Param, Value};
    use super::*;

    /// A separable objective: best at threads=4, max_batch_size=8; counts calls.
    struct Mock {
        calls: Vec<Config>,
        noise: f64,
    }

    impl Objective for Mock {
        fn measure(&mut self, c: &Config) -> Result<Measured> {
            self.calls.push(c.clone());
            let num = |p: Param, d: f64| c.0.get(&p).map_or(d, |v| v.parse::<f64>().unwrap());
            let score =
                100.0 - (num(Param::Threads, 1.0) - 4.0).powi(2) - (num(Param::MaxBatchSize, 128.0) - 8.0).abs();
            Ok(Measured { score, spread: self.noise })
        }
    }

    fn space(t: &str, b: &str) -> Space {
        Space(vec![
            (Param::Threads, parse_list(Param::Threads, t).unwrap()),
            (Param::MaxBatchSize, parse_list(Param::MaxBatchSize, b).unwrap()),
        ])
    }

    fn best(o: &Outcome) -> Config {
        o.trials
            .iter()
            .fold(None::<&(Config, Measured)>, |b, t| match b {
                Some(b) if !t.1.beats(&b.1) => Some(b),
                _ => Some(t),
            })
            .unwrap()
            .0
            .clone()
    }

    fn cfg(t: &str, b: &str) -> Config {
        Config::default().with(Param::Threads, &Value::Set(t.into())).with(Param::MaxBatchSize, &Value::Set(b.into()))
    }

    #[test]
    fn grid_when_it_fits() {
        let mut m = Mock { calls: vec![], noise: 0.0 };
        let o = search(&space("2,4", "4,8"), &Config::default(), 4, &mut m).unwrap();
        assert_eq!((o.strategy, m.calls.len(), o.budget_exhausted), (Strategy::Grid, 4, false));
        assert_eq!(best(&o), cfg("4", "8"));
    }

    #[test]
    fn coordinate_descent_finds_the_optimum_within_budget() {
        let mut m = Mock { calls: vec![], noise: 0.0 };
        let s = space("1,2,4,8", "1,8,32,128");
        let o = search(&s, &Config::default(), 10, &mut m).unwrap();
        assert_eq!(o.strategy, Strategy::CoordinateDescent);
        assert_eq!(m.calls[0], Config::default(), "baseline first");
        assert_eq!(best(&o), cfg("4", "8"));
        // Baseline, 4 thread values, then 4 batch sizes at threads=4, then a pass that changes nothing.
        assert!(m.calls.len() <= 10, "{}", m.calls.len());
        let unique: std::collections::HashSet<_> = m.calls.iter().collect();
        assert_eq!(unique.len(), m.calls.len(), "no configuration measured twice");

        let mut m = Mock { calls: vec![], noise: 0.0 };
        let o = search(&s, &Config::default(), 3, &mut m).unwrap();
        assert_eq!((m.calls.len(), o.budget_exhausted), (3, true));
    }

    #[test]
    fn differences_within_the_noise_are_ties() {
        // With a spread of 5, threads 2 and 4 (96 and 100... minus the batch term) do not separate from 1.
        let mut m = Mock { calls: vec![], noise: 50.0 };
        let o = search(&space("1,2,4", "8,128"), &Config::default(), 5, &mut m).unwrap();
        assert_eq!(o.strategy, Strategy::CoordinateDescent);
        assert_eq!(m.calls[1..4].iter().filter(|c| c.0.contains_key(&Param::Threads)).count(), 3);
        let a = Measured { score: 10.0, spread: 1.0 };
        assert!(!Measured { score: 10.5, spread: 0.2 }.beats(&a));
        assert!(Measured { score: 11.5, spread: 0.2 }.beats(&a));
        // Without a spread (one repeat), 3.5% is noise and 6% is not.
        let one = Measured { score: 4.0, spread: 0.0 };
        assert!(!Measured { score: 4.14, spread: 0.0 }.beats(&one));
        assert!(Measured { score: 4.24, spread: 0.0 }.beats(&one));
        assert!(a.beats(&Measured { score: f64::NEG_INFINITY, spread: 0.0 }));
    }

    #[test]
    fn median_and_mad() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(median(&[]), 0.0);
        assert_eq!(mad(&[1.0, 2.0, 3.0, 4.0, 100.0]), 1.0);
        assert_eq!(mad(&[5.0]), 0.0);
    }
}
