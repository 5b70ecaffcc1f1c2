//! Tensor infos: name, type, shape and where the data lies.

use super::limits::MAX_DIMS;
use super::types::GgmlType;

/// One tensor of a GGUF file, as its info describes it, checked against the file.
///
/// Shapes are in ggml order: `dims()[0]` (`ne[0]`) is the fastest-varying dimension, the row
/// length. [`TensorInfo::row_major_shape`] reverses it into NumPy/PyTorch order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    pub(crate) name: String,
    pub(crate) ggml_type: GgmlType,
    pub(crate) dims: Vec<u64>,
    pub(crate) n_elements: u64,
    pub(crate) n_bytes: u64,
    pub(crate) data_offset: u64,
    pub(crate) file_offset: u64,
    pub(crate) info_offset: u64,
}

impl TensorInfo {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn ggml_type(&self) -> GgmlType {
        self.ggml_type
    }

    /// The shape in ggml order (`ne[0]` first, the fastest-varying dimension).
    pub fn dims(&self) -> &[u64] {
        &self.dims
    }

    /// The shape in row-major order (slowest-varying first), as NumPy and PyTorch write it.
    pub fn row_major_shape(&self) -> Vec<u64> {
        self.dims.iter().rev().copied().collect()
    }

    pub fn n_elements(&self) -> u64 {
        self.n_elements
    }

    /// Bytes of data (blocks times block size; no padding).
    pub fn n_bytes(&self) -> u64 {
        self.n_bytes
    }

    /// Offset of the data from the start of the data section, as the file states it.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }

    /// Offset of the data from the start of the file.
    pub fn file_offset(&self) -> u64 {
        self.file_offset
    }

    /// Offset of this tensor's info record from the start of the file (for messages).
    pub fn info_offset(&self) -> u64 {
        self.info_offset
    }
}

/// Element count and byte size of a `ty` tensor of shape `dims` (ggml order), or why there is
/// none. ggml keeps `ne` and element counts in `int64_t`, so both must stay at or below
/// `i64::MAX`; every product is checked, so no shape can wrap into a small size.
pub(crate) fn tensor_size(ty: GgmlType, dims: &[u64]) -> Result<(u64, u64), String> {
    if dims.len() > MAX_DIMS {
        return Err(format!("has {} dimensions, at most {MAX_DIMS} allowed", dims.len()));
    }
    const LIMIT: u64 = i64::MAX as u64;
    let mut n: u64 = 1;
    for (i, &d) in dims.iter().enumerate() {
        if d > LIMIT {
            return Err(format!("has dimension {i} = {d}, past ggml's limit of i64::MAX"));
        }
        n = n
            .checked_mul(d)
            .filter(|&n| n <= LIMIT)
            .ok_or_else(|| "has more elements than ggml can count (i64::MAX)".to_string())?;
    }
    let ne0 = dims.first().copied().unwrap_or(1);
    if ne0 % ty.block_size() != 0 {
        return Err(format!(
            "has a first dimension of {ne0}, not a multiple of the {ty} block size {}",
            ty.block_size()
        ));
    }
    // ne0 is a whole number of blocks, so the element count is too.
    let bytes = (n / ty.block_size())
        .checked_mul(ty.type_size())
        .ok_or_else(|| format!("takes more than 2^64 bytes as {ty}"))?;
    Ok((n, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_of_plain_and_block_types() {
        assert_eq!(tensor_size(GgmlType::F32, &[3, 5]), Ok((15, 60)));
        assert_eq!(tensor_size(GgmlType::Q8_0, &[64, 3]), Ok((192, 6 * 34)));
        assert_eq!(tensor_size(GgmlType::MXFP4, &[32]), Ok((32, 17)));
        assert_eq!(tensor_size(GgmlType::F16, &[]), Ok((1, 2)), "no dims: one element");
        assert_eq!(tensor_size(GgmlType::F16, &[4, 0, 2]), Ok((0, 0)));
    }

    #[test]
    fn products_that_would_wrap_are_refused() {
        // 2^32 * 2^32 wraps u64 to 0; 2^62 * 4 wraps too.
        assert!(tensor_size(GgmlType::F32, &[1 << 32, 1 << 32]).is_err());
        assert!(tensor_size(GgmlType::F32, &[1 << 62, 4]).is_err());
        assert!(tensor_size(GgmlType::F32, &[u64::MAX]).is_err());
        // The element count fits but its bytes do not fit i64 (4 * 2^62 = 2^64): refused.
        assert!(tensor_size(GgmlType::F32, &[1 << 62]).is_err());
        // Wrapping to a product of exactly 1: 3 * 12297829382473034411 = 2^65 + 1.
        assert!(tensor_size(GgmlType::F32, &[3, 12_297_829_382_473_034_411]).is_err());
    }

    #[test]
    fn block_types_need_whole_blocks_per_row() {
        let err = tensor_size(GgmlType::Q4_0, &[33, 2]).unwrap_err();
        assert!(err.contains("block size 32"), "{err}");
        assert!(tensor_size(GgmlType::Q4_K, &[256, 1]).is_ok());
    }
}
