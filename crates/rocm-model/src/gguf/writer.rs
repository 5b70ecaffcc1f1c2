//! [`GgufWriter`]: builds GGUF files (synthetic models for tests and tools).
//!
//! It writes what the reader accepts and nothing else: keys and names within the limits,
//! unique, shapes whose sizes match the data, tensors at aligned offsets in the order they
//! were added, each followed by zero padding to the alignment (as ggml's and gguf-py's
//! writers lay them out).

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

use half::{bf16, f16};
use rocm_kernels::quant::{
    quantize_mxfp4_gguf, quantize_q4_0, quantize_q4_k, quantize_q5_k, quantize_q6_k, quantize_q8_0,
};

use super::error::WriteError;
use super::file::GgufFile;
use super::header::{MAGIC, SUPPORTED_VERSIONS};
use super::limits::{
    DEFAULT_ALIGNMENT, MAX_ARRAY_DEPTH, MAX_ARRAY_LEN, MAX_NAME_BYTES, MAX_STRING_BYTES, MAX_TENSORS,
    check_alignment,
};
use super::metadata::Metadata;
use super::reader::ALIGNMENT_KEY;
use super::tensor::tensor_size;
use super::types::GgmlType;
use super::value::{Array, Value};

type Result<T, E = WriteError> = std::result::Result<T, E>;

#[derive(Debug, Clone)]
struct PendingTensor {
    name: String,
    ty: GgmlType,
    dims: Vec<u64>,
    data: Vec<u8>,
}

/// Collects metadata and tensors, then writes them as one GGUF file.
///
/// ```
/// use rocm_model::{GgmlType, GgufFile, GgufWriter};
/// let mut w = GgufWriter::new();
/// w.add_metadata("general.architecture", "llama")?;
/// w.add_f32("norm.weight", &[4], &[1.0, 2.0, 3.0, 4.0])?;
/// w.add_quantized("ffn.weight", GgmlType::Q8_0, &[32, 2], &vec![0.5; 64])?;
/// let file = GgufFile::from_bytes(w.to_bytes())?;
/// assert_eq!(file.to_f32("norm.weight")?, [1.0, 2.0, 3.0, 4.0]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct GgufWriter {
    version: u32,
    metadata: Metadata,
    tensors: Vec<PendingTensor>,
    names: HashSet<String>,
}

impl Default for GgufWriter {
    fn default() -> Self {
        GgufWriter::new()
    }
}

impl GgufWriter {
    /// An empty version-3 file with the default alignment (32).
    pub fn new() -> Self {
        GgufWriter { version: 3, metadata: Metadata::new(), tensors: Vec::new(), names: HashSet::new() }
    }

    /// A writer holding everything `file` holds: its version, its metadata in order (the
    /// alignment key included) and its tensors with their stored bytes. A file this writer
    /// made rewrites to the same bytes. The tensors' bytes are copied into memory, each copy
    /// reserved fallibly: a tensor larger than the host can hold is
    /// [`WriteError::HostAllocation`], not an abort.
    pub fn from_file(file: &GgufFile) -> Result<Self> {
        let mut w = GgufWriter::new();
        w.set_version(file.version())?;
        for (key, value) in file.metadata().iter() {
            w.add_metadata(key, value.clone())?;
        }
        for t in file.tensors() {
            let bytes = file.tensor_bytes(t);
            let mut data = Vec::new();
            data.try_reserve_exact(bytes.len()).map_err(|source| WriteError::HostAllocation {
                name: t.name().to_string(),
                bytes: t.n_bytes(),
                source,
            })?;
            data.extend_from_slice(bytes);
            w.add_tensor(t.name(), t.ggml_type(), t.dims(), data)?;
        }
        Ok(w)
    }

    /// Writes version 2 or 3 (the same bytes for a little-endian file, but for the number).
    pub fn set_version(&mut self, version: u32) -> Result<&mut Self> {
        if !SUPPORTED_VERSIONS.contains(&version) {
            return Err(WriteError::Version { version });
        }
        self.version = version;
        Ok(self)
    }

    /// Sets `general.alignment` (a uint32 power of two up to 1 MiB), adding or replacing it.
    pub fn set_alignment(&mut self, alignment: u32) -> Result<&mut Self> {
        check_alignment(alignment.into())
            .map_err(|reason| WriteError::BadValue { key: ALIGNMENT_KEY.into(), reason: reason.into() })?;
        self.metadata.set(ALIGNMENT_KEY, Value::U32(alignment));
        Ok(self)
    }

    /// The alignment the file will be written with.
    pub fn alignment(&self) -> u32 {
        match self.metadata.get(ALIGNMENT_KEY) {
            Some(&Value::U32(a)) => a,
            _ => DEFAULT_ALIGNMENT,
        }
    }

    /// The metadata added so far, in order.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// Adds a metadata entry. Keys must be unique; `general.alignment` must be a valid uint32.
    pub fn add_metadata(&mut self, key: impl Into<String>, value: impl Into<Value>) -> Result<&mut Self> {
        let key = key.into();
        let value = value.into();
        check_name("metadata key", &key)?;
        if key == ALIGNMENT_KEY {
            let Value::U32(a) = value else {
                return Err(WriteError::BadValue {
                    key,
                    reason: format!("must be uint32, not {}", value.value_type()),
                });
            };
            check_alignment(a.into())
                .map_err(|reason| WriteError::BadValue { key: key.clone(), reason: reason.into() })?;
        }
        check_value(&value).map_err(|reason| WriteError::BadValue { key: key.clone(), reason })?;
        self.metadata.insert(key, value).map_err(|(key, _)| WriteError::DuplicateKey { key })?;
        Ok(self)
    }

    /// Adds a tensor of `ty` with shape `dims` (ggml order: `dims[0]` is the row length) whose
    /// encoded bytes are `data`; their length must be what the shape and type take.
    pub fn add_tensor(
        &mut self,
        name: impl Into<String>,
        ty: GgmlType,
        dims: &[u64],
        data: impl Into<Vec<u8>>,
    ) -> Result<&mut Self> {
        let name = name.into();
        let data = data.into();
        check_name("tensor name", &name)?;
        if self.names.contains(&name) {
            return Err(WriteError::DuplicateTensor { name });
        }
        if self.tensors.len() as u64 >= MAX_TENSORS {
            return Err(WriteError::BadTensor { name, reason: format!("more than {MAX_TENSORS} tensors") });
        }
        let (_, bytes) =
            tensor_size(ty, dims).map_err(|reason| WriteError::BadTensor { name: name.clone(), reason })?;
        if data.len() as u64 != bytes {
            return Err(WriteError::BadTensor {
                name,
                reason: format!("{} bytes of data given, shape {dims:?} of {ty} takes {bytes}", data.len()),
            });
        }
        self.names.insert(name.clone());
        self.tensors.push(PendingTensor { name, ty, dims: dims.to_vec(), data });
        Ok(self)
    }

    /// Adds an F32 tensor.
    pub fn add_f32(&mut self, name: impl Into<String>, dims: &[u64], values: &[f32]) -> Result<&mut Self> {
        self.add_quantized(name, GgmlType::F32, dims, values)
    }

    /// Encodes `values` (ggml element order) as `ty` and adds them: F32, F16, BF16 (rounded to
    /// nearest even), Q8_0, Q4_0, MXFP4, Q4_K, Q5_K and Q6_K (encoded by `rocm_kernels::quant`;
    /// the k-quant encoder is rocmforge's own, see `rocm_kernels::quant::kquant`).
    pub fn add_quantized(
        &mut self,
        name: impl Into<String>,
        ty: GgmlType,
        dims: &[u64],
        values: &[f32],
    ) -> Result<&mut Self> {
        let name = name.into();
        let (n, bytes) =
            tensor_size(ty, dims).map_err(|reason| WriteError::BadTensor { name: name.clone(), reason })?;
        if values.len() as u64 != n {
            return Err(WriteError::BadTensor {
                name,
                reason: format!("{} values given, shape {dims:?} holds {n}", values.len()),
            });
        }
        let quantize = |f: fn(&[f32], &mut [u8]) -> Result<(), rocm_kernels::quant::QuantError>| {
            let mut out = vec![0u8; bytes as usize];
            f(values, &mut out)
                .map(|()| out)
                .map_err(|source| WriteError::Quantize { name: name.clone(), source })
        };
        let data: Vec<u8> = match ty {
            GgmlType::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
            GgmlType::F16 => values.iter().flat_map(|&v| f16::from_f32(v).to_le_bytes()).collect(),
            GgmlType::BF16 => values.iter().flat_map(|&v| bf16::from_f32(v).to_le_bytes()).collect(),
            GgmlType::Q8_0 => quantize(quantize_q8_0)?,
            GgmlType::Q4_0 => quantize(quantize_q4_0)?,
            GgmlType::MXFP4 => quantize(quantize_mxfp4_gguf)?,
            GgmlType::Q4_K => quantize(quantize_q4_k)?,
            GgmlType::Q5_K => quantize(quantize_q5_k)?,
            GgmlType::Q6_K => quantize(quantize_q6_k)?,
            other => {
                return Err(WriteError::BadTensor {
                    name,
                    reason: format!(
                        "cannot encode type {} ({other}); pass encoded bytes to add_tensor",
                        other.id()
                    ),
                });
            }
        };
        self.add_tensor(name, ty, dims, data)
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_to(&mut out).expect("writing to a Vec cannot fail");
        out
    }

    /// Writes the file to `path`.
    pub fn write_file(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let io = |source| WriteError::Io { path: path.to_path_buf(), source };
        let mut file = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
        self.write_to(&mut file).map_err(io)?;
        file.flush().map_err(io)
    }

    /// Writes the file to `out`.
    pub fn write_to(&self, out: &mut impl Write) -> std::io::Result<()> {
        let align = u64::from(self.alignment());
        let mut head = Vec::new();
        head.extend_from_slice(&MAGIC);
        head.extend_from_slice(&self.version.to_le_bytes());
        head.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        head.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in self.metadata.iter() {
            put_str(&mut head, key);
            head.extend_from_slice(&value.value_type().id().to_le_bytes());
            put_value(&mut head, value);
        }
        let mut offset = 0u64;
        for t in &self.tensors {
            put_str(&mut head, &t.name);
            head.extend_from_slice(&(t.dims.len() as u32).to_le_bytes());
            for d in &t.dims {
                head.extend_from_slice(&d.to_le_bytes());
            }
            head.extend_from_slice(&t.ty.id().to_le_bytes());
            head.extend_from_slice(&offset.to_le_bytes());
            offset += (t.data.len() as u64).next_multiple_of(align);
        }
        pad(&mut head, align);
        out.write_all(&head)?;
        let zeros = vec![0u8; align as usize];
        for t in &self.tensors {
            out.write_all(&t.data)?;
            let padding = (t.data.len() as u64).next_multiple_of(align) - t.data.len() as u64;
            out.write_all(&zeros[..padding as usize])?;
        }
        Ok(())
    }
}

fn check_name(what: &'static str, name: &str) -> Result<()> {
    if name.len() as u64 > MAX_NAME_BYTES {
        return Err(WriteError::NameTooLong {
            what,
            name: name.to_string(),
            len: name.len(),
            max: MAX_NAME_BYTES,
        });
    }
    Ok(())
}

/// Why the reader would refuse `value`, if it would.
fn check_value(value: &Value) -> Result<(), String> {
    match value {
        Value::String(s) => check_string(s),
        Value::Array(a) => check_array(a, 1),
        _ => Ok(()),
    }
}

fn check_string(s: &str) -> Result<(), String> {
    if s.len() as u64 > MAX_STRING_BYTES {
        return Err(format!("a string of {} bytes exceeds the limit of {MAX_STRING_BYTES}", s.len()));
    }
    Ok(())
}

fn check_array(a: &Array, depth: usize) -> Result<(), String> {
    if a.len() as u64 > MAX_ARRAY_LEN {
        return Err(format!("an array of {} elements exceeds the limit of {MAX_ARRAY_LEN}", a.len()));
    }
    match a {
        Array::String(v) => v.iter().try_for_each(|s| check_string(s)),
        Array::Array(v) => {
            if depth >= MAX_ARRAY_DEPTH {
                return Err(format!("arrays nested more than {MAX_ARRAY_DEPTH} levels deep"));
            }
            v.iter().try_for_each(|inner| check_array(inner, depth + 1))
        }
        _ => Ok(()),
    }
}

fn pad(out: &mut Vec<u8>, align: u64) {
    let len = (out.len() as u64).next_multiple_of(align) as usize;
    out.resize(len, 0);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

/// A value without its type tag.
fn put_value(out: &mut Vec<u8>, value: &Value) {
    match value {
        Value::U8(v) => out.push(*v),
        Value::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::Bool(v) => out.push(u8::from(*v)),
        Value::String(s) => put_str(out, s),
        Value::Array(a) => put_array(out, a),
        Value::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
    }
}

/// An array: element type, length, elements.
fn put_array(out: &mut Vec<u8>, a: &Array) {
    out.extend_from_slice(&a.element_type().id().to_le_bytes());
    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
    fn each<T: Copy, const N: usize>(out: &mut Vec<u8>, v: &[T], f: fn(T) -> [u8; N]) {
        v.iter().for_each(|&x| out.extend_from_slice(&f(x)));
    }
    match a {
        Array::U8(v) => out.extend_from_slice(v),
        Array::I8(v) => each(out, v, i8::to_le_bytes),
        Array::U16(v) => each(out, v, u16::to_le_bytes),
        Array::I16(v) => each(out, v, i16::to_le_bytes),
        Array::U32(v) => each(out, v, u32::to_le_bytes),
        Array::I32(v) => each(out, v, i32::to_le_bytes),
        Array::F32(v) => each(out, v, f32::to_le_bytes),
        Array::Bool(v) => v.iter().for_each(|&b| out.push(u8::from(b))),
        Array::String(v) => v.iter().for_each(|s| put_str(out, s)),
        Array::Array(v) => v.iter().for_each(|inner| put_array(out, inner)),
        Array::U64(v) => each(out, v, u64::to_le_bytes),
        Array::I64(v) => each(out, v, i64::to_le_bytes),
        Array::F64(v) => each(out, v, f64::to_le_bytes),
    }
}
