//! SentencePiece BPE (`tokenizer.ggml.model = llama`: Llama 2, Mistral, Phi-3).
//!
//! Spaces become `▁` (and a text gets one in front where the vocabulary asks for a space
//! prefix); the text starts as one symbol per character, and of all neighbouring pairs whose
//! concatenation is a token, the one whose token scores highest (`tokenizer.ggml.scores`)
//! merges first. A character left without a token becomes its UTF-8 bytes' `<0xNN>` tokens, or
//! the unknown token where the vocabulary has no byte tokens.

use std::collections::HashMap;

use super::merge::{Symbol, merge_symbols};
use super::{BYTE, NORMAL, SCORES_KEY, UNKNOWN, USER_DEFINED, Vocabulary, byte_token, flag, token_id};
use crate::gguf::{Array, Metadata};
use crate::model::error::{ModelError, Result};

/// Whether to put a space in front of text where the vocabulary has no spaces-prefix key.
pub(super) const ADD_SPACE_PREFIX_KEY: &str = "tokenizer.ggml.add_space_prefix";
/// The unknown token's id.
const UNKNOWN_ID_KEY: &str = "tokenizer.ggml.unknown_token_id";

/// A score that orders as f32 does (`total_cmp`: scores are finite in practice; NaN last).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Score(f32);

impl Eq for Score {}

impl Ord for Score {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&other.0)
    }
}

impl PartialOrd for Score {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

#[derive(Debug)]
pub(super) struct Spm {
    scores: Vec<f32>,
    /// The tokens text may become (normal and user-defined ones; all without token types):
    /// never a control, byte or unused token, whatever its text.
    plain: Vec<bool>,
    /// The `<0xNN>` token of each byte, where the vocabulary has one.
    byte_ids: [Option<u32>; 256],
    unknown: Option<u32>,
    /// Whether a text that follows the start or a special token gets a space in front.
    pub add_space_prefix: bool,
}

impl Spm {
    /// The scores and byte tokens of `metadata`'s vocabulary.
    pub fn new(metadata: &Metadata, vocab: &Vocabulary<'_>) -> Result<Spm> {
        let tokens = vocab.tokens;
        let bad = |reason: String| ModelError::BadMetadata { key: SCORES_KEY.into(), reason };
        let scores = match metadata.get(SCORES_KEY) {
            None => return Err(ModelError::MissingKey { key: SCORES_KEY.into() }),
            Some(v) => match v.as_array() {
                Some(Array::F32(s)) => s.clone(),
                _ => return Err(bad(format!("not an array of f32: {}", v.preview(4, 40)))),
            },
        };
        if scores.len() != tokens.len() {
            return Err(bad(format!("{} scores for {} tokens", scores.len(), tokens.len())));
        }
        // Without token types every token is NORMAL (`Vocabulary::ty`).
        let ty = |id: usize| vocab.ty(id);
        let plain = (0..tokens.len()).map(|id| matches!(ty(id), NORMAL | USER_DEFINED)).collect();
        let mut byte_ids = [None; 256];
        for (id, text) in tokens.iter().enumerate() {
            // Untyped vocabularies: a byte token by its text alone.
            if let Some(b) = byte_token(text).filter(|_| vocab.types.is_none() || ty(id) == BYTE) {
                byte_ids[b as usize].get_or_insert(id as u32);
            }
        }
        // The file's unknown token, or the first token typed UNKNOWN.
        let unknown = token_id(metadata, UNKNOWN_ID_KEY, tokens.len())?
            .or_else(|| (0..tokens.len()).find(|&id| ty(id) == UNKNOWN).map(|id| id as u32));
        let add_space_prefix = flag(metadata, ADD_SPACE_PREFIX_KEY, true)?;
        Ok(Spm { scores, plain, byte_ids, unknown, add_space_prefix })
    }

    /// The id of `text` if it is a token text may become.
    fn token(&self, ids: &HashMap<String, u32>, text: &str) -> Option<u32> {
        ids.get(text).copied().filter(|&id| self.plain[id as usize])
    }

    /// Appends the tokens of `text` (no special tokens in it) to `out`, with a space in front
    /// when `prefix`.
    pub fn encode(
        &self,
        ids: &HashMap<String, u32>,
        text: &str,
        prefix: bool,
        out: &mut Vec<u32>,
    ) -> Result<()> {
        let mut escaped = String::with_capacity(text.len() + 3);
        if prefix {
            escaped.push('\u{2581}');
        }
        escaped.extend(text.chars().map(|c| if c == ' ' { '\u{2581}' } else { c }));
        let symbols = escaped
            .char_indices()
            .map(|(i, c)| {
                let end = i + c.len_utf8();
                Symbol { start: i, end, id: self.token(ids, &escaped[i..end]) }
            })
            .collect();
        let merged = merge_symbols(symbols, |l, r| {
            let id = self.token(ids, &escaped[l.start..r.end])?;
            Some((Score(self.scores[id as usize]), id))
        });
        for s in merged {
            if let Some(id) = s.id {
                out.push(id);
                continue;
            }
            // A character without a token of its own (merged symbols always are tokens): its
            // bytes' tokens, or one unknown token where a byte has none.
            let c = &escaped[s.start..s.end];
            let bytes: Option<Vec<u32>> = c.bytes().map(|b| self.byte_ids[b as usize]).collect();
            match (bytes, self.unknown) {
                (Some(bytes), _) => out.extend(bytes),
                (None, Some(unknown)) => out.push(unknown),
                (None, None) => {
                    return Err(ModelError::BadInput(format!(
                        "{c:?} has no token, and the vocabulary has neither its byte tokens nor an unknown token"
                    )));
                }
            }
        }
        Ok(())
    }
}
