//! `kv_cache` (`kernels/kv_cache.hip`): writing new K/V rows into a paged KV cache, and copying
//! blocks (copy-on-write after a sequence fork).
//!
//! A cache tensor is `[num_blocks, block_size, kv_heads, head_dim]`: `num_blocks * block_size`
//! token slots of `kv_heads * head_dim` elements ([`CacheShape`]); paged attention
//! ([`crate::attention::paged_attention`]) reads it through block tables.

use rocm_runtime::DeviceBuffer;

use crate::KernelModule;
use crate::dtype::{Dtype, kernel_name};
use crate::error::{KernelError, Result, ensure};
use crate::launchable::{Launchable, every_dtype};
use crate::loader;

const KERNEL: &str = "kv_cache";
const MODULE: KernelModule = KernelModule::KvCache;

/// The shape of one K or V cache tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheShape {
    pub num_blocks: usize,
    pub block_size: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
}

impl CacheShape {
    /// Elements of one slot: `kv_heads * head_dim`.
    pub fn row(&self) -> usize {
        self.kv_heads * self.head_dim
    }

    pub fn num_slots(&self) -> usize {
        self.num_blocks * self.block_size
    }

    /// Elements of the tensor, or `None` on overflow.
    pub fn elements(&self) -> Option<usize> {
        self.num_blocks.checked_mul(self.block_size)?.checked_mul(self.kv_heads)?.checked_mul(self.head_dim)
    }

    pub(crate) fn check(&self, k_cache: usize, v_cache: usize) -> Result<()> {
        ensure(
            self.num_blocks > 0 && self.block_size > 0 && self.kv_heads > 0 && self.head_dim > 0,
            KERNEL,
            || format!("every dimension of {self:?} must be at least 1"),
        )?;
        let len = self.elements().ok_or_else(|| KernelError::Shape {
            kernel: KERNEL,
            message: format!("{self:?} overflows usize"),
        })?;
        ensure(self.num_slots() <= i32::MAX as usize, KERNEL, || {
            format!("{} slots exceed what an i32 slot id addresses", self.num_slots())
        })?;
        for (name, got) in [("k_cache", k_cache), ("v_cache", v_cache)] {
            ensure(got == len, KERNEL, || format!("{name} has {got} elements, {self:?} needs {len}"))?;
        }
        Ok(())
    }

    /// That `k` and `v` hold `tokens` contiguous rows (`k_len`, `v_len` elements); errors are
    /// `kernel`'s (the cache write's, or the RoPE launch that writes the cache itself).
    pub(crate) fn check_rows(
        &self,
        kernel: &'static str,
        tokens: usize,
        k_len: usize,
        v_len: usize,
    ) -> Result<()> {
        let need = tokens * self.row();
        for (name, got) in [("k", k_len), ("v", v_len)] {
            ensure(got == need, kernel, || {
                format!(
                    "{name} has {got} elements; {tokens} tokens of [{}, {}] need {need}",
                    self.kv_heads, self.head_dim
                )
            })?;
        }
        Ok(())
    }
}

/// `rf_kv_cache_write`'s argument (generated from `kernels/include/rocmforge_kv_cache_abi.h`).
type WriteParams = crate::abi::kv_cache::rf_kv_write_params;

/// The cache write's parameters: `slots.len()` contiguous rows of `k` and `v` into the caches
/// (checked by the caller).
pub(crate) fn write_params<T: Dtype>(
    shape: &CacheShape,
    k: &DeviceBuffer<T>,
    v: &DeviceBuffer<T>,
    slots: &DeviceBuffer<i32>,
    k_cache: &DeviceBuffer<T>,
    v_cache: &DeviceBuffer<T>,
) -> WriteParams {
    WriteParams {
        k: k.device_ptr(),
        v: v.device_ptr(),
        k_cache: k_cache.device_ptr(),
        v_cache: v_cache.device_ptr(),
        slots: slots.device_ptr(),
        k_stride: shape.row() as u64,
        v_stride: shape.row() as u64,
        row: shape.row() as u64,
        tokens: slots.len() as u64,
        num_slots: shape.num_slots() as u64,
    }
}

/// `rf_kv_cache_copy_blocks`' argument (generated from `kernels/include/rocmforge_kv_cache_abi.h`).
type CopyParams = crate::abi::kv_cache::rf_kv_copy_params;

/// Writes `tokens` new rows of `k` and `v` (`[tokens, kv_heads, head_dim]`, contiguous) to the
/// cache slots `slots[t]` (`[tokens]` i32, on the device as the allocator produced them). A
/// negative slot skips its token (padding); a slot at or past `num_slots` is skipped as well,
/// so a wrong mapping cannot write outside the cache. Two tokens mapped to one slot leave
/// either's row there.
pub fn kv_cache_write<T: Dtype>(
    shape: &CacheShape,
    k: &DeviceBuffer<T>,
    v: &DeviceBuffer<T>,
    slots: &DeviceBuffer<i32>,
    k_cache: &mut DeviceBuffer<T>,
    v_cache: &mut DeviceBuffer<T>,
) -> Result<()> {
    shape.check(k_cache.len(), v_cache.len())?;
    let tokens = slots.len();
    shape.check_rows(KERNEL, tokens, k.len(), v.len())?;
    if tokens == 0 {
        return Ok(());
    }
    let stream = k_cache.stream().clone();
    let kernel = loader::kernel(&stream, MODULE, &kernel_name::<T>("rf_kv_cache_write"))?;
    let params = write_params(shape, k, v, slots, k_cache, v_cache);
    let config = loader::grid_stride(&stream, &kernel, tokens * shape.row());
    // SAFETY: rf_kv_cache_write_<T>(rf_kv_write_params) reads slots[t] for t < tokens =
    // slots.len(), k and v rows t * row + i < tokens * row = their lengths (checked), and writes
    // k_cache/v_cache at slot * row + i only for 0 <= slot < num_slots, inside their checked
    // lengths. The pointers are those of the buffers named by reads/writes.
    unsafe {
        stream
            .launch(&kernel)
            // The entry waits for the kernel ahead first (rocmforge_dependent_launch.h).
            .dependent()
            .reads(k)
            .reads(v)
            .reads(slots)
            .writes(k_cache)
            .writes(v_cache)
            .arg(params)
            .launch(config)?
    };
    Ok(())
}

/// Copies whole blocks, `(src, dst)` block ids, in both caches: what a copy-on-write append to a
/// forked sequence needs before it writes. Ids must be below `num_blocks`, no block may be the
/// destination twice, and no destination may also be a source (the copies run concurrently).
pub fn kv_cache_copy_blocks<T: Dtype>(
    shape: &CacheShape,
    pairs: &[(usize, usize)],
    k_cache: &mut DeviceBuffer<T>,
    v_cache: &mut DeviceBuffer<T>,
) -> Result<()> {
    copy_blocks(shape, pairs, k_cache, v_cache)
}

/// [`kv_cache_copy_blocks`] through shared borrows of the caches: for caches that a graph
/// borrows for its whole life (`rocm_runtime::Graph::state`), between its replays. Like
/// `DeviceBuffer::write_from_host` it changes the contents of the caches only, never their
/// allocations, ordered on their stream after the replays queued before it (device memory is
/// not Rust memory: nothing on the host reads it). `k_cache` and `v_cache` must be two buffers.
pub fn kv_cache_copy_blocks_shared<T: Dtype>(
    shape: &CacheShape,
    pairs: &[(usize, usize)],
    k_cache: &DeviceBuffer<T>,
    v_cache: &DeviceBuffer<T>,
) -> Result<()> {
    ensure(k_cache.device_ptr() != v_cache.device_ptr() || k_cache.is_empty(), KERNEL, || {
        "the K and V caches are one buffer".into()
    })?;
    copy_blocks(shape, pairs, k_cache, v_cache)
}

/// [`kv_cache_copy_blocks`] for two distinct caches (a mutable borrow of each, or the check of
/// [`kv_cache_copy_blocks_shared`]).
fn copy_blocks<T: Dtype>(
    shape: &CacheShape,
    pairs: &[(usize, usize)],
    k_cache: &DeviceBuffer<T>,
    v_cache: &DeviceBuffer<T>,
) -> Result<()> {
    shape.check(k_cache.len(), v_cache.len())?;
    let mut dsts: Vec<usize> = pairs.iter().map(|p| p.1).collect();
    dsts.sort_unstable();
    for &(src, dst) in pairs {
        ensure(src < shape.num_blocks && dst < shape.num_blocks, KERNEL, || {
            format!("block pair ({src}, {dst}) is outside the cache's {} blocks", shape.num_blocks)
        })?;
        ensure(src != dst && dsts.binary_search(&src).is_err(), KERNEL, || {
            format!("block {src} is both copied from and written to")
        })?;
    }
    ensure(dsts.windows(2).all(|w| w[0] != w[1]), KERNEL, || {
        "a block is the destination of two copies".into()
    })?;
    if pairs.is_empty() {
        return Ok(());
    }
    let stream = k_cache.stream().clone();
    let flat: Vec<i32> = pairs.iter().flat_map(|&(s, d)| [s as i32, d as i32]).collect();
    let device_pairs = stream.upload(&flat)?;
    let kernel = loader::kernel(&stream, MODULE, &kernel_name::<T>("rf_kv_cache_copy_blocks"))?;
    let block_elems = shape.block_size * shape.row();
    let params = CopyParams {
        k_cache: k_cache.device_ptr(),
        v_cache: v_cache.device_ptr(),
        pairs: device_pairs.device_ptr(),
        n: pairs.len() as u64,
        block_elems: block_elems as u64,
        num_blocks: shape.num_blocks as u64,
    };
    let config = loader::grid_stride(&stream, &kernel, pairs.len() * block_elems);
    // SAFETY: rf_kv_cache_copy_blocks_<T>(rf_kv_copy_params) reads the 2n pair entries uploaded
    // above, and reads/writes k_cache/v_cache at block * block_elems + i < num_blocks *
    // block_elems = their checked lengths, for ids checked above to be in range; no destination
    // is a source, so no element is read and written by different threads. The caches are two
    // buffers (distinct mutable borrows, or checked), so K's copies and V's never overlap; they
    // are named with `reads`, which notes them for a capture as `writes` does, because the
    // shared form holds only shared borrows of them.
    unsafe {
        stream
            .launch(&kernel)
            // The entry waits for the kernel ahead first (rocmforge_dependent_launch.h).
            .dependent()
            .reads(&device_pairs)
            .reads(k_cache)
            .reads(v_cache)
            .arg(params)
            .launch(config)?
    };
    Ok(())
}

/// CPU reference of [`kv_cache_write`] on host copies of the caches.
pub fn kv_cache_write_reference<T: Dtype>(
    shape: &CacheShape,
    k: &[T],
    v: &[T],
    slots: &[i32],
    k_cache: &mut [T],
    v_cache: &mut [T],
) {
    let row = shape.row();
    for (t, &slot) in slots.iter().enumerate() {
        if slot < 0 || slot as usize >= shape.num_slots() {
            continue;
        }
        let s = slot as usize * row;
        k_cache[s..s + row].copy_from_slice(&k[t * row..(t + 1) * row]);
        v_cache[s..s + row].copy_from_slice(&v[t * row..(t + 1) * row]);
    }
}

/// The entries this module launches ([`crate::launchable`]).
pub(crate) fn launchable() -> Vec<Launchable> {
    [every_dtype(MODULE, "rf_kv_cache_write"), every_dtype(MODULE, "rf_kv_cache_copy_blocks")].concat()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_writes_rows_to_slots_and_skips_padding() {
        let shape = CacheShape { num_blocks: 2, block_size: 2, kv_heads: 1, head_dim: 2 };
        let (mut kc, mut vc) = (vec![0.0f32; 8], vec![0.0f32; 8]);
        let k = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0];
        let v = [-1.0f32, -2.0, -3.0, -4.0, -5.0, -6.0];
        kv_cache_write_reference(&shape, &k, &v, &[3, -1, 9], &mut kc, &mut vc);
        assert_eq!(kc, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 2.0]);
        assert_eq!(vc, [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, -1.0, -2.0]);
    }

    #[test]
    fn shapes_are_checked() {
        let shape = CacheShape { num_blocks: 4, block_size: 16, kv_heads: 2, head_dim: 8 };
        assert_eq!(shape.elements(), Some(1024));
        shape.check(1024, 1024).unwrap();
        assert!(shape.check(1023, 1024).unwrap_err().to_string().contains("k_cache has 1023"));
        assert!(CacheShape { num_blocks: 0, ..shape }.check(0, 0).is_err());
        assert!(CacheShape { num_blocks: usize::MAX, ..shape }.check(0, 0).is_err());
    }
}
