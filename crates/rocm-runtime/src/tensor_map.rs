//! Tensor maps: the descriptors through which the TMA engine (NVIDIA, sm_90 and later) copies a
//! box of a tensor in global memory into shared memory with one instruction
//! (`cp.async.bulk.tensor`), filling what lies outside the tensor with zeros. A kernel takes one
//! by value as a `const __grid_constant__` parameter.

use crate::buffer::DeviceBuffer;
use crate::error::{Error, Result};

/// A tensor map (CUDA's `CUtensorMap`, 128 bytes; a kernel declares it aligned to 64).
///
/// It holds the buffer's device address, not a borrow of it: a launch that passes one must name
/// the buffer too (`Launch::reads`), as for any pointer it passes, so that the buffer outlives the
/// kernel and belongs to its stream.
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct TensorMap([u64; 16]);

impl TensorMap {
    /// A map over the first `rows * row_bytes` bytes of `buffer` as `rows` rows of `row_bytes`
    /// unsigned bytes, copied in boxes of `box_rows` rows x `box_bytes` bytes that may start at
    /// any row, at a multiple of 16 bytes in it (a kernel that starts one elsewhere faults:
    /// `CUDA_ERROR_ILLEGAL_INSTRUCTION`); a box's bytes past a row's end or past the last row
    /// arrive as zeros.
    ///
    /// The hardware's rules, refused here with what broke them: the buffer's address and
    /// `row_bytes` are multiples of 16, `box_bytes` is a multiple of 16, and both box sides are
    /// 1 to 256. Only NVIDIA's driver makes tensor maps.
    pub fn bytes_2d(
        buffer: &DeviceBuffer<u8>,
        rows: usize,
        row_bytes: usize,
        box_bytes: usize,
        box_rows: usize,
    ) -> Result<TensorMap> {
        let invalid = |what: String| Err(Error::InvalidArgument(format!("tensor map: {what}")));
        match rows.checked_mul(row_bytes) {
            Some(bytes) if bytes <= buffer.len() => {}
            _ => {
                return invalid(format!(
                    "{rows} rows of {row_bytes} bytes exceed the buffer's {}",
                    buffer.len()
                ));
            }
        }
        if rows == 0 || row_bytes == 0 {
            return invalid(format!("{rows} rows of {row_bytes} bytes: an empty tensor"));
        }
        if !buffer.device_ptr().is_multiple_of(16) || !row_bytes.is_multiple_of(16) {
            return invalid(format!(
                "the address {:#x} and the row length {row_bytes} must be multiples of 16 bytes",
                buffer.device_ptr()
            ));
        }
        if !box_bytes.is_multiple_of(16) || !(1..=256).contains(&box_bytes) || !(1..=256).contains(&box_rows)
        {
            return invalid(format!(
                "a box of {box_rows} rows x {box_bytes} bytes: each side 1 to 256, the bytes a multiple of 16"
            ));
        }
        let driver = buffer.stream().backend().driver();
        let map = driver.tensor_map_bytes_2d(
            buffer.device_ptr(),
            rows as u64,
            row_bytes as u64,
            box_bytes as u32,
            box_rows as u32,
        )?;
        Ok(TensorMap(map))
    }
}
