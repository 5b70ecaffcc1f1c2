//! Comparing GPU results with references: max-abs, max-rel and relative L2 errors, with the
//! worst element named. NaN never passes.

/// Allowed error. An element passes when `|a - e| <= abs + rel * |e|`; the whole comparison
/// also needs `relative_l2 <= l2` when `l2` is set.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Tolerance {
    pub abs: f64,
    pub rel: f64,
    pub l2: Option<f64>,
}

impl Tolerance {
    /// Exact equality.
    pub const EXACT: Tolerance = Tolerance { abs: 0.0, rel: 0.0, l2: None };

    pub const fn abs(abs: f64) -> Self {
        Tolerance { abs, rel: 0.0, l2: None }
    }

    pub const fn new(abs: f64, rel: f64) -> Self {
        Tolerance { abs, rel, l2: None }
    }

    pub const fn with_l2(self, l2: f64) -> Self {
        Tolerance { l2: Some(l2), ..self }
    }
}

/// The result of a comparison.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub len: usize,
    pub max_abs: f64,
    pub max_rel: f64,
    pub relative_l2: f64,
    /// Elements outside the tolerance (NaN mismatches included).
    pub failures: usize,
    /// The element with the largest error relative to its allowance, and its two values.
    pub worst: Option<(usize, f64, f64)>,
}

impl Comparison {
    pub fn passed(&self, tol: &Tolerance) -> bool {
        self.failures == 0 && tol.l2.is_none_or(|l2| self.relative_l2 <= l2)
    }
}

impl std::fmt::Display for Comparison {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} elements out of tolerance; max abs {:.3e}, max rel {:.3e}, relative L2 {:.3e}",
            self.failures, self.len, self.max_abs, self.max_rel, self.relative_l2
        )?;
        if let Some((i, a, e)) = self.worst {
            write!(f, "; worst at index {i}: got {a:e}, expected {e:e}")?;
        }
        Ok(())
    }
}

/// Compares `actual` with `expected` element by element. Lengths must match.
pub fn compare<A: Copy + Into<f64>, E: Copy + Into<f64>>(
    actual: &[A],
    expected: &[E],
    tol: &Tolerance,
) -> Comparison {
    assert_eq!(actual.len(), expected.len(), "compared slices differ in length");
    let (mut max_abs, mut max_rel, mut failures) = (0.0f64, 0.0f64, 0usize);
    let (mut diff2, mut ref2) = (0.0f64, 0.0f64);
    let mut worst: Option<(usize, f64, f64)> = None;
    let mut worst_ratio = -1.0f64;
    for (i, (&a, &e)) in actual.iter().zip(expected).enumerate() {
        let (a, e): (f64, f64) = (a.into(), e.into());
        let both_nan = a.is_nan() && e.is_nan();
        let same_inf = a.is_infinite() && a == e;
        let err = if both_nan || same_inf { 0.0 } else { (a - e).abs() };
        let allowance = tol.abs + tol.rel * e.abs();
        // NaN in `err` (one side NaN, or inf - inf) compares false and so fails.
        let ok = both_nan || same_inf || err <= allowance;
        if !ok {
            failures += 1;
        }
        let ratio = if ok { err / allowance.max(f64::MIN_POSITIVE) } else { f64::INFINITY };
        if ratio > worst_ratio || worst.is_none() {
            worst_ratio = ratio;
            worst = Some((i, a, e));
        }
        if err.is_finite() {
            max_abs = max_abs.max(err);
            if e != 0.0 {
                max_rel = max_rel.max(err / e.abs());
            }
            diff2 += err * err;
            ref2 += if e.is_finite() { e * e } else { 0.0 };
        } else {
            max_abs = f64::NAN;
        }
    }
    let relative_l2 = if ref2 > 0.0 { (diff2 / ref2).sqrt() } else { diff2.sqrt() };
    Comparison { len: actual.len(), max_abs, max_rel, relative_l2, failures, worst }
}

/// Panics with a report naming the worst element unless `actual` matches `expected`.
#[track_caller]
pub fn assert_close<A: Copy + Into<f64>, E: Copy + Into<f64>>(actual: &[A], expected: &[E], tol: Tolerance) {
    let c = compare(actual, expected, &tol);
    assert!(c.passed(&tol), "results differ from the reference (tolerance {tol:?}): {c}");
}

/// The largest `|a - e|` (NaN if any pair involves NaN).
pub fn max_abs_diff<A: Copy + Into<f64>, E: Copy + Into<f64>>(actual: &[A], expected: &[E]) -> f64 {
    compare(actual, expected, &Tolerance::EXACT).max_abs
}

/// `||a - e|| / ||e||`.
pub fn relative_l2<A: Copy + Into<f64>, E: Copy + Into<f64>>(actual: &[A], expected: &[E]) -> f64 {
    compare(actual, expected, &Tolerance::EXACT).relative_l2
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_slices_pass_exactly() {
        let c = compare(&[1.0f32, -2.0, 3.5], &[1.0f32, -2.0, 3.5], &Tolerance::EXACT);
        assert!(c.passed(&Tolerance::EXACT), "{c}");
        assert_eq!(c.max_abs, 0.0);
    }

    #[test]
    fn nan_never_passes() {
        let tol = Tolerance::new(1e9, 1e9);
        let c = compare(&[1.0f32, f32::NAN], &[1.0f32, 2.0], &tol);
        assert!(!c.passed(&tol));
        assert_eq!(c.failures, 1);
        assert_eq!(c.worst.unwrap().0, 1);
        let c = compare(&[1.0f32, 2.0], &[1.0f32, f32::NAN], &tol);
        assert!(!c.passed(&tol));
    }

    #[test]
    fn the_report_names_the_worst_element() {
        let c = compare(&[1.0f64, 2.5, 3.0, 4.0], &[1.0f64, 2.0, 3.0, 4.1], &Tolerance::abs(0.01));
        assert_eq!(c.failures, 2);
        let (i, a, e) = c.worst.unwrap();
        assert_eq!((i, a, e), (1, 2.5, 2.0));
        assert!(c.to_string().contains("worst at index 1"), "{c}");
    }

    #[test]
    fn relative_l2_is_scaled_by_the_reference() {
        let r = relative_l2(&[1.1f64, 0.0], &[1.0f64, 0.0]);
        assert!((r - 0.1).abs() < 1e-12, "{r}");
        let tol = Tolerance::abs(1.0).with_l2(0.05);
        assert!(!compare(&[1.1f64], &[1.0f64], &tol).passed(&tol));
    }

    #[test]
    #[should_panic(expected = "worst at index 0")]
    fn assert_close_panics_with_the_report() {
        assert_close(&[2.0f32], &[1.0f32], Tolerance::abs(0.5));
    }
}
