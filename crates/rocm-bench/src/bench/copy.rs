//! The ceiling for memory-bound kernels: a device-to-device copy of 1 GiB, counting the bytes
//! read plus the bytes written. Also the driver's memset of 1 GiB, the write-only ceiling for
//! kernels that only store (`causal_mask`), and `stream_read` of 1 GiB, the read-only one for
//! kernels that mostly load (the matrix-vector products), reported next to it; the target stays
//! the copy.

use super::{Bench, Row};
use crate::Result;

pub fn run(b: &mut Bench) -> Result<Vec<Row>> {
    let n = 1usize << 30;
    let host = b.random_bytes(n);
    let src = b.stream.upload(&host)?;
    let mut dst = b.stream.alloc::<u8>(n)?;
    let ms = b.time(|| Ok(dst.copy_from_device(&src)?))?;
    let copy = Row {
        kernel: "copy".into(),
        dtype: "u8",
        shape: "1 GiB".into(),
        ms,
        bytes: 2 * n as u64,
        flops: None,
    };
    // dst holds the copy of random bytes: read before the memset makes it uniform.
    let ms = b.time_read(std::slice::from_ref(&dst))?;
    let read = Row {
        kernel: "read (read-only)".into(),
        dtype: "u8",
        shape: "1 GiB".into(),
        ms,
        bytes: n as u64,
        flops: None,
    };
    drop(src);
    let ms = b.time(|| Ok(dst.fill_bytes(0x5a)?))?;
    let memset = Row {
        kernel: "memset (write-only)".into(),
        dtype: "u8",
        shape: "1 GiB".into(),
        ms,
        bytes: n as u64,
        flops: None,
    };
    Ok(vec![copy, memset, read])
}
