//! Picking the next token from a row of logits, on the host: greedy, or seeded sampling with
//! temperature, top-k and top-p (nucleus) as Hugging Face's `generate` applies them (temperature
//! first, then top-k, then top-p over what is left).
//!
//! One row of logits is a few hundred KiB at most (128k tokens in f32), sorted in well under a
//! millisecond: the host is the simple place for it.

use super::error::{ModelError, Result};
use super::synthetic::SplitMix;

/// How to pick a token.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sampling {
    /// 0: greedy (the largest logit; the lowest id among equals). Else logits are divided by it.
    pub temperature: f32,
    /// Keep only the `top_k` largest logits (0: all).
    pub top_k: usize,
    /// Keep the smallest set of the most likely tokens whose probabilities sum to at least
    /// `top_p` (1: all).
    pub top_p: f32,
    /// The random stream's seed: the same seed and logits give the same tokens.
    pub seed: u64,
}

impl Sampling {
    /// Always the most likely token.
    pub const GREEDY: Sampling = Sampling { temperature: 0.0, top_k: 0, top_p: 1.0, seed: 0 };
}

/// Picks tokens by a [`Sampling`], drawing from its own seeded stream.
#[derive(Debug, Clone)]
pub struct Sampler {
    settings: Sampling,
    rng: SplitMix,
}

impl Sampler {
    /// Refuses a temperature that is negative or not finite and a `top_p` outside (0, 1].
    pub fn new(settings: Sampling) -> Result<Sampler> {
        let t = settings.temperature;
        if !(t.is_finite() && t >= 0.0) {
            return Err(ModelError::BadInput(format!("temperature {t:e}: must be finite and at least 0")));
        }
        let p = settings.top_p;
        if !(p > 0.0 && p <= 1.0) {
            return Err(ModelError::BadInput(format!("top_p {p:e}: must be in (0, 1]")));
        }
        Ok(Sampler { settings, rng: SplitMix(settings.seed) })
    }

    pub fn settings(&self) -> &Sampling {
        &self.settings
    }

    /// The next token for one row of logits. Refuses an empty row, a NaN or +inf logit, and a
    /// row whose every logit is -inf (nothing can be picked).
    pub fn sample(&mut self, logits: &[f32]) -> Result<u32> {
        if let Some(i) = logits.iter().position(|v| v.is_nan() || *v == f32::INFINITY) {
            return Err(ModelError::BadInput(format!("logit {i} is {}: cannot sample", logits[i])));
        }
        let best = argmax(logits).ok_or_else(|| {
            ModelError::BadInput("no token can be picked: the logits are empty or all -inf".into())
        })?;
        if self.settings.temperature == 0.0 || self.settings.top_k == 1 {
            return Ok(best as u32);
        }
        let candidates = self.candidates(logits);
        let u = self.rng.uniform();
        Ok(pick(&candidates, u))
    }

    /// The tokens left after top-k and top-p, most likely first, with their probabilities at
    /// the temperature (renormalised over what is left).
    fn candidates(&self, logits: &[f32]) -> Vec<(u32, f64)> {
        let s = &self.settings;
        let mut order: Vec<u32> =
            (0..logits.len() as u32).filter(|&i| logits[i as usize] != f32::NEG_INFINITY).collect();
        let by_logit = |a: &u32, b: &u32| logits[*b as usize].total_cmp(&logits[*a as usize]).then(a.cmp(b));
        if s.top_k > 0 && s.top_k < order.len() {
            order.select_nth_unstable_by(s.top_k - 1, by_logit);
            order.truncate(s.top_k);
        }
        order.sort_unstable_by(by_logit);
        // Softmax at the temperature, from the largest logit (every exponent <= 0).
        let top = logits[order[0] as usize] as f64;
        let t = s.temperature as f64;
        let mut weighted: Vec<(u32, f64)> =
            order.iter().map(|&i| (i, ((logits[i as usize] as f64 - top) / t).exp())).collect();
        let total: f64 = weighted.iter().map(|w| w.1).sum();
        let mut kept = 0.0;
        let mut keep = weighted.len();
        for (n, w) in weighted.iter_mut().enumerate() {
            w.1 /= total;
            kept += w.1;
            if kept >= s.top_p as f64 {
                keep = n + 1;
                break;
            }
        }
        weighted.truncate(keep);
        let left: f64 = weighted.iter().map(|w| w.1).sum();
        weighted.iter_mut().for_each(|w| w.1 /= left);
        weighted
    }
}

/// The largest logit's index (the lowest among equals), or `None` when every logit is -inf.
fn argmax(logits: &[f32]) -> Option<usize> {
    let mut best: Option<usize> = None;
    for (i, &v) in logits.iter().enumerate() {
        if v != f32::NEG_INFINITY && best.is_none_or(|b| v > logits[b]) {
            best = Some(i);
        }
    }
    best
}

/// The candidate whose cumulative probability first exceeds `u` (in [0, 1)); the last one if
/// rounding leaves the sum short of `u`.
fn pick(candidates: &[(u32, f64)], u: f64) -> u32 {
    let mut sum = 0.0;
    for &(token, p) in candidates {
        sum += p;
        if u < sum {
            return token;
        }
    }
    candidates.last().map_or(0, |c| c.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sampler(temperature: f32, top_k: usize, top_p: f32, seed: u64) -> Sampler {
        Sampler::new(Sampling { temperature, top_k, top_p, seed }).unwrap()
    }

    #[test]
    fn greedy_takes_the_largest_logit_and_the_lowest_id_among_equals() {
        let mut s = Sampler::new(Sampling::GREEDY).unwrap();
        assert_eq!(s.sample(&[0.5, 2.0, -1.0, 2.0]).unwrap(), 1);
        assert_eq!(s.sample(&[f32::NEG_INFINITY, -3.0]).unwrap(), 1);
        // top_k = 1 is greedy at any temperature.
        assert_eq!(sampler(5.0, 1, 1.0, 9).sample(&[0.0, 0.1, 7.0]).unwrap(), 2);
    }

    #[test]
    fn a_small_top_p_keeps_only_the_most_likely_token() {
        let mut s = sampler(1.0, 0, 1e-6, 3);
        for _ in 0..100 {
            assert_eq!(s.sample(&[1.0, 3.0, 2.0, 2.9]).unwrap(), 1);
        }
    }

    #[test]
    fn top_k_and_top_p_cut_the_candidates_as_documented() {
        // Probabilities at temperature 1 of logits ln(4), ln(3), ln(2), ln(1): 0.4, 0.3, 0.2, 0.1.
        let logits = [4f32.ln(), 3f32.ln(), 2f32.ln(), 0.0];
        let ids = |c: Vec<(u32, f64)>| c.iter().map(|c| c.0).collect::<Vec<_>>();
        assert_eq!(ids(sampler(1.0, 0, 1.0, 0).candidates(&logits)), [0, 1, 2, 3]);
        assert_eq!(ids(sampler(1.0, 2, 1.0, 0).candidates(&logits)), [0, 1]);
        // 0.4 + 0.3 >= 0.7: two kept; 0.71 needs the third.
        assert_eq!(ids(sampler(1.0, 0, 0.7, 0).candidates(&logits)), [0, 1]);
        assert_eq!(ids(sampler(1.0, 0, 0.71, 0).candidates(&logits)), [0, 1, 2]);
        let kept = sampler(1.0, 3, 1.0, 0).candidates(&logits);
        let want = [4.0 / 9.0, 3.0 / 9.0, 2.0 / 9.0];
        for (c, w) in kept.iter().zip(want) {
            assert!((c.1 - w).abs() < 1e-6, "{kept:?}");
        }
    }

    /// 20000 draws land on each token in proportion to its probability: within 5 standard
    /// deviations of the binomial count (a fixed seed, so the outcome is the same every run).
    #[test]
    fn draws_follow_the_softmax_at_the_temperature() {
        let logits = [1.0f32, 0.0, -1.0, 0.5];
        let temperature = 0.7f64;
        let weights: Vec<f64> = logits.iter().map(|&l| (l as f64 / temperature).exp()).collect();
        let total: f64 = weights.iter().sum();
        let mut s = sampler(temperature as f32, 0, 1.0, 42);
        let draws = 20_000;
        let mut counts = [0usize; 4];
        for _ in 0..draws {
            counts[s.sample(&logits).unwrap() as usize] += 1;
        }
        for (i, &c) in counts.iter().enumerate() {
            let p = weights[i] / total;
            let (mean, sd) = (draws as f64 * p, (draws as f64 * p * (1.0 - p)).sqrt());
            assert!(
                (c as f64 - mean).abs() < 5.0 * sd,
                "token {i}: {c} draws, expected {mean:.0} +- {sd:.0}"
            );
        }
    }

    #[test]
    fn the_same_seed_gives_the_same_tokens() {
        let logits: Vec<f32> = (0..1000).map(|i| ((i * 37 % 101) as f32).sin()).collect();
        let run = |seed| {
            let mut s = sampler(0.9, 50, 0.95, seed);
            (0..32).map(|_| s.sample(&logits).unwrap()).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn bad_settings_and_logits_are_refused() {
        for (t, p) in
            [(-1.0, 1.0), (f32::NAN, 1.0), (f32::INFINITY, 1.0), (1.0, 0.0), (1.0, 1.5), (1.0, f32::NAN)]
        {
            let e = Sampler::new(Sampling { temperature: t, top_k: 0, top_p: p, seed: 0 }).unwrap_err();
            assert!(
                e.to_string().contains(if t.is_finite() && t >= 0.0 { "top_p" } else { "temperature" }),
                "{e}"
            );
        }
        let mut s = sampler(1.0, 0, 1.0, 0);
        assert!(s.sample(&[]).unwrap_err().to_string().contains("empty or all -inf"));
        assert!(s.sample(&[f32::NEG_INFINITY; 3]).unwrap_err().to_string().contains("all -inf"));
        assert!(s.sample(&[0.0, f32::NAN]).unwrap_err().to_string().contains("logit 1 is NaN"));
        assert!(s.sample(&[f32::INFINITY]).unwrap_err().to_string().contains("logit 0 is inf"));
    }
}
