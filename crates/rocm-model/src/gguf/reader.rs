//! The parser: bytes in, a checked layout out, or an error saying where the file is wrong.
//!
//! Rules it keeps, whatever the input:
//! - every length is checked against the bytes left before anything is allocated by it;
//! - every size and offset is computed with checked arithmetic;
//! - recursion (arrays of arrays) is bounded by [`MAX_ARRAY_DEPTH`];
//! - no indexing that can panic: slices come from [`Cursor::take`] only.

use std::collections::HashMap;

use super::error::{GgufError, Result};
use super::header::Header;
use super::limits::{
    DEFAULT_ALIGNMENT, MAX_ARRAY_DEPTH, MAX_ARRAY_LEN, MAX_DIMS, MAX_NAME_BYTES, MAX_STRING_BYTES,
    check_alignment,
};
use super::metadata::Metadata;
use super::tensor::{TensorInfo, tensor_size};
use super::types::TypeId;
use super::value::{Array, Value, ValueType};

/// The key that sets the data alignment.
pub const ALIGNMENT_KEY: &str = "general.alignment";

/// A read position in the file. Every read is bounds-checked and reports the context it was
/// reading for when the file ends too early.
#[derive(Debug)]
pub(crate) struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    pub(crate) fn new(data: &'a [u8]) -> Self {
        Cursor { data, pos: 0 }
    }

    pub(crate) fn pos(&self) -> u64 {
        self.pos as u64
    }

    pub(crate) fn remaining(&self) -> u64 {
        (self.data.len() - self.pos) as u64
    }

    /// The next `n` bytes, or [`GgufError::Truncated`] naming `context()`.
    pub(crate) fn take(&mut self, n: u64, context: impl FnOnce() -> String) -> Result<&'a [u8]> {
        let available = self.remaining();
        if n > available {
            return Err(GgufError::Truncated {
                context: context(),
                offset: self.pos(),
                needed: n,
                available,
            });
        }
        // n <= remaining <= usize::MAX, and pos + n <= len.
        let n = n as usize;
        let bytes = &self.data[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, context: impl FnOnce() -> String) -> Result<[u8; N]> {
        let bytes = self.take(N as u64, context)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    pub(crate) fn u8(&mut self, context: impl FnOnce() -> String) -> Result<u8> {
        Ok(self.array::<1>(context)?[0])
    }

    pub(crate) fn u32(&mut self, context: impl FnOnce() -> String) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array(context)?))
    }

    pub(crate) fn u64(&mut self, context: impl FnOnce() -> String) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array(context)?))
    }

    /// A GGUF string (u64 length, UTF-8 bytes, no terminator) of at most `max` bytes. The
    /// length is checked against `max` and against the file before any byte is copied.
    pub(crate) fn string(&mut self, max: u64, context: impl Fn() -> String) -> Result<String> {
        let offset = self.pos();
        let len = self.u64(&context)?;
        if len > max {
            return Err(GgufError::StringTooLong { context: context(), offset, len, max });
        }
        let bytes = self.take(len, &context)?;
        match std::str::from_utf8(bytes) {
            Ok(s) => Ok(s.to_owned()),
            Err(_) => Err(GgufError::InvalidUtf8 { context: context(), offset }),
        }
    }
}

/// A parsed and checked GGUF layout; the tensor bytes stay in the caller's buffer.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub(crate) header: Header,
    pub(crate) metadata: Metadata,
    pub(crate) alignment: u32,
    pub(crate) data_offset: u64,
    pub(crate) tensors: Vec<TensorInfo>,
    pub(crate) index: HashMap<String, usize>,
}

/// Parses and checks a whole GGUF file held in `data`.
pub(crate) fn parse(data: &[u8]) -> Result<Layout> {
    let mut cur = Cursor::new(data);
    let header = Header::read(&mut cur)?;
    // Both counts were checked against the bytes left, so these capacities are bounded by the
    // file's size.
    let metadata = read_metadata(&mut cur, header.metadata_count)?;
    let alignment = match metadata.get(ALIGNMENT_KEY) {
        None => DEFAULT_ALIGNMENT,
        Some(&Value::U32(a)) => check_alignment(a.into())
            .map_err(|reason| GgufError::InvalidAlignment { value: a.into(), reason })?,
        Some(other) => return Err(GgufError::AlignmentType { found: other.value_type() }),
    };
    let (mut tensors, index) = read_tensor_infos(&mut cur, header.tensor_count, alignment)?;

    // The data section starts at the next multiple of the alignment after the tensor infos.
    let align = u64::from(alignment);
    let data_offset = cur.pos().checked_next_multiple_of(align).ok_or(GgufError::InvalidAlignment {
        value: align,
        reason: "the data section would start past 2^64 bytes",
    })?;
    check_data(&mut tensors, data_offset, data.len() as u64)?;
    Ok(Layout { header, metadata, alignment, data_offset, tensors, index })
}

fn read_metadata(cur: &mut Cursor<'_>, count: u64) -> Result<Metadata> {
    let mut metadata = Metadata::with_capacity(count as usize);
    for i in 0..count {
        let at = cur.pos();
        let key = cur.string(MAX_NAME_BYTES, || format!("metadata key #{i}"))?;
        let type_at = cur.pos();
        let type_id = cur.u32(|| format!("the type of metadata key `{key}`"))?;
        let Some(ty) = ValueType::from_id(type_id) else {
            return Err(GgufError::UnknownValueType {
                context: format!("metadata key `{key}`"),
                offset: type_at,
                type_id,
            });
        };
        let value = read_value(cur, ty, &key)?;
        metadata.insert(key, value).map_err(|(key, _)| GgufError::DuplicateKey { key, offset: at })?;
    }
    Ok(metadata)
}

fn value_context(key: &str) -> impl Fn() -> String + '_ {
    move || format!("the value of metadata key `{key}`")
}

fn read_value(cur: &mut Cursor<'_>, ty: ValueType, key: &str) -> Result<Value> {
    let ctx = value_context(key);
    let at = cur.pos();
    Ok(match ty {
        ValueType::U8 => Value::U8(cur.u8(&ctx)?),
        ValueType::I8 => Value::I8(cur.u8(&ctx)? as i8),
        ValueType::U16 => Value::U16(u16::from_le_bytes(cur.array(&ctx)?)),
        ValueType::I16 => Value::I16(i16::from_le_bytes(cur.array(&ctx)?)),
        ValueType::U32 => Value::U32(cur.u32(&ctx)?),
        ValueType::I32 => Value::I32(i32::from_le_bytes(cur.array(&ctx)?)),
        ValueType::F32 => Value::F32(f32::from_le_bytes(cur.array(&ctx)?)),
        ValueType::Bool => Value::Bool(to_bool(cur.u8(&ctx)?, key, at)?),
        ValueType::String => Value::String(cur.string(MAX_STRING_BYTES, &ctx)?),
        ValueType::Array => Value::Array(read_array(cur, key, 1)?),
        ValueType::U64 => Value::U64(cur.u64(&ctx)?),
        ValueType::I64 => Value::I64(i64::from_le_bytes(cur.array(&ctx)?)),
        ValueType::F64 => Value::F64(f64::from_le_bytes(cur.array(&ctx)?)),
    })
}

fn to_bool(byte: u8, key: &str, offset: u64) -> Result<bool> {
    match byte {
        0 => Ok(false),
        1 => Ok(true),
        value => Err(GgufError::InvalidBool { context: format!("metadata key `{key}`"), offset, value }),
    }
}

/// Reads an array (element type, length, elements) at nesting level `depth` (1 = the value
/// itself is the array).
fn read_array(cur: &mut Cursor<'_>, key: &str, depth: usize) -> Result<Array> {
    let ctx = value_context(key);
    let at = cur.pos();
    let type_id = cur.u32(&ctx)?;
    let Some(elem) = ValueType::from_id(type_id) else {
        return Err(GgufError::UnknownValueType {
            context: format!("array in metadata key `{key}`"),
            offset: at,
            type_id,
        });
    };
    let len_at = cur.pos();
    let len = cur.u64(&ctx)?;
    if len > MAX_ARRAY_LEN {
        return Err(GgufError::ArrayTooLong {
            context: format!("metadata key `{key}`"),
            offset: len_at,
            len,
            max: MAX_ARRAY_LEN,
        });
    }
    if elem == ValueType::Array && depth >= MAX_ARRAY_DEPTH {
        return Err(GgufError::NestingTooDeep {
            context: format!("metadata key `{key}`"),
            offset: at,
            max: MAX_ARRAY_DEPTH,
        });
    }
    // Every element takes at least this many bytes: check the file holds them all before
    // reserving room for `len` elements.
    let needed = len * elem.min_encoded_size(); // len <= 2^24, size <= 12: no overflow
    let available = cur.remaining();
    if needed > available {
        return Err(GgufError::Truncated {
            context: format!("the {len} {elem} elements of metadata key `{key}`"),
            offset: cur.pos(),
            needed,
            available,
        });
    }
    let n = len as usize;
    // Fixed-size elements: one bounds-checked slice, then decoded in place.
    let mut fixed = |size: u64| cur.take(len * size, &ctx);
    Ok(match elem {
        ValueType::U8 => Array::U8(fixed(1)?.to_vec()),
        ValueType::I8 => Array::I8(fixed(1)?.iter().map(|&b| b as i8).collect()),
        ValueType::U16 => Array::U16(le(fixed(2)?, u16::from_le_bytes)),
        ValueType::I16 => Array::I16(le(fixed(2)?, i16::from_le_bytes)),
        ValueType::U32 => Array::U32(le(fixed(4)?, u32::from_le_bytes)),
        ValueType::I32 => Array::I32(le(fixed(4)?, i32::from_le_bytes)),
        ValueType::F32 => Array::F32(le(fixed(4)?, f32::from_le_bytes)),
        ValueType::U64 => Array::U64(le(fixed(8)?, u64::from_le_bytes)),
        ValueType::I64 => Array::I64(le(fixed(8)?, i64::from_le_bytes)),
        ValueType::F64 => Array::F64(le(fixed(8)?, f64::from_le_bytes)),
        ValueType::Bool => {
            let start = cur.pos();
            let bytes = cur.take(len, &ctx)?;
            let mut out = Vec::with_capacity(n);
            for (i, &b) in bytes.iter().enumerate() {
                out.push(to_bool(b, key, start + i as u64)?);
            }
            Array::Bool(out)
        }
        ValueType::String => {
            let mut out = Vec::with_capacity(n);
            for _ in 0..n {
                out.push(cur.string(MAX_STRING_BYTES, &ctx)?);
            }
            Array::String(out)
        }
        ValueType::Array => {
            let mut out = Vec::with_capacity(n);
            for _ in 0..n {
                out.push(read_array(cur, key, depth + 1)?);
            }
            Array::Array(out)
        }
    })
}

/// Decodes little-endian `N`-byte elements.
fn le<T, const N: usize>(bytes: &[u8], from: fn([u8; N]) -> T) -> Vec<T> {
    bytes
        .chunks_exact(N)
        .map(|c| {
            let mut a = [0u8; N];
            a.copy_from_slice(c);
            from(a)
        })
        .collect()
}

fn read_tensor_infos(
    cur: &mut Cursor<'_>,
    count: u64,
    alignment: u32,
) -> Result<(Vec<TensorInfo>, HashMap<String, usize>)> {
    let mut tensors = Vec::with_capacity(count as usize);
    let mut index = HashMap::with_capacity(count as usize);
    for i in 0..count {
        let at = cur.pos();
        let name = cur.string(MAX_NAME_BYTES, || format!("the name of tensor #{i}"))?;
        let ctx = || format!("the info of tensor `{name}`");
        let n_dims = cur.u32(ctx)?;
        if n_dims as usize > MAX_DIMS {
            return Err(GgufError::TooManyDims { tensor: name, offset: at, n_dims, max: MAX_DIMS });
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            dims.push(cur.u64(ctx)?);
        }
        let type_id = cur.u32(ctx)?;
        let data_offset = cur.u64(ctx)?;
        let ty = match TypeId::from_u32(type_id) {
            TypeId::Known(t) => t,
            TypeId::Removed(type_name) => {
                return Err(GgufError::RemovedTensorType {
                    tensor: name,
                    offset: at,
                    type_id,
                    name: type_name,
                });
            }
            TypeId::Unknown => {
                return Err(GgufError::UnknownTensorType { tensor: name, offset: at, type_id });
            }
        };
        let (n_elements, n_bytes) = tensor_size(ty, &dims).map_err(|reason| GgufError::BadShape {
            tensor: name.clone(),
            offset: at,
            dims: dims.clone(),
            reason,
        })?;
        if data_offset % u64::from(alignment) != 0 {
            return Err(GgufError::MisalignedTensor { tensor: name, offset: at, data_offset, alignment });
        }
        if index.contains_key(&name) {
            return Err(GgufError::DuplicateTensor { name, offset: at });
        }
        index.insert(name.clone(), tensors.len());
        tensors.push(TensorInfo {
            name,
            ggml_type: ty,
            dims,
            n_elements,
            n_bytes,
            data_offset,
            file_offset: 0, // set once the data section's start is known
            info_offset: at,
        });
    }
    Ok((tensors, index))
}

/// Places every tensor in the file: inside it, and not overlapping another.
fn check_data(tensors: &mut [TensorInfo], data_offset: u64, file_len: u64) -> Result<()> {
    for t in tensors.iter_mut() {
        let start = data_offset.checked_add(t.data_offset);
        match start.and_then(|s| s.checked_add(t.n_bytes)) {
            Some(end) if end <= file_len => t.file_offset = data_offset + t.data_offset,
            _ => {
                return Err(GgufError::TensorOutOfBounds {
                    tensor: t.name.clone(),
                    data_offset: t.data_offset,
                    start: start.unwrap_or(u64::MAX),
                    size: t.n_bytes,
                    file_len,
                });
            }
        }
    }
    // Two tensors sharing bytes would let a write through one change the other (and is never
    // what a writer meant): sort by start and compare neighbours. Empty tensors share nothing.
    let mut order: Vec<&TensorInfo> = tensors.iter().filter(|t| t.n_bytes > 0).collect();
    order.sort_by_key(|t| t.data_offset);
    for pair in order.windows(2) {
        let (a, b) = (pair[0], pair[1]);
        let a_end = a.data_offset + a.n_bytes; // inside the file, checked above
        if b.data_offset < a_end {
            return Err(GgufError::OverlappingTensors {
                first: a.name.clone(),
                first_start: a.data_offset,
                first_end: a_end,
                second: b.name.clone(),
                second_start: b.data_offset,
            });
        }
    }
    Ok(())
}
