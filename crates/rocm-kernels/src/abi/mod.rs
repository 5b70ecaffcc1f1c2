//! What kernels and launchers share, generated from the ABI headers `kernels/include/*_abi.h` by
//! `cargo xtask bindgen` (committed; `cargo xtask bindgen --check` fails when a header changed
//! and these were not regenerated). One text for both sides: a constant or a parameter struct
//! cannot be changed on one side only. Each struct's size and field offsets, as clang lays out
//! the header the kernels compile, are asserted when this crate compiles.

/// `rocmforge_flash_abi.h`: the flash-attention kernels' parameter block and tile sizes.
pub(crate) mod flash;
/// `rocmforge_mxfp4_tiled_abi.h`: the tiled MXFP4 layout and kernel constants.
pub(crate) mod mxfp4_tiled;
