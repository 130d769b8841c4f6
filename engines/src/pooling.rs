//! Embeddings from a decoder: a prompt's final hidden states (after the final norm) pooled into one vector,
//! by the mean over every prompt position or as the last position's state (llama-server's `--pooling mean|last`),
//! and the L2 normalization the APIs apply.

use crate::model::Logits;

/// How a prompt's hidden states become one vector.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pooling {
    /// The mean over every prompt position (sentence-transformers' default).
    Mean,
    /// The last prompt position's state (models trained for it: Qwen3-Embedding, e5-mistral, gte-Qwen2).
    Last,
}

impl Pooling {
    /// The rows a step computing a prompt chunk needs back: every row for the mean, the last row of the
    /// prompt's last chunk (`last_chunk`) for the last token.
    pub fn rows(self, last_chunk: bool) -> Logits {
        match self {
            Pooling::Mean => Logits::HiddenAll,
            Pooling::Last if last_chunk => Logits::HiddenLast,
            Pooling::Last => Logits::None,
        }
    }
}

/// One prompt's pooling in progress, fed the hidden rows of each prefill chunk in order.
#[derive(Clone, Debug)]
pub struct Pooler {
    pooling: Pooling,
    /// The sum of the rows so far (mean) or the last row (last), in f64 so that long prompts lose nothing.
    acc: Vec<f64>,
    /// Rows taken.
    rows: usize,
}

impl Pooler {
    /// An empty pooling.
    pub fn new(pooling: Pooling) -> Self {
        Pooler { pooling, acc: Vec::new(), rows: 0 }
    }

    /// How it pools.
    pub fn pooling(&self) -> Pooling {
        self.pooling
    }

    /// Takes the hidden rows a step returned for the prompt's next `positions` positions (see
    /// [`Pooling::rows`]: one row each for the mean; the last one, or none, for the last token).
    pub fn push(&mut self, hidden: &[f32], positions: usize) {
        let count = if self.pooling == Pooling::Mean { positions } else { 1 };
        let Some(width) = hidden.len().checked_div(count).filter(|&w| w > 0) else { return };
        if self.acc.len() != width {
            self.acc = vec![0.0; width];
        }
        match self.pooling {
            Pooling::Mean => {
                for row in hidden.chunks_exact(width) {
                    self.acc.iter_mut().zip(row).for_each(|(a, &x)| *a += f64::from(x));
                }
                self.rows += count;
            }
            Pooling::Last => {
                let last = &hidden[hidden.len() - width..];
                self.acc.iter_mut().zip(last).for_each(|(a, &x)| *a = f64::from(x));
                self.rows = 1;
            }
        }
    }

    /// Forgets every row taken (the prompt is computed again after a preemption).
    pub fn restart(&mut self) {
        self.acc.clear();
        self.rows = 0;
    }

    /// The pooled vector (empty when no row was taken).
    pub fn finish(&self) -> Vec<f32> {
        let n = self.rows.max(1) as f64;
        self.acc.iter().map(|&a| (a / n) as f32).collect()
    }
}

/// `v` scaled to unit Euclidean length (a zero vector stays zero).
pub fn l2_normalize(v: &mut [f32]) {
    let norm = v.iter().map(|&x| f64::from(x) * f64::from(x)).sum::<f64>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x = (f64::from(*x) / norm) as f32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_over_chunks_and_last_row() {
        let mut p = Pooler::new(Pooling::Mean);
        p.push(&[1.0, 2.0, 3.0, 4.0], 2);
        p.push(&[5.0, 6.0], 1);
        assert_eq!(p.finish(), [3.0, 4.0]);
        p.restart();
        p.push(&[2.0, 2.0], 1);
        assert_eq!(p.finish(), [2.0, 2.0]);
        let mut p = Pooler::new(Pooling::Last);
        p.push(&[], 5);
        p.push(&[3.0, 4.0], 2);
        assert_eq!(p.finish(), [3.0, 4.0]);
        assert!(Pooler::new(Pooling::Last).finish().is_empty());
    }

    #[test]
    fn rows_asked_for() {
        assert_eq!(Pooling::Mean.rows(false), Logits::HiddenAll);
        assert_eq!(Pooling::Last.rows(false), Logits::None);
        assert_eq!(Pooling::Last.rows(true), Logits::HiddenLast);
    }

    #[test]
    fn unit_length() {
        let mut v = [3.0, 4.0];
        l2_normalize(&mut v);
        assert_eq!(v, [0.6, 0.8]);
        let mut zero = [0.0, 0.0];
        l2_normalize(&mut zero);
        assert_eq!(zero, [0.0, 0.0]);
    }
}
