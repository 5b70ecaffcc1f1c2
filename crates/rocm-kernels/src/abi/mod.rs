//! What kernels and launchers share, generated from the ABI headers `kernels/include/*_abi.h` by
//! `cargo xtask bindgen` (committed; `cargo xtask bindgen --check` fails when a header changed
//! and these were not regenerated). One text for both sides: a constant or a parameter struct
//! cannot be changed on one side only. Each struct's size and field offsets, as clang lays out
//! the header the kernels compile, are asserted when this crate compiles.

/// `rocmforge_attention_abi.h`: the unfused attention kernels' parameter block and tile.
pub(crate) mod attention;
/// `rocmforge_dequant_abi.h`: the dequantisation kernel's tile.
pub(crate) mod dequant;
/// `rocmforge_flash_abi.h`: the flash-attention kernels' parameter block and tile sizes.
pub(crate) mod flash;
/// `rocmforge_gemm_abi.h`: the portable GEMM kernels' parameter block and tiles.
pub(crate) mod gemm;
/// `rocmforge_kv_cache_abi.h`: the KV-cache kernels' parameter blocks.
pub(crate) mod kv_cache;
/// `rocmforge_mxfp_abi.h`: the MXFP matrix-vector and matrix-matrix kernels' shapes.
pub(crate) mod mxfp;
/// `rocmforge_mxfp4_tiled_abi.h`: the tiled MXFP4 layout and kernel constants.
pub(crate) mod mxfp4_tiled;
/// `rocmforge_persistent_mlp_abi.h`: the persistent MLP kernel's parameter block and ring.
pub(crate) mod persistent_mlp;
/// `rocmforge_quant_gemm_abi.h`: the mixed-input matrix-core GEMM's tile and per-format stages.
pub(crate) mod quant_gemm;
/// `rocmforge_quant_matvec_abi.h`: the fused quantised matrix-vector kernels' shape.
pub(crate) mod quant_matvec;
/// `rocmforge_rmsnorm_abi.h`: the RMSNorm kernels' register caches.
pub(crate) mod rmsnorm;
/// `rocmforge_stream_read_abi.h`: the staged read's parameter block and ring.
pub(crate) mod stream_read;
/// `rocmforge_swiglu_abi.h`: the SwiGLU kernel's scalar unroll.
pub(crate) mod swiglu;
