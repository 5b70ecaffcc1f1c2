//! `rope` (`kernels/rope.hip`): rotary position embedding, in place on Q and K.
//!
//! Q is `[tokens, q_heads, head_dim]` and K `[tokens, k_heads, head_dim]`, each with its own
//! head count and token stride ([`RopeTensor`]); both turn by the same positions, one `i32` per
//! token in a device buffer. A pair of elements `(a, b)` of a head turns by the angle
//! `theta = (position / scaling_factor) * inv_freq[i] / freq_factor[i]`:
//!
//! ```text
//! (a, b) -> (a cos(theta) - b sin(theta),  b cos(theta) + a sin(theta))
//! inv_freq[i] = base^(-2i / d)          (d: the rotated dimension, i < d / 2)
//! freq_factor[i] = 1                    (unless the Rope has frequency factors, below)
//! ```
//!
//! The variants ([`RopeStyle`]) choose the pairs, `d` and the base:
//!
//! | style | pairs | d | base |
//! |---|---|---|---|
//! | `NeoX { rotary_dim }` (GPT-NeoX, Llama, "rotate_half") | `(i, i + d/2)` | `rotary_dim` | `theta_base` |
//! | `GptJ { rotary_dim }` | `(2i, 2i + 1)` | `rotary_dim` | `theta_base` |
//! | `Glm { rope_ratio }` (GLM-4, ChatGLM2/3) | `(2i, 2i + 1)` | `head_dim / 2` | `theta_base * rope_ratio` |
//! | `ChatGlm2d` (ChatGLM-6B) | first half: `(i, i + d/2)` by `positions`; second half (offset `head_dim/2`): `(i, i + d/2)` by `block_positions` | `head_dim / 2` each | `theta_base` |
//!
//! A `rotary_dim` below `head_dim` is partial rotary: elements from `rotary_dim` on (from
//! `head_dim / 2` on for GLM) pass through, neither read nor written.
//!
//! **Scaling** is linear position interpolation: the position is divided by `scaling_factor`
//! (1 = none; Code Llama / "linear" `rope_scaling` use e.g. 4).
//!
//! **Frequency factors** ([`FreqFactors`], [`Rope::with_freq_factors`]) divide each pair's
//! frequency by a factor of its own: `freq_factor[i]`, one per rotated pair of a segment (`d /
//! 2` of them; the two halves of ChatGLM 2D share them). This is llama.cpp's `freq_factors`
//! argument of `ggml_rope_ext`, which Llama 3.1+ files carry as the tensor `rope_freqs.weight`
//! (Llama 3.1's "llama3" `rope_scaling`: 1 for the high frequencies, up to 8 for the low ones).
//! They combine with `scaling_factor` (both divide). Factors must be positive and finite;
//! [`FreqFactors::new`] refuses others, naming the first bad one, and [`Rope::run`] refuses a
//! count that is not the style's pairs a segment. Factors of 1 change nothing (the table the
//! kernel gets is bit for bit the one without factors).
//!
//! **Positions** are `i32`; valid ones are `0 <= p < max_position` (`max_position` defaults to
//! 2^31, i.e. every non-negative `i32`). [`Rope::upload_positions`] checks host positions as it
//! uploads them and refuses a bad one with an error naming the token. Positions already on the
//! device cannot be checked without waiting for them, so there an invalid position is not an
//! `Err`: the kernel writes NaN into every rotated element of that token (Q and K), which makes
//! the mistake loud downstream. The reference does the same.
//!
//! **Accuracy**: `inv_freq` is computed on the host in f64 (and divided by `scaling_factor`
//! and the frequency factor there), the kernel forms `p * inv_freq` and reduces it modulo 2*pi in f64, then takes f32
//! `sincosf` of the reduced angle. The angle is within about 1.2e-7 rad of the exact one for
//! every valid position (the f32 rounding of the reduced angle dominates; at p = 1e5 the f64
//! product carries 1e-11), and cos/sin within a few 1e-7: outputs are within a few f32 ulps of
//! the exact rotation of the stored inputs. This is tighter than implementations that form the
//! angle in f32 (HF, vLLM caches), whose angle error grows to ~1e-2 rad at position 1e5. (The
//! f64 part grows with the unreduced angle: factors or a `scaling_factor` below 1, which speed
//! the rotation up, add to it in proportion; at or above 1 they only slow it.)
//!
//! [`rope_reference`] is the f64 CPU reference of one tensor.

use std::fmt;

use rocm_runtime::{DeviceBuffer, LaunchConfig, Stream};

use crate::KernelModule;
use crate::dtype::{Dtype, kernel_name};
use crate::error::{KernelError, Result, ensure};
use crate::launchable::{Launchable, every_dtype};
use crate::loader;

mod into_cache;
pub use into_cache::ROPE_KV_FUSION_ENV;

const KERNEL: &str = "rope";
const MODULE: KernelModule = KernelModule::Rope;

/// Pairs of one rotated segment the kernel's frequency table holds (`MAX_PAIRS` in the kernel):
/// `rotary_dim <= 512`, and `head_dim <= 1024` for the ChatGLM 2D form.
pub const MAX_PAIRS: usize = 256;

/// Threads a block at most on the table path; a token with more work items loops.
const MAX_BLOCK: usize = 512;

/// Threads a block on the warp path (one token a warp; `__launch_bounds__(128)` in the kernel).
const WARP_BLOCK: usize = 128;

/// Which pairs rotate, and over which dimension (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RopeStyle {
    /// Half-split pairs `(i, i + rotary_dim/2)` over the first `rotary_dim` elements.
    NeoX { rotary_dim: usize },
    /// Interleaved pairs `(2i, 2i + 1)` over the first `rotary_dim` elements.
    GptJ { rotary_dim: usize },
    /// GLM-4 / ChatGLM2-3: interleaved pairs over the first `head_dim / 2` elements, base
    /// `theta_base * rope_ratio`.
    Glm { rope_ratio: f32 },
    /// ChatGLM-6B: NeoX pairs over each half of the head (dimension `head_dim / 2` each), the
    /// first half by `positions`, the second by `block_positions`.
    ChatGlm2d,
}

/// Per-pair frequency factors (see the module docs): pair `i`'s frequency is divided by the
/// `i`-th. One to [`MAX_PAIRS`] factors, each positive and finite: [`FreqFactors::new`] checks
/// them, so every value of this type holds valid ones. A fixed table (like the kernel's), so
/// that [`Rope`] stays `Copy`.
#[derive(Clone, Copy)]
pub struct FreqFactors {
    len: usize,
    values: [f64; MAX_PAIRS],
}

impl FreqFactors {
    /// The factors, checked: 1 to [`MAX_PAIRS`] of them, each positive and finite.
    pub fn new(factors: &[f64]) -> Result<Self> {
        let len = factors.len();
        ensure((1..=MAX_PAIRS).contains(&len), KERNEL, || {
            format!("{len} frequency factors: need 1 to {MAX_PAIRS} (one per rotated pair)")
        })?;
        if let Some((i, f)) = factors.iter().enumerate().find(|(_, f)| !(f.is_finite() && **f > 0.0)) {
            return Err(KernelError::Shape {
                kernel: KERNEL,
                message: format!("frequency factor {i} is {f:?}: factors must be positive and finite"),
            });
        }
        let mut values = [0.0; MAX_PAIRS];
        values[..len].copy_from_slice(factors);
        Ok(FreqFactors { len, values })
    }

    /// [`FreqFactors::new`] of f32 values (as a GGUF file stores them), widened exactly.
    pub fn from_f32(factors: &[f32]) -> Result<Self> {
        let wide: Vec<f64> = factors.iter().map(|&f| f64::from(f)).collect();
        Self::new(&wide)
    }

    pub fn as_slice(&self) -> &[f64] {
        &self.values[..self.len]
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Always false: there is at least one factor.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl fmt::Debug for FreqFactors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("FreqFactors").field(&self.as_slice()).finish()
    }
}

impl PartialEq for FreqFactors {
    fn eq(&self, other: &Self) -> bool {
        self.as_slice() == other.as_slice()
    }
}

/// [`Rope::whole_head_table`]: pair `i` of a head (elements `(2i, 2i + 1)` interleaved, else
/// `(i, i + head_dim / 2)`) turns by `position * inv_freq[i]`; positions outside
/// `[0, max_position)` turn to NaN.
#[derive(Debug, Clone, PartialEq)]
pub struct WholeHeadTable {
    pub inv_freq: Vec<f64>,
    pub interleaved: bool,
    pub max_position: i64,
}

/// A RoPE: the style, the head size, the base, the linear scaling, the per-pair frequency
/// factors and the valid positions.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rope {
    pub style: RopeStyle,
    pub head_dim: usize,
    /// The frequency base (10000 for most models).
    pub theta_base: f32,
    /// Linear position scaling: positions are divided by it (1 = none).
    pub scaling_factor: f32,
    /// Per-pair frequency factors (none = all 1): one per rotated pair of a segment.
    pub freq_factors: Option<FreqFactors>,
    /// Positions at or past this (and negative ones) are invalid: NaN in the rotated elements.
    pub max_position: Option<u32>,
}

/// The rotated segments of a head, as the kernel sees them.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Layout {
    /// Elements of one segment (`d`).
    seg_dim: usize,
    /// 1, or 2 for ChatGLM 2D (the second starting at `seg_dim`).
    segments: usize,
    interleaved: bool,
    /// The frequency base (with `rope_ratio` applied).
    base: f64,
}

impl Rope {
    /// `style` on heads of `head_dim`, base 10000, no scaling, every non-negative position valid.
    pub fn new(style: RopeStyle, head_dim: usize) -> Self {
        Rope {
            style,
            head_dim,
            theta_base: 10_000.0,
            scaling_factor: 1.0,
            freq_factors: None,
            max_position: None,
        }
    }

    /// Full NeoX / Llama rotary (`rotary_dim = head_dim`), base 10000.
    pub fn neox(head_dim: usize) -> Self {
        Rope::new(RopeStyle::NeoX { rotary_dim: head_dim }, head_dim)
    }

    pub fn with_theta_base(self, theta_base: f32) -> Self {
        Rope { theta_base, ..self }
    }

    pub fn with_scaling_factor(self, scaling_factor: f32) -> Self {
        Rope { scaling_factor, ..self }
    }

    /// Divides pair `i`'s frequency by `freq_factors[i]`; [`Rope::run`] needs one factor per
    /// rotated pair of a segment.
    pub fn with_freq_factors(self, freq_factors: FreqFactors) -> Self {
        Rope { freq_factors: Some(freq_factors), ..self }
    }

    pub fn with_max_position(self, max_position: u32) -> Self {
        Rope { max_position: Some(max_position), ..self }
    }

    /// Checks the configuration and returns the kernel's view of it.
    fn layout(&self) -> Result<Layout> {
        let hd = self.head_dim;
        ensure(hd > 0 && hd.is_multiple_of(2), KERNEL, || {
            format!("head_dim must be even and positive, got {hd}")
        })?;
        ensure(self.theta_base.is_finite() && self.theta_base > 0.0, KERNEL, || {
            format!("theta_base must be positive and finite, got {}", self.theta_base)
        })?;
        ensure(self.scaling_factor.is_finite() && self.scaling_factor > 0.0, KERNEL, || {
            format!("scaling_factor must be positive and finite, got {}", self.scaling_factor)
        })?;
        let base = self.theta_base as f64;
        let layout = match self.style {
            RopeStyle::NeoX { rotary_dim } | RopeStyle::GptJ { rotary_dim } => {
                ensure(rotary_dim > 0 && rotary_dim.is_multiple_of(2) && rotary_dim <= hd, KERNEL, || {
                    format!("rotary_dim must be even, positive and at most head_dim = {hd}, got {rotary_dim}")
                })?;
                let interleaved = matches!(self.style, RopeStyle::GptJ { .. });
                Layout { seg_dim: rotary_dim, segments: 1, interleaved, base }
            }
            RopeStyle::Glm { rope_ratio } => {
                ensure(rope_ratio.is_finite() && rope_ratio > 0.0, KERNEL, || {
                    format!("rope_ratio must be positive and finite, got {rope_ratio}")
                })?;
                ensure(hd.is_multiple_of(4), KERNEL, || {
                    format!("GLM RoPE needs head_dim a multiple of 4, got {hd}")
                })?;
                Layout { seg_dim: hd / 2, segments: 1, interleaved: true, base: base * rope_ratio as f64 }
            }
            RopeStyle::ChatGlm2d => {
                ensure(hd.is_multiple_of(4), KERNEL, || {
                    format!("ChatGLM 2D RoPE needs head_dim a multiple of 4, got {hd}")
                })?;
                Layout { seg_dim: hd / 2, segments: 2, interleaved: false, base }
            }
        };
        ensure(layout.seg_dim / 2 <= MAX_PAIRS, KERNEL, || {
            format!("{} rotated pairs per segment exceed the kernel's {MAX_PAIRS}", layout.seg_dim / 2)
        })?;
        ensure(layout.base.is_finite(), KERNEL, || "theta_base * rope_ratio overflows".into())?;
        if let Some(factors) = &self.freq_factors {
            let pairs = layout.seg_dim / 2;
            ensure(factors.len() == pairs, KERNEL, || {
                format!("{} frequency factors, but the style rotates {pairs} pairs a segment", factors.len())
            })?;
            // inv_freq is monotonic in i, so its largest value is at one end; a factor small
            // enough to overflow the table would turn every angle of its pair into NaN.
            let largest = inv_freq(layout.base, 0, layout.seg_dim).max(inv_freq(
                layout.base,
                pairs - 1,
                layout.seg_dim,
            ));
            let smallest = factors.as_slice().iter().copied().fold(f64::INFINITY, f64::min);
            ensure((largest / self.scaling_factor as f64 / smallest).is_finite(), KERNEL, || {
                format!("a frequency factor of {smallest:?} overflows the frequency table")
            })?;
        }
        Ok(layout)
    }

    /// The frequency factor of pair `i` (1 without factors).
    fn freq_factor(&self, i: usize) -> f64 {
        self.freq_factors.as_ref().map_or(1.0, |f| f.as_slice()[i])
    }

    /// `inv_freq[i] / scaling_factor / freq_factor[i]` for the kernel's table, in f64. Dividing
    /// by a factor of 1 is exact: factors of 1 give the table without factors, bit for bit.
    fn freqs(&self, layout: &Layout) -> [f64; MAX_PAIRS] {
        let mut table = [0.0f64; MAX_PAIRS];
        for (i, f) in table.iter_mut().take(layout.seg_dim / 2).enumerate() {
            *f = inv_freq(layout.base, i, layout.seg_dim) / self.scaling_factor as f64 / self.freq_factor(i);
        }
        table
    }

    /// The rotation of whole heads as a kernel that forms its own angles takes it (one that
    /// rotates q and k inside a larger step, with `kernels/include/rocmforge_rope_angle.h`):
    /// one segment covering the head, its pairs interleaved or not, each pair's `inv_freq /
    /// scaling_factor / freq_factor` in f64 (the table [`Rope::run`] passes), and the first
    /// invalid position. Refused for a style that does not turn every
    /// element of a head (a partial `rotary_dim`, GLM's half-head, ChatGLM's two segments).
    pub fn whole_head_table(&self) -> Result<WholeHeadTable> {
        let layout = self.layout()?;
        ensure(layout.segments == 1 && layout.seg_dim == self.head_dim, KERNEL, || {
            format!(
                "{:?} turns {} segment(s) of {} of a head's {} elements; only a rotation of whole heads has one \
                 table",
                self.style, layout.segments, layout.seg_dim, self.head_dim
            )
        })?;
        let table = self.freqs(&layout);
        Ok(WholeHeadTable {
            inv_freq: table[..layout.seg_dim / 2].to_vec(),
            interleaved: layout.interleaved,
            max_position: self.max_position(),
        })
    }

    /// `max_position` as the kernel takes it (2^31 when unset).
    fn max_position(&self) -> i64 {
        self.max_position.map_or(1i64 << 31, i64::from)
    }

    /// Applies the RoPE in place to `q` and, if given, `k`, at `positions` (one per token;
    /// `block_positions` too for [`RopeStyle::ChatGlm2d`], and only then). Queued on `q`'s
    /// stream; every buffer must belong to it.
    pub fn run<T: Dtype>(
        &self,
        q: RopeTensor<'_, T>,
        k: Option<RopeTensor<'_, T>>,
        positions: &DeviceBuffer<i32>,
        block_positions: Option<&DeviceBuffer<i32>>,
    ) -> Result<()> {
        let layout = self.layout()?;
        let tokens = positions.len();
        self.check_positions(tokens, block_positions.map(|b| b.len()))?;
        let q_stride = q.check(self, "q", tokens)?;
        let k_stride = match &k {
            Some(k) => k.check(self, "k", tokens)?,
            None => 0,
        };
        let k_heads = k.as_ref().map_or(0, |k| k.heads);
        check_heads(self.head_dim, q.heads, k_heads)?;
        if tokens == 0 || q.heads + k_heads == 0 {
            return Ok(());
        }
        let stream = q.buffer.stream().clone();
        let n = 16 / size_of::<T>();
        let k_ptr = k.as_ref().map(|k| k.buffer.device_ptr());
        let vectorized = vectorizable(&layout, self.head_dim, n, q.buffer.device_ptr(), q_stride)
            && k_ptr.is_none_or(|p| vectorizable(&layout, self.head_dim, n, p, k_stride));
        let warp = stream.backend().info().warp_size.max(1) as usize;
        let path = path(&layout, vectorized, n, warp);
        let kernel = loader::kernel(&stream, MODULE, &kernel_name::<T>(path.kernel(&layout)))?;
        let config = match path {
            Path::Warp => {
                let rounds = head_rounds(&layout, vectorized, n, warp, q.heads + k_heads);
                warp_config(&stream, &kernel, tokens, warp, rounds)
            }
            Path::Table => config(&stream, &kernel, &layout, q.heads + k_heads, tokens, vectorized, n),
        };
        let freqs = self.freqs(&layout);
        // SAFETY: rf_rope_<T> and rf_rope_warp_<T> take the same arguments (T* q, T* k,
        // const int* pos, const int* block_pos, u64 tokens, u64 q_heads, u64 k_heads, u64
        // q_stride, u64 k_stride, u32 head_dim, u32 seg_dim, u32 segments, int interleaved, int
        // vectorized, i64 max_pos, Freqs) and read pos[t] (and block_pos[t] when segments == 2)
        // for t < tokens, and read and write, for h < heads, element e < segments * seg_dim <=
        // head_dim of q[t * q_stride + h * head_dim + e] (and of k likewise): `check` proved
        // those inside q and k, and `check_positions` the position buffers. They read
        // freqs.inv_freq[i] for i < seg_dim / 2 <= MAX_PAIRS. q and k are distinct mutable
        // borrows; the builder checks every buffer's stream. With `vectorized`, 16-byte accesses
        // are aligned (checked by `vectorizable`). The warp path needs a head's work items to fit
        // one warp of the device's width (`path`); its grid's z (`head_slices`) splits each
        // token's rounds of heads, each round taken by exactly one slice, so every element is
        // still read and written by one thread.
        unsafe {
            // Dependent (rocmforge_dependent_launch.h): the warp entries read the positions
            // before they wait for the kernel ahead, q and k and every write after it; the
            // others wait first.
            let launch = stream.launch(&kernel).dependent().buffer_mut(q.buffer);
            let launch = match k {
                Some(k) => launch.buffer_mut(k.buffer),
                None => launch.arg(0u64),
            };
            let launch = launch.buffer(positions).reads_before_wait(positions);
            let launch = match block_positions {
                Some(b) => launch.buffer(b).reads_before_wait(b),
                None => launch.arg(0u64),
            };
            launch
                .arg(tokens as u64)
                .arg(q.heads as u64)
                .arg(k_heads as u64)
                .arg(q_stride as u64)
                .arg(k_stride as u64)
                .arg(self.head_dim as u32)
                .arg(layout.seg_dim as u32)
                .arg(layout.segments as u32)
                .arg(layout.interleaved as i32)
                .arg(vectorized as i32)
                .arg(self.max_position())
                .arg(freqs)
                .launch(config)?
        };
        Ok(())
    }

    /// Uploads `positions` (host values) on `stream` after checking each is in `0 <=
    /// p < max_position`: the checked way in, where a bad position is an `Err` naming the token
    /// rather than NaN in the output. Pass the buffer to [`Rope::run`].
    pub fn upload_positions(&self, stream: &Stream, positions: &[i32]) -> Result<DeviceBuffer<i32>> {
        let max = self.max_position();
        if let Some((token, &p)) = positions.iter().enumerate().find(|&(_, &p)| p < 0 || i64::from(p) >= max)
        {
            return Err(KernelError::Shape {
                kernel: KERNEL,
                message: format!("position {p} of token {token} is outside [0, {max})"),
            });
        }
        Ok(stream.upload(positions)?)
    }

    fn check_positions(&self, tokens: usize, block_positions: Option<usize>) -> Result<()> {
        match (self.style, block_positions) {
            (RopeStyle::ChatGlm2d, Some(len)) => ensure(len == tokens, KERNEL, || {
                format!("block_positions has {len} entries, positions {tokens}")
            }),
            (RopeStyle::ChatGlm2d, None) => Err(KernelError::Shape {
                kernel: KERNEL,
                message: "ChatGLM 2D RoPE needs block_positions".into(),
            }),
            (_, Some(_)) => Err(KernelError::Shape {
                kernel: KERNEL,
                message: "block_positions are only used by the ChatGLM 2D style".into(),
            }),
            (_, None) => Ok(()),
        }
    }
}

/// `(q_heads + k_heads) * head_dim` must fit the kernel's 32-bit work-item count.
fn check_heads(head_dim: usize, q_heads: usize, k_heads: usize) -> Result<()> {
    let elements = q_heads.checked_add(k_heads).and_then(|h| h.checked_mul(head_dim));
    ensure(elements.is_some_and(|e| e <= i32::MAX as usize), KERNEL, || {
        format!("{q_heads} + {k_heads} heads of {head_dim} exceed 2^31 - 1 elements a token")
    })
}

/// Whether the kernel may use 16-byte accesses on a tensor: the base pointer 16-byte aligned,
/// every head start (token stride, head_dim) and every group of `n` pairs (two vectors of `n`
/// elements: `a` and `b` halves for NeoX, consecutive for interleaved pairs) a whole number of
/// vectors.
fn vectorizable(layout: &Layout, head_dim: usize, n: usize, ptr: u64, token_stride: usize) -> bool {
    let half = layout.seg_dim / 2;
    let groups =
        if layout.interleaved { layout.seg_dim.is_multiple_of(2 * n) } else { half.is_multiple_of(n) };
    groups
        && ptr.is_multiple_of(16)
        && token_stride.is_multiple_of(n)
        && head_dim.is_multiple_of(n)
        && layout.seg_dim.is_multiple_of(n)
}

/// The kernel a launch takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// `rf_rope_warp_<T>` (half-split pairs) or `rf_rope_warp_il_<T>` (interleaved pairs): one
    /// token a warp, each lane forms the cos/sin of its own pairs in registers and reuses them
    /// over every head it rotates; needs a head's work items to fit one warp.
    Warp,
    /// `rf_rope_<T>`: one token a block, the token's cos/sin table in shared memory behind a
    /// barrier; any number of work items a head.
    Table,
}

impl Path {
    fn kernel(self, layout: &Layout) -> &'static str {
        match (self, layout.interleaved) {
            (Path::Warp, false) => "rf_rope_warp",
            (Path::Warp, true) => "rf_rope_warp_il",
            (Path::Table, _) => "rf_rope",
        }
    }
}

/// Work items of one head on the warp path. An item is the pairs of one 16-byte access pair on
/// the vector path: `n` pairs for half-split pairs (`n` elements at `i` and at `i + d/2`), `n / 2`
/// for interleaved ones (one vector of `n` elements); one pair without vectors.
fn warp_items_per_head(layout: &Layout, vectorized: bool, n: usize) -> usize {
    let pairs_per_item = match (vectorized, layout.interleaved) {
        (false, _) => 1,
        (true, false) => n,
        (true, true) => n / 2,
    };
    layout.segments * (layout.seg_dim / 2 / pairs_per_item)
}

/// The warp path when a head's work items fit one warp of `warp` lanes (then every lane of it
/// rotates the same pairs of each head it visits), the table path otherwise.
fn path(layout: &Layout, vectorized: bool, n: usize, warp: usize) -> Path {
    if warp_items_per_head(layout, vectorized, n) <= warp { Path::Warp } else { Path::Table }
}

/// Rounds of heads a warp of `warp` lanes takes for one token on the warp path: it covers
/// `warp / items a head` heads at a time.
fn head_rounds(layout: &Layout, vectorized: bool, n: usize, warp: usize, heads: usize) -> usize {
    let at_a_time = (warp / warp_items_per_head(layout, vectorized, n).max(1)).max(1);
    heads.div_ceil(at_a_time)
}

/// Warps the warp path aims to keep busy per compute unit before it splits tokens' heads.
const WARPS_PER_COMPUTE_UNIT: usize = 2;

/// Warp path: `WARP_BLOCK` threads a block, one token a warp, and the grid's z the slices each
/// token's `rounds` rounds of heads are split over: with few tokens (decode) one warp would rotate
/// all of a token's heads in turn, so up to `rounds` warps share them until there are about
/// [`WARPS_PER_COMPUTE_UNIT`] warps a compute unit; one slice when tokens alone give that.
fn warp_config(
    stream: &Stream,
    kernel: &rocm_runtime::Function,
    tokens: usize,
    warp: usize,
    rounds: usize,
) -> LaunchConfig {
    let block = (WARP_BLOCK.min(kernel.max_threads_per_block() as usize) / warp * warp).max(warp);
    let mut config = loader::row_per_block(stream, kernel, tokens.div_ceil(block / warp), block as u32);
    let info = stream.backend().info();
    let wanted = (info.compute_units.max(1) as usize).saturating_mul(WARPS_PER_COMPUTE_UNIT);
    let max_z = info.max_grid[2].clamp(1, 65_535) as usize;
    config.grid[2] = head_slices(tokens, rounds, wanted).min(max_z) as u32;
    config
}

/// Slices of a token's `rounds` rounds of heads so that `tokens` tokens make about `wanted`
/// warps: 1 to `rounds`.
fn head_slices(tokens: usize, rounds: usize, wanted: usize) -> usize {
    wanted.div_ceil(tokens.max(1)).clamp(1, rounds.max(1))
}

/// Table path: one block per token; the threads cover the token's work items (groups of pairs
/// over all heads), balanced over as few rounds of at most `MAX_BLOCK` threads as needed.
fn config(
    stream: &Stream,
    kernel: &rocm_runtime::Function,
    layout: &Layout,
    heads: usize,
    tokens: usize,
    vectorized: bool,
    n: usize,
) -> LaunchConfig {
    let pairs_per_item = if vectorized { n } else { 1 };
    let items = heads * layout.segments * (layout.seg_dim / 2 / pairs_per_item);
    let warp = stream.backend().info().warp_size.max(1) as usize;
    let rounds = items.div_ceil(MAX_BLOCK).max(1);
    let block = items.div_ceil(rounds).div_ceil(warp).saturating_mul(warp).clamp(warp, MAX_BLOCK.max(warp));
    loader::row_per_block(stream, kernel, tokens, block as u32)
}

/// `base^(-2i / d)` in f64.
fn inv_freq(base: f64, i: usize, d: usize) -> f64 {
    base.powf(-((2 * i) as f64) / d as f64)
}

/// Q or K for [`Rope::run`]: a buffer of `[tokens, heads, head_dim]`, token `t` starting at
/// `t * token_stride` (default `heads * head_dim`, contiguous). A larger stride describes a head
/// range of a wider tensor, e.g. the Q and K heads of a packed QKV buffer (as one tensor of
/// `q_heads + k_heads` heads with the QKV row as stride, leaving V alone).
#[derive(Debug)]
pub struct RopeTensor<'a, T: Dtype> {
    pub buffer: &'a mut DeviceBuffer<T>,
    pub heads: usize,
    pub token_stride: Option<usize>,
}

impl<'a, T: Dtype> RopeTensor<'a, T> {
    pub fn new(buffer: &'a mut DeviceBuffer<T>, heads: usize) -> Self {
        RopeTensor { buffer, heads, token_stride: None }
    }

    pub fn with_token_stride(self, token_stride: usize) -> Self {
        RopeTensor { token_stride: Some(token_stride), ..self }
    }

    /// Checks the stride and length for `tokens` tokens; returns the stride.
    fn check(&self, rope: &Rope, name: &str, tokens: usize) -> Result<usize> {
        check_tensor(rope.head_dim, name, self.buffer.len(), self.heads, self.token_stride, tokens)
    }
}

/// The token stride of a `[tokens, heads, head_dim]` tensor of `len` elements, checked.
fn check_tensor(
    head_dim: usize,
    name: &str,
    len: usize,
    heads: usize,
    token_stride: Option<usize>,
    tokens: usize,
) -> Result<usize> {
    let row = heads.checked_mul(head_dim).ok_or_else(|| KernelError::Shape {
        kernel: KERNEL,
        message: format!("{name}: {heads} heads of {head_dim} overflow usize"),
    })?;
    let stride = token_stride.unwrap_or(row);
    ensure(stride >= row, KERNEL, || {
        format!("{name}: token stride {stride} is less than {heads} heads x {head_dim}")
    })?;
    let need = match tokens {
        0 => Some(0),
        t => (t - 1).checked_mul(stride).and_then(|v| v.checked_add(row)),
    };
    match token_stride {
        // Contiguous: exactly the tensor.
        None => ensure(need == Some(len), KERNEL, || {
            format!("{name} has {len} elements, expected {tokens} tokens x {heads} heads x {head_dim}")
        })?,
        Some(_) => ensure(need.is_some_and(|need| len >= need), KERNEL, || {
            format!("{name} holds {len} elements; {tokens} tokens at stride {stride} need {need:?}")
        })?,
    }
    Ok(stride)
}

/// `q` and `k` rotated in place at `positions`, for contiguous tensors (see [`Rope::run`]).
pub fn rope_in_place<T: Dtype>(
    rope: &Rope,
    q: &mut DeviceBuffer<T>,
    q_heads: usize,
    k: &mut DeviceBuffer<T>,
    k_heads: usize,
    positions: &DeviceBuffer<i32>,
    block_positions: Option<&DeviceBuffer<i32>>,
) -> Result<()> {
    rope.run(RopeTensor::new(q, q_heads), Some(RopeTensor::new(k, k_heads)), positions, block_positions)
}

/// CPU reference of [`Rope::run`] on one tensor (Q or K) in f64: `x` holds the stored values
/// (as f32) of `[tokens, heads, head_dim]` at `token_stride` (default contiguous); the result
/// has the same layout, with pass-through elements (and gaps between tokens) copied; frequency
/// factors and linear scaling as the kernel applies them. Invalid
/// positions give NaN in the rotated elements, as the kernel does. Panics on a configuration
/// the launcher refuses.
pub fn rope_reference(
    rope: &Rope,
    x: &[f32],
    heads: usize,
    token_stride: Option<usize>,
    positions: &[i32],
    block_positions: Option<&[i32]>,
) -> Vec<f64> {
    let layout = rope.layout().expect("rope reference: invalid configuration");
    let tokens = positions.len();
    rope.check_positions(tokens, block_positions.map(|b| b.len())).expect("rope reference: positions");
    let stride = check_tensor(rope.head_dim, "x", x.len(), heads, token_stride, tokens)
        .expect("rope reference: tensor shape");
    let mut out: Vec<f64> = x.iter().map(|&v| v as f64).collect();
    let half = layout.seg_dim / 2;
    let max = rope.max_position();
    for (t, &position) in positions.iter().enumerate() {
        for seg in 0..layout.segments {
            let p = if seg == 0 { position } else { block_positions.expect("checked")[t] };
            let valid = p >= 0 && (p as i64) < max;
            let scaled = p as f64 / rope.scaling_factor as f64;
            for h in 0..heads {
                let start = t * stride + h * rope.head_dim + seg * layout.seg_dim;
                for i in 0..half {
                    let (ia, ib) = if layout.interleaved { (2 * i, 2 * i + 1) } else { (i, i + half) };
                    let (a, b) = (x[start + ia] as f64, x[start + ib] as f64);
                    let (ra, rb) = if valid {
                        let freq = inv_freq(layout.base, i, layout.seg_dim) / rope.freq_factor(i);
                        let (s, c) = (scaled * freq).sin_cos();
                        (a * c - b * s, b * c + a * s)
                    } else {
                        (f64::NAN, f64::NAN)
                    };
                    out[start + ia] = ra;
                    out[start + ib] = rb;
                }
            }
        }
    }
    out
}

/// The entries this module launches ([`crate::launchable`]): [`Path::kernel`]'s every answer.
pub(crate) fn launchable() -> Vec<Launchable> {
    let mut names = Vec::new();
    for path in [Path::Warp, Path::Table] {
        for interleaved in [false, true] {
            names.push(path.kernel(&Layout { seg_dim: 64, segments: 1, interleaved, base: 10_000.0 }));
        }
    }
    names.extend(["rf_rope_warp_kv", "rf_rope_warp_il_kv"]); // `Rope::run_into_cache`
    names.sort();
    names.dedup();
    names.iter().flat_map(|name| every_dtype(MODULE, name)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn few_tokens_split_their_heads_over_warps() {
        // Decode at Llama-3-8B shapes: 40 heads, 2 a round (16 items a head, 32 lanes), an H100's
        // 132 compute units x 2 warps wanted.
        assert_eq!(head_slices(1, 20, 264), 20);
        assert_eq!(head_slices(8, 20, 264), 20);
        assert_eq!(head_slices(100, 20, 264), 3);
        assert_eq!(head_slices(512, 20, 264), 1);
        assert_eq!(head_slices(0, 20, 264), 20);
        assert_eq!(head_slices(1, 0, 264), 1);
    }

    fn close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() < 1e-12, "element {i}: got {g}, want {w} (all: {got:?})");
        }
    }

    // Angles used below. Position 1, base 10000:
    //   d = 4: inv_freq = [1, 10000^(-1/2) = 0.01]        -> angles 1, 0.01
    //   d = 2: inv_freq = [1]                              -> angle 1
    //   d = 8: inv_freq = [1, 0.1, 0.01, 0.001]
    // cos 1 = 0.5403023058681398, sin 1 = 0.8414709848078965
    // cos 0.01 = 0.9999500004166653, sin 0.01 = 0.009999833334166664
    const C1: f64 = 0.5403023058681398;
    const S1: f64 = 0.8414709848078965;
    const C01: f64 = 0.9999500004166653;
    const S01: f64 = 0.009999833334166664;
    /// [1, 2, 3, 4] at position 1, head_dim 4, base 10000, NeoX and GPT-J pairs.
    const NEOX_1234: [f64; 4] =
        [-1.9841106485555495, 1.959900667496664, 2.4623779024123156, 4.019799668334994];
    const GPTJ_1234: [f64; 4] =
        [-1.1426396637476532, 1.922075596544176, 2.9598506679133294, 4.029799501669161];

    #[test]
    fn neox_pairs_are_half_split() {
        // head_dim 4, x = [1, 2, 3, 4]: pairs (x0, x2) by angle 1, (x1, x3) by angle 0.01.
        let y = rope_reference(&Rope::neox(4), &[1.0, 2.0, 3.0, 4.0], 1, None, &[1], None);
        let want = [
            1.0 * C1 - 3.0 * S1,   // 0.5403023 - 2.5244130 = -1.9841106
            2.0 * C01 - 4.0 * S01, // 1.9999000 - 0.0399993 =  1.9599007
            3.0 * C1 + 1.0 * S1,   // 1.6209069 + 0.8414710 =  2.4623779
            4.0 * C01 + 2.0 * S01, // 3.9998000 + 0.0199997 =  4.0197997
        ];
        close(&y, &want);
        close(&y, &NEOX_1234);
    }

    #[test]
    fn gptj_pairs_are_interleaved() {
        // head_dim 4, x = [1, 2, 3, 4]: pairs (x0, x1) by angle 1, (x2, x3) by angle 0.01.
        let y = rope_reference(
            &Rope::new(RopeStyle::GptJ { rotary_dim: 4 }, 4),
            &[1.0, 2.0, 3.0, 4.0],
            1,
            None,
            &[1],
            None,
        );
        let want = [
            1.0 * C1 - 2.0 * S1,   // 0.5403023 - 1.6829420 = -1.1426397
            2.0 * C1 + 1.0 * S1,   // 1.0806046 + 0.8414710 =  1.9220756
            3.0 * C01 - 4.0 * S01, // 2.9998500 - 0.0399993 =  2.9598507
            4.0 * C01 + 3.0 * S01, // 3.9998000 + 0.0299995 =  4.0297995
        ];
        close(&y, &want);
        close(&y, &GPTJ_1234);
    }

    #[test]
    fn position_zero_is_the_identity_and_position_two_doubles_the_angle() {
        let x = [1.0, 2.0, 3.0, 4.0];
        let y = rope_reference(&Rope::neox(4), &x, 1, None, &[0], None);
        close(&y, &[1.0, 2.0, 3.0, 4.0]);
        // Position 2, scaling factor 2: the same as position 1.
        let scaled = rope_reference(&Rope::neox(4).with_scaling_factor(2.0), &x, 1, None, &[2], None);
        let plain = rope_reference(&Rope::neox(4), &x, 1, None, &[1], None);
        close(&scaled, &plain);
    }

    #[test]
    fn whole_head_tables_are_the_kernels_table() {
        let gptj =
            Rope::new(RopeStyle::GptJ { rotary_dim: 8 }, 8).with_theta_base(100.0).with_scaling_factor(2.0);
        let t = gptj.whole_head_table().unwrap();
        assert!(t.interleaved);
        assert_eq!(t.max_position, 1 << 31);
        assert_eq!(t.inv_freq, gptj.freqs(&gptj.layout().unwrap())[..4].to_vec());
        assert_eq!(t.inv_freq[1], 100f64.powf(-2.0 / 8.0) / 2.0);
        let neox = Rope::neox(8).with_max_position(9).whole_head_table().unwrap();
        assert!(!neox.interleaved);
        assert_eq!(neox.max_position, 9);
        for rope in [
            Rope::new(RopeStyle::NeoX { rotary_dim: 4 }, 8),
            Rope::new(RopeStyle::Glm { rope_ratio: 1.0 }, 8),
            Rope::new(RopeStyle::ChatGlm2d, 8),
        ] {
            let err = rope.whole_head_table().unwrap_err().to_string();
            assert!(err.contains("only a rotation of whole heads has one table"), "{err}");
        }
    }

    #[test]
    fn freq_factors_divide_each_pairs_frequency() {
        // head_dim 4 (angles 1 and 0.01 at position 1): factors [1, 0.01] turn pair (x1, x3) by
        // 0.01 / 0.01 = 1 as well.
        let factors = FreqFactors::new(&[1.0, 0.01]).unwrap();
        let rope = Rope::neox(4).with_freq_factors(factors);
        let y = rope_reference(&rope, &[1.0, 2.0, 3.0, 4.0], 1, None, &[1], None);
        close(&y, &[1.0 * C1 - 3.0 * S1, 2.0 * C1 - 4.0 * S1, 3.0 * C1 + 1.0 * S1, 4.0 * C1 + 2.0 * S1]);
        // Factors of 2 at position 2 are position 1 without them, and they combine with linear
        // scaling (2 * 2 at position 4); GPT-J pairs take them in pair order too.
        let x = [1.0, 2.0, 3.0, 4.0];
        let twos = FreqFactors::new(&[2.0, 2.0]).unwrap();
        close(&rope_reference(&Rope::neox(4).with_freq_factors(twos), &x, 1, None, &[2], None), &NEOX_1234);
        let both = Rope::neox(4).with_freq_factors(twos).with_scaling_factor(2.0);
        close(&rope_reference(&both, &x, 1, None, &[4], None), &NEOX_1234);
        let gptj = Rope::new(RopeStyle::GptJ { rotary_dim: 4 }, 4).with_freq_factors(twos);
        close(&rope_reference(&gptj, &x, 1, None, &[2], None), &GPTJ_1234);
        // ChatGLM 2D: both halves take the same factors.
        let two_d = Rope::new(RopeStyle::ChatGlm2d, 8).with_freq_factors(twos);
        let y = rope_reference(&two_d, &[x, x].concat(), 1, None, &[2], Some(&[2]));
        close(&y, &[NEOX_1234, NEOX_1234].concat());
    }

    #[test]
    fn freq_factors_of_one_change_nothing() {
        let ones = FreqFactors::new(&[1.0; 32]).unwrap();
        for rope in [
            Rope::neox(64).with_theta_base(500_000.0),
            Rope::new(RopeStyle::GptJ { rotary_dim: 64 }, 128).with_scaling_factor(4.0),
            Rope::new(RopeStyle::Glm { rope_ratio: 3.0 }, 128),
            Rope::new(RopeStyle::ChatGlm2d, 128),
        ] {
            let with = rope.with_freq_factors(ones);
            let (a, b) = (rope.layout().unwrap(), with.layout().unwrap());
            assert_eq!(a, b);
            // The kernel's table, bit for bit.
            assert_eq!(rope.freqs(&a).map(f64::to_bits), with.freqs(&b).map(f64::to_bits), "{rope:?}");
            let x: Vec<f32> = (0..2 * rope.head_dim).map(|i| (i as f32 * 0.37).sin()).collect();
            let block = matches!(rope.style, RopeStyle::ChatGlm2d).then_some(&[5, 9][..]);
            let plain = rope_reference(&rope, &x, 1, None, &[3, 70_000], block);
            assert_eq!(plain, rope_reference(&with, &x, 1, None, &[3, 70_000], block));
        }
        // The table divides by each factor in f64.
        let factors: Vec<f64> = (0..32).map(|i| 1.0 + i as f64 / 4.0).collect();
        let rope =
            Rope::neox(64).with_scaling_factor(2.0).with_freq_factors(FreqFactors::new(&factors).unwrap());
        let table = rope.freqs(&rope.layout().unwrap());
        for (i, f) in factors.iter().enumerate() {
            assert_eq!(table[i], inv_freq(10_000.0, i, 64) / 2.0 / f);
        }
        assert!(table[32..].iter().all(|&v| v == 0.0));
    }

    #[test]
    fn freq_factors_are_checked() {
        let message = |r: Result<FreqFactors>| crate::error::shape_message(r, "rope");
        assert_eq!(
            message(FreqFactors::new(&[])),
            "0 frequency factors: need 1 to 256 (one per rotated pair)"
        );
        assert!(message(FreqFactors::new(&[1.0; 257])).starts_with("257 frequency factors"));
        let cases: [(&[f64], &str); 5] = [
            (&[1.0, 0.0], "frequency factor 1 is 0.0"),
            (&[1.0, 2.0, -8.0], "frequency factor 2 is -8.0"),
            (&[f64::NAN], "frequency factor 0 is NaN"),
            (&[1.0, f64::INFINITY], "frequency factor 1 is inf"),
            (&[-0.0], "frequency factor 0 is -0.0"),
        ];
        for (factors, says) in cases {
            let m = message(FreqFactors::new(factors));
            assert_eq!(m, format!("{says}: factors must be positive and finite"));
        }
        assert!(
            message(FreqFactors::from_f32(&[1.0, f32::NEG_INFINITY]))
                .starts_with("frequency factor 1 is -inf")
        );
        let f = FreqFactors::from_f32(&[1.0, 1.5, 8.0]).unwrap();
        assert_eq!((f.as_slice(), f.len(), f.is_empty()), (&[1.0, 1.5, 8.0][..], 3, false));
        assert_eq!(f, FreqFactors::new(&[1.0, 1.5, 8.0]).unwrap());
        assert_ne!(f, FreqFactors::new(&[1.0, 1.5]).unwrap());
        assert_eq!(format!("{f:?}"), "FreqFactors([1.0, 1.5, 8.0])");
        // One factor per rotated pair of a segment: rotary_dim / 2, head_dim / 4 for GLM and
        // for each half of ChatGLM 2D.
        let n = |k: usize| FreqFactors::new(&vec![2.0; k]).unwrap();
        for (rope, pairs) in [
            (Rope::neox(8), 4),
            (Rope::new(RopeStyle::NeoX { rotary_dim: 4 }, 8), 2),
            (Rope::new(RopeStyle::GptJ { rotary_dim: 6 }, 8), 3),
            (Rope::new(RopeStyle::Glm { rope_ratio: 1.0 }, 16), 4),
            (Rope::new(RopeStyle::ChatGlm2d, 16), 4),
        ] {
            assert!(rope.with_freq_factors(n(pairs)).layout().is_ok(), "{rope:?}");
            for wrong in [pairs - 1, pairs + 1] {
                let m = refused(rope.with_freq_factors(n(wrong)));
                assert_eq!(
                    m,
                    format!("{wrong} frequency factors, but the style rotates {pairs} pairs a segment")
                );
            }
        }
        // A factor so small that a frequency overflows f64 is refused rather than run as NaN.
        let tiny = Rope::neox(4).with_freq_factors(FreqFactors::new(&[1.0, 1e-307]).unwrap());
        assert!(refused(tiny.with_scaling_factor(1e-3)).contains("overflows the frequency table"));
        assert!(tiny.layout().is_ok());
    }

    #[test]
    fn partial_rotary_passes_the_rest_through() {
        // head_dim 6, rotary_dim 4 (NeoX): elements 4 and 5 pass through; two heads, two tokens.
        let rope = Rope::new(RopeStyle::NeoX { rotary_dim: 4 }, 6);
        let head = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let x: Vec<f32> = head.repeat(4);
        let y = rope_reference(&rope, &x, 2, None, &[1, 0], None);
        let rotated = [NEOX_1234[0], NEOX_1234[1], NEOX_1234[2], NEOX_1234[3], 5.0, 6.0];
        let identity = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        close(&y, &[rotated, rotated, identity, identity].concat());
        // GPT-J with rotary_dim 2 of 4: only (x0, x1) turns, by inv_freq[0] = 1.
        let y = rope_reference(
            &Rope::new(RopeStyle::GptJ { rotary_dim: 2 }, 4),
            &[1.0, 2.0, 3.0, 4.0],
            1,
            None,
            &[1],
            None,
        );
        close(&y, &[1.0 * C1 - 2.0 * S1, 2.0 * C1 + 1.0 * S1, 3.0, 4.0]);
    }

    #[test]
    fn glm_rotates_interleaved_pairs_of_the_first_half_with_a_scaled_base() {
        // head_dim 8: d = 4, pairs (x0, x1), (x2, x3); base 100 * rope_ratio 100 = 10000, so the
        // angles at position 1 are 1 and 0.01; x4..x7 pass through.
        let rope = Rope::new(RopeStyle::Glm { rope_ratio: 100.0 }, 8).with_theta_base(100.0);
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        let y = rope_reference(&rope, &x, 1, None, &[1], None);
        close(&y, &[GPTJ_1234.as_slice(), &[5.0, 6.0, 7.0, 8.0]].concat());
    }

    #[test]
    fn chatglm_2d_rotates_each_half_by_its_own_position() {
        // head_dim 8: halves of 4, each NeoX with d = 4 (angles p * [1, 0.01]). The first half
        // turns by position 1, the second by block position 0 (identity), then swapped.
        let rope = Rope::new(RopeStyle::ChatGlm2d, 8);
        let x = [1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0];
        let y = rope_reference(&rope, &x, 1, None, &[1], Some(&[0]));
        close(&y, &[NEOX_1234, [1.0, 2.0, 3.0, 4.0]].concat());
        let y = rope_reference(&rope, &x, 1, None, &[0], Some(&[1]));
        close(&y, &[[1.0, 2.0, 3.0, 4.0], NEOX_1234].concat());
    }

    #[test]
    fn a_large_position_is_the_exact_angle() {
        // head_dim 2: one pair, inv_freq 1: the angle is the position itself.
        let p = 100_000;
        let y = rope_reference(&Rope::neox(2), &[1.0, 0.0], 1, None, &[p], None);
        close(&y, &[(p as f64).cos(), (p as f64).sin()]);
        close(&y, &[-0.9993608074382124, 0.03574879797201651]);
        // A rotation keeps the norm.
        assert!((y[0] * y[0] + y[1] * y[1] - 1.0).abs() < 1e-12);
    }

    #[test]
    fn invalid_positions_give_nan() {
        let rope = Rope::new(RopeStyle::NeoX { rotary_dim: 2 }, 4).with_max_position(8);
        let x = [1.0, 2.0, 3.0, 4.0].repeat(3);
        let y = rope_reference(&rope, &x, 1, None, &[-1, 8, 7], None);
        // Rotated elements (0 and 1) are NaN for the first two tokens; 2 and 3 pass through.
        assert!(y[0].is_nan() && y[1].is_nan() && y[4].is_nan() && y[5].is_nan());
        close(&[y[2], y[3], y[6], y[7]], &[3.0, 4.0, 3.0, 4.0]);
        assert!(y[8..].iter().all(|v| v.is_finite()));
        // Without a maximum, any non-negative position is valid; negative ones never are.
        let y = rope_reference(&Rope::neox(2), &[1.0, 0.0, 1.0, 0.0], 1, None, &[i32::MAX, -5], None);
        assert!(y[0].is_finite() && y[1].is_finite() && y[2].is_nan() && y[3].is_nan());
    }

    #[test]
    fn strided_tokens_leave_the_gaps_alone() {
        // Two tokens of one head of 2 at stride 3: element 2 is a gap.
        let y = rope_reference(&Rope::neox(2), &[1.0, 0.0, 9.0, 1.0, 0.0], 1, Some(3), &[1, 0], None);
        close(&y, &[C1, S1, 9.0, 1.0, 0.0]);
    }

    fn refused(rope: Rope) -> String {
        crate::error::shape_message(rope.layout(), "rope")
    }

    #[test]
    fn bad_configurations_are_refused() {
        assert!(refused(Rope::neox(7)).contains("head_dim"));
        assert!(refused(Rope::new(RopeStyle::NeoX { rotary_dim: 3 }, 8)).contains("rotary_dim"));
        assert!(refused(Rope::new(RopeStyle::GptJ { rotary_dim: 10 }, 8)).contains("rotary_dim"));
        assert!(refused(Rope::new(RopeStyle::NeoX { rotary_dim: 0 }, 8)).contains("rotary_dim"));
        assert!(refused(Rope::new(RopeStyle::Glm { rope_ratio: 1.0 }, 6)).contains("multiple of 4"));
        assert!(refused(Rope::new(RopeStyle::Glm { rope_ratio: -1.0 }, 8)).contains("rope_ratio"));
        assert!(refused(Rope::new(RopeStyle::ChatGlm2d, 10)).contains("multiple of 4"));
        assert!(refused(Rope::neox(1024)).contains("pairs"));
        assert!(Rope::new(RopeStyle::ChatGlm2d, 1024).layout().is_ok());
        assert!(refused(Rope::neox(8).with_theta_base(0.0)).contains("theta_base"));
        assert!(refused(Rope::neox(8).with_scaling_factor(f32::INFINITY)).contains("scaling_factor"));
        let rope = Rope::neox(8);
        assert!(rope.check_positions(3, Some(3)).is_err(), "block positions without the 2D style");
        let glm2d = Rope::new(RopeStyle::ChatGlm2d, 8);
        assert!(glm2d.check_positions(3, None).is_err());
        assert!(glm2d.check_positions(3, Some(2)).is_err());
        assert!(glm2d.check_positions(3, Some(3)).is_ok());
        // Tensors: exact length when contiguous, enough for the stride otherwise.
        assert_eq!(check_tensor(8, "q", 48, 2, None, 3).unwrap(), 16);
        assert!(check_tensor(8, "q", 47, 2, None, 3).is_err());
        assert!(check_tensor(8, "q", 49, 2, None, 3).is_err());
        assert_eq!(check_tensor(8, "q", 56, 2, Some(20), 3).unwrap(), 20);
        assert!(check_tensor(8, "q", 55, 2, Some(20), 3).is_err());
        assert!(check_tensor(8, "q", 100, 2, Some(15), 3).is_err());
        assert!(check_heads(128, usize::MAX, 1).is_err());
        assert!(check_heads(128, 1 << 24, 0).is_err());
        assert!(check_heads(128, 32, 8).is_ok());
    }

    #[test]
    fn vector_access_needs_aligned_groups() {
        let neox = Rope::neox(128).layout().unwrap();
        assert!(vectorizable(&neox, 128, 8, 0, 128 * 40));
        assert!(!vectorizable(&neox, 128, 8, 8, 128 * 40), "unaligned base");
        assert!(!vectorizable(&neox, 128, 8, 0, 128 * 40 + 4), "unaligned token stride");
        let partial = Rope::new(RopeStyle::NeoX { rotary_dim: 24 }, 128).layout().unwrap();
        assert!(!vectorizable(&partial, 128, 8, 0, 128), "12 pairs are not whole vectors of 8");
        assert!(vectorizable(&partial, 128, 4, 0, 128));
        let glm = Rope::new(RopeStyle::Glm { rope_ratio: 1.0 }, 128).layout().unwrap();
        assert!(vectorizable(&glm, 128, 8, 0, 128));
        // Interleaved groups are two consecutive vectors: 24 elements hold three vectors of 8
        // but not a whole number of groups of 16.
        let gptj = Rope::new(RopeStyle::GptJ { rotary_dim: 24 }, 128).layout().unwrap();
        assert!(!vectorizable(&gptj, 128, 8, 0, 128));
        assert!(vectorizable(&gptj, 128, 4, 0, 128));
        let small = Rope::new(RopeStyle::ChatGlm2d, 16).layout().unwrap();
        assert!(!vectorizable(&small, 16, 8, 0, 16), "4 pairs per half");
        assert!(vectorizable(&small, 16, 4, 0, 16));
    }

    #[test]
    fn heads_whose_items_fit_a_warp_take_the_warp_path() {
        let layout = |style, hd| Rope::new(style, hd).layout().unwrap();
        let neox = layout(RopeStyle::NeoX { rotary_dim: 128 }, 128);
        let glm = layout(RopeStyle::Glm { rope_ratio: 1.0 }, 128);
        // The benchmark: NeoX-128 is 8 items a head in f16/bf16 (n = 8, 8 pairs an item) and 16
        // in f32 (n = 4); GLM-128 (32 interleaved pairs, n / 2 an item) 8 and 16; on 32- and
        // 64-wide warps.
        assert_eq!(warp_items_per_head(&neox, true, 8), 8);
        assert_eq!(warp_items_per_head(&neox, true, 4), 16);
        assert_eq!(warp_items_per_head(&glm, true, 8), 8);
        assert_eq!(warp_items_per_head(&glm, true, 4), 16);
        for warp in [32, 64] {
            for n in [4, 8] {
                assert_eq!(path(&neox, true, n, warp), Path::Warp);
                assert_eq!(path(&glm, true, n, warp), Path::Warp);
            }
        }
        assert_eq!(Path::Warp.kernel(&neox), "rf_rope_warp");
        assert_eq!(Path::Warp.kernel(&glm), "rf_rope_warp_il");
        assert_eq!(Path::Table.kernel(&glm), "rf_rope");
        // Single pairs: 64 a NeoX-128 head fit a 64-wide wavefront but not a 32-wide warp.
        assert_eq!(path(&neox, false, 8, 32), Path::Table);
        assert_eq!(path(&neox, false, 8, 64), Path::Warp);
        // Items that do not divide the warp: 6 (NeoX-96 f16) use 30 of 32 lanes.
        assert_eq!(path(&layout(RopeStyle::NeoX { rotary_dim: 96 }, 96), true, 8, 32), Path::Warp);
        // GPT-J on 256: 128 pairs, 32 items (f16/bf16) or 64 (f32).
        let gptj = layout(RopeStyle::GptJ { rotary_dim: 256 }, 256);
        assert_eq!(path(&gptj, true, 8, 32), Path::Warp);
        assert_eq!(path(&gptj, true, 4, 32), Path::Table);
        assert_eq!(path(&gptj, true, 4, 64), Path::Warp);
        // ChatGLM 2D on 1024: two segments of 256 pairs, 64 items (f16) or 128 (f32) a head.
        let big = layout(RopeStyle::ChatGlm2d, 1024);
        assert_eq!(path(&big, true, 8, 64), Path::Warp);
        assert_eq!(path(&big, true, 8, 32), Path::Table);
        assert_eq!(path(&big, true, 4, 64), Path::Table);
    }
}
