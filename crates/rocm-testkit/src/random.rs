//! Seeded random test data: the same seed gives the same data on every machine.

use half::{bf16, f16};

/// A small, fast, seedable generator (SplitMix64). Not for cryptography; for test data that is
/// random, reproducible from the seed printed with a failure, and never all zeros.
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [lo, hi).
    pub fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next_f64()
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = self.next_f64().max(f64::MIN_POSITIVE);
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// Uniform integer in [0, n).
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0, "below(0)");
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    pub fn f32_vec(&mut self, len: usize, lo: f32, hi: f32) -> Vec<f32> {
        (0..len).map(|_| self.uniform(lo as f64, hi as f64) as f32).collect()
    }

    pub fn normal_f32_vec(&mut self, len: usize, scale: f32) -> Vec<f32> {
        (0..len).map(|_| (self.normal() * scale as f64) as f32).collect()
    }

    pub fn f16_vec(&mut self, len: usize, lo: f32, hi: f32) -> Vec<f16> {
        self.f32_vec(len, lo, hi).into_iter().map(f16::from_f32).collect()
    }

    pub fn bf16_vec(&mut self, len: usize, lo: f32, hi: f32) -> Vec<bf16> {
        self.f32_vec(len, lo, hi).into_iter().map(bf16::from_f32).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_data() {
        assert_eq!(Rng::new(7).f32_vec(100, -1.0, 1.0), Rng::new(7).f32_vec(100, -1.0, 1.0));
        assert_ne!(Rng::new(7).f32_vec(100, -1.0, 1.0), Rng::new(8).f32_vec(100, -1.0, 1.0));
    }

    #[test]
    fn values_stay_in_range_and_are_not_all_zero() {
        let v = Rng::new(1).f32_vec(100_000, -2.0, 3.0);
        assert!(v.iter().all(|&x| (-2.0..3.0).contains(&x)));
        assert!(v.iter().filter(|&&x| x != 0.0).count() > 99_990);
        // The mean's standard error is 5/sqrt(12)/sqrt(1e5) = 0.0046: 0.05 is over ten of them.
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
        assert!((mean - 0.5).abs() < 0.05, "{mean}");
    }

    #[test]
    fn below_stays_below() {
        let mut rng = Rng::new(3);
        assert!((0..1000).all(|_| rng.below(7) < 7));
    }
}
