//! Position ids for the GLM family, and the RoPE configurations that consume them.
//!
//! **ChatGLM-6B** (the first ChatGLM, `position_encoding_2d = true`) gives every token two ids
//! and rotates each half of a head by one of them ([`RopeStyle::ChatGlm2d`]). A prompt is the
//! text tokens, then `[gMASK]` (or `[MASK]`), then `<sop>` (the `bos_token_id`). With
//! `context_length` the index of `<sop>` and `mask_position` the index of the mask token, token
//! `i` of the sequence has
//!
//! ```text
//! i <  context_length:  position_id = i,              block_position_id = 0
//! i >= context_length:  position_id = mask_position,  block_position_id = i - context_length + 1
//! ```
//!
//! so `<sop>` itself has block position 1 and the tokens generated after it 2, 3, ... This is
//! how `get_position_ids` (prefill) and `prepare_inputs_for_generation` (one token a step:
//! `[mask_position, seq_length - context_length]` with `seq_length` counting the new token) in
//! `modeling_chatglm.py` of THUDM/chatglm-6b compute them; the tokenizer's
//! `build_inputs_with_special_tokens` appends `[gMASK, <sop>]` to the prompt, and the mask token
//! is the first `[gMASK]` if there is one, else the first `[MASK]`. [`ChatGlmPositions`]
//! reproduces that.
//!
//! **GLM-4, ChatGLM2 and ChatGLM3** use plain positions `0, 1, 2, ...` ([`plain_positions`])
//! with interleaved rotary pairs over the first half of each head and the base multiplied by the
//! config's `rope_ratio` (`base = 10000 * rope_ratio` in their `RotaryEmbedding`): [`glm4_rope`].
//!
//! `docs/positions.md` has worked examples and the sources.

use rocm_kernels::rope::{MAX_PAIRS, Rope, RopeStyle};

/// Why position ids (or a RoPE configuration) could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PositionError {
    #[error("the prompt has no [gMASK] or [MASK] token")]
    NoMaskToken,

    #[error("the prompt has no <sop> token (ChatGLM-6B prompts end with [gMASK] <sop>)")]
    NoSopToken,

    /// The mask token must be part of the context (the tokens before `<sop>`).
    #[error("the mask token at index {mask_position} is not before <sop> at index {context_length}")]
    MaskOutsideContext { mask_position: usize, context_length: usize },

    /// Kernels take positions as `i32`.
    #[error("token index {index} gives a position past i32::MAX")]
    TooLong { index: usize },

    #[error("invalid GLM RoPE: {0}")]
    InvalidRope(String),
}

pub type Result<T, E = PositionError> = std::result::Result<T, E>;

/// The token ids ChatGLM-6B's positions depend on (from the model's config).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChatGlmSpecialTokens {
    /// `mask_token_id`: `[MASK]`, a masked span inside the text.
    pub mask: u32,
    /// `gmask_token_id`: `[gMASK]`, generation at the end.
    pub gmask: u32,
    /// `bos_token_id`: `<sop>`, the start of the generated part.
    pub sop: u32,
}

impl ChatGlmSpecialTokens {
    /// The ids in THUDM/chatglm-6b's `config.json` (`mask_token_id` 130000, `gmask_token_id`
    /// 130001, `bos_token_id` 130004). Early revisions of that model used other ids: take them
    /// from the model's own config where it has them.
    pub const CHATGLM_6B: ChatGlmSpecialTokens =
        ChatGlmSpecialTokens { mask: 130_000, gmask: 130_001, sop: 130_004 };
}

/// Two ids a token, for [`RopeStyle::ChatGlm2d`]: `positions` turn the first half of each
/// head, `block_positions` the second.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Positions2d {
    pub positions: Vec<i32>,
    pub block_positions: Vec<i32>,
}

impl Positions2d {
    pub fn len(&self) -> usize {
        self.positions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.positions.is_empty()
    }
}

/// ChatGLM-6B's 2D positions of one sequence (see the module docs for the rule and its source).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChatGlmPositions {
    context_length: usize,
    mask_position: usize,
}

impl ChatGlmPositions {
    /// Positions for a sequence whose first `context_length` tokens are the context (the
    /// `<sop>` token, if the prompt has one, is at index `context_length`) and whose mask token
    /// is at `mask_position`, which must be inside the context.
    pub fn new(context_length: usize, mask_position: usize) -> Result<Self> {
        if mask_position >= context_length {
            return Err(PositionError::MaskOutsideContext { mask_position, context_length });
        }
        i32::try_from(context_length).map_err(|_| PositionError::TooLong { index: context_length })?;
        Ok(ChatGlmPositions { context_length, mask_position })
    }

    /// Finds the mask token (the first `[gMASK]`, else the first `[MASK]`) and `<sop>` (the
    /// first one) in a tokenised prompt, as ChatGLM-6B's modeling code does.
    pub fn from_prompt(tokens: &[u32], special: ChatGlmSpecialTokens) -> Result<Self> {
        let first = |id: u32| tokens.iter().position(|&t| t == id);
        let mask_position =
            first(special.gmask).or_else(|| first(special.mask)).ok_or(PositionError::NoMaskToken)?;
        let context_length = first(special.sop).ok_or(PositionError::NoSopToken)?;
        ChatGlmPositions::new(context_length, mask_position)
    }

    pub fn context_length(&self) -> usize {
        self.context_length
    }

    pub fn mask_position(&self) -> usize {
        self.mask_position
    }

    /// `(position_id, block_position_id)` of the token at `index` in the sequence.
    pub fn at(&self, index: usize) -> Result<(i32, i32)> {
        let too_long = || PositionError::TooLong { index };
        if index < self.context_length {
            // `new` checked that the context length fits i32.
            return Ok((index as i32, 0));
        }
        let block = (index - self.context_length).checked_add(1).ok_or_else(too_long)?;
        let block = i32::try_from(block).map_err(|_| too_long())?;
        i32::try_from(index).map_err(|_| too_long())?;
        Ok((self.mask_position as i32, block))
    }

    /// The ids of tokens `start .. start + count`: a whole prompt, a chunk of it, or several
    /// decode steps.
    pub fn range(&self, start: usize, count: usize) -> Result<Positions2d> {
        if count == 0 {
            return Ok(Positions2d::default());
        }
        let last = start.checked_add(count - 1).ok_or(PositionError::TooLong { index: usize::MAX })?;
        // Both ids grow with the index: if the last fits, all do (checked before allocating).
        self.at(last)?;
        let mut ids =
            Positions2d { positions: Vec::with_capacity(count), block_positions: Vec::with_capacity(count) };
        for index in start..=last {
            let (p, b) = self.at(index)?;
            ids.positions.push(p);
            ids.block_positions.push(b);
        }
        Ok(ids)
    }

    /// The ids of a prompt of `prompt_len` tokens (prefill): tokens `0 .. prompt_len`.
    pub fn prefill(&self, prompt_len: usize) -> Result<Positions2d> {
        self.range(0, prompt_len)
    }

    /// The ids of generated token `step` (0: the first token sampled after the prompt), which
    /// sits at index `prompt_len + step` and is fed to the model in the following decode step.
    pub fn decode(&self, prompt_len: usize, step: usize) -> Result<(i32, i32)> {
        let index = prompt_len.checked_add(step).ok_or(PositionError::TooLong { index: usize::MAX })?;
        self.at(index)
    }
}

/// Plain positions `start, start + 1, ..., start + count - 1` (GLM-4, ChatGLM2/3, and any
/// model with ordinary RoPE): a prompt is `plain_positions(0, len)`, decode step of a sequence
/// holding `n` tokens `plain_positions(n, 1)`.
pub fn plain_positions(start: usize, count: usize) -> Result<Vec<i32>> {
    if count == 0 {
        return Ok(Vec::new());
    }
    let last = start.checked_add(count - 1).ok_or(PositionError::TooLong { index: usize::MAX })?;
    let last = i32::try_from(last).map_err(|_| PositionError::TooLong { index: last })?;
    // `start <= last <= i32::MAX`.
    Ok((start as i32..=last).collect())
}

/// Checks what the RoPE kernel needs of a GLM head size: a multiple of 4 (two halves of whole
/// pairs) with at most `MAX_PAIRS` pairs in a rotated half.
fn check_head_dim(head_dim: usize) -> Result<()> {
    if head_dim == 0 || !head_dim.is_multiple_of(4) || head_dim / 4 > MAX_PAIRS {
        return Err(PositionError::InvalidRope(format!(
            "head_dim must be a positive multiple of 4 up to {}, got {head_dim}",
            4 * MAX_PAIRS
        )));
    }
    Ok(())
}

fn check_positive(name: &str, value: f32) -> Result<()> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        // `{:?}`: an exponent for large values (3.4028235e38), not 39 digits.
        Err(PositionError::InvalidRope(format!("{name} must be positive and finite, got {value:?}")))
    }
}

/// The RoPE of GLM-4 and ChatGLM2/3: interleaved pairs `(2i, 2i + 1)` over the first
/// `head_dim / 2` elements of each head (the rest pass through), frequency base
/// `rope_theta * rope_ratio` (`rope_theta` is 10000 in those models' code; `rope_ratio` is the
/// config's, 1 where it has none). Takes [`plain_positions`].
pub fn glm4_rope(head_dim: usize, rope_theta: f32, rope_ratio: f32) -> Result<Rope> {
    check_head_dim(head_dim)?;
    check_positive("rope_theta", rope_theta)?;
    check_positive("rope_ratio", rope_ratio)?;
    Ok(Rope::new(RopeStyle::Glm { rope_ratio }, head_dim).with_theta_base(rope_theta))
}

/// The RoPE of ChatGLM-6B: each half of a head rotated NeoX-style (pairs `(i, i + d/2)`,
/// `d = head_dim / 2`) with base 10000, the first half by the position ids, the second by the
/// block position ids ([`ChatGlmPositions`]).
pub fn chatglm_rope(head_dim: usize) -> Result<Rope> {
    check_head_dim(head_dim)?;
    Ok(Rope::new(RopeStyle::ChatGlm2d, head_dim))
}

#[cfg(test)]
mod tests {
    use rocm_kernels::rope::rope_reference;

    use super::*;

    #[test]
    fn a_gmask_prompt_rotates_sop_and_what_follows_at_the_mask() {
        // "a b c [gMASK] <sop>": context 0..4, mask at 3; then two generated tokens.
        let p = ChatGlmPositions::new(4, 3).unwrap();
        let ids = p.prefill(5).unwrap();
        assert_eq!(ids.positions, [0, 1, 2, 3, 3]);
        assert_eq!(ids.block_positions, [0, 0, 0, 0, 1]);
        assert_eq!(p.decode(5, 0).unwrap(), (3, 2), "the first generated token");
        assert_eq!(p.decode(5, 1).unwrap(), (3, 3));
        // The same ids from the token ids themselves.
        let t = ChatGlmSpecialTokens::CHATGLM_6B;
        let prompt = [5, 6, 7, t.gmask, t.sop];
        assert_eq!(ChatGlmPositions::from_prompt(&prompt, t).unwrap(), p);
        // A prefill of prompt and generated tokens together equals prefill + decode steps.
        let all = p.range(0, 7).unwrap();
        assert_eq!(all.positions, [0, 1, 2, 3, 3, 3, 3]);
        assert_eq!(all.block_positions, [0, 0, 0, 0, 1, 2, 3]);
        assert_eq!(all.len(), 7);
    }

    #[test]
    fn a_mask_in_the_middle_keeps_the_context_positions_plain() {
        // "a [MASK] b c <sop>": the mask at 1, context 0..4.
        let t = ChatGlmSpecialTokens { mask: 100, gmask: 101, sop: 104 };
        let p = ChatGlmPositions::from_prompt(&[7, 100, 8, 9, 104], t).unwrap();
        assert_eq!((p.context_length(), p.mask_position()), (4, 1));
        let ids = p.prefill(5).unwrap();
        assert_eq!(ids.positions, [0, 1, 2, 3, 1]);
        assert_eq!(ids.block_positions, [0, 0, 0, 0, 1]);
        assert_eq!(p.decode(5, 2).unwrap(), (1, 4));
        // [gMASK] wins over [MASK] when both are there; the first of each counts.
        let p = ChatGlmPositions::from_prompt(&[100, 101, 101, 104, 104], t).unwrap();
        assert_eq!((p.context_length(), p.mask_position()), (3, 1));
        // A chunk in the middle of a sequence.
        let chunk = p.range(2, 3).unwrap();
        assert_eq!((chunk.positions, chunk.block_positions), (vec![2, 1, 1], vec![0, 1, 2]));
        assert!(p.range(9, 0).unwrap().is_empty());
    }

    #[test]
    fn bad_prompts_are_refused() {
        let t = ChatGlmSpecialTokens { mask: 100, gmask: 101, sop: 104 };
        assert_eq!(ChatGlmPositions::from_prompt(&[1, 2, 104], t), Err(PositionError::NoMaskToken));
        assert_eq!(ChatGlmPositions::from_prompt(&[1, 101], t), Err(PositionError::NoSopToken));
        assert_eq!(
            ChatGlmPositions::from_prompt(&[1, 104, 101], t),
            Err(PositionError::MaskOutsideContext { mask_position: 2, context_length: 1 })
        );
        assert_eq!(
            ChatGlmPositions::new(0, 0),
            Err(PositionError::MaskOutsideContext { mask_position: 0, context_length: 0 })
        );
        let too_long = i32::MAX as usize + 1;
        assert!(matches!(ChatGlmPositions::new(too_long, 0), Err(PositionError::TooLong { .. })));
        let p = ChatGlmPositions::new(2, 1).unwrap();
        assert_eq!(p.at(i32::MAX as usize).unwrap(), (1, i32::MAX - 1));
        assert_eq!(p.at(too_long), Err(PositionError::TooLong { index: too_long }));
        assert!(p.range(usize::MAX, 2).is_err());
        assert!(p.decode(usize::MAX, 1).is_err());
    }

    #[test]
    fn plain_positions_count_from_the_start() {
        assert_eq!(plain_positions(0, 4).unwrap(), [0, 1, 2, 3]);
        assert_eq!(plain_positions(9, 1).unwrap(), [9]);
        assert!(plain_positions(3, 0).unwrap().is_empty());
        assert_eq!(plain_positions(i32::MAX as usize, 1).unwrap(), [i32::MAX]);
        assert!(matches!(plain_positions(i32::MAX as usize, 2), Err(PositionError::TooLong { .. })));
        assert!(plain_positions(usize::MAX, 2).is_err());
    }

    #[test]
    fn glm_rope_configurations() {
        let rope = glm4_rope(128, 10_000.0, 500.0).unwrap();
        assert_eq!(rope.style, RopeStyle::Glm { rope_ratio: 500.0 });
        assert_eq!((rope.head_dim, rope.theta_base, rope.scaling_factor), (128, 10_000.0, 1.0));
        assert_eq!(chatglm_rope(128).unwrap().style, RopeStyle::ChatGlm2d);
        for bad in [0, 6, 4 * MAX_PAIRS + 4] {
            assert!(matches!(glm4_rope(bad, 1e4, 1.0), Err(PositionError::InvalidRope(_))), "{bad}");
            assert!(matches!(chatglm_rope(bad), Err(PositionError::InvalidRope(_))), "{bad}");
        }
        for (theta, ratio) in [(0.0, 1.0), (1e4, -1.0), (f32::NAN, 1.0), (1e4, f32::INFINITY)] {
            let e = glm4_rope(64, theta, ratio).unwrap_err();
            assert!(e.to_string().contains("positive and finite"), "{e}");
        }
        // Large values print with an exponent, not 39 digits.
        let e = glm4_rope(64, -f32::MAX, 1.0).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid GLM RoPE: rope_theta must be positive and finite, got -3.4028235e38"
        );
    }

    fn close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() < 1e-12, "element {i}: got {g}, want {w} (all: {got:?})");
        }
    }

    /// Through the RoPE reference: generated token 0 of a prompt of 4 ("a [gMASK] b <sop>",
    /// context 3, mask at 1) sits at index 4 with ids (1, 2). Head of 8: the first half
    /// [1, 2, 3, 4] turns by position 1 (NeoX pairs (0, 2) and (1, 3), angles 1 * [1, 0.01]);
    /// the second half [5, 6, 7, 8] by block position 2 (angles 2 * [1, 0.01]).
    #[test]
    fn chatglm_ids_rotate_each_half_through_the_reference() {
        let p = ChatGlmPositions::new(3, 1).unwrap();
        let ids = p.range(3, 2).unwrap(); // <sop> (index 3) and the first generated token
        assert_eq!((ids.positions.as_slice(), ids.block_positions.as_slice()), (&[1, 1][..], &[1, 2][..]));
        // <sop> gets equal halves, the generated token [1, ..., 8].
        let x = [1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0];
        let y = rope_reference(
            &chatglm_rope(8).unwrap(),
            &x,
            1,
            None,
            &ids.positions,
            Some(&ids.block_positions),
        );
        let (c1, s1, c01, s01) = (1f64.cos(), 1f64.sin(), 0.01f64.cos(), 0.01f64.sin());
        let (c2, s2, c02, s02) = (2f64.cos(), 2f64.sin(), 0.02f64.cos(), 0.02f64.sin());
        let token1 = [
            1.0 * c1 - 3.0 * s1,   // -1.9841106485555495
            2.0 * c01 - 4.0 * s01, //  1.959900667496664
            3.0 * c1 + 1.0 * s1,   //  2.4623779024123156
            4.0 * c01 + 2.0 * s01, //  4.019799668334994
            5.0 * c2 - 7.0 * s2,   // -2.0807 - 6.3651 = -8.445816170515483
            6.0 * c02 - 8.0 * s02, //  5.9988 - 0.1600 =  5.838810706452802
            7.0 * c2 + 5.0 * s2,   // -2.9130 + 4.5465 =  1.633459278298412
            8.0 * c02 + 6.0 * s02, //  7.9984 + 0.1200 =  8.11839205349262
        ];
        close(&y[8..], &token1);
        close(&y[12..], &[-8.445816170515483, 5.838810706452802, 1.633459278298412, 8.11839205349262]);
        // <sop>: both halves turn by 1 (position 1, block position 1): equal halves stay equal.
        close(&y[4..8], &y[0..4]);
        close(&y[0..4], &token1[0..4]);
    }

    /// GLM-4 with base 100 * rope_ratio 100 = 10000 on a head of 8: interleaved pairs (0, 1)
    /// and (2, 3) by angles p * [1, 0.01]; elements 4..8 pass through. At position 3:
    #[test]
    fn glm4_ids_rotate_the_first_half_interleaved_through_the_reference() {
        let positions = plain_positions(0, 4).unwrap();
        let x: Vec<f32> = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0].repeat(4);
        let y = rope_reference(&glm4_rope(8, 100.0, 100.0).unwrap(), &x, 1, None, &positions, None);
        let (c3, s3, c03, s03) = (3f64.cos(), 3f64.sin(), 0.03f64.cos(), 0.03f64.sin());
        let want = [
            1.0 * c3 - 2.0 * s3,   // -0.98999 - 0.28224 = -1.27223251272018
            2.0 * c3 + 1.0 * s3,   // -1.97998 + 0.14112 = -1.8388649851410237
            3.0 * c03 - 4.0 * s03, //  2.99865 - 0.11998 =  2.87866810043698
            4.0 * c03 + 3.0 * s03, //  3.99820 + 0.08999 =  4.088186635603437
            5.0,
            6.0,
            7.0,
            8.0,
        ];
        close(&y[24..], &want);
        close(&y[24..28], &[-1.27223251272018, -1.8388649851410237, 2.87866810043698, 4.088186635603437]);
        close(&y[..8], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    }
}
