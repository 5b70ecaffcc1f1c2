//! Everything a model can refuse, each naming the key, tensor or input involved.

use crate::gguf::{GgufError, WriteError};
use crate::kv_cache::{KvCacheDeviceError, KvCacheError};
use crate::position::PositionError;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("GGUF metadata key `{key}` is missing")]
    MissingKey { key: String },

    #[error("GGUF metadata key `{key}`: {reason}")]
    BadMetadata { key: String, reason: String },

    #[error("architecture `{0}` is not supported (supported: llama, qwen2, glm4)")]
    UnsupportedArchitecture(String),

    #[error("tensor `{name}` is missing from the model")]
    MissingTensor { name: String },

    #[error("tensor `{name}`: {reason}")]
    BadTensor { name: String, reason: String },

    /// A forward pass given inputs that do not fit the model, the cache or each other.
    #[error("invalid input: {0}")]
    BadInput(String),

    #[error(transparent)]
    Gguf(#[from] GgufError),

    #[error(transparent)]
    Write(#[from] WriteError),

    #[error(transparent)]
    KvCache(#[from] KvCacheError),

    #[error(transparent)]
    KvCacheDevice(#[from] KvCacheDeviceError),

    #[error(transparent)]
    Position(#[from] PositionError),

    #[error(transparent)]
    Kernel(#[from] rocm_kernels::KernelError),

    #[error(transparent)]
    Runtime(#[from] rocm_runtime::Error),
}

pub type Result<T, E = ModelError> = std::result::Result<T, E>;
