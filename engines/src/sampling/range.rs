//! The ranges of the float sampling parameters, checked on the f64 a JSON number parses to before it
//! is narrowed to the engine's f32: rounding would otherwise carry a value just outside a range onto
//! its bound (`top_p: 1.0000000000000002` becomes 1.0) and accept what the API documents as refused.

use super::SamplingError;

/// The smallest positive f32: "> 0" over f32 values is ">= this".
const TINY: f32 = f32::from_bits(1);
/// The largest f32 below 1: "< 1" over f32 values is "<= this".
const BELOW_ONE: f32 = 1.0 - f32::EPSILON / 2.0;
// Both are the f32 neighbours of the open ends.
const _: () = assert!(TINY > 0.0 && TINY / 2.0 == 0.0);
const _: () = assert!(BELOW_ONE < 1.0 && f32::from_bits(BELOW_ONE.to_bits() + 1) == 1.0);

/// A float sampling parameter, with the closed range of f32 values it may take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloatParam {
    /// Temperature, 0 (greedy) or more, finite.
    Temperature,
    /// TGI's temperature: strictly positive, finite.
    PositiveTemperature,
    /// Nucleus mass, in (0, 1].
    TopP,
    /// Typical decoding mass, in (0, 1).
    TypicalP,
    /// Min-p, in [0, 1].
    MinP,
    /// Repetition penalty, strictly positive, finite.
    RepetitionPenalty,
    /// Frequency penalty, in [-2, 2].
    FrequencyPenalty,
    /// Presence penalty, in [-2, 2].
    PresencePenalty,
}

impl FloatParam {
    /// The least and the greatest value allowed, both f32 values (so they convert to f64 exactly).
    fn bounds(self) -> (f32, f32) {
        match self {
            Self::Temperature => (0.0, f32::MAX),
            Self::PositiveTemperature | Self::RepetitionPenalty => (TINY, f32::MAX),
            Self::TopP => (TINY, 1.0),
            Self::TypicalP => (TINY, BELOW_ONE),
            Self::MinP => (0.0, 1.0),
            Self::FrequencyPenalty | Self::PresencePenalty => (-2.0, 2.0),
        }
    }

    /// The error a value outside the range gets.
    fn error(self) -> SamplingError {
        match self {
            Self::Temperature => SamplingError::NegativeTemperature,
            Self::PositiveTemperature => SamplingError::Temperature,
            Self::TopP => SamplingError::TopP,
            Self::TypicalP => SamplingError::TypicalP,
            Self::MinP => SamplingError::MinP,
            Self::RepetitionPenalty => SamplingError::RepetitionPenalty,
            Self::FrequencyPenalty => SamplingError::FrequencyPenalty,
            Self::PresencePenalty => SamplingError::PresencePenalty,
        }
    }

    /// `v` as the engine's f32, or the parameter's error when `v` (NaN included) is outside the range.
    /// Narrowing is monotone and the bounds are f32 values, so what passes here passes [`Self::check`].
    pub fn narrow(self, v: f64) -> Result<f32, SamplingError> {
        let (lo, hi) = self.bounds();
        if v >= f64::from(lo) && v <= f64::from(hi) {
            Ok(v as f32)
        } else {
            Err(self.error())
        }
    }

    /// [`Self::narrow`] of an optional field.
    pub fn narrow_opt(self, v: Option<f64>) -> Result<Option<f32>, SamplingError> {
        v.map(|v| self.narrow(v)).transpose()
    }

    /// Checks an f32 value against the range.
    pub fn check(self, v: f32) -> Result<(), SamplingError> {
        self.narrow(f64::from(v)).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_that_round_onto_a_bound_are_refused() {
        let next_up = |v: f64| f64::from_bits(v.to_bits() + 1);
        let next_down = |v: f64| f64::from_bits(v.to_bits() - 1);
        assert_eq!(FloatParam::TopP.narrow(1.0), Ok(1.0));
        assert_eq!(FloatParam::TopP.narrow(next_up(1.0)), Err(SamplingError::TopP));
        assert_eq!(
            FloatParam::Temperature.narrow(next_up(f64::from(f32::MAX))),
            Err(SamplingError::NegativeTemperature)
        );
        assert_eq!(FloatParam::PositiveTemperature.narrow(next_down(f64::from(TINY))), Err(SamplingError::Temperature));
        assert_eq!(FloatParam::TypicalP.narrow(next_up(f64::from(BELOW_ONE))), Err(SamplingError::TypicalP));
        assert_eq!(FloatParam::FrequencyPenalty.narrow(next_up(2.0)), Err(SamplingError::FrequencyPenalty));
        assert_eq!(FloatParam::PresencePenalty.narrow(-next_up(2.0)), Err(SamplingError::PresencePenalty));
        assert_eq!(FloatParam::MinP.narrow(f64::NAN), Err(SamplingError::MinP));
        assert_eq!(FloatParam::Temperature.narrow(0.7), Ok(0.7));
        assert_eq!(FloatParam::Temperature.narrow(f64::INFINITY), Err(SamplingError::NegativeTemperature));
    }

    #[test]
    fn f32_checks_keep_the_open_and_closed_ends() {
        assert!(FloatParam::TopP.check(0.0).is_err() && FloatParam::TopP.check(TINY).is_ok());
        assert!(FloatParam::TypicalP.check(1.0).is_err() && FloatParam::TypicalP.check(BELOW_ONE).is_ok());
        assert!(FloatParam::Temperature.check(0.0).is_ok() && FloatParam::PositiveTemperature.check(0.0).is_err());
        assert!(FloatParam::RepetitionPenalty.check(f32::INFINITY).is_err());
    }
}
