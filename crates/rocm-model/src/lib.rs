//! Model plumbing for rocmforge: GGUF files and the tensors in them.
//!
//! - [`gguf`]: a hardened reader for GGUF versions 2 and 3 (little-endian), memory-mapped, that
//!   checks every count, length, shape, offset and alignment against the file and its limits
//!   before trusting it, and refuses bad input with an error naming the key or tensor and the
//!   byte offset; and a writer for synthetic models.
//! - [`DeviceTensors`]: lazy upload. Tensors stay in the mapping until first used on a device,
//!   are then uploaded once through the runtime's memory guard, cached, and can be evicted.
//! - [`npy`]: a small `.npy` writer (f32, and i64 for token ids), for the `gguf dump` tool and
//!   `rocm-bench model-run`.
//!
//! ```
//! use rocm_model::{GgmlType, GgufFile, GgufWriter};
//!
//! let mut w = GgufWriter::new();
//! w.add_metadata("general.architecture", "llama")?;
//! w.add_metadata("llama.context_length", 4096u32)?;
//! w.add_quantized("blk.0.ffn_up.weight", GgmlType::Q4_0, &[64, 3], &vec![0.25; 192])?;
//! let file = GgufFile::from_bytes(w.to_bytes())?; // GgufFile::open(path) maps a file
//!
//! let info = file.tensor("blk.0.ffn_up.weight")?;
//! assert_eq!((info.dims(), info.n_bytes()), (&[64, 3][..], 6 * 18));
//! assert_eq!(file.metadata().get_u64("llama.context_length"), Some(4096));
//! assert_eq!(file.to_f32("blk.0.ffn_up.weight")?.len(), 192);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! On a GPU: `DeviceTensors::new(Arc::new(file), stream).get_or_upload(name)` gives the
//! tensor's bytes in device memory, uploaded on first use. `docs/gguf.md` describes the format
//! facts this relies on, the reader's limits and why, and the upload design. The
//! `gguf` binary (`cargo run -p rocm-model --bin gguf -- inspect FILE`) lists a file and dumps
//! tensors to `.npy`.

pub mod gguf;
pub mod kv_cache;
mod lazy;
pub mod model;
pub mod npy;
pub mod position;

pub use gguf::{
    Array, GgmlType, GgufError, GgufFile, GgufWriter, Metadata, TensorInfo, Value, ValueType, WriteError,
};
pub use lazy::DeviceTensors;
