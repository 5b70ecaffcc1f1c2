//! What a device is: the facts read from it once, through attribute queries.

use crate::platform::Platform;

/// A device's fixed properties. Kernels size themselves from these (never from constants:
/// the warp is 32 lanes on NVIDIA and 64 or 32 on AMD).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceInfo {
    pub ordinal: usize,
    /// The host API the device is driven through.
    pub platform: Platform,
    /// The kind of kernel binary it loads. Not the same question as the host API: AMD's HIP for
    /// NVIDIA drives an NVIDIA GPU through HIP, and it loads NVIDIA code objects.
    pub code_objects: CodeObjectKind,
    pub name: String,
    /// Compilation target: `sm_90`, or an AMD GPU's full target ID with its features
    /// (`gfx90a:sramecc+:xnack-`), which is what its code objects are checked against.
    pub arch: String,
    /// Streaming multiprocessors (NVIDIA) or compute units (AMD).
    pub compute_units: u32,
    pub warp_size: u32,
    pub max_threads_per_block: u32,
    pub max_grid: [u32; 3],
    /// Shared memory (LDS) a block gets without opting in.
    pub shared_mem_per_block: u32,
    /// Shared memory a block may opt in to (equal to the above on AMD).
    pub shared_mem_per_block_optin: u32,
    pub l2_cache_bytes: u32,
    pub total_memory: u64,
    pub pci_bus_id: u32,
    /// Whether allocations are stream-ordered (memory pools); otherwise frees wait for the
    /// owning stream.
    pub stream_ordered_memory: bool,
    /// Which matrix-core instructions the kernels' fast paths may use on this device. A
    /// capability, not a platform: launchers pick a fast kernel by it and keep the portable
    /// one for [`MatrixCores::None`].
    pub matrix_cores: MatrixCores,
    /// Hopper's warpgroup MMA (`wgmma`): an sm_90 device, whose code objects the kernels build
    /// as sm_90a SASS (which runs there only). Launchers take the warpgroup kernels by this.
    pub warpgroup_mma: bool,
    /// Programmatic dependent launch (NVIDIA sm_90+ through the CUDA driver): a launch marked
    /// [`dependent`](crate::Launch::dependent) may start while the kernel ahead of it on the
    /// stream is still running, and waits for it inside (`rf_wait_prior_grid`). Elsewhere such
    /// a launch is an ordinary one.
    pub dependent_launch: bool,
    /// Cooperative launches ([`crate::Launch::cooperative`]: every block resident at once, or
    /// the launch is refused), which kernels with grid-wide barriers need: the CUDA driver on
    /// devices that report them; HIP from 5.5 (`hipModuleLaunchCooperativeKernel`), so not
    /// AMD's HIP 5.2 for NVIDIA.
    pub cooperative_launch: bool,
    /// Tensor maps (`crate::TensorMap`, the TMA engine's descriptors, NVIDIA sm_90+): made by
    /// the CUDA driver only, so false through HIP, AMD's HIP for NVIDIA included, even on a
    /// Hopper GPU. Launchers of kernels that copy through one take another path without them.
    pub tensor_maps: bool,
    /// Whether the device drives a display (a desktop's GPU, shared with the compositor):
    /// NVIDIA reports the display watchdog (the kernel-execution timeout); on AMD, sysfs says
    /// whether the card is the boot VGA device or has a connected connector. GPU test runs
    /// default to a small budget and one test at a time on such a device.
    pub drives_display: bool,
}

/// The kind of kernel binary a device loads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CodeObjectKind {
    /// AMDGPU code objects (hipcc `--genco` offload bundles), checked against the device's target ID.
    Amd,
    /// NVIDIA fatbins (SASS per SM arch plus PTX).
    Nvidia,
}

impl CodeObjectKind {
    /// Lower-case name, also the folder `cargo xtask kernels` writes them to (`amd`, `nvidia`).
    pub fn name(self) -> &'static str {
        match self {
            CodeObjectKind::Amd => "amd",
            CodeObjectKind::Nvidia => "nvidia",
        }
    }
}

impl std::fmt::Display for CodeObjectKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

/// Matrix-core instruction families the kernels have fast paths for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatrixCores {
    /// No fast path: portable kernels only.
    None,
    /// NVIDIA `mma.sync` with f16/bf16 inputs and f32 accumulation (sm_80 and later).
    MmaSync,
    /// AMD CDNA MFMA (`v_mfma_f32_16x16x16f16` / `..bf16_1k`, f32 accumulation) on 64-lane
    /// wavefronts: gfx908 (CDNA 1), gfx90a (CDNA 2), gfx940-gfx942 (CDNA 3), gfx950 (CDNA 4),
    /// the targets the kernels build an MFMA body for.
    Mfma,
}

impl MatrixCores {
    /// What an NVIDIA device of compute capability `major.x` has a fast path for: mma.sync
    /// m16n8k16 with bf16 inputs needs sm_80 (Ampere) or later.
    pub fn for_nvidia_major(major: u32) -> MatrixCores {
        if major >= 8 { MatrixCores::MmaSync } else { MatrixCores::None }
    }

    /// What an AMD device of compilation target `arch` (`gfx90a`, or with target features:
    /// `gfx90a:sramecc+:xnack-`) has a fast path for.
    pub fn for_amd_arch(arch: &str) -> MatrixCores {
        let base = arch.split(':').next().unwrap_or("");
        match base {
            "gfx908" | "gfx90a" | "gfx940" | "gfx941" | "gfx942" | "gfx950" => MatrixCores::Mfma,
            _ => MatrixCores::None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::MatrixCores;

    #[test]
    fn amd_matrix_cores_by_arch() {
        for arch in ["gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx950", "gfx90a:sramecc+:xnack-"] {
            assert_eq!(MatrixCores::for_amd_arch(arch), MatrixCores::Mfma, "{arch}");
        }
        for arch in ["gfx906", "gfx1030", "gfx1100", "gfx1201", "", "sm_90"] {
            assert_eq!(MatrixCores::for_amd_arch(arch), MatrixCores::None, "{arch}");
        }
    }
}

/// Device memory as the driver reports it at one moment (other processes included).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryInfo {
    pub free: u64,
    pub total: u64,
}
