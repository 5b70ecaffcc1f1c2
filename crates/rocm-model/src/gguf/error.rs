//! Errors of the GGUF reader, the tensor accessors and the writer.
//!
//! Every refusal of a file says where: which metadata key or tensor, and at which byte of the
//! file the offending field starts. The reader never panics on any input.

use std::path::PathBuf;

use rocm_kernels::quant::QuantError;
use rocm_runtime::Bytes;

use super::types::GgmlType;
use super::value::ValueType;

/// Why a GGUF file could not be read, or a tensor of it not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GgufError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },

    /// The path names a directory, a device, a pipe or a socket: mapping or reading it fails
    /// with an error (`No such device`) that does not say so.
    #[error("{path}: is a {kind}, not a GGUF file")]
    NotAFile { path: PathBuf, kind: &'static str },

    #[error("not a GGUF file: it starts with {found:02x?}, not \"GGUF\"")]
    BadMagic { found: Vec<u8> },

    #[error(
        "big-endian GGUF file (the version field reads {raw:#010x}, version {swapped} byte-swapped): only little-endian files are supported"
    )]
    BigEndian { raw: u32, swapped: u32 },

    #[error("GGUF version {version} is not supported (versions 2 and 3 are)")]
    UnsupportedVersion { version: u32 },

    /// A field runs past the end of the file.
    #[error("truncated file: {context} needs {needed} bytes at byte {offset}, only {available} remain")]
    Truncated { context: String, offset: u64, needed: u64, available: u64 },

    /// A header count is more than the limit, or than the rest of the file could hold.
    #[error("header at byte {offset}: {count} {what} {reason}")]
    CountTooLarge { what: &'static str, count: u64, offset: u64, reason: String },

    #[error("{context} at byte {offset}: string of {len} bytes exceeds the limit of {max}")]
    StringTooLong { context: String, offset: u64, len: u64, max: u64 },

    #[error("{context} at byte {offset}: string is not valid UTF-8")]
    InvalidUtf8 { context: String, offset: u64 },

    #[error("{context} at byte {offset}: unknown metadata value type {type_id}")]
    UnknownValueType { context: String, offset: u64, type_id: u32 },

    #[error("{context} at byte {offset}: bool byte is {value}, not 0 or 1")]
    InvalidBool { context: String, offset: u64, value: u8 },

    #[error("{context} at byte {offset}: array of {len} elements exceeds the limit of {max}")]
    ArrayTooLong { context: String, offset: u64, len: u64, max: u64 },

    #[error("{context} at byte {offset}: arrays nested more than {max} levels deep")]
    NestingTooDeep { context: String, offset: u64, max: usize },

    #[error("metadata key `{key}` appears twice (again at byte {offset})")]
    DuplicateKey { key: String, offset: u64 },

    #[error("metadata key `general.alignment` is of type {found}, expected uint32")]
    AlignmentType { found: ValueType },

    #[error("metadata key `general.alignment` = {value}: {reason}")]
    InvalidAlignment { value: u64, reason: &'static str },

    #[error("tensor `{tensor}` at byte {offset}: {n_dims} dimensions, at most {max} allowed")]
    TooManyDims { tensor: String, offset: u64, n_dims: u32, max: usize },

    #[error("tensor `{tensor}` at byte {offset}: shape {dims:?} {reason}")]
    BadShape { tensor: String, offset: u64, dims: Vec<u64>, reason: String },

    #[error("tensor `{tensor}` at byte {offset}: unknown ggml type {type_id}")]
    UnknownTensorType { tensor: String, offset: u64, type_id: u32 },

    #[error(
        "tensor `{tensor}` at byte {offset}: ggml type {type_id} ({name}) was removed from GGUF; its layout is undefined"
    )]
    RemovedTensorType { tensor: String, offset: u64, type_id: u32, name: &'static str },

    #[error(
        "tensor `{tensor}`: data offset {data_offset} is not a multiple of the alignment {alignment} (tensor info at byte {offset})"
    )]
    MisalignedTensor { tensor: String, offset: u64, data_offset: u64, alignment: u32 },

    #[error(
        "tensor `{tensor}`: its {size} bytes at data offset {data_offset} (file byte {start}) run past the end of the {file_len}-byte file"
    )]
    TensorOutOfBounds { tensor: String, data_offset: u64, start: u64, size: u64, file_len: u64 },

    #[error(
        "tensors `{first}` (data bytes {first_start}..{first_end}) and `{second}` (from {second_start}) overlap"
    )]
    OverlappingTensors { first: String, first_start: u64, first_end: u64, second: String, second_start: u64 },

    #[error("tensor name `{name}` appears twice (again at byte {offset})")]
    DuplicateTensor { name: String, offset: u64 },

    #[error("no tensor named `{name}`")]
    NoSuchTensor { name: String },

    #[error("tensor `{tensor}`: unsupported type {type_id} ({type_name}) for {operation}")]
    UnsupportedType { tensor: String, type_id: u32, type_name: &'static str, operation: &'static str },

    #[error("tensor `{tensor}`: row {row} asked for, it has {rows} rows of {width}")]
    RowOutOfRange { tensor: String, row: u64, rows: u64, width: u64 },

    #[error("tensor `{tensor}`: a row has {width} values, the buffer given holds {len}")]
    RowBuffer { tensor: String, width: u64, len: usize },

    #[error("tensor `{tensor}`: decoding {ty} failed: {source}")]
    Decode { tensor: String, ty: GgmlType, source: QuantError },

    #[error("tensor `{tensor}` ({bytes} bytes): {source}")]
    Device { tensor: String, bytes: u64, source: Box<rocm_runtime::Error> },

    #[error(
        "the {tensors} tensor(s) not yet on the device take {}, more than the memory guard has left: budget {}, in use {}",
        Bytes(*needed), Bytes(*budget), Bytes(*in_use)
    )]
    ModelOverBudget { tensors: usize, needed: u64, budget: u64, in_use: u64 },

    #[error("tensor `{tensor}` ({bytes} bytes) does not fit this machine's address space")]
    TooLargeForHost { tensor: String, bytes: u64 },

    /// Host memory for a tensor's values could not be reserved (the count comes from the file;
    /// the allocation is fallible, so this is an error, not an abort).
    #[error(
        "tensor `{tensor}`: its {elements} elements as {element} take {}, more host memory than could be allocated",
        Bytes(*bytes)
    )]
    HostAllocation {
        tensor: String,
        elements: u64,
        element: &'static str,
        /// `elements` times the element's size, saturating at `u64::MAX`.
        bytes: u64,
        source: std::collections::TryReserveError,
    },
}

impl GgufError {
    /// The runtime's memory-guard refusal inside, if this is one.
    pub fn over_budget(&self) -> Option<&rocm_runtime::OverBudget> {
        match self {
            GgufError::Device { source, .. } => match source.as_ref() {
                rocm_runtime::Error::OverBudget(o) => Some(o),
                _ => None,
            },
            _ => None,
        }
    }
}

/// Why the writer refused a value or tensor.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("metadata key `{key}` added twice")]
    DuplicateKey { key: String },
    #[error("tensor `{name}` added twice")]
    DuplicateTensor { name: String },
    #[error("{what} `{name}` is {len} bytes long, the limit is {max}")]
    NameTooLong { what: &'static str, name: String, len: usize, max: u64 },
    #[error("metadata key `{key}`: {reason}")]
    BadValue { key: String, reason: String },
    #[error("GGUF version {version} cannot be written (2 and 3 can)")]
    Version { version: u32 },
    #[error("tensor `{name}`: {reason}")]
    BadTensor { name: String, reason: String },
    #[error("tensor `{name}`: {source}")]
    Quantize { name: String, source: QuantError },
    #[error("tensor `{name}`: copying its {} into memory failed: could not allocate", Bytes(*bytes))]
    HostAllocation { name: String, bytes: u64, source: std::collections::TryReserveError },
}

pub type Result<T, E = GgufError> = std::result::Result<T, E>;
