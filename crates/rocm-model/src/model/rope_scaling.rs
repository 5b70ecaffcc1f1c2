//! RoPE scaling from a GGUF file: the `<arch>.rope.scaling.*` metadata, the per-pair frequency
//! factors tensor `rope_freqs.weight`, and how Llama 3.1's factors are made.
//!
//! | key / tensor | meaning |
//! |---|---|
//! | `<arch>.rope.scaling.type` | `none`, `linear`, or `llama3`; any other (`yarn`, `longrope`, ...) is refused, naming it |
//! | `<arch>.rope.scaling.factor` (or the older `<arch>.rope.scale_linear`) | linear scaling: positions are divided by it |
//! | `rope_freqs.weight` | `[rotary_dim / 2]` factors, any decodable type: pair `i`'s frequency is divided by the `i`-th |
//!
//! This is how llama.cpp reads them: no type means `linear`, so a factor without a type scales
//! (`none` ignores any factor); and `rope_freqs.weight`, where a file has it, is passed to every
//! RoPE as `freq_factors` whatever the type. llama.cpp's converter writes that tensor for Hugging
//! Face's `rope_scaling = {"rope_type": "llama3", ...}` (Llama 3.1, 3.2, 3.3) and writes no
//! scaling type for it. A file that does say `llama3` must carry the tensor (the factors are
//! the whole of that scaling) and is refused without it; its `rope.scaling.factor`, if any, is
//! llama3's own `factor`, already inside the factors, and is not applied again.

use rocm_kernels::rope::MAX_PAIRS;

use super::config::optional_f32;
use super::error::{ModelError, Result};
use crate::gguf::{GgufFile, Metadata, Value};

/// The per-pair RoPE frequency factors (llama.cpp's `rope_freqs`, `LLM_TENSOR_ROPE_FREQS`).
pub const ROPE_FREQS: &str = "rope_freqs.weight";

/// How positions or frequencies are scaled (`<arch>.rope.scaling.type`, see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum RopeScaling {
    /// No type and no factor, or type `none`.
    #[default]
    None,
    /// Positions divided by the factor: type `linear`, or a factor without a type.
    Linear(f32),
    /// Llama 3.1's scaling: the factors of [`ROPE_FREQS`], which the file must carry.
    Llama3,
}

impl RopeScaling {
    /// The linear factor positions are divided by (1 unless `Linear`).
    pub fn linear_factor(self) -> f32 {
        match self {
            RopeScaling::Linear(f) => f,
            RopeScaling::None | RopeScaling::Llama3 => 1.0,
        }
    }

    /// The name `<arch>.rope.scaling.type` gives it.
    pub fn type_name(self) -> &'static str {
        match self {
            RopeScaling::None => "none",
            RopeScaling::Linear(_) => "linear",
            RopeScaling::Llama3 => "llama3",
        }
    }
}

/// Reads `<arch>.rope.scaling.type` and the linear factor (see the module docs).
pub(super) fn read_scaling(meta: &Metadata, arch: &str) -> Result<RopeScaling> {
    let type_key = format!("{arch}.rope.scaling.type");
    let kind = match meta.get(&type_key) {
        None => None,
        Some(v) => Some(v.as_str().ok_or_else(|| {
            bad(&type_key, &format!("expected a string, found {} {}", v.value_type(), v.preview(4, 40)))
        })?),
    };
    let linear = || -> Result<RopeScaling> {
        for key in [format!("{arch}.rope.scaling.factor"), format!("{arch}.rope.scale_linear")] {
            if let Some(f) = optional_f32(meta, &key)? {
                if f <= 0.0 {
                    return Err(bad(&key, &format!("{f:?} is not positive")));
                }
                return Ok(RopeScaling::Linear(f));
            }
        }
        Ok(RopeScaling::None)
    };
    match kind {
        None | Some("linear") => linear(),
        Some("none") => Ok(RopeScaling::None),
        Some("llama3") => Ok(RopeScaling::Llama3),
        Some(other) => Err(bad(
            &type_key,
            &format!(
                "RoPE scaling type {} is not supported (supported: none, linear, llama3)",
                Value::String(other.to_string()).preview(4, 40)
            ),
        )),
    }
}

/// The factors of [`ROPE_FREQS`] if `file` has the tensor: `pairs` values (dims `[pairs]`, any
/// type `GgufFile::to_f32` decodes), each positive and finite. `None` without the tensor.
pub(super) fn read_freq_factors(file: &GgufFile, pairs: usize) -> Result<Option<Vec<f32>>> {
    let Ok(info) = file.tensor(ROPE_FREQS) else {
        return Ok(None);
    };
    if info.dims() != [pairs as u64] {
        return Err(ModelError::BadTensor {
            name: ROPE_FREQS.into(),
            reason: format!(
                "GGUF dims {:?}, the RoPE needs one factor per rotated pair: [{pairs}]",
                info.dims()
            ),
        });
    }
    let factors = file.to_f32(ROPE_FREQS)?;
    check_freq_factors(&factors, pairs)?;
    Ok(Some(factors))
}

/// `factors` are one per rotated pair (`pairs` of them), each positive and finite; an error
/// names [`ROPE_FREQS`].
pub(super) fn check_freq_factors(factors: &[f32], pairs: usize) -> Result<()> {
    let bad_tensor = |reason: String| ModelError::BadTensor { name: ROPE_FREQS.into(), reason };
    if factors.len() != pairs {
        return Err(bad_tensor(format!(
            "{} frequency factors, the RoPE rotates {pairs} pairs a head",
            factors.len()
        )));
    }
    if let Some((i, f)) = factors.iter().enumerate().find(|(_, f)| !(f.is_finite() && **f > 0.0)) {
        return Err(bad_tensor(format!(
            "factor {i} is {f:?}; frequency factors must be positive and finite"
        )));
    }
    Ok(())
}

/// The error for a file whose scaling type is `llama3` but which has no [`ROPE_FREQS`].
pub(super) fn missing_llama3_factors(arch: &str) -> ModelError {
    ModelError::BadTensor {
        name: ROPE_FREQS.into(),
        reason: format!(
            "the llama3 frequency factors tensor is missing (`{arch}.rope.scaling.type` is \"llama3\", \
             whose scaling is those factors)"
        ),
    }
}

/// Llama 3.1's per-pair frequency factors (Hugging Face `rope_scaling` with `rope_type:
/// "llama3"`), as llama.cpp's converter writes them into [`ROPE_FREQS`]. For pair `i < d / 2`
/// (`d` = `rotary_dim`):
///
/// ```text
/// inv_freq   = base^(-2i / d)
/// wavelen    = 2 pi / inv_freq
/// high_wl    = original_max / high_freq_factor        (2048 for Llama 3.1)
/// low_wl     = original_max / low_freq_factor         (8192)
/// wavelen < high_wl:   1                              (high frequencies keep theirs)
/// wavelen > low_wl:    factor                         (low frequencies are slowed by factor)
/// otherwise:           1 / ((1 - s) / factor + s),    s = (original_max / wavelen - low_freq_factor)
///                                                         / (high_freq_factor - low_freq_factor)
/// ```
///
/// which is continuous: `s` is 1 at `high_wl` and 0 at `low_wl`. Llama 3.1 uses `factor` 8,
/// `low_freq_factor` 1, `high_freq_factor` 4, `original_max_position_embeddings` 8192 (Llama 3.2
/// 1B/3B: `factor` 32). Computed in f64 and rounded once to f32; the converter forms `inv_freq`
/// and the band arithmetic in f32 (torch), so its values in the smooth band can differ from
/// these in the last bit or two (within 2e-7 relative for Llama 3.1 8B); 1 and `factor` are
/// exact in both. At a wavelength exactly on the boundary of an empty band
/// (`low_freq_factor == high_freq_factor`, as in Llama 4) the factor is 1.
///
/// Refused: `rotary_dim` odd, zero, or above the kernel's `2 * MAX_PAIRS`; any other argument
/// not positive and finite; `low_freq_factor > high_freq_factor`.
pub fn llama3_freq_factors(
    rotary_dim: usize,
    base: f64,
    factor: f64,
    low_freq_factor: f64,
    high_freq_factor: f64,
    original_max_position: f64,
) -> Result<Vec<f32>> {
    if rotary_dim == 0 || !rotary_dim.is_multiple_of(2) || rotary_dim / 2 > MAX_PAIRS {
        return Err(ModelError::BadInput(format!(
            "llama3 factors: rotary_dim must be even, positive and at most {}, got {rotary_dim}",
            2 * MAX_PAIRS
        )));
    }
    for (name, v) in [
        ("base", base),
        ("factor", factor),
        ("low_freq_factor", low_freq_factor),
        ("high_freq_factor", high_freq_factor),
        ("original_max_position", original_max_position),
    ] {
        if !(v.is_finite() && v > 0.0) {
            return Err(ModelError::BadInput(format!(
                "llama3 factors: {name} must be positive and finite, got {v:?}"
            )));
        }
    }
    // Every factor lies between 1 and `factor`, so `factor` in f32's range keeps them all there.
    let narrow = factor as f32;
    if !(narrow.is_finite() && narrow > 0.0) {
        return Err(ModelError::BadInput(format!(
            "llama3 factors: factor {factor:?} is beyond the range of f32"
        )));
    }
    if low_freq_factor > high_freq_factor {
        return Err(ModelError::BadInput(format!(
            "llama3 factors: low_freq_factor {low_freq_factor:?} is above high_freq_factor {high_freq_factor:?}"
        )));
    }
    let high_wavelen = original_max_position / high_freq_factor;
    let low_wavelen = original_max_position / low_freq_factor;
    let factors = (0..rotary_dim / 2)
        .map(|i| {
            let inv_freq = base.powf(-((2 * i) as f64) / rotary_dim as f64);
            let wavelen = std::f64::consts::TAU / inv_freq;
            let f = if wavelen < high_wavelen {
                1.0
            } else if wavelen > low_wavelen {
                factor
            } else if high_freq_factor == low_freq_factor {
                1.0
            } else {
                let s = (original_max_position / wavelen - low_freq_factor)
                    / (high_freq_factor - low_freq_factor);
                1.0 / ((1.0 - s) / factor + s)
            };
            f as f32
        })
        .collect();
    Ok(factors)
}

fn bad(key: &str, reason: &str) -> ModelError {
    ModelError::BadMetadata { key: key.to_string(), reason: reason.to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `got` within `rel` of `want`, relatively.
    fn near(got: f32, want: f64, rel: f64) -> bool {
        ((got as f64 - want) / want).abs() <= rel
    }

    /// Known values. The smooth band was worked out independently of this code (Python, f64,
    /// the formula of the docs); 1 and `factor` are exact. `converter` is the same formula in f32
    /// arithmetic, as the converter's torch float32 does it (numpy float32): within 2e-7.
    #[test]
    fn llama3_factors_of_llama_3_1_and_3_2() {
        // Llama 3.1 8B / 70B: head 128, base 500000, factor 8, low 1, high 4, original 8192.
        // Pair i has wavelength 2 pi 500000^(i/64): below 2048 for i <= 28, above 8192 from 35.
        let f = llama3_freq_factors(128, 500_000.0, 8.0, 1.0, 4.0, 8192.0).unwrap();
        assert_eq!(f.len(), 64);
        assert!(f[..=28].iter().all(|&v| v == 1.0), "{f:?}");
        assert!(f[35..].iter().all(|&v| v == 8.0), "{f:?}");
        let smooth = [
            1.207483871283662,
            1.5534146285049255,
            2.0263132059050557,
            2.6945296878947333,
            3.684252527745718,
            5.257326588708467,
        ];
        let converter = [
            1.2074838876724243,
            1.5534145832061768,
            2.026313066482544,
            2.6945300102233887,
            3.684253215789795,
            5.257327079772949,
        ];
        for (k, (&want, &conv)) in smooth.iter().zip(&converter).enumerate() {
            let got = f[29 + k];
            assert_eq!(got, want as f32, "pair {}", 29 + k);
            assert!(near(got, conv, 2e-7), "pair {}: {got} vs the converter's {conv}", 29 + k);
        }
        // Increasing from 1 to the factor: slower rotation for longer wavelengths.
        assert!(f.windows(2).all(|w| w[0] <= w[1]));

        // Llama 3.2 1B: head 64, factor 32: 1 for pairs 0-14, 32 from 18.
        let f = llama3_freq_factors(64, 500_000.0, 32.0, 1.0, 4.0, 8192.0).unwrap();
        assert!(f[..=14].iter().all(|&v| v == 1.0) && f[18..].iter().all(|&v| v == 32.0), "{f:?}");
        for (k, want) in [1.6513292457638984, 3.2922621029408843, 9.666728978753293].into_iter().enumerate() {
            assert_eq!(f[15 + k], want as f32, "pair {}", 15 + k);
        }
        // The synthetic model's (head 64, factor 8): the 3.1 band's values at every other pair.
        let f = llama3_freq_factors(64, 500_000.0, 8.0, 1.0, 4.0, 8192.0).unwrap();
        assert_eq!(f[15..18], [smooth[1] as f32, smooth[3] as f32, smooth[5] as f32]);
    }

    /// Llama 4's `low_freq_factor == high_freq_factor` leaves no smooth band: 1 below the
    /// original context's wavelength, the factor above.
    #[test]
    fn llama3_factors_without_a_smooth_band() {
        let f = llama3_freq_factors(128, 500_000.0, 16.0, 1.0, 1.0, 8192.0).unwrap();
        assert!(f.iter().all(|&v| v == 1.0 || v == 16.0), "{f:?}");
        // 2 pi 500000^(i/64) > 8192 from i = 35 (as for Llama 3.1's low band).
        assert_eq!(f.iter().position(|&v| v == 16.0), Some(35));
    }

    #[test]
    fn llama3_factor_arguments_are_checked() {
        let msg = |r: Result<Vec<f32>>| r.unwrap_err().to_string();
        assert!(msg(llama3_freq_factors(0, 1e4, 8.0, 1.0, 4.0, 8192.0)).contains("rotary_dim"));
        assert!(msg(llama3_freq_factors(63, 1e4, 8.0, 1.0, 4.0, 8192.0)).contains("rotary_dim"));
        assert!(msg(llama3_freq_factors(1026, 1e4, 8.0, 1.0, 4.0, 8192.0)).contains("at most 512"));
        assert!(msg(llama3_freq_factors(64, 0.0, 8.0, 1.0, 4.0, 8192.0)).contains("base must be positive"));
        assert!(msg(llama3_freq_factors(64, 1e4, f64::NAN, 1.0, 4.0, 8192.0)).contains("factor must be"));
        assert!(msg(llama3_freq_factors(64, 1e4, 8.0, 1.0, 4.0, -1.0)).contains("original_max_position"));
        assert!(
            msg(llama3_freq_factors(64, 1e4, 1e39, 1.0, 4.0, 8192.0)).contains("beyond the range of f32")
        );
        assert_eq!(
            msg(llama3_freq_factors(64, 1e4, 8.0, 4.0, 1.0, 8192.0)),
            "invalid input: llama3 factors: low_freq_factor 4.0 is above high_freq_factor 1.0"
        );
    }

    #[test]
    fn factor_lists_are_checked_naming_the_tensor() {
        assert!(check_freq_factors(&[1.0, 2.0], 2).is_ok());
        let msg = |f: &[f32], pairs| check_freq_factors(f, pairs).unwrap_err().to_string();
        assert_eq!(
            msg(&[1.0; 3], 2),
            "tensor `rope_freqs.weight`: 3 frequency factors, the RoPE rotates 2 pairs a head"
        );
        assert_eq!(
            msg(&[1.0, 0.0], 2),
            "tensor `rope_freqs.weight`: factor 1 is 0.0; frequency factors must be positive and finite"
        );
        assert!(msg(&[f32::NAN, 1.0], 2).contains("factor 0 is NaN"));
        assert!(msg(&[1.0, f32::INFINITY], 2).contains("factor 1 is inf"));
        assert!(msg(&[-2.0, 1.0], 2).contains("factor 0 is -2.0"));
    }
}
