//! The KV cache's device tensors: one K and one V buffer a layer, indexed by slot.
//!
//! Each buffer is `[num_blocks, block_size, kv_heads, head_dim]`, contiguous. Blocks and the
//! slots inside them run together, so the tensor is equally `[slots, kv_heads, head_dim]` with
//! `slots = num_blocks * block_size`: the row of slot `s` (all KV heads of one token) is the
//! `kv_heads * head_dim` elements from `s * kv_heads * head_dim`, head `h` of it `head_dim`
//! elements from there plus `h * head_dim`. A slot is what `PagedCache::append` returns
//! (`block * block_size + offset`), so the bookkeeping and the tensors agree without a second
//! table. Token-major rows keep a cache write (one token, all heads) one contiguous store.

use rocm_kernels::kv_cache::CacheShape;
use rocm_runtime::{Bytes, DeviceBuffer, DeviceCopy, OverBudget, Stream};

use super::allocator::check_config;
use super::table::PagedCache;

/// Failures of the device tensors: a bad shape, or memory the guard will not give.
#[derive(Debug, thiserror::Error)]
pub enum KvCacheDeviceError {
    #[error("invalid KV cache shape: {0}")]
    InvalidShape(String),

    /// Checked before allocating anything: the whole cache does not fit what the memory guard
    /// has left.
    #[error(
        "a KV cache of {shape} needs {}, more than the memory guard has left: budget {}, in use {}",
        Bytes(*needed), Bytes(*budget), Bytes(*in_use)
    )]
    OverBudget { shape: KvCacheShape, needed: u64, budget: u64, in_use: u64 },

    /// An allocation failed anyway (another user of the device allocated meanwhile, or the
    /// driver refused). The buffers allocated before it have been freed again.
    #[error("allocating the {which} cache of layer {layer} ({}) failed: {source}", Bytes(*bytes))]
    Device { layer: usize, which: &'static str, bytes: u64, source: Box<rocm_runtime::Error> },

    #[error("layer {layer} does not exist: the cache has {layers} layers")]
    LayerOutOfRange { layer: usize, layers: usize },

    #[error(transparent)]
    Runtime(#[from] rocm_runtime::Error),
}

impl KvCacheDeviceError {
    /// The memory guard's refusal inside, if this is one.
    pub fn over_budget(&self) -> Option<&OverBudget> {
        match self {
            KvCacheDeviceError::Device { source, .. } => match source.as_ref() {
                rocm_runtime::Error::OverBudget(o) => Some(o),
                _ => None,
            },
            KvCacheDeviceError::Runtime(rocm_runtime::Error::OverBudget(o)) => Some(o),
            _ => None,
        }
    }
}

type Result<T, E = KvCacheDeviceError> = std::result::Result<T, E>;

/// The sizes of a KV cache's tensors, checked so every product below fits `usize`: `num_layers`
/// layers of K and V, each one tensor of the kernels' [`CacheShape`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvCacheShape {
    num_layers: usize,
    layer: CacheShape,
}

impl std::fmt::Display for KvCacheShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} layers x K,V x [{} blocks, {} slots, {} KV heads, {} dims]",
            self.num_layers,
            self.layer.num_blocks,
            self.layer.block_size,
            self.layer.kv_heads,
            self.layer.head_dim
        )
    }
}

impl KvCacheShape {
    /// Every size must be positive, the slots (`num_blocks * block_size`) at most
    /// [`MAX_SLOTS`](super::MAX_SLOTS), and `2 * num_layers * num_blocks * block_size * kv_heads *
    /// head_dim` elements must fit `usize` (bytes are checked again per element type).
    pub fn new(
        num_layers: usize,
        num_blocks: usize,
        block_size: usize,
        kv_heads: usize,
        head_dim: usize,
    ) -> Result<Self> {
        let shape =
            KvCacheShape { num_layers, layer: CacheShape { num_blocks, block_size, kv_heads, head_dim } };
        if [num_layers, num_blocks, block_size, kv_heads, head_dim].contains(&0) {
            return Err(KvCacheDeviceError::InvalidShape(format!("{shape}: every size must be positive")));
        }
        // Slots are numbered with i32 by the bookkeeping and the kernels.
        check_config(num_blocks, block_size)
            .map_err(|e| KvCacheDeviceError::InvalidShape(format!("{shape}: {e}")))?;
        let total = [num_blocks, block_size, kv_heads, head_dim, num_layers, 2]
            .iter()
            .try_fold(1usize, |acc, &n| acc.checked_mul(n));
        if total.is_none() {
            return Err(KvCacheDeviceError::InvalidShape(format!(
                "{shape}: the element count overflows usize"
            )));
        }
        Ok(shape)
    }

    /// The shape for the blocks of `cache`.
    pub fn for_cache(
        cache: &PagedCache,
        num_layers: usize,
        kv_heads: usize,
        head_dim: usize,
    ) -> Result<Self> {
        KvCacheShape::new(num_layers, cache.num_blocks(), cache.block_size(), kv_heads, head_dim)
    }

    pub fn num_layers(&self) -> usize {
        self.num_layers
    }

    pub fn num_blocks(&self) -> usize {
        self.layer.num_blocks
    }

    pub fn block_size(&self) -> usize {
        self.layer.block_size
    }

    pub fn kv_heads(&self) -> usize {
        self.layer.kv_heads
    }

    pub fn head_dim(&self) -> usize {
        self.layer.head_dim
    }

    /// `num_blocks * block_size`.
    pub fn slots(&self) -> usize {
        self.layer.num_slots()
    }

    /// Elements from one slot's row to the next: `kv_heads * head_dim`.
    pub fn slot_stride(&self) -> usize {
        self.layer.row()
    }

    /// Elements of one layer's K (or V) buffer (fits `usize`: checked by [`KvCacheShape::new`]).
    pub fn layer_elements(&self) -> usize {
        self.slots() * self.slot_stride()
    }

    /// Where head `head` of slot `slot` starts in a layer's buffer, or `None` past the end.
    pub fn offset(&self, slot: usize, head: usize) -> Option<usize> {
        (slot < self.slots() && head < self.kv_heads())
            .then(|| slot * self.slot_stride() + head * self.head_dim())
    }

    /// One layer's K (or V) tensor as the cache-write, block-copy and paged-attention kernels
    /// take it.
    pub fn kernel_shape(&self) -> CacheShape {
        self.layer
    }

    /// Bytes of one layer's K (or V) buffer of `T`, or `None` if that overflows.
    pub fn layer_bytes<T>(&self) -> Option<u64> {
        (self.layer_elements() as u64).checked_mul(size_of::<T>() as u64)
    }

    /// Bytes of every buffer (K and V of every layer) of `T`, or `None` if that overflows.
    pub fn total_bytes<T>(&self) -> Option<u64> {
        self.layer_bytes::<T>()?.checked_mul(2)?.checked_mul(self.num_layers as u64)
    }
}

/// The K and V tensors of every layer, on one stream's device (see the module docs for the
/// layout). Allocated uninitialised: a kernel reads only slots a cache write has filled.
pub struct KvCacheTensors<T: DeviceCopy> {
    shape: KvCacheShape,
    stream: Stream,
    k: Vec<DeviceBuffer<T>>,
    v: Vec<DeviceBuffer<T>>,
}

impl<T: DeviceCopy> std::fmt::Debug for KvCacheTensors<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvCacheTensors")
            .field("type", &std::any::type_name::<T>())
            .field("shape", &self.shape)
            .field("stream", &self.stream.id())
            .finish()
    }
}

impl<T: DeviceCopy> KvCacheTensors<T> {
    /// Allocates the cache on `stream` (charged to its account, ordered on it) through the
    /// memory guard. First checks that the whole cache fits what the guard has left
    /// ([`KvCacheDeviceError::OverBudget`], nothing allocated); an allocation that fails anyway
    /// is [`KvCacheDeviceError::Device`] naming the layer, and the buffers already allocated
    /// are freed before it returns.
    #[track_caller]
    pub fn new(stream: &Stream, shape: KvCacheShape) -> Result<Self> {
        let too_big = || {
            KvCacheDeviceError::InvalidShape(format!(
                "{shape} of {} overflows the byte count",
                std::any::type_name::<T>()
            ))
        };
        let needed = shape.total_bytes::<T>().ok_or_else(too_big)?;
        let layer_bytes = shape.layer_bytes::<T>().ok_or_else(too_big)?;
        let ledger = stream.backend().ledger();
        let (budget, in_use) = (ledger.budget(), ledger.in_use());
        if needed > budget.saturating_sub(in_use) {
            return Err(KvCacheDeviceError::OverBudget { shape, needed, budget, in_use });
        }
        let _span = tracing::debug_span!("kv_cache_alloc", %shape, bytes = needed).entered();
        let elements = shape.layer_elements();
        let (mut k, mut v) = (Vec::with_capacity(shape.num_layers), Vec::with_capacity(shape.num_layers));
        for layer in 0..shape.num_layers {
            // Called here, not in a closure, so the ledger records our caller's location. On an
            // error, `k` and `v` drop, freeing what was allocated.
            let wrap = |which, source| KvCacheDeviceError::Device {
                layer,
                which,
                bytes: layer_bytes,
                source: Box::new(source),
            };
            k.push(stream.alloc::<T>(elements).map_err(|e| wrap("K", e))?);
            v.push(stream.alloc::<T>(elements).map_err(|e| wrap("V", e))?);
        }
        Ok(KvCacheTensors { shape, stream: stream.clone(), k, v })
    }

    pub fn shape(&self) -> &KvCacheShape {
        &self.shape
    }

    /// The stream the buffers belong to: kernels using them must run on it.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    pub fn num_layers(&self) -> usize {
        self.shape.num_layers
    }

    /// Bytes of all the buffers.
    pub fn size_bytes(&self) -> u64 {
        self.k.iter().chain(&self.v).map(|b| b.size_bytes() as u64).sum()
    }

    fn check_layer(&self, layer: usize) -> Result<usize> {
        if layer < self.shape.num_layers {
            Ok(layer)
        } else {
            Err(KvCacheDeviceError::LayerOutOfRange { layer, layers: self.shape.num_layers })
        }
    }

    /// Layer `layer`'s K cache.
    pub fn k(&self, layer: usize) -> Result<&DeviceBuffer<T>> {
        Ok(&self.k[self.check_layer(layer)?])
    }

    /// Layer `layer`'s V cache.
    pub fn v(&self, layer: usize) -> Result<&DeviceBuffer<T>> {
        Ok(&self.v[self.check_layer(layer)?])
    }

    /// Layer `layer`'s K and V caches, writable (for a cache-write or block-copy kernel).
    pub fn layer_mut(&mut self, layer: usize) -> Result<(&mut DeviceBuffer<T>, &mut DeviceBuffer<T>)> {
        let i = self.check_layer(layer)?;
        Ok((&mut self.k[i], &mut self.v[i]))
    }

    /// Sets every byte of every buffer to `value` (0 clears; 0xFF poisons f32/f16/bf16 with NaN,
    /// so a test sees any slot read before it was written). Queued on the stream.
    pub fn fill_bytes(&mut self, value: u8) -> Result<()> {
        for buffer in self.k.iter_mut().chain(self.v.iter_mut()) {
            buffer.fill_bytes(value)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_puts_a_slot_row_at_slot_times_the_row() {
        // 3 layers, 4 blocks of 16 slots, 2 KV heads of 8.
        let s = KvCacheShape::new(3, 4, 16, 2, 8).unwrap();
        assert_eq!((s.slots(), s.slot_stride(), s.layer_elements()), (64, 16, 1024));
        assert_eq!(s.offset(0, 0), Some(0));
        // Block 2, offset 5 -> slot 37; head 1 of it.
        assert_eq!(s.offset(2 * 16 + 5, 1), Some(37 * 16 + 8));
        assert_eq!(s.offset(63, 1), Some(1024 - 8), "the last head of the last slot ends the buffer");
        assert_eq!((s.offset(64, 0), s.offset(0, 2)), (None, None));
        assert_eq!(s.layer_bytes::<f32>(), Some(4096));
        assert_eq!(s.total_bytes::<u16>(), Some(2 * 3 * 2048));
        let cache = PagedCache::new(4, 16).unwrap();
        assert_eq!(KvCacheShape::for_cache(&cache, 3, 2, 8).unwrap(), s);
        let k = s.kernel_shape();
        assert_eq!(
            (k.num_slots(), k.row(), k.elements()),
            (s.slots(), s.slot_stride(), Some(s.layer_elements()))
        );
    }

    #[test]
    fn bad_shapes_are_refused() {
        for dims in [[0, 4, 16, 2, 8], [1, 4, 16, 0, 8], [1, 4, 0, 2, 8]] {
            let e = KvCacheShape::new(dims[0], dims[1], dims[2], dims[3], dims[4]).unwrap_err();
            assert!(e.to_string().contains("must be positive"), "{e}");
        }
        let e = KvCacheShape::new(usize::MAX / 2, 2, 1, 1, 1).unwrap_err();
        assert!(e.to_string().contains("overflows"), "{e}");
        // Fits as elements, not as bytes of f64.
        let e = KvCacheShape::new(1, 1 << 16, 1 << 16, 1, 1).unwrap_err();
        assert!(e.to_string().contains("slots"), "{e}");
        let s = KvCacheShape::new(1, 1 << 15, 1 << 15, 1 << 16, 1 << 15).unwrap();
        assert_eq!((s.total_bytes::<u8>(), s.total_bytes::<f64>()), (Some(1 << 62), None));
    }

    #[test]
    fn the_refusal_names_the_shape_and_the_budget() {
        let shape = KvCacheShape::new(2, 8, 16, 4, 64).unwrap();
        let e = KvCacheDeviceError::OverBudget { shape, needed: 3 << 30, budget: 2 << 30, in_use: 1 << 20 };
        let text = e.to_string();
        for needle in ["2 layers", "8 blocks", "3.00 GiB", "budget 2147483648 B", "in use 1048576 B"] {
            assert!(text.contains(needle), "`{needle}` missing from: {text}");
        }
        assert!(e.over_budget().is_none());
    }
}
