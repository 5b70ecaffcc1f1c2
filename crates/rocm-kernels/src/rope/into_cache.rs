//! [`Rope::run_into_cache`]: RoPE on Q and K with K and V written into a paged KV cache, in one
//! launch where the layout allows it (`rf_rope_warp_kv_<T>` / `rf_rope_warp_il_kv_<T>`,
//! `kernels/rope.hip` version 6), else [`Rope::run`] then [`kv_cache_write`]. A decode step ran
//! those two back to back; one launch saves the second's launch and its round trip to memory.

use std::sync::OnceLock;

use rocm_runtime::DeviceBuffer;

use super::{
    KERNEL, MODULE, Path, Rope, RopeTensor, check_heads, head_rounds, path, vectorizable, warp_config,
};
use crate::dtype::{Dtype, kernel_name};
use crate::error::{Result, ensure};
use crate::kv_cache::{CacheShape, kv_cache_write, write_params};
use crate::loader;

/// Set to `0` to make [`Rope::run_into_cache`] always take the two launches: the benchmarks'
/// A/B switch (read once a process).
pub const ROPE_KV_FUSION_ENV: &str = "ROCMFORGE_ROPE_KV";

fn fusion_allowed() -> bool {
    static ALLOWED: OnceLock<bool> = OnceLock::new();
    *ALLOWED.get_or_init(|| std::env::var(ROPE_KV_FUSION_ENV).map_or(true, |v| v.trim() != "0"))
}

impl Rope {
    /// Rotates `q` in place and `k` at `positions`, and writes `k` (rotated) and `v` into the
    /// cache slots `slots[t]` of `k_cache` / `v_cache`, with [`kv_cache_write`]'s rules: `k` and
    /// `v` are `[tokens, shape.kv_heads, shape.head_dim]`, contiguous; a negative slot, or one
    /// past the cache, leaves that token's K and V out of it (its Q is rotated all the same).
    ///
    /// One launch when the style rotates each head whole in one segment (NeoX or GPT-J over the
    /// full head: Llama, Mistral, Qwen2) and a head's work fits a warp; otherwise [`Rope::run`]
    /// and [`kv_cache_write`]. What `k` holds afterwards is not specified (the fused launch
    /// leaves it as it was, the other path rotates it): read K from the cache. Both paths do
    /// the same arithmetic (`RawItem::rotate` of the warp path).
    #[allow(clippy::too_many_arguments)]
    pub fn run_into_cache<T: Dtype>(
        &self,
        q: RopeTensor<'_, T>,
        k: &mut DeviceBuffer<T>,
        v: &DeviceBuffer<T>,
        positions: &DeviceBuffer<i32>,
        shape: &CacheShape,
        slots: &DeviceBuffer<i32>,
        k_cache: &mut DeviceBuffer<T>,
        v_cache: &mut DeviceBuffer<T>,
    ) -> Result<()> {
        let layout = self.layout()?;
        let tokens = positions.len();
        ensure(slots.len() == tokens, KERNEL, || {
            format!("{} cache slots for {tokens} positions: one slot a token", slots.len())
        })?;
        ensure(shape.head_dim == self.head_dim, KERNEL, || {
            format!("the cache's head_dim {} is not the RoPE's {}", shape.head_dim, self.head_dim)
        })?;
        let whole_heads = layout.segments == 1 && layout.seg_dim == self.head_dim;
        let n = 16 / size_of::<T>();
        let q_stride = q.check(self, "q", tokens)?;
        let vectorized = vectorizable(&layout, self.head_dim, n, q.buffer.device_ptr(), q_stride)
            && vectorizable(&layout, self.head_dim, n, k.device_ptr(), shape.row());
        let stream = q.buffer.stream().clone();
        let warp = stream.backend().info().warp_size.max(1) as usize;
        let fused = fusion_allowed() && whole_heads && path(&layout, vectorized, n, warp) == Path::Warp;
        if !fused || tokens == 0 {
            self.run(q, Some(RopeTensor::new(k, shape.kv_heads)), positions, None)?;
            return kv_cache_write(shape, k, v, slots, k_cache, v_cache);
        }
        shape.check(k_cache.len(), v_cache.len())?;
        shape.check_rows(KERNEL, tokens, k.len(), v.len())?;
        check_heads(self.head_dim, q.heads, shape.kv_heads)?;
        let name = if layout.interleaved { "rf_rope_warp_il_kv" } else { "rf_rope_warp_kv" };
        let kernel = loader::kernel(&stream, MODULE, &kernel_name::<T>(name))?;
        let rounds = head_rounds(&layout, vectorized, n, warp, q.heads + shape.kv_heads);
        let config = warp_config(&stream, &kernel, tokens, warp, rounds);
        let params = write_params(shape, k, v, slots, k_cache, v_cache);
        // SAFETY: rf_rope_warp_kv_<T> / rf_rope_warp_il_kv_<T> take (T* q, const int* pos, u64
        // tokens, u64 q_heads, u64 k_heads, u64 q_stride, u32 head_dim, int vectorized, i64
        // max_pos, Freqs, rf_kv_write_params). For t < tokens they read pos[t] and slots[t]
        // (both `tokens` long: checked), read and write q[t * q_stride + h * head_dim + e] for
        // h < q_heads, e < head_dim (`q.check`), read k[t * row + e] and v[t * row + e] for
        // e < row = kv_heads * head_dim (k and v are tokens * row long: checked), and write
        // k_cache / v_cache [slot * row + e] only for 0 <= slot < num_slots (`shape.check`: the
        // caches are num_slots * row long). The work split is `run`'s warp path (a head's items
        // fit a warp: `path`), so every element of q and of a cache row has one writer. q, the
        // caches are distinct mutable borrows; k and v are borrowed (k is only read). With
        // `vectorized`, q and k are 16-byte aligned in whole vectors (`vectorizable`); the V
        // copy checks its own alignment in the kernel.
        unsafe {
            // Dependent: the positions and slots are read before the wait (inputs of the step),
            // everything else after it.
            stream
                .launch(&kernel)
                .dependent()
                .buffer_mut(q.buffer)
                .buffer(positions)
                .reads_before_wait(positions)
                .reads_before_wait(slots)
                .reads(k)
                .reads(v)
                .writes(k_cache)
                .writes(v_cache)
                .arg(tokens as u64)
                .arg(q.heads as u64)
                .arg(shape.kv_heads as u64)
                .arg(q_stride as u64)
                .arg(self.head_dim as u32)
                .arg(vectorized as i32)
                .arg(self.max_position())
                .arg(self.freqs(&layout))
                .arg(params)
                .launch(config)?
        };
        Ok(())
    }
}
