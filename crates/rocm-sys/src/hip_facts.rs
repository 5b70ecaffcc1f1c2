//! What differs between HIP releases, as data: how `hipRuntimeGetVersion` encodes a version,
//! which exported symbols each release has, which device attributes its `hipDeviceGetAttribute`
//! answers, and where the device-properties struct keeps the target name.
//!
//! Every fact names where it comes from: AMD's headers and sources, and the symbol-version nodes
//! (`hipMallocAsync@@hip_5.1`) of AMD's own `libamdhip64` builds. The runtime decides from these
//! tables and the version the loaded library reports, never by calling and seeing what fails.

use std::fmt;

/// A HIP release as `hipRuntimeGetVersion` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct HipVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl HipVersion {
    pub const fn new(major: u32, minor: u32) -> Self {
        HipVersion { major, minor, patch: 0 }
    }

    /// Whether this release is `major.minor` or later (the patch is ignored).
    pub fn at_least(self, since: HipVersion) -> bool {
        (self.major, self.minor) >= (since.major, since.minor)
    }
}

impl fmt::Display for HipVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Which HIP implementation a loaded `libamdhip64` is, decoded from `hipRuntimeGetVersion`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HipRuntime {
    /// AMD's HIP for AMD GPUs. It reports `HIP_VERSION` = major * 10^7 + minor * 10^5 + patch
    /// (`hip/hip_version.h`; 5.2.3 reports 50221153, 6.4.3 reports 60443484).
    Amd(HipVersion),
    /// AMD's HIP for NVIDIA GPUs (`hip/nvidia_detail/nvidia_hip_runtime_api.h`), whose
    /// `hipRuntimeGetVersion` returns `cudaRuntimeGetVersion`: 1000 * major + 10 * minor of the
    /// CUDA runtime underneath (11080 for CUDA 11.8). It loads NVIDIA code objects.
    NvidiaCuda { cuda_major: u32, cuda_minor: u32 },
}

impl HipRuntime {
    /// Decodes the value `hipRuntimeGetVersion` wrote. HIP releases start at 1.0 (10^7), and
    /// CUDA runtime versions stay far below that, so the two encodings cannot be confused.
    pub fn decode(value: i32) -> Option<HipRuntime> {
        let value = u32::try_from(value).ok().filter(|v| *v > 0)?;
        if value >= 10_000_000 {
            Some(HipRuntime::Amd(HipVersion {
                major: value / 10_000_000,
                minor: value / 100_000 % 100,
                patch: value % 100_000,
            }))
        } else {
            Some(HipRuntime::NvidiaCuda { cuda_major: value / 1000, cuda_minor: value % 1000 / 10 })
        }
    }

    /// The HIP release whose symbols and attributes apply. AMD's HIP for NVIDIA ships with
    /// the HIP headers it was built from; rocmforge builds it from HIP 5.2's (`cargo xtask
    /// hip-nvidia`), whose wrappers cover every entry point the runtime binds.
    pub fn api_version(self) -> HipVersion {
        match self {
            HipRuntime::Amd(v) => v,
            HipRuntime::NvidiaCuda { .. } => HipVersion::new(5, 2),
        }
    }
}

impl fmt::Display for HipRuntime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HipRuntime::Amd(v) => write!(f, "HIP {v}"),
            HipRuntime::NvidiaCuda { cuda_major, cuda_minor } => {
                write!(f, "HIP for NVIDIA over the CUDA {cuda_major}.{cuda_minor} runtime")
            }
        }
    }
}

/// An exported HIP entry point the runtime uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SymbolFact {
    pub name: &'static str,
    /// The first release that exports it: the symbol-version node of AMD's `libamdhip64`
    /// (`nm -D libamdhip64.so.6`: `hipMallocAsync@@hip_5.1`, `hipGetDevicePropertiesR0600@@hip_6.0`,
    /// `hip_4.2` for everything older, the first node the library has).
    pub since: HipVersion,
    /// Bound when the library is opened (a missing one refuses the library, naming it); the
    /// others are looked up one by one and used only where the running release has them.
    pub required: bool,
}

const fn required(name: &'static str) -> SymbolFact {
    SymbolFact { name, since: HipVersion::new(4, 2), required: true }
}

const fn optional(name: &'static str, major: u32, minor: u32) -> SymbolFact {
    SymbolFact { name, since: HipVersion::new(major, minor), required: false }
}

/// Every HIP symbol rocmforge calls. The required ones are exactly the fields of the generated
/// `HipLibrary` (a unit test checks), the optional ones are `HipExtras`.
pub const HIP_SYMBOLS: &[SymbolFact] = &[
    required("hipInit"),
    required("hipDriverGetVersion"),
    required("hipRuntimeGetVersion"),
    required("hipGetDeviceCount"),
    required("hipSetDevice"),
    required("hipGetDevice"),
    required("hipDeviceGetName"),
    required("hipDeviceGetAttribute"),
    required("hipDeviceTotalMem"),
    required("hipMemGetInfo"),
    required("hipGetErrorName"),
    required("hipGetErrorString"),
    required("hipStreamCreateWithFlags"),
    required("hipStreamDestroy"),
    required("hipStreamSynchronize"),
    required("hipStreamQuery"),
    required("hipStreamWaitEvent"),
    required("hipMalloc"),
    required("hipFree"),
    required("hipMemcpyHtoDAsync"),
    required("hipMemcpyDtoHAsync"),
    required("hipMemcpyDtoDAsync"),
    required("hipMemsetD8Async"),
    required("hipMemsetD16Async"),
    required("hipMemsetD32Async"),
    required("hipEventCreateWithFlags"),
    required("hipEventDestroy"),
    required("hipEventRecord"),
    required("hipEventSynchronize"),
    required("hipEventQuery"),
    required("hipEventElapsedTime"),
    required("hipModuleLoadData"),
    required("hipModuleUnload"),
    required("hipModuleGetFunction"),
    required("hipModuleLaunchKernel"),
    required("hipFuncGetAttribute"),
    // The 5.x device-properties layout; from 6.0 this unversioned symbol keeps filling the old
    // layout for old binaries (`hipDeviceProp_tR0000`), and 6.0's headers rename the call.
    optional("hipGetDeviceProperties", 4, 2),
    optional("hipGetDevicePropertiesR0600", 6, 0),
    // The stream-ordered allocator.
    optional("hipMallocAsync", 5, 1),
    optional("hipFreeAsync", 5, 1),
    optional("hipDeviceGetDefaultMemPool", 5, 1),
    optional("hipMemPoolSetAttribute", 5, 1),
    optional("hipMemPoolTrimTo", 5, 1),
    // Stream capture and graphs (`hipStreamBeginCapture@@hip_4.3` and so on in 5.2.3's and
    // 6.4.3's libamdhip64; `hipGraphInstantiateWithFlags` came in 4.5, so the runtime
    // instantiates with the 4.3 call). Optional although every supported AMD release has them:
    // AMD's HIP for NVIDIA defines them only under nvcc, so a library built from its headers
    // by a host compiler lacks them unless it supplies its own (`xtask/hip_nvidia/exports.cpp`
    // does), and a library without them should still run everything but graphs.
    optional("hipStreamBeginCapture", 4, 3),
    optional("hipStreamEndCapture", 4, 3),
    optional("hipStreamIsCapturing", 4, 3),
    optional("hipGraphInstantiate", 4, 3),
    optional("hipGraphLaunch", 4, 3),
    optional("hipGraphExecDestroy", 4, 3),
    optional("hipGraphDestroy", 4, 3),
    // Cooperative launches of a module's function (`hipModuleLaunchCooperativeKernel@@hip_5.5`
    // in 6.4.3's libamdhip64; 5.2.3 exports only the host-stub `hipLaunchCooperativeKernel`, and
    // AMD's HIP 5.2 for NVIDIA has no module form).
    optional("hipModuleLaunchCooperativeKernel", 5, 5),
];

/// The entry points a HIP library needs for stream capture and graphs, all optional
/// ([`HIP_SYMBOLS`]): without any one of them the runtime reports graphs unsupported.
pub const GRAPH_SYMBOLS: &[&str] = &[
    "hipStreamBeginCapture",
    "hipStreamEndCapture",
    "hipStreamIsCapturing",
    "hipGraphInstantiate",
    "hipGraphLaunch",
    "hipGraphExecDestroy",
    "hipGraphDestroy",
];

/// The symbol fact for `name`.
pub fn symbol(name: &str) -> Option<&'static SymbolFact> {
    HIP_SYMBOLS.iter().find(|s| s.name == name)
}

/// A `hipDeviceAttribute_t` the runtime asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttributeFact {
    pub name: &'static str,
    /// Its value; the same in every release's header from 5.2 to 6.4 (`offsetof`-style check of
    /// Debian's 5.2.3, 5.7.1 and 6.4.3 headers; the unit test compares with the bindings).
    pub value: i32,
    /// The first release whose `hipDeviceGetAttribute` has a case for it, or `None` for never
    /// (its `default:` answers `hipErrorInvalidValue`). From AMD's `hip_device_runtime.cpp`
    /// (hipamd for 5.x, clr for 6.x and 7.x).
    pub amd_since: Option<HipVersion>,
    /// Whether AMD's HIP for NVIDIA (5.2 headers) maps it onto a CUDA attribute.
    pub nvidia: bool,
}

const fn attribute(name: &'static str, value: i32, amd: bool, nvidia: bool) -> AttributeFact {
    let amd_since = if amd { Some(HipVersion::new(5, 0)) } else { None };
    AttributeFact { name, value, amd_since, nvidia }
}

impl AttributeFact {
    /// Whether `runtime`'s `hipDeviceGetAttribute` answers this attribute.
    pub fn answered_by(&self, runtime: HipRuntime) -> bool {
        match runtime {
            HipRuntime::Amd(v) => self.amd_since.is_some_and(|since| v.at_least(since)),
            HipRuntime::NvidiaCuda { .. } => self.nvidia,
        }
    }
}

/// The attributes the runtime reads. `hipDeviceAttributeGcnArch` (10003 in 5.x, renamed
/// `hipDeviceAttributeUnused4` in 6.0) is listed because no release answers it: the target
/// name is only in the device-properties struct ([`PROPS_LAYOUTS`]).
pub const HIP_ATTRIBUTES: &[AttributeFact] = &[
    // AMD's runtime answers it (0: no watchdog); AMD's HIP for NVIDIA passes CUDA's on.
    attribute("hipDeviceAttributeKernelExecTimeout", 18, true, true),
    attribute("hipDeviceAttributeL2CacheSize", 19, true, true),
    attribute("hipDeviceAttributeComputeCapabilityMajor", 23, true, true),
    attribute("hipDeviceAttributeMaxGridDimX", 29, true, true),
    attribute("hipDeviceAttributeMaxGridDimY", 30, true, true),
    attribute("hipDeviceAttributeMaxGridDimZ", 31, true, true),
    attribute("hipDeviceAttributeMaxThreadsPerBlock", 56, true, true),
    attribute("hipDeviceAttributeComputeCapabilityMinor", 61, true, true),
    attribute("hipDeviceAttributeMultiprocessorCount", 63, true, true),
    attribute("hipDeviceAttributePciBusId", 67, true, true),
    attribute("hipDeviceAttributeMaxSharedMemoryPerBlock", 74, true, true),
    // No case for it before 6.0 (the 5.x properties have no such field; AMD gives a block all
    // of the LDS anyway). HIP 5.2 for NVIDIA has none either (nor a call to opt a module kernel
    // in), so the runtime asks the CUDA driver there.
    AttributeFact {
        name: "hipDeviceAttributeSharedMemPerBlockOptin",
        value: 75,
        amd_since: Some(HipVersion::new(6, 0)),
        nvidia: false,
    },
    attribute("hipDeviceAttributeWarpSize", 87, true, true),
    // Answered from 5.2 with the runtime's `HIP_MEM_POOL_SUPPORT` flag, which defaults to off
    // before ROCm 6.2 ([`MEMORY_POOLS_DEFAULT_SINCE`]); where it is 0 the runtime frees through
    // `hipFree` after synchronising the owning stream.
    attribute("hipDeviceAttributeMemoryPoolsSupported", 88, true, true),
    attribute("hipDeviceAttributeGcnArch", 10003, false, false),
];

/// The attribute fact for `name`.
pub fn attribute_fact(name: &str) -> Option<&'static AttributeFact> {
    HIP_ATTRIBUTES.iter().find(|a| a.name == name)
}

/// Where a device-properties layout keeps `gcnArchName` (`char[256]`, the full target ID such as
/// `gfx90a:sramecc+:xnack-`), and the entry point that fills that layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PropsLayout {
    /// The first release the layout is the current one for.
    pub since: HipVersion,
    pub symbol: &'static str,
    /// `sizeof` the struct.
    pub size: usize,
    /// `offsetof(.., gcnArchName)`.
    pub gcn_arch_name: usize,
}

/// Length of `gcnArchName` in every layout.
pub const GCN_ARCH_NAME_LEN: usize = 256;

/// The layouts, oldest first, measured with `sizeof`/`offsetof` against AMD's headers for the
/// AMD platform: `hipDeviceProp_t` of HIP 5.2.3 and 5.7.1 (792 bytes, name at 396) and
/// `hipDeviceProp_tR0600` of HIP 6.4.3 (1472 bytes, name at 1160).
pub const PROPS_LAYOUTS: &[PropsLayout] = &[
    PropsLayout {
        since: HipVersion::new(5, 0),
        symbol: "hipGetDeviceProperties",
        size: 792,
        gcn_arch_name: 396,
    },
    PropsLayout {
        since: HipVersion::new(6, 0),
        symbol: "hipGetDevicePropertiesR0600",
        size: 1472,
        gcn_arch_name: 1160,
    },
];

/// The properties layout a release fills, or `None` before 5.0.
pub fn props_layout(version: HipVersion) -> Option<&'static PropsLayout> {
    PROPS_LAYOUTS.iter().rev().find(|l| version.at_least(l.since))
}

/// The release from which `hipMallocAsync` memory pools are on by default: AMD's
/// `HIP_MEM_POOL_SUPPORT` flag (`rocclr/utils/flags.hpp`) is false in the 6.1-era sources and
/// true in the 6.3-era ones; ROCm 6.2 is where it turned. Before it a device reports
/// `hipDeviceAttributeMemoryPoolsSupported` = 0 unless the user sets the flag.
pub const MEMORY_POOLS_DEFAULT_SINCE: HipVersion = HipVersion::new(6, 2);

/// The AMDHSA code object versions (ELF `EI_ABIVERSION` + 2) the HIP runtime loads, each with the
/// first release that loads it; a version not listed loads on no release this table knows.
/// Where each comes from, and how sure it is:
/// - v4: the default of AMD's compilers for ROCm 4.x and 5.x (upstream clang made it the default
///   in D117845, and later v5 in llvm-project #79038), so every 5.x runtime loads it. 5.0 is the
///   oldest release rocmforge supports, not the first that had v4.
/// - v5: 5.0 is the figure this table was given, not confirmed here. What is confirmed is 5.2:
///   Debian's `libamdhip64.so.5.2.21153` (HIP 5.2.3) reads the v5-only hidden kernel arguments
///   (`hidden_block_count_x`, `hidden_heap_v1` are among its strings).
/// - v6: 6.4. ROCr before 6.3 refuses a v6 object as `HSA_STATUS_ERROR_INVALID_CODE_OBJECT`
///   (ROCR-Runtime issue #321), and generic targets, which exist only in v6 (LLVM AMDGPUUsage,
///   "Generic Processors"), need a HIP runtime that matches them to devices: AMD names 6.4 (as
///   this table was told; no release note checked here), and ROCm's own composable_kernel
///   waited for 6.4.1 to build them. A processor-specific v6 object may already load on 6.3;
///   not confirmed, so 6.4 for all of v6.
pub const CODE_OBJECT_VERSIONS: &[(u8, HipVersion)] =
    &[(4, HipVersion::new(5, 0)), (5, HipVersion::new(5, 0)), (6, HipVersion::new(6, 4))];

/// The first release whose HIP runtime loads code object `version` ([`CODE_OBJECT_VERSIONS`]),
/// or `None` for a version no known release loads.
pub fn code_object_version_since(version: u8) -> Option<HipVersion> {
    CODE_OBJECT_VERSIONS.iter().find(|(v, _)| *v == version).map(|&(_, since)| since)
}

/// The code object versions `release` loads, oldest first.
pub fn code_object_versions_loaded_by(release: HipVersion) -> Vec<u8> {
    CODE_OBJECT_VERSIONS.iter().filter(|(_, since)| release.at_least(*since)).map(|&(v, _)| v).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hip::{hipDeviceAttribute_t as Attr, hipDeviceProp_t};

    #[test]
    fn versions_decode_by_encoding() {
        let amd = |major, minor, patch| Some(HipRuntime::Amd(HipVersion { major, minor, patch }));
        assert_eq!(HipRuntime::decode(50221153), amd(5, 2, 21153));
        assert_eq!(HipRuntime::decode(60443484), amd(6, 4, 43484));
        assert_eq!(HipRuntime::decode(70051831), amd(7, 0, 51831));
        assert_eq!(HipRuntime::decode(11080), Some(HipRuntime::NvidiaCuda { cuda_major: 11, cuda_minor: 8 }));
        assert_eq!(HipRuntime::decode(12040), Some(HipRuntime::NvidiaCuda { cuda_major: 12, cuda_minor: 4 }));
        assert_eq!(HipRuntime::decode(0), None);
        assert_eq!(HipRuntime::decode(-1), None);
        assert_eq!(HipRuntime::decode(60443484).unwrap().to_string(), "HIP 6.4.43484");
        assert_eq!(
            HipRuntime::decode(11080).unwrap().to_string(),
            "HIP for NVIDIA over the CUDA 11.8 runtime"
        );
    }

    #[test]
    fn the_properties_layout_follows_the_major_version() {
        let v = |major, minor| HipVersion { major, minor, patch: 1 };
        assert_eq!(props_layout(v(4, 5)), None);
        assert_eq!(props_layout(v(5, 2)).unwrap().symbol, "hipGetDeviceProperties");
        assert_eq!(props_layout(v(5, 7)).unwrap().gcn_arch_name, 396);
        assert_eq!(props_layout(v(6, 0)).unwrap().symbol, "hipGetDevicePropertiesR0600");
        assert_eq!(props_layout(v(7, 1)).unwrap().gcn_arch_name, 1160);
        for layout in PROPS_LAYOUTS {
            assert!(layout.gcn_arch_name + GCN_ARCH_NAME_LEN <= layout.size, "{layout:?}");
            assert!(symbol(layout.symbol).is_some_and(|s| layout.since.at_least(s.since)), "{layout:?}");
        }
    }

    #[test]
    fn the_5x_layout_matches_the_bindings() {
        // The committed bindings come from HIP 5.2's headers.
        assert_eq!(std::mem::size_of::<hipDeviceProp_t>(), PROPS_LAYOUTS[0].size);
        assert_eq!(std::mem::offset_of!(hipDeviceProp_t, gcnArchName), PROPS_LAYOUTS[0].gcn_arch_name);
    }

    #[test]
    fn attribute_values_match_the_bindings() {
        let bound = [
            (Attr::hipDeviceAttributeKernelExecTimeout, "hipDeviceAttributeKernelExecTimeout"),
            (Attr::hipDeviceAttributeL2CacheSize, "hipDeviceAttributeL2CacheSize"),
            (Attr::hipDeviceAttributeComputeCapabilityMajor, "hipDeviceAttributeComputeCapabilityMajor"),
            (Attr::hipDeviceAttributeMaxGridDimX, "hipDeviceAttributeMaxGridDimX"),
            (Attr::hipDeviceAttributeMaxGridDimY, "hipDeviceAttributeMaxGridDimY"),
            (Attr::hipDeviceAttributeMaxGridDimZ, "hipDeviceAttributeMaxGridDimZ"),
            (Attr::hipDeviceAttributeMaxThreadsPerBlock, "hipDeviceAttributeMaxThreadsPerBlock"),
            (Attr::hipDeviceAttributeComputeCapabilityMinor, "hipDeviceAttributeComputeCapabilityMinor"),
            (Attr::hipDeviceAttributeMultiprocessorCount, "hipDeviceAttributeMultiprocessorCount"),
            (Attr::hipDeviceAttributePciBusId, "hipDeviceAttributePciBusId"),
            (Attr::hipDeviceAttributeMaxSharedMemoryPerBlock, "hipDeviceAttributeMaxSharedMemoryPerBlock"),
            (Attr::hipDeviceAttributeSharedMemPerBlockOptin, "hipDeviceAttributeSharedMemPerBlockOptin"),
            (Attr::hipDeviceAttributeWarpSize, "hipDeviceAttributeWarpSize"),
            (Attr::hipDeviceAttributeMemoryPoolsSupported, "hipDeviceAttributeMemoryPoolsSupported"),
            (Attr::hipDeviceAttributeGcnArch, "hipDeviceAttributeGcnArch"),
        ];
        assert_eq!(bound.len(), HIP_ATTRIBUTES.len());
        for (attr, name) in bound {
            let fact = attribute_fact(name).unwrap_or_else(|| panic!("{name} has no fact"));
            assert_eq!(fact.value, attr.0 as i32, "{name}");
        }
        let gcn_arch = attribute_fact("hipDeviceAttributeGcnArch").unwrap();
        let optin = attribute_fact("hipDeviceAttributeSharedMemPerBlockOptin").unwrap();
        let amd = |major, minor| HipRuntime::Amd(HipVersion { major, minor, patch: 0 });
        let nvidia = HipRuntime::NvidiaCuda { cuda_major: 11, cuda_minor: 8 };
        for runtime in [amd(5, 2), amd(6, 4), amd(7, 0), nvidia] {
            assert!(!gcn_arch.answered_by(runtime), "no release answers GcnArch: {runtime}");
        }
        assert!(!optin.answered_by(amd(5, 7)) && optin.answered_by(amd(6, 0)) && !optin.answered_by(nvidia));
        let warp = attribute_fact("hipDeviceAttributeWarpSize").unwrap();
        assert!(warp.answered_by(amd(5, 2)) && warp.answered_by(nvidia));
    }

    #[test]
    fn code_object_versions_by_release() {
        let v = |major, minor| HipVersion { major, minor, patch: 7 };
        assert_eq!(code_object_versions_loaded_by(v(5, 0)), [4, 5]);
        assert_eq!(code_object_versions_loaded_by(v(5, 7)), [4, 5]);
        assert_eq!(code_object_versions_loaded_by(v(6, 3)), [4, 5]);
        assert_eq!(code_object_versions_loaded_by(v(6, 4)), [4, 5, 6]);
        assert_eq!(code_object_versions_loaded_by(v(7, 0)), [4, 5, 6]);
        assert!(code_object_versions_loaded_by(v(4, 5)).is_empty());
        assert_eq!(code_object_version_since(6), Some(HipVersion::new(6, 4)));
        assert_eq!(code_object_version_since(3), None);
        assert_eq!(code_object_version_since(7), None);
        assert!(CODE_OBJECT_VERSIONS.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1));
    }

    #[test]
    fn graph_symbols_are_optional_facts_of_hip_4_3() {
        for name in GRAPH_SYMBOLS {
            let fact = symbol(name).unwrap_or_else(|| panic!("{name} has no fact"));
            assert!(!fact.required && fact.since == HipVersion::new(4, 3), "{fact:?}");
        }
        // Every release rocmforge supports, and HIP for NVIDIA's 5.2 headers, are past it.
        let nvidia = HipRuntime::NvidiaCuda { cuda_major: 11, cuda_minor: 8 };
        assert!(nvidia.api_version().at_least(HipVersion::new(4, 3)));
    }

    #[test]
    fn the_required_symbols_are_the_generated_library_fields() {
        // `HipLibrary` resolves each of its fields when the library opens.
        let generated = include_str!("hip.rs");
        let start = generated.find("pub struct HipLibrary {").expect("HipLibrary in hip.rs");
        let body = &generated[start..start + generated[start..].find("\n}").unwrap()];
        let mut fields: Vec<&str> = body
            .lines()
            .filter_map(|l| l.trim().strip_prefix("pub "))
            .filter_map(|l| l.split(':').next())
            .filter(|n| n.starts_with("hip"))
            .collect();
        fields.sort_unstable();
        let mut required: Vec<&str> = HIP_SYMBOLS.iter().filter(|s| s.required).map(|s| s.name).collect();
        required.sort_unstable();
        assert_eq!(fields, required);
        let mut names: Vec<&str> = HIP_SYMBOLS.iter().map(|s| s.name).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), HIP_SYMBOLS.len(), "a symbol is listed twice");
    }
}
