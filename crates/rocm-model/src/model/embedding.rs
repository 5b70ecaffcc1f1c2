//! The vocabulary's two ends: the token embedding (`token_embd.weight`, ids to hidden vectors)
//! and the output head (`output.weight`, or the embedding itself when the model ties them).
//!
//! Both are `[vocab, hidden]` matrices (GGUF dims `[hidden, vocab]`), in any type the loader
//! reads. A lookup decodes the tokens' rows on the CPU from the mapped file (exact, as every
//! supported type decodes exactly to f32), rounds them once to `T` and uploads them: one row a
//! token, a few KiB, where a gather kernel would save nothing a decode step can measure. The head
//! is a [`Linear`] like the blocks' projections, kept as stored on the device.

use std::sync::Arc;

use rocm_kernels::Dtype;
use rocm_kernels::gemm::GemmElement;
use rocm_runtime::{DeviceBuffer, Stream};

use super::config::ModelConfig;
use super::error::{ModelError, Result};
use super::linear::Linear;
use super::vocabulary::{TOKENS_KEY, vocabulary_tokens};
use super::weights::{checked_info, load_linear};
use crate::gguf::{GgufFile, host_vec};
use crate::lazy::DeviceTensors;

/// llama.cpp's name of the token embedding.
pub const TOKEN_EMBEDDING: &str = "token_embd.weight";
/// llama.cpp's name of the output head (absent when the model ties it to the embedding).
pub const OUTPUT_HEAD: &str = "output.weight";

/// The token embedding: rows of the mapped file, decoded on demand.
#[derive(Debug)]
pub(crate) struct TokenEmbedding {
    file: Arc<GgufFile>,
    hidden: usize,
    vocab: usize,
}

impl TokenEmbedding {
    /// The embedding of `file`, if it has one, after checking its shape and type and that the
    /// vocabulary the metadata states (`<arch>.vocab_size`, `tokenizer.ggml.tokens`) is its row
    /// count.
    pub fn load(file: &Arc<GgufFile>, config: &ModelConfig) -> Result<Option<TokenEmbedding>> {
        let Ok(info) = file.tensor(TOKEN_EMBEDDING) else {
            return Ok(None);
        };
        let dims = info.dims().to_vec();
        let vocab = match dims[..] {
            [hidden, vocab] if hidden == config.hidden as u64 && vocab > 0 => vocab,
            _ => {
                return Err(ModelError::BadTensor {
                    name: TOKEN_EMBEDDING.into(),
                    reason: format!(
                        "GGUF dims {dims:?}, the config needs [{}, vocab] with vocab >= 1",
                        config.hidden
                    ),
                });
            }
        };
        checked_info(file, TOKEN_EMBEDDING, &dims)?;
        let vocab = usize::try_from(vocab).map_err(|_| ModelError::BadTensor {
            name: TOKEN_EMBEDDING.into(),
            reason: "too many rows".into(),
        })?;
        check_stated_vocab(file, config, vocab)?;
        Ok(Some(TokenEmbedding { file: file.clone(), hidden: config.hidden, vocab }))
    }

    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// Refuses the first id past the vocabulary, naming it and its place.
    pub fn check_ids(&self, tokens: &[u32]) -> Result<()> {
        match tokens.iter().enumerate().find(|&(_, &t)| t as usize >= self.vocab) {
            Some((i, &t)) => Err(ModelError::BadInput(format!(
                "token id {t} (at {i}) is out of range: the vocabulary has {} tokens (ids 0..={})",
                self.vocab,
                self.vocab - 1
            ))),
            None => Ok(()),
        }
    }

    /// The rows of `tokens` in `T`, `[tokens.len(), hidden]`, on `stream`. An id past the
    /// vocabulary is refused (naming it and its place) before anything is decoded.
    pub fn lookup<T: Dtype>(&self, tokens: &[u32], stream: &Stream) -> Result<DeviceBuffer<T>> {
        Ok(stream.upload(&self.rows::<T>(tokens)?)?)
    }

    /// The rows of `tokens` in `T` on the host, `[tokens.len(), hidden]` ([`TokenEmbedding::lookup`]
    /// before the upload).
    pub fn rows<T: Dtype>(&self, tokens: &[u32]) -> Result<Vec<T>> {
        self.check_ids(tokens)?;
        let n = tokens.len() as u64 * self.hidden as u64;
        let mut values = host_vec::<T>(TOKEN_EMBEDDING, n, T::NAME)?;
        let mut row = vec![0f32; self.hidden];
        for &t in tokens {
            self.file.row_to_f32(TOKEN_EMBEDDING, t as u64, &mut row)?;
            values.extend(row.iter().map(|&v| T::from_f32(v)));
        }
        Ok(values)
    }
}

/// Refuses a vocabulary size stated in the metadata that differs from the embedding's rows:
/// token ids from the tokenizer would then index the wrong rows, or past them.
fn check_stated_vocab(file: &GgufFile, config: &ModelConfig, vocab: usize) -> Result<()> {
    let metadata = file.metadata();
    let key = format!("{}.vocab_size", config.architecture.name());
    if let Some(value) = metadata.get(&key) {
        let stated = value.as_u64();
        if stated != Some(vocab as u64) {
            return Err(ModelError::BadMetadata {
                key,
                reason: format!(
                    "{} does not match the {vocab} rows of {TOKEN_EMBEDDING}",
                    value.preview(4, 40)
                ),
            });
        }
    }
    let stated = vocabulary_tokens(metadata)?.map(<[String]>::len);
    if let Some(n) = stated.filter(|&n| n != vocab) {
        return Err(ModelError::BadMetadata {
            key: TOKENS_KEY.into(),
            reason: format!("{n} tokens, but {TOKEN_EMBEDDING} has {vocab} rows"),
        });
    }
    Ok(())
}

/// The output head: `output.weight`, or the token embedding when the model ties them (no
/// `output.weight`). `None` for a model without either.
pub(crate) fn load_head<T: GemmElement>(
    tensors: &DeviceTensors,
    config: &ModelConfig,
    embedding: Option<&TokenEmbedding>,
) -> Result<Option<Linear<T>>> {
    let file = tensors.file();
    let name = if file.tensor(OUTPUT_HEAD).is_ok() {
        OUTPUT_HEAD
    } else if embedding.is_some() {
        TOKEN_EMBEDDING
    } else {
        return Ok(None);
    };
    let vocab = match *file.tensor(name)?.dims() {
        [_, vocab] => vocab as usize,
        ref dims => {
            return Err(ModelError::BadTensor {
                name: name.into(),
                reason: format!("GGUF dims {dims:?}, the config needs [{}, vocab]", config.hidden),
            });
        }
    };
    if let Some(e) = embedding.filter(|e| e.vocab() != vocab) {
        return Err(ModelError::BadTensor {
            name: name.into(),
            reason: format!("{vocab} rows, but {TOKEN_EMBEDDING} has {}", e.vocab()),
        });
    }
    checked_info(file, name, &[config.hidden as u64, vocab as u64])?;
    Ok(Some(load_linear(tensors, name, vocab, config.hidden)?))
}
