//! Which targets each `kernels/*.hip` file is built for.
//!
//! A file is built for every target of every platform, unless it is the implementation of a
//! family for one kind of chip (flash attention's matrix-core kernels): then it is built for those
//! chips alone, so no target compiles, and no module carries, code it can never run. Such a file
//! refuses to compile for any other device target (`#error`), so this table and the sources
//! cannot disagree silently. Launchers pick those modules only on devices that report the
//! capability (`DeviceInfo::matrix_cores`, `warpgroup_mma`).

use rocm_runtime::{MatrixCores, Platform};

/// The chips a restricted file is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Only {
    /// NVIDIA sm_80 and later (`mma.sync`, `cp.async`, `ldmatrix`), PTX included.
    NvidiaMmaSync,
    /// NVIDIA sm_90a alone, as machine code: its kernels use Hopper's arch-specific `wgmma`,
    /// which PTX for later GPUs cannot carry.
    NvidiaSm90a,
    /// AMD CDNA: the processors the runtime reports MFMA for (`MatrixCores::for_amd_arch`),
    /// which the kernel enables its body for (its `RF_FLASH_MFMA`).
    AmdMfma,
}

/// The restricted files, by stem; every other file is built for every target.
const RESTRICTED: &[(&str, Only)] = &[
    ("flash_mma", Only::NvidiaMmaSync),
    ("flash_wgmma", Only::NvidiaSm90a),
    ("flash_mfma", Only::AmdMfma),
    ("persistent_mlp", Only::NvidiaMmaSync),
    ("quant_gemm_wgmma", Only::NvidiaSm90a),
    ("quant_matmul_mma", Only::NvidiaMmaSync),
    ("quant_matvec_mma", Only::NvidiaMmaSync),
];

/// The restriction of `kernels/<stem>.hip`, if it has one.
pub fn only(stem: &str) -> Option<Only> {
    RESTRICTED.iter().find(|(s, _)| *s == stem).map(|(_, only)| *only)
}

impl Only {
    pub fn platform(self) -> Platform {
        match self {
            Only::NvidiaMmaSync | Only::NvidiaSm90a => Platform::Nvidia,
            Only::AmdMfma => Platform::Amd,
        }
    }

    /// Whether an SM arch (`80`, `90a`: number and suffix) is kept.
    pub fn keeps_sm(self, number: u32, suffix: &str) -> bool {
        match self {
            Only::NvidiaMmaSync => number >= 80,
            Only::NvidiaSm90a => number == 90 && suffix == "a",
            Only::AmdMfma => false,
        }
    }

    /// Whether a gfx target ID (`gfx90a`, `gfx942:xnack-`) is kept.
    pub fn keeps_gfx(self, target: &str) -> bool {
        self == Only::AmdMfma && MatrixCores::for_amd_arch(target) == MatrixCores::Mfma
    }

    /// Whether the fatbin carries PTX (for GPUs newer than the list) besides machine code.
    pub fn ptx(self) -> bool {
        self != Only::NvidiaSm90a
    }

    pub fn describe(self) -> &'static str {
        match self {
            Only::NvidiaMmaSync => "NVIDIA sm_80 and later",
            Only::NvidiaSm90a => "NVIDIA sm_90a",
            Only::AmdMfma => "AMD targets with MFMA",
        }
    }
}

/// The table as the build stamp records it: a change to it rebuilds the objects.
pub fn stamp_line() -> String {
    let files: Vec<String> =
        RESTRICTED.iter().map(|(stem, only)| format!("{stem}: {}", only.describe())).collect();
    format!("restricted files: {}\n", files.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restricted_files_exist_and_unrestricted_ones_build_everywhere() {
        let kernels = crate::workspace_root().join("kernels");
        for (stem, _) in RESTRICTED {
            assert!(
                kernels.join(format!("{stem}.hip")).is_file(),
                "kernels/{stem}.hip is listed but missing"
            );
        }
        assert_eq!(only("flash_portable"), None);
        assert_eq!(only("axpy"), None);
        // The fused quantised matrix-vector product is portable SIMT code: every target.
        assert_eq!(only("quant_matvec"), None);
    }

    #[test]
    fn target_rules() {
        let mma = Only::NvidiaMmaSync;
        assert!(mma.keeps_sm(80, "") && mma.keeps_sm(90, "a") && !mma.keeps_sm(75, "") && mma.ptx());
        let wg = Only::NvidiaSm90a;
        assert!(wg.keeps_sm(90, "a") && !wg.keeps_sm(90, "") && !wg.keeps_sm(80, "") && !wg.ptx());
        let mfma = Only::AmdMfma;
        assert!(mfma.keeps_gfx("gfx90a") && mfma.keeps_gfx("gfx942:xnack-") && mfma.keeps_gfx("gfx950"));
        for other in ["gfx1100", "gfx1030", "gfx11-generic", "gfx9-4-generic", "gfx900"] {
            assert!(!mfma.keeps_gfx(other), "{other}");
        }
        assert!(!mma.keeps_gfx("gfx90a") && !mfma.keeps_sm(90, "a"));
        assert_eq!(mfma.platform(), Platform::Amd);
        assert_eq!(wg.platform(), Platform::Nvidia);
    }

    #[test]
    fn the_kernel_enables_mfma_where_the_runtime_reports_it() {
        // flash_mfma.hip enables its body (and compiles at all) for the processors its guard
        // names: they must be the runtime's MFMA processors, among every target xtask knows.
        let source = std::fs::read_to_string(crate::workspace_root().join("kernels/flash_mfma.hip")).unwrap();
        let guard =
            source.lines().skip_while(|l| !l.starts_with("#if RF_PLATFORM_AMD")).take(2).collect::<String>();
        let named: Vec<&str> =
            guard.split("defined(__").skip(1).filter_map(|s| s.split("__)").next()).collect();
        for processor in &named {
            assert!(Only::AmdMfma.keeps_gfx(processor), "the kernel enables MFMA on {processor}");
        }
        let known = crate::kernels::AMD_TARGETS.iter().chain(&["gfx908", "gfx940", "gfx941", "gfx900"]);
        for target in known.filter(|t| !named.contains(t)) {
            assert!(
                !Only::AmdMfma.keeps_gfx(target),
                "{target} is built for MFMA but the kernel has no body there"
            );
        }
    }
}
