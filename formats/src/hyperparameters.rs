//! The bounds every decoder hyperparameter must meet, whichever file states it (config.json or GGUF
//! metadata): positive sizes below generous ceilings (so that no product overflows and no allocation is
//! sized by an absurd value), shapes that divide, finite positive floats.

/// A hyperparameter, for naming the key at fault in the file it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hyper {
    /// Model width.
    Hidden,
    /// MLP inner width.
    Intermediate,
    /// Decoder layers.
    Layers,
    /// Query heads.
    Heads,
    /// Key/value heads.
    KvHeads,
    /// Width of a head.
    HeadDim,
    /// Vocabulary size.
    Vocab,
    /// Trained context length.
    Context,
    /// RMSNorm epsilon.
    RmsEps,
    /// RoPE base frequency.
    RopeTheta,
    /// RoPE scaling factor.
    RopeFactor,
    /// Sliding attention window.
    SlidingWindow,
}

/// Largest model width or MLP width accepted (the largest published models use about 50,000).
pub const MAX_WIDTH: usize = 1 << 20;
/// Most decoder layers accepted.
pub const MAX_LAYERS: usize = 1 << 12;
/// Most attention heads accepted.
pub const MAX_HEADS: usize = 1 << 12;
/// Widest head accepted.
pub const MAX_HEAD_DIM: usize = 1 << 12;
/// Largest vocabulary accepted (published ones stay below 2^18).
pub const MAX_VOCAB: usize = 1 << 24;
/// Longest context accepted (published ones stay below 2^24).
pub const MAX_CONTEXT: usize = 1 << 24;

/// A decoder's hyperparameters as a file states them (defaults applied), not yet checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Hyperparameters {
    /// Model width.
    pub hidden: usize,
    /// MLP inner width.
    pub intermediate: usize,
    /// Decoder layers.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// Width of a head.
    pub head_dim: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// Trained context length.
    pub context: usize,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// RoPE base frequency.
    pub rope_theta: f32,
    /// RoPE scaling factor, when the model scales RoPE.
    pub rope_factor: Option<f32>,
    /// Sliding attention window, when enabled.
    pub sliding_window: Option<usize>,
}

/// A hyperparameter out of bounds: which, its value, and what it must be.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{value} {problem}")]
pub struct HyperError {
    /// The hyperparameter at fault.
    pub hyper: Hyper,
    /// Its value, as written in the message.
    pub value: String,
    /// What is wrong with it.
    pub problem: String,
}

impl Hyperparameters {
    /// Checks every bound; the first violation is the error.
    pub fn check(&self) -> Result<(), HyperError> {
        use Hyper::*;
        let sizes = [
            (Hidden, self.hidden, MAX_WIDTH),
            (Intermediate, self.intermediate, MAX_WIDTH),
            (Layers, self.layers, MAX_LAYERS),
            (Heads, self.heads, MAX_HEADS),
            (KvHeads, self.kv_heads, MAX_HEADS),
            (HeadDim, self.head_dim, MAX_HEAD_DIM),
            (Vocab, self.vocab, MAX_VOCAB),
            (Context, self.context, MAX_CONTEXT),
        ];
        for (hyper, value, max) in sizes {
            if value == 0 {
                return Err(error(hyper, value, "must be positive"));
            }
            if value > max {
                return Err(error(hyper, value, format!("is larger than the {max} tgi accepts")));
            }
        }
        if !self.heads.is_multiple_of(self.kv_heads) {
            return Err(error(KvHeads, self.kv_heads, format!("does not divide the {} attention heads", self.heads)));
        }
        if !self.head_dim.is_multiple_of(2) {
            return Err(error(HeadDim, self.head_dim, "must be even (RoPE rotates pairs of dimensions)"));
        }
        if !(self.rms_eps.is_finite() && self.rms_eps > 0.0 && self.rms_eps < 1.0) {
            return Err(error(RmsEps, self.rms_eps, "must be a number between 0 and 1 (exclusive)"));
        }
        if !(self.rope_theta.is_finite() && self.rope_theta > 1.0) {
            return Err(error(RopeTheta, self.rope_theta, "must be a finite number greater than 1"));
        }
        if let Some(f) = self.rope_factor.filter(|f| !(f.is_finite() && *f > 0.0)) {
            return Err(error(RopeFactor, f, "must be a finite positive number"));
        }
        match self.sliding_window {
            Some(0) => Err(error(SlidingWindow, 0, "must be positive (or absent, for no window)")),
            _ => Ok(()),
        }
    }
}

fn error(hyper: Hyper, value: impl std::fmt::Display, problem: impl Into<String>) -> HyperError {
    HyperError { hyper, value: value.to_string(), problem: problem.into() }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stories() -> Hyperparameters {
        Hyperparameters {
            hidden: 64,
            intermediate: 172,
            layers: 5,
            heads: 8,
            kv_heads: 4,
            head_dim: 8,
            vocab: 512,
            context: 512,
            rms_eps: 1e-5,
            rope_theta: 10000.0,
            rope_factor: None,
            sliding_window: None,
        }
    }

    fn err(change: impl FnOnce(&mut Hyperparameters)) -> (Hyper, String) {
        let mut h = stories();
        change(&mut h);
        let e = h.check().unwrap_err();
        (e.hyper, e.to_string())
    }

    #[test]
    fn accepts_a_real_model() {
        stories().check().unwrap();
        let h = Hyperparameters { rope_factor: Some(8.0), sliding_window: Some(4096), ..stories() };
        h.check().unwrap();
    }

    #[test]
    fn refuses_each_bound() {
        use Hyper::*;
        assert_eq!(err(|h| h.sliding_window = Some(0)).0, SlidingWindow);
        assert_eq!(err(|h| h.hidden = 0), (Hidden, "0 must be positive".into()));
        assert_eq!(err(|h| h.vocab = 1 << 40), (Vocab, "1099511627776 is larger than the 16777216 tgi accepts".into()));
        assert_eq!(err(|h| h.context = 1 << 40).0, Context);
        assert_eq!(err(|h| h.layers = usize::MAX).0, Layers);
        assert_eq!(err(|h| h.kv_heads = 3), (KvHeads, "3 does not divide the 8 attention heads".into()));
        assert_eq!(err(|h| h.kv_heads = 16).0, KvHeads);
        assert_eq!(err(|h| h.head_dim = 7).0, HeadDim);
        assert_eq!(err(|h| h.rms_eps = f32::NAN), (RmsEps, "NaN must be a number between 0 and 1 (exclusive)".into()));
        assert_eq!(err(|h| h.rms_eps = -1e-5).0, RmsEps);
        assert_eq!(err(|h| h.rms_eps = f32::INFINITY).0, RmsEps);
        assert_eq!(err(|h| h.rope_theta = 0.0), (RopeTheta, "0 must be a finite number greater than 1".into()));
        assert_eq!(err(|h| h.rope_theta = f32::INFINITY).0, RopeTheta);
        assert_eq!(err(|h| h.rope_factor = Some(f32::NAN)).0, RopeFactor);
        assert_eq!(err(|h| h.rope_factor = Some(-2.0)).0, RopeFactor);
    }
}
