//! [`GgufFile`]: a parsed GGUF file whose tensor data stays in the mapping until used.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::error::{GgufError, Result};
use super::metadata::Metadata;
use super::reader::{Layout, parse};
use super::tensor::TensorInfo;
use super::types::GgmlType;

/// Where the file's bytes live.
enum Storage {
    /// Memory-mapped read-only: pages are read from disk only when a tensor is touched.
    Mapped(memmap2::Mmap),
    /// Held in memory (files made by the writer in tests and tools, fuzz inputs).
    Owned(Vec<u8>),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Mapped(m) => m,
            Storage::Owned(v) => v,
        }
    }
}

/// A GGUF file (version 2 or 3, little-endian), parsed and checked.
///
/// Opening reads only the header, the metadata and the tensor infos; tensor data is reached
/// through the mapping when asked for ([`GgufFile::bytes`], [`GgufFile::to_f32`]) and is
/// uploaded to a GPU by [`crate::DeviceTensors`]. Every tensor was checked at open time to lie
/// inside the file, aligned and apart from the others, so the accessors cannot fail on bounds.
pub struct GgufFile {
    storage: Storage,
    path: Option<PathBuf>,
    layout: Layout,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("bytes", &self.len())
            .field("version", &self.version())
            .field("metadata", &self.layout.metadata.len())
            .field("tensors", &self.layout.tensors.len())
            .finish()
    }
}

/// [`GgufError::NotAFile`] unless `ty` (the type of the file at `path`) is a regular file.
fn not_a_file(path: &Path, ty: &std::fs::FileType) -> Result<()> {
    if ty.is_file() {
        return Ok(());
    }
    let kind = if ty.is_dir() { "directory" } else { special_file_kind(ty) };
    Err(GgufError::NotAFile { path: path.to_path_buf(), kind })
}

#[cfg(unix)]
fn special_file_kind(ty: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if ty.is_block_device() {
        "block device"
    } else if ty.is_char_device() {
        "character device"
    } else if ty.is_fifo() {
        "named pipe"
    } else if ty.is_socket() {
        "socket"
    } else {
        "special file"
    }
}

#[cfg(not(unix))]
fn special_file_kind(_: &std::fs::FileType) -> &'static str {
    "special file"
}

impl GgufFile {
    /// Memory-maps and parses the file at `path`, which must be a regular file (a directory,
    /// device, pipe or socket is [`GgufError::NotAFile`]).
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref();
        let io = |source| GgufError::Io { path: path.to_path_buf(), source };
        // Checked before opening: opening a FIFO would block until a writer comes, and a
        // directory opens fine and then fails to map with `No such device`.
        not_a_file(path, &std::fs::metadata(path).map_err(io)?.file_type())?;
        let file = File::open(path).map_err(io)?;
        let meta = file.metadata().map_err(io)?;
        // Again on what was opened, in case the path was replaced in between.
        not_a_file(path, &meta.file_type())?;
        let len = meta.len();
        let storage = if len == 0 {
            // Some platforms refuse to map an empty file; it is refused below either way.
            Storage::Owned(Vec::new())
        } else {
            // SAFETY: the map is read-only and lives as long as the returned value. Another
            // process truncating or rewriting the file while it is mapped would change or
            // fault the mapped bytes; that is the contract of every memory-mapped model loader
            // (llama.cpp's included) and is documented in docs/gguf.md. All bounds were checked
            // against the length at mapping time, so no Rust access goes past the mapping.
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
            Storage::Mapped(map)
        };
        let layout = parse(storage.bytes())?;
        tracing::debug!(
            path = %path.display(),
            bytes = len,
            tensors = layout.tensors.len(),
            metadata = layout.metadata.len(),
            "opened GGUF"
        );
        Ok(GgufFile { storage, path: Some(path.to_path_buf()), layout })
    }

    /// Parses a file held in memory (what [`crate::GgufWriter::to_bytes`] returns, say).
    pub fn from_bytes(bytes: Vec<u8>) -> Result<GgufFile> {
        let layout = parse(&bytes)?;
        Ok(GgufFile { storage: Storage::Owned(bytes), path: None, layout })
    }

    /// Parses and checks `bytes` without keeping them: what the fuzzer drives.
    pub fn check(bytes: &[u8]) -> Result<()> {
        parse(bytes).map(|_| ())
    }

    /// The path this file was opened from, if it was.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The whole file.
    pub fn as_bytes(&self) -> &[u8] {
        self.storage.bytes()
    }

    /// File size in bytes.
    pub fn len(&self) -> u64 {
        self.storage.bytes().len() as u64
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn version(&self) -> u32 {
        self.layout.header.version
    }

    /// The data alignment (`general.alignment`, 32 when absent).
    pub fn alignment(&self) -> u32 {
        self.layout.alignment
    }

    /// Where the data section starts, from the start of the file.
    pub fn data_offset(&self) -> u64 {
        self.layout.data_offset
    }

    pub fn metadata(&self) -> &Metadata {
        &self.layout.metadata
    }

    /// Tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.layout.tensors
    }

    /// The info of the tensor called `name`.
    pub fn tensor(&self, name: &str) -> Result<&TensorInfo> {
        self.layout
            .index
            .get(name)
            .map(|&i| &self.layout.tensors[i])
            .ok_or_else(|| GgufError::NoSuchTensor { name: name.to_string() })
    }

    /// The raw bytes of the tensor called `name`, in the file's encoding (blocks for quantised
    /// types, little-endian elements otherwise). Touching them pages them in.
    pub fn bytes(&self, name: &str) -> Result<&[u8]> {
        Ok(self.tensor_bytes(self.tensor(name)?))
    }

    /// The raw bytes of `info`, which must be one of this file's tensors.
    pub fn tensor_bytes(&self, info: &TensorInfo) -> &[u8] {
        // The reader checked `file_offset + n_bytes <= len` for every tensor; `get` keeps
        // this panic-free even for a foreign `info`, returning an empty slice.
        let range = usize::try_from(info.file_offset).ok().and_then(|start| {
            let end = start.checked_add(usize::try_from(info.n_bytes).ok()?)?;
            Some(start..end)
        });
        range.and_then(|r| self.as_bytes().get(r)).unwrap_or(&[])
    }

    /// The tensor called `name` decoded to f32, in ggml element order (`ne[0]` fastest).
    /// Supported: F32, F16, BF16, Q8_0, Q4_0, MXFP4, Q4_K, Q5_K, Q6_K; other types are
    /// [`GgufError::UnsupportedType`]. The whole tensor is decoded into one vector, reserved
    /// fallibly: where the allocator refuses it (a tensor whose f32 values exceed the host's
    /// memory) this is [`GgufError::HostAllocation`] with the sizes. To go through a tensor of
    /// any size in bounded memory, use [`GgufFile::to_f32_chunked`].
    pub fn to_f32(&self, name: &str) -> Result<Vec<f32>> {
        let info = self.tensor(name)?;
        super::dequant::decode(info, self.tensor_bytes(info))
    }

    /// The info of the tensor called `name` if [`GgufFile::to_f32`] can decode it, or the
    /// error it would give ([`GgufError::UnsupportedType`]), without decoding anything: for a
    /// caller that must prepare (an output file, say) before decoding.
    pub fn decodable_tensor(&self, name: &str) -> Result<&TensorInfo> {
        let info = self.tensor(name)?;
        super::dequant::check_decodable(info)?;
        Ok(info)
    }

    /// The tensor called `name` decoded to f32 a piece at a time, in ggml element order: `sink`
    /// is called with consecutive pieces of at most `chunk_elements` values (whole blocks, so a
    /// piece holds at least one block) that together make the tensor. Memory use is one buffer
    /// of `chunk_elements` values, whatever the tensor's size; the first error, from decoding or
    /// from `sink`, stops the walk and is returned. Types as for [`GgufFile::to_f32`].
    pub fn to_f32_chunked<E: From<GgufError>>(
        &self,
        name: &str,
        chunk_elements: usize,
        sink: impl FnMut(&[f32]) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E> {
        let info = self.tensor(name)?;
        super::dequant::decode_chunked(info, self.tensor_bytes(info), chunk_elements, sink)
    }

    /// Row `row` of the tensor called `name` (its `ne[0]` values: one token's embedding, say)
    /// decoded to f32 into `out`, which holds exactly one row. Types as for
    /// [`GgufFile::to_f32`]. A row of a block format is whole blocks: the reader refuses a
    /// tensor whose `ne[0]` is not a multiple of its type's block.
    pub fn row_to_f32(&self, name: &str, row: u64, out: &mut [f32]) -> Result<()> {
        let info = self.tensor(name)?;
        super::dequant::check_decodable(info)?;
        let width = info.dims.first().copied().unwrap_or(1);
        let rows = info.n_elements.checked_div(width).unwrap_or(0);
        if row >= rows {
            return Err(GgufError::RowOutOfRange { tensor: info.name.clone(), row, rows, width });
        }
        if out.len() as u64 != width {
            return Err(GgufError::RowBuffer { tensor: info.name.clone(), width, len: out.len() });
        }
        // In bounds: row < rows, and the tensor's bytes are rows * row_bytes.
        let row_bytes = (info.n_bytes / rows) as usize;
        let start = row as usize * row_bytes;
        let bytes = &self.tensor_bytes(info)[start..start + row_bytes];
        super::dequant::decode_blocks(info, bytes, out)
    }

    /// Total bytes of all tensors.
    pub fn tensor_bytes_total(&self) -> u64 {
        self.layout.tensors.iter().map(|t| t.n_bytes).sum()
    }

    /// How many tensors of each type, in type id order.
    pub fn type_counts(&self) -> Vec<(GgmlType, usize)> {
        GgmlType::ALL
            .iter()
            .map(|&t| (t, self.layout.tensors.iter().filter(|i| i.ggml_type == t).count()))
            .filter(|&(_, n)| n > 0)
            .collect()
    }
}
