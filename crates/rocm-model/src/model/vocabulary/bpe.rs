//! Byte-level BPE (`tokenizer.ggml.model = gpt2`: Llama 3, Qwen2, GLM-4, GPT-2).
//!
//! Text is cut into words by the file's pre-tokenizer; each word starts as one symbol per byte
//! (the token of that byte's character in GPT-2's table), and neighbours merge by
//! `tokenizer.ggml.merges`, the earliest merge in that list first. Merges never cross words.
//! With `ignore_merges` (Llama 3, GLM-4) a word that is itself a token is that token.

use std::cmp::Reverse;
use std::collections::HashMap;

use super::merge::{Symbol, merge_symbols};
use super::pretokenize::PreTokenizer;
use super::{MERGES_KEY, PRE_KEY, char_of_byte, required_str};
use crate::gguf::{Array, Metadata};
use crate::model::error::{ModelError, Result};

#[derive(Debug)]
pub(super) struct Bpe {
    pre: PreTokenizer,
    /// (left, right) tokens to (rank, merged token); the lower rank merges first.
    merges: HashMap<(u32, u32), (u32, u32)>,
    /// The token of each byte's character; `None` where the vocabulary has none.
    byte_ids: [Option<u32>; 256],
}

impl Bpe {
    /// The merges and pre-tokenizer of `metadata`, against the vocabulary `ids` (token text to
    /// id). Refuses a missing or unknown pre-tokenizer and merges that are not two tokens
    /// separated by one space whose concatenation is a token.
    pub fn new(metadata: &Metadata, ids: &HashMap<String, u32>) -> Result<Bpe> {
        let pre = PreTokenizer::named(required_str(metadata, PRE_KEY)?)?;
        let bad = |reason: String| ModelError::BadMetadata { key: MERGES_KEY.into(), reason };
        let list = match metadata.get(MERGES_KEY) {
            None => return Err(ModelError::MissingKey { key: MERGES_KEY.into() }),
            Some(v) => v
                .as_array()
                .and_then(Array::as_strings)
                .ok_or_else(|| bad(format!("not an array of strings: {}", v.preview(4, 40))))?,
        };
        let mut merges = HashMap::with_capacity(list.len());
        for (rank, merge) in list.iter().enumerate() {
            let parts = merge.split_once(' ').filter(|(_, right)| !right.contains(' '));
            let (left, right) =
                parts.ok_or_else(|| bad(format!("merge {rank} {merge:?} is not two tokens and a space")))?;
            let token = |text: &str| {
                ids.get(text)
                    .copied()
                    .ok_or_else(|| bad(format!("merge {rank} {merge:?}: {text:?} is not a token")))
            };
            let key = (token(left)?, token(right)?);
            let merged = token(&format!("{left}{right}"))?;
            merges.entry(key).or_insert((rank as u32, merged));
        }
        let mut byte_ids = [None; 256];
        for (b, id) in byte_ids.iter_mut().enumerate() {
            *id = ids.get(char_of_byte(b as u8).encode_utf8(&mut [0; 4]) as &str).copied();
        }
        Ok(Bpe { pre, merges, byte_ids })
    }

    /// Whether the beginning-of-sequence token goes in front where the file does not say.
    pub fn bos_by_default(&self) -> bool {
        self.pre.bos_by_default
    }

    /// The words of `text`, cut by the pre-tokenizer.
    pub fn words<'t>(&self, text: &'t str) -> Vec<&'t str> {
        self.pre.words(text)
    }

    /// Appends the tokens of `text` (no special tokens in it) to `out`.
    pub fn encode(&self, ids: &HashMap<String, u32>, text: &str, out: &mut Vec<u32>) -> Result<()> {
        let mut chars = String::new(); // a word in GPT-2's characters, one buffer for all
        for word in self.pre.words(text) {
            if self.pre.ignore_merges {
                chars.clear();
                chars.extend(word.bytes().map(char_of_byte));
                if let Some(&id) = ids.get(&chars) {
                    out.push(id);
                    continue;
                }
            }
            let symbols = word
                .bytes()
                .enumerate()
                .map(|(i, b)| match self.byte_ids[b as usize] {
                    Some(id) => Ok(Symbol { start: i, end: i + 1, id: Some(id) }),
                    None => Err(ModelError::BadInput(format!(
                        "the vocabulary has no token for byte 0x{b:02X} (GPT-2's character {:?})",
                        char_of_byte(b)
                    ))),
                })
                .collect::<Result<Vec<_>>>()?;
            let merged = merge_symbols(symbols, |l, r| {
                let &(rank, id) = self.merges.get(&(l.id?, r.id?))?;
                Some((Reverse(rank), id))
            });
            out.extend(merged.iter().map(|s| s.id.expect("every symbol is a token")));
        }
        Ok(())
    }
}
