//! Which targets each `kernels/*.hip` file is built for.
//!
//! A file is built for every target of every platform, unless it is the implementation of a
//! family for one kind of chip (flash attention's matrix-core kernels): then it is built for those
//! chips alone, so no target compiles, and no module carries, code it can never run. Such a file
//! refuses to compile for any other device target (`#error`), so this table and the sources
//! cannot disagree silently. Launchers pick those modules only on devices that report the
//! capability (`DeviceInfo::matrix_cores`, `warpgroup_mma`).

use rocm_runtime::Platform;

/// The chips a restricted file is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Only {
    /// NVIDIA sm_80 and later (`mma.sync`, `cp.async`, `ldmatrix`), PTX included.
    NvidiaMmaSync,
    /// NVIDIA sm_90a alone, as machine code: its kernels use Hopper's arch-specific `wgmma`,
    /// which PTX for later GPUs cannot carry.
    NvidiaSm90a,
    /// AMD CDNA, the processors with MFMA that the kernel enables it for (its `RF_FLASH_MFMA`).
    AmdMfma,
}

/// The restricted files, by stem; every other file is built for every target.
const RESTRICTED: &[(&str, Only)] =
    &[("flash_mma", Only::NvidiaMmaSync), ("flash_wgmma", Only::NvidiaSm90a), ("flash_mfma", Only::AmdMfma)];

/// AMD processors with the MFMA instructions `flash_mfma.hip` uses.
const MFMA_PROCESSORS: &[&str] = &["gfx908", "gfx90a", "gfx940", "gfx941", "gfx942", "gfx950"];

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
        let processor = target.split(':').next().unwrap_or_default();
        self == Only::AmdMfma && MFMA_PROCESSORS.contains(&processor)
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
    fn the_mfma_list_matches_the_kernel() {
        // flash_mfma.hip enables its body (and compiles at all) for exactly these processors.
        let source = std::fs::read_to_string(crate::workspace_root().join("kernels/flash_mfma.hip")).unwrap();
        let guard =
            source.lines().skip_while(|l| !l.starts_with("#if RF_PLATFORM_AMD")).take(2).collect::<String>();
        let mut named: Vec<&str> =
            guard.split("defined(__").skip(1).filter_map(|s| s.split("__)").next()).collect();
        named.sort();
        let mut listed = MFMA_PROCESSORS.to_vec();
        listed.sort();
        assert_eq!(named, listed, "kernels/flash_mfma.hip's RF_FLASH_MFMA guard and MFMA_PROCESSORS differ");
    }
}
