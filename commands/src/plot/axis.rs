//! A chart axis: linear or logarithmic, with the tick values chosen here (round numbers, or the
//! load levels themselves) rather than by plotters.

use std::ops::Range;

use plotters::coord::ranged1d::{DefaultFormatting, KeyPointHint, Ranged};

/// Above this ratio of largest to smallest value a latency axis switches to a log scale.
const LOG_ABOVE: f64 = 30.0;

/// One axis of a panel: its span, its scale and where its labelled ticks go.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    ticks: Vec<f64>,
}

impl Axis {
    /// A linear axis over `lo..hi` (widened when empty) with round-number ticks.
    pub fn linear(lo: f64, hi: f64) -> Axis {
        let (lo, hi) = if hi > lo { (lo, hi) } else { (lo - 1.0, hi + 1.0) };
        Axis { lo, hi, log: false, ticks: linear_ticks(lo, hi, 6) }
    }

    /// A logarithmic axis over `lo..hi` (both positive) with 1-2-5 ticks.
    pub fn log(lo: f64, hi: f64) -> Axis {
        let (lo, hi) = if hi > lo { (lo, hi) } else { (lo / 2.0, hi * 2.0) };
        Axis { lo, hi, log: true, ticks: log_ticks(lo, hi) }
    }

    /// Fits `values` (non-finite ones ignored): log scale when `allow_log`, all are positive and
    /// they span more than a factor of 30, else linear, from zero when `from_zero`. Pads the ends.
    pub fn fit(values: impl IntoIterator<Item = f64>, from_zero: bool, allow_log: bool) -> Axis {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in values.into_iter().filter(|v| v.is_finite()) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        if lo > hi {
            return Axis::linear(0.0, 1.0);
        }
        if allow_log && lo > 0.0 && hi / lo > LOG_ABOVE {
            let pad = (hi / lo).powf(0.04);
            return Axis::log(lo / pad, hi * pad);
        }
        if from_zero && lo >= 0.0 {
            let hi = if hi > 0.0 { hi * 1.08 } else { 1.0 };
            return Axis::linear(0.0, hi);
        }
        let pad = if hi > lo { (hi - lo) * 0.05 } else { lo.abs().max(1.0) * 0.1 };
        Axis::linear(lo - pad, hi + pad)
    }

    /// The same span and scale with labelled ticks exactly at `ticks` (those inside the span).
    pub fn with_ticks(mut self, ticks: &[f64]) -> Axis {
        self.ticks = ticks.iter().copied().filter(|t| (self.lo..=self.hi).contains(t)).collect();
        self
    }

    /// The same axis extended upwards so that the top `share` of it is free (for a legend).
    pub fn with_headroom(self, share: f64) -> Axis {
        let grow = share.clamp(0.0, 0.8) / (1.0 - share.clamp(0.0, 0.8));
        if self.log {
            Axis::log(self.lo, self.hi * (self.hi / self.lo).powf(grow))
        } else {
            Axis::linear(self.lo, self.hi + (self.hi - self.lo) * grow)
        }
    }

    /// Whether the scale is logarithmic.
    pub fn is_log(&self) -> bool {
        self.log
    }

    /// Where `v` falls along the axis, 0 at `lo` and 1 at `hi`.
    fn fraction(&self, v: f64) -> f64 {
        if self.log {
            let v = v.max(self.lo);
            (v.ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln())
        } else {
            (v - self.lo) / (self.hi - self.lo)
        }
    }
}

impl Ranged for Axis {
    type FormatOption = DefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        let t = self.fraction(*value).clamp(-1.0, 2.0);
        limit.0 + ((limit.1 - limit.0) as f64 * t).round() as i32
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // Grid lines and labels only at the chosen ticks; no light lines between them.
        if hint.weight().allow_light_points() {
            return Vec::new();
        }
        self.ticks.clone()
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

/// About `target` round-number ticks (steps of 1, 2 or 5 times a power of ten) within `lo..=hi`.
pub fn linear_ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    let raw = (hi - lo) / target as f64;
    if !(raw.is_finite() && raw > 0.0) {
        return vec![lo];
    }
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0].iter().map(|m| m * mag).find(|s| *s >= raw).unwrap_or(10.0 * mag);
    let first = (lo / step - 1e-9).ceil() as i64;
    let last = (hi / step + 1e-9).floor() as i64;
    (first..=last).map(|i| i as f64 * step).collect()
}

/// Ticks for a log axis: 1, 2 and 5 times powers of ten, only powers of ten when that gives too
/// many, and round linear steps when the span is too narrow for three.
pub fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let decades = (lo.log10().floor() as i32)..=(hi.log10().ceil() as i32);
    let pick = |mults: &[f64]| -> Vec<f64> {
        decades
            .clone()
            .flat_map(|e| mults.iter().map(move |m| m * 10f64.powi(e)))
            .filter(|v| *v >= lo * (1.0 - 1e-9) && *v <= hi * (1.0 + 1e-9))
            .collect()
    };
    let ticks = pick(&[1.0, 2.0, 5.0]);
    if ticks.len() > 10 {
        pick(&[1.0])
    } else if ticks.len() < 3 {
        linear_ticks(lo, hi, 4).into_iter().filter(|v| *v > 0.0).collect()
    } else {
        ticks
    }
}

/// A tick label: no trailing zeros, thousands as `k`.
pub fn tick_label(v: f64) -> String {
    if v.abs() >= 10_000.0 {
        return format!("{}k", trim(format!("{:.1}", v / 1000.0)));
    }
    trim(format!("{v:.3}"))
}

fn trim(s: String) -> String {
    if !s.contains('.') {
        return s;
    }
    let t = s.trim_end_matches('0').trim_end_matches('.');
    if t == "-0" {
        "0".into()
    } else {
        t.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use plotters::coord::ranged1d::BoldPoints;

    #[test]
    fn ticks_are_round() {
        assert_eq!(linear_ticks(0.0, 100.0, 6), vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
        let labels: Vec<String> = linear_ticks(0.3, 1.4, 6).into_iter().map(tick_label).collect();
        assert_eq!(labels, ["0.4", "0.6", "0.8", "1", "1.2", "1.4"]);
        assert_eq!(log_ticks(3.0, 700.0), vec![5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0]);
        assert_eq!(log_ticks(0.5, 2e5), vec![1.0, 10.0, 100.0, 1000.0, 10000.0, 100000.0]);
        assert_eq!(log_ticks(15.0, 45.0), vec![20.0, 30.0, 40.0]);
        for (v, s) in [(0.0, "0"), (2.5, "2.5"), (1000.0, "1000"), (0.125, "0.125"), (15000.0, "15k"), (-0.0001, "0")] {
            assert_eq!(tick_label(v), s);
        }
    }

    #[test]
    fn fit_picks_the_scale() {
        assert!(Axis::fit([5.0, 10.0, 400.0], false, true).is_log());
        assert!(!Axis::fit([5.0, 10.0, 400.0], false, false).is_log());
        assert_eq!(Axis::fit([5.0, 10.0], true, true).range(), 0.0..10.8);
        assert_eq!(Axis::fit([], true, true).range(), 0.0..1.0);
        assert_eq!(Axis::fit([f64::NAN, 3.0], true, true).range(), 0.0..3.0 * 1.08);
        let a = Axis::log(1.0, 100.0);
        assert_eq!(a.map(&10.0, (0, 100)), 50);
        assert_eq!(a.map(&0.0, (0, 100)), 0);
        let l = Axis::linear(0.0, 64.0).with_ticks(&[1.0, 8.0, 64.0, 128.0]);
        assert_eq!(l.key_points(BoldPoints(10)), vec![1.0, 8.0, 64.0]);
        assert!(l.key_points(10usize).is_empty());
        assert_eq!(Axis::linear(0.0, 10.0).with_headroom(0.5).range(), 0.0..20.0);
        assert_eq!(Axis::log(1.0, 10.0).with_headroom(0.5).range(), 1.0..100.0);
    }
}
