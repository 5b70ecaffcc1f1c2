//! Device descriptions for the launchers' unit tests: what a launch shape is computed from,
//! without a device.

use rocm_runtime::{CodeObjectKind, DeviceInfo, MatrixCores, Platform};

/// An sm_90 NVIDIA device of `sms` multiprocessors and `optin_kib` KiB of shared memory a block
/// when opted in (an H100 or H200: 132 and 227; an A100: 108 and 163).
pub(crate) fn nvidia(name: &str, sms: u32, optin_kib: u32) -> DeviceInfo {
    DeviceInfo {
        ordinal: 0,
        platform: Platform::Nvidia,
        code_objects: CodeObjectKind::Nvidia,
        name: name.into(),
        arch: "sm_90".into(),
        compute_units: sms,
        warp_size: 32,
        max_threads_per_block: 1024,
        max_grid: [i32::MAX as u32, 65_535, 65_535],
        shared_mem_per_block: 48 * 1024,
        shared_mem_per_block_optin: optin_kib * 1024,
        l2_cache_bytes: 50 << 20,
        total_memory: 80 << 30,
        pci_bus_id: 0,
        stream_ordered_memory: true,
        matrix_cores: MatrixCores::MmaSync,
        warpgroup_mma: true,
        dependent_launch: false,
        tensor_maps: true,
        drives_display: false,
    }
}
