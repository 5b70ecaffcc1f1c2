//! `cargo xtask hip-nvidia [--out DIR]`: a `libamdhip64` for NVIDIA GPUs, made of AMD's own HIP
//! implementation for NVIDIA, so the runtime's HIP driver runs (and the GPU suite passes through
//! it) on the NVIDIA machines the project has.
//!
//! AMD's `hip/nvidia_detail/nvidia_hip_runtime_api.h` (Debian's `libamdhip64-dev`, HIP 5.2) holds
//! the HIP API as `inline static` wrappers of the CUDA runtime; `xtask/hip_nvidia/exports.cpp`
//! exports the entry points rocm-sys binds under their HIP names. The wrappers build against
//! CUDA 11.8's headers (not 13's), so the library links CUDA 11.8's `libcudart.so.11.0`, which is
//! copied beside it and runs on newer drivers. `libcuda.so.1` (the driver) is needed at run time
//! only; the link uses an empty stand-in with its soname.
//!
//! Output: `<out>/libamdhip64.so.5` and `<out>/libcudart.so.11.0` (default
//! `target/hip-nvidia/`). Use it with `ROCMFORGE_PLATFORM=amd
//! ROCMFORGE_HIP_LIBRARY=<out>/libamdhip64.so.5`.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use rocm_sys::hip_facts::{self, HipRuntime};

use crate::flags::Flags;
use crate::{Result, toolchain};

const USAGE: &str = "usage: cargo xtask hip-nvidia [--out DIR]

  Builds target/hip-nvidia/libamdhip64.so.5 (or DIR/...) from AMD's HIP-for-NVIDIA headers.
  Needs: g++ (or $CXX), libamdhip64-dev (HIP 5.2's nvidia_detail headers), and CUDA 11.8's
  runtime headers and library from PyPI, in target/hip-nvidia/cuda-11.8 or $ROCMFORGE_CUDA11_ROOT:
    python3 -m pip install --target target/hip-nvidia/cuda-11.8 \\
        nvidia-cuda-runtime-cu11==11.8.89 nvidia-cuda-nvcc-cu11==11.8.89
";

/// The library's file name: HIP 5's soname, matching the headers it is built from.
pub const LIBRARY: &str = "libamdhip64.so.5";
const CUDART: &str = "libcudart.so.11.0";
/// The shim source, relative to the workspace root.
const EXPORTS: &str = "xtask/hip_nvidia/exports.cpp";
/// The CUDA runtime version the headers must be (`CUDART_VERSION`).
const CUDART_VERSION: &str = "11080";

pub fn run(args: &[String]) -> Result<()> {
    let root = crate::workspace_root();
    let mut flags = Flags::new(args, USAGE);
    if flags.help() {
        print!("{USAGE}");
        return Ok(());
    }
    let out = flags.value("--out")?.map_or_else(|| default_out(&root), PathBuf::from);
    flags.finish()?;
    let inputs = Inputs::find(&root)?;
    let library = build(&root, &inputs, &out)?;
    println!("hip-nvidia: wrote {} (with {CUDART} beside it)", library.display());
    println!("hip-nvidia: use it with ROCMFORGE_PLATFORM=amd ROCMFORGE_HIP_LIBRARY={}", library.display());
    Ok(())
}

pub fn default_out(root: &Path) -> PathBuf {
    root.join("target").join("hip-nvidia")
}

/// What the build needs, found.
#[derive(Debug)]
pub struct Inputs {
    hip_include: PathBuf,
    cuda_include: PathBuf,
    crt_include: PathBuf,
    cudart: PathBuf,
    cxx: PathBuf,
}

impl Inputs {
    /// Finds every input or says what is missing and how to get it.
    pub fn find(root: &Path) -> Result<Inputs> {
        let missing = |what: &str| format!("hip-nvidia: {what} not found\n{USAGE}");
        let hip_include = toolchain::hip_include_dir()
            .filter(|d| d.join("hip/nvidia_detail/nvidia_hip_runtime_api.h").is_file())
            .ok_or_else(|| missing("hip/nvidia_detail/nvidia_hip_runtime_api.h (libamdhip64-dev)"))?;
        let cuda11 = std::env::var_os("ROCMFORGE_CUDA11_ROOT")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| default_out(root).join("cuda-11.8"));
        let cuda_include = cuda11.join("nvidia/cuda_runtime/include");
        let api = cuda_include.join("cuda_runtime_api.h");
        let text = fs::read_to_string(&api).map_err(|_| missing(&format!("{}", api.display())))?;
        if !text.contains(&format!("#define CUDART_VERSION  {CUDART_VERSION}"))
            && !text.contains(&format!("#define CUDART_VERSION {CUDART_VERSION}"))
        {
            return Err(format!(
                "hip-nvidia: {} is not CUDA 11.8's (CUDART_VERSION {CUDART_VERSION})",
                api.display()
            )
            .into());
        }
        let crt_include = cuda11.join("nvidia/cuda_nvcc/include");
        if !crt_include.join("crt/host_defines.h").is_file() {
            return Err(missing(&format!(
                "{}/crt/host_defines.h (nvidia-cuda-nvcc-cu11)",
                crt_include.display()
            ))
            .into());
        }
        let cudart = cuda11.join("nvidia/cuda_runtime/lib").join(CUDART);
        if !cudart.is_file() {
            return Err(missing(&cudart.display().to_string()).into());
        }
        let cxx = std::env::var_os("CXX")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .unwrap_or_else(|| "g++".into());
        Ok(Inputs { hip_include, cuda_include, crt_include, cudart, cxx })
    }
}

/// The HIP names `exports.cpp` exports, in file order (its `RF_EXPORT(ret, name, ...)` lines,
/// which forward to AMD's wrappers, and `RF_EXPORT_OURS(...)` lines, which forward to its own).
pub fn exported_names(source: &str) -> Vec<String> {
    source
        .lines()
        .map(str::trim_start)
        .filter_map(|l| l.strip_prefix("RF_EXPORT(").or_else(|| l.strip_prefix("RF_EXPORT_OURS(")))
        .filter_map(|rest| rest.split(',').nth(1))
        .map(|name| name.trim().to_string())
        .collect()
}

/// The symbols the library must export: every one rocm-sys uses that HIP 5.2, the release of the
/// headers, provides.
fn required_exports() -> Vec<&'static str> {
    let release = HipRuntime::NvidiaCuda { cuda_major: 11, cuda_minor: 8 }.api_version();
    hip_facts::HIP_SYMBOLS.iter().filter(|s| release.at_least(s.since)).map(|s| s.name).collect()
}

/// Builds the library into `out` and checks its exports; returns its path.
pub fn build(root: &Path, inputs: &Inputs, out: &Path) -> Result<PathBuf> {
    let source = root.join(EXPORTS);
    let text = fs::read_to_string(&source).map_err(|e| format!("{}: {e}", source.display()))?;
    let names = exported_names(&text);
    let missing: Vec<_> = required_exports().into_iter().filter(|n| !names.iter().any(|x| x == n)).collect();
    if !missing.is_empty() {
        return Err(format!("{EXPORTS} does not export {}", missing.join(", ")).into());
    }
    fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    // Intermediate files stay in the build tree, whatever `out` is (an archive carries only
    // the two libraries).
    let work = default_out(root).join("build");
    fs::create_dir_all(&work)?;
    // CUDA 11.8's runtime wheel lacks cuda_profiler_api.h, which AMD's header includes for the
    // two profiler calls it wraps; rocmforge exports neither.
    fs::write(
        work.join("cuda_profiler_api.h"),
        "#pragma once\n#include <cuda_runtime_api.h>\nextern \"C\" cudaError_t cudaProfilerStart(void);\n\
         extern \"C\" cudaError_t cudaProfilerStop(void);\n",
    )?;
    // Exports the HIP names, nothing else.
    fs::write(work.join("exports.map"), "{ global: hip*; local: *; };\n")?;
    // An empty library with the driver's soname: the link records the dependency, and the real
    // libcuda.so.1 of the machine that runs it provides the symbols.
    let stub = work.join("libcuda.so.1");
    let mut cmd = Command::new(&inputs.cxx);
    cmd.args(["-x", "c++", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o"]).arg(&stub).arg("/dev/null");
    run_tool(cmd)?;

    let library = out.join(LIBRARY);
    let mut cmd = Command::new(&inputs.cxx);
    cmd.args(["-std=c++17", "-O2", "-fPIC", "-shared", "-Wall", "-Werror", "-D__HIP_PLATFORM_NVIDIA__"])
        // AMD's header uses CUDA calls that CUDA 11.8 marks deprecated.
        .arg("-Wno-deprecated-declarations")
        .arg(format!("-I{}", work.display()))
        .arg(format!("-I{}", inputs.hip_include.display()))
        .arg(format!("-I{}", inputs.cuda_include.display()))
        .arg(format!("-I{}", inputs.crt_include.display()))
        .arg("-o")
        .arg(&library)
        .arg(&source)
        .arg(format!("-Wl,-soname,{LIBRARY}"))
        .arg(format!("-Wl,--version-script,{}", work.join("exports.map").display()))
        .arg("-Wl,-rpath,$ORIGIN");
    for name in &names {
        cmd.arg(format!("-Wl,--defsym,{name}=rf_export_{name}"));
    }
    cmd.arg(format!("-L{}", inputs.cudart.parent().unwrap_or(Path::new(".")).display()))
        .arg(format!("-l:{CUDART}"))
        .arg(format!("-L{}", work.display()))
        .args(["-Wl,--no-as-needed", "-l:libcuda.so.1"]);
    run_tool(cmd)?;
    fs::copy(&inputs.cudart, out.join(CUDART)).map_err(|e| format!("copying {CUDART}: {e}"))?;

    let exported = dynamic_symbols(&library)?;
    let absent: Vec<_> = names.iter().filter(|n| !exported.contains(n)).cloned().collect();
    if !absent.is_empty() {
        return Err(format!("{} does not export {}", library.display(), absent.join(", ")).into());
    }
    println!("hip-nvidia: {} exports {} HIP entry points", library.display(), names.len());
    Ok(library)
}

/// Defined dynamic symbols of a shared library, without version suffixes (`nm -D`).
fn dynamic_symbols(library: &Path) -> Result<Vec<String>> {
    let out = Command::new("nm")
        .args(["-D", "--defined-only"])
        .arg(library)
        .output()
        .map_err(|e| format!("cannot run nm (binutils): {e}"))?;
    if !out.status.success() {
        return Err(
            format!("nm -D {} failed: {}", library.display(), String::from_utf8_lossy(&out.stderr)).into()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().nth(2))
        .map(|s| s.split('@').next().unwrap_or(s).to_string())
        .collect())
}

fn run_tool(mut cmd: Command) -> Result<()> {
    let out = cmd.output().map_err(|e| format!("cannot run {}: {e}", cmd.get_program().to_string_lossy()))?;
    if !out.status.success() {
        return Err(format!(
            "{} failed:\n{}{}",
            cmd.get_program().to_string_lossy(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shim_exports_every_symbol_hip_5_2_provides() {
        let source = fs::read_to_string(crate::workspace_root().join(EXPORTS)).unwrap();
        let names = exported_names(&source);
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "an entry point is exported twice");
        for required in required_exports() {
            assert!(names.iter().any(|n| n == required), "{EXPORTS} does not export {required}");
        }
        // Nothing HIP 5.2 lacks: the R0600 layout call is 6.0's.
        assert!(!names.iter().any(|n| n == "hipGetDevicePropertiesR0600"));
        assert!(names.iter().all(|n| hip_facts::symbol(n).is_some()), "an export rocm-sys does not use");
    }

    #[test]
    fn export_lines_are_parsed_by_name() {
        let text = "RF_EXPORT(hipError_t, hipInit, (unsigned f), (f))\n  RF_EXPORT(const char*, hipGetErrorName,\n// RF_EXPORT in a comment\nRF_EXPORT_OURS(hipError_t, hipGraphLaunch, (x), (x))\n#define RF_EXPORT_OURS(ret, name, params, args) \\";
        assert_eq!(exported_names(text), ["hipInit", "hipGetErrorName", "hipGraphLaunch"]);
    }
}
