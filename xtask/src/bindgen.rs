//! `cargo xtask bindgen [--check]`: regenerate rocm-sys's committed bindings, and the Rust side
//! of the kernels' ABI headers ([`abi_bindgen`]).
//!
//! The bindings are generated once, by a developer, and committed: building rocmforge never
//! needs libclang or the HIP/CUDA headers. `--check` regenerates into memory and fails when the
//! committed files differ, so a header or allowlist change cannot drift silently (CI runs it).
//! It also compares what the HIP binding (from HIP 5.2) relies on with the newer HIP headers of
//! the `cargo xtask amd-toolchain` chroot, when that exists ([`crate::hip_drift`]).

use std::path::Path;

use crate::flags::Flags;
use crate::{Result, abi_bindgen, hip_drift, toolchain, workspace_root};

const USAGE: &str = "usage: cargo xtask bindgen [--check]";

/// One generated file: which header, which items, which loader struct.
pub(crate) struct Binding {
    /// Output file, relative to `crates/rocm-sys/src/`.
    pub(crate) file: &'static str,
    /// Wrapper header, relative to `crates/rocm-sys/wrapper/`.
    pub(crate) header: &'static str,
    /// Name of the generated libloading struct.
    pub(crate) library: &'static str,
    pub(crate) functions: &'static [&'static str],
    /// Enums the driver returns or takes: generated as integer newtypes so an unknown value
    /// from a newer driver is just another number, never undefined behaviour.
    pub(crate) newtype_enums: &'static [&'static str],
    pub(crate) types: &'static [&'static str],
    pub(crate) vars: &'static [&'static str],
}

/// The HIP runtime API subset rocm-runtime uses, every release from 5.x on: the required entry
/// points of `rocm_sys::hip_facts::HIP_SYMBOLS`. The optional ones (the stream-ordered allocator,
/// the versioned device-properties calls) are looked up one by one (`rocm_sys::HipExtras`).
/// Device-wide synchronisation (`hipDeviceSynchronize`, `hipDeviceReset`) is deliberately
/// absent: it cannot be called.
pub(crate) const HIP: Binding = Binding {
    file: "hip.rs",
    header: "hip.h",
    library: "HipLibrary",
    functions: &[
        "hipInit",
        "hipDriverGetVersion",
        "hipRuntimeGetVersion",
        "hipGetDeviceCount",
        "hipSetDevice",
        "hipGetDevice",
        "hipDeviceGetName",
        "hipDeviceGetAttribute",
        "hipDeviceTotalMem",
        "hipMemGetInfo",
        "hipGetErrorName",
        "hipGetErrorString",
        "hipStreamCreateWithFlags",
        "hipStreamDestroy",
        "hipStreamSynchronize",
        "hipStreamQuery",
        "hipStreamWaitEvent",
        "hipMalloc",
        "hipFree",
        "hipMemcpyHtoDAsync",
        "hipMemcpyDtoHAsync",
        "hipMemcpyDtoDAsync",
        "hipMemsetD8Async",
        "hipMemsetD16Async",
        "hipMemsetD32Async",
        "hipEventCreateWithFlags",
        "hipEventDestroy",
        "hipEventRecord",
        "hipEventSynchronize",
        "hipEventQuery",
        "hipEventElapsedTime",
        "hipModuleLoadData",
        "hipModuleUnload",
        "hipModuleGetFunction",
        "hipModuleLaunchKernel",
        "hipFuncGetAttribute",
    ],
    newtype_enums: &[
        "hipError_t",
        "hipDeviceAttribute_t",
        "hipFunction_attribute",
        "hipStreamCaptureMode",
        "hipStreamCaptureStatus",
    ],
    // The 5.x device-properties layout, so a unit test can hold `rocm_sys::hip_facts` to it; the
    // handle and enum types of the optional stream-capture and graph calls (`HipExtras`).
    types: &[
        "hipDeviceProp_t",
        "hipGraph_t",
        "hipGraphExec_t",
        "hipGraphNode_t",
        "hipStreamCaptureMode",
        "hipStreamCaptureStatus",
    ],
    vars: &["hipStreamNonBlocking", "hipEventDefault", "hipEventDisableTiming"],
};

/// The CUDA driver API subset HIP maps to on NVIDIA. Names are the exported symbols
/// (`cuMemAlloc_v2`, not the `cuMemAlloc` macro). `cuCtxSynchronize` is deliberately absent.
const CUDA: Binding = Binding {
    file: "cuda.rs",
    header: "cuda.h",
    library: "CudaLibrary",
    functions: &[
        "cuInit",
        "cuDriverGetVersion",
        "cuDeviceGetCount",
        "cuDeviceGet",
        "cuDeviceGetName",
        "cuDeviceGetAttribute",
        "cuDeviceTotalMem_v2",
        "cuDevicePrimaryCtxRetain",
        "cuDevicePrimaryCtxRelease_v2",
        "cuCtxSetCurrent",
        "cuCtxGetCurrent",
        "cuMemGetInfo_v2",
        "cuGetErrorName",
        "cuGetErrorString",
        "cuStreamCreate",
        "cuStreamDestroy_v2",
        "cuStreamSynchronize",
        "cuStreamQuery",
        "cuStreamWaitEvent",
        "cuMemAlloc_v2",
        "cuMemFree_v2",
        "cuMemAllocAsync",
        "cuMemFreeAsync",
        // The default pool keeps freed memory (up to the ledger's budget) instead of unmapping
        // it at every synchronisation (`DeviceDriver::retain_freed_memory`).
        "cuDeviceGetDefaultMemPool",
        "cuMemPoolSetAttribute",
        "cuMemPoolTrimTo",
        "cuMemcpyHtoDAsync_v2",
        "cuMemcpyDtoHAsync_v2",
        "cuMemcpyDtoDAsync_v2",
        "cuMemsetD8Async",
        "cuMemsetD16Async",
        "cuMemsetD32Async",
        "cuEventCreate",
        "cuEventDestroy_v2",
        "cuEventRecord",
        "cuEventSynchronize",
        "cuEventQuery",
        "cuModuleLoadData",
        "cuModuleUnload",
        "cuModuleGetFunction",
        "cuLaunchKernel",
        // Launches that may begin before the kernel ahead of them ends (programmatic dependent
        // launch, sm_90+; `Launch::dependent`): CUDA 12.0's.
        "cuLaunchKernelEx",
        "cuFuncGetAttribute",
        "cuFuncSetAttribute",
        // Stream capture and graphs (`rocm_runtime::Graph`). cuda.h's `cuStreamBeginCapture` and
        // `cuGraphInstantiate` are macros for these exported names; the newest of them,
        // cuGraphInstantiateWithFlags, is CUDA 11.4's.
        "cuStreamBeginCapture_v2",
        "cuStreamEndCapture",
        "cuStreamIsCapturing",
        "cuGraphInstantiateWithFlags",
        "cuGraphLaunch",
        "cuGraphExecDestroy",
        "cuGraphDestroy",
        // TMA tensor maps (`rocm_runtime::TensorMap`, sm_90+): CUDA 12.0's.
        "cuTensorMapEncodeTiled",
    ],
    newtype_enums: &[
        "cudaError_enum",
        "CUtensorMapDataType_enum",
        "CUtensorMapInterleave_enum",
        "CUtensorMapSwizzle_enum",
        "CUtensorMapL2promotion_enum",
        "CUtensorMapFloatOOBfill_enum",
        "CUdevice_attribute_enum",
        "CUfunction_attribute_enum",
        "CUstream_flags_enum",
        "CUevent_flags_enum",
        "CUstreamCaptureMode_enum",
        "CUstreamCaptureStatus_enum",
        "CUmemPool_attribute_enum",
        "CUlaunchAttributeID_enum",
    ],
    types: &["CUstream_flags_enum", "CUevent_flags_enum", "CUmemPool_attribute_enum"],
    vars: &[],
};

/// The cuBLAS subset of the vendor GEMM (`rocm_runtime::Blas` on NVIDIA): a handle bound to
/// a stream and a user workspace per call, and the mixed-precision GEMMs with f32 compute.
/// Headers: a CUDA toolkit, or NVIDIA's `nvidia-cublas` wheel beside the nvcc wheels.
const CUBLAS: Binding = Binding {
    file: "cublas.rs",
    header: "cublas.h",
    library: "CublasLibrary",
    functions: &[
        "cublasCreate_v2",
        "cublasDestroy_v2",
        "cublasSetStream_v2",
        "cublasSetWorkspace_v2",
        "cublasGetStatusName",
        "cublasGetStatusString",
        "cublasGemmEx",
        "cublasGemmStridedBatchedEx",
    ],
    newtype_enums: &[
        "cublasStatus_t",
        "cublasOperation_t",
        "cublasComputeType_t",
        "cublasGemmAlgo_t",
        "cudaDataType_t",
    ],
    types: &[],
    vars: &[],
};

pub fn run(args: &[String]) -> Result<()> {
    let mut flags = Flags::new(args, USAGE);
    let check = flags.switch("--check");
    flags.finish()?;
    let root = workspace_root();
    let sys = root.join("crates/rocm-sys");
    let mut stale = Vec::new();
    let mut hip_text = None;
    for binding in [&HIP, &CUDA, &CUBLAS] {
        let include = match binding.header {
            "hip.h" => toolchain::hip_include_dir(),
            _ => toolchain::cuda_include_dir(),
        }
        .ok_or_else(|| {
            format!("headers for {} not found: {}", binding.header, toolchain::install_hint(binding.header))
        })?;
        if binding.header == "cublas.h" && !include.join("cublas_api.h").is_file() {
            return Err(format!(
                "cublas_api.h not found in {}: install the CUDA toolkit's cuBLAS or `pip install nvidia-cublas==13.0.*`",
                include.display()
            )
            .into());
        }
        let text = generate(binding, &sys.join("wrapper").join(binding.header), &include)?;
        let out = sys.join("src").join(binding.file);
        if check {
            let committed = std::fs::read_to_string(&out).unwrap_or_default();
            if committed != text {
                stale.push(out);
            }
            if binding.file == HIP.file {
                hip_text = Some((text, include));
            }
        } else {
            std::fs::write(&out, text).map_err(|e| format!("writing {}: {e}", out.display()))?;
            println!("wrote {}", out.display());
        }
    }
    stale.extend(abi_bindgen::run(&root, check)?);
    if !stale.is_empty() {
        let names: Vec<_> = stale.iter().map(|p| p.display().to_string()).collect();
        return Err(format!(
            "committed bindings differ from a fresh generation: {}; run `cargo xtask bindgen`",
            names.join(", ")
        )
        .into());
    }
    if check {
        println!("bindings are up to date");
    }
    if let Some((text, include)) = hip_text {
        hip_drift::check(&text, &include)?;
    }
    Ok(())
}

fn generate(binding: &Binding, header: &Path, include: &Path) -> Result<String> {
    let bindings = builder(binding, header, include)
        .generate()
        .map_err(|e| format!("bindgen failed on {}: {e}", header.display()))?;
    Ok(bindings.to_string())
}

/// The configuration every binding is generated with; `hip_drift` adds to it.
pub(crate) fn builder(binding: &Binding, header: &Path, include: &Path) -> bindgen::Builder {
    let mut builder = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .clang_arg(format!("-I{}", include.display()))
        .dynamic_library_name(binding.library)
        .dynamic_link_require_all(true)
        .layout_tests(false)
        .derive_default(true)
        .generate_comments(false)
        .prepend_enum_name(false)
        .raw_line("// Generated by `cargo xtask bindgen`; do not edit by hand.")
        .raw_line("#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals)]")
        .raw_line("#![allow(dead_code, unsafe_op_in_unsafe_fn, missing_debug_implementations, clippy::all, clippy::undocumented_unsafe_blocks)]");
    for f in binding.functions {
        builder = builder.allowlist_function(f);
    }
    for e in binding.newtype_enums {
        builder = builder.newtype_enum(e);
    }
    for t in binding.types {
        builder = builder.allowlist_type(t);
    }
    for v in binding.vars {
        builder = builder.allowlist_var(v);
    }
    builder
}
