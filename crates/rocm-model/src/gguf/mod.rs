//! GGUF: ggml's single-file model format, read (memory-mapped, hardened) and written.
//!
//! Layout of a (little-endian, version 2 or 3) file, every integer little-endian:
//!
//! ```text
//! "GGUF"  u32 version  u64 tensor_count  u64 metadata_count
//! metadata_count x { string key, u32 value_type, value }
//! tensor_count   x { string name, u32 n_dims, u64 dims[n_dims], u32 ggml_type, u64 offset }
//! zero padding to `general.alignment` (default 32)
//! data section: each tensor at `data_start + offset`, offsets multiples of the alignment
//! ```
//!
//! A string is a u64 byte length and UTF-8 bytes (no terminator); an array is a u32 element
//! type, a u64 length and the elements (arrays may hold arrays). `dims[0]` is the
//! fastest-varying dimension. `docs/gguf.md` states the facts relied on and the limits.

mod dequant;
pub(crate) use dequant::host_vec;
mod error;
mod file;
mod header;
pub mod limits;
mod metadata;
mod reader;
mod tensor;
mod types;
mod value;
mod writer;

pub use error::{GgufError, Result, WriteError};
pub use file::GgufFile;
pub use header::{HEADER_BYTES, Header, MAGIC, SUPPORTED_VERSIONS};
pub use metadata::Metadata;
pub use reader::ALIGNMENT_KEY;
pub use tensor::TensorInfo;
pub use types::{GgmlType, TypeId};
pub use value::{Array, Value, ValueType};
pub use writer::GgufWriter;

#[cfg(test)]
mod tests;
