//! Opening the driver libraries: candidate names, the env overrides, and the optional symbols.

use std::ffi::{OsString, c_void};
use std::os::raw::c_int;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::cuda::{CUevent, CUfunction, CUresult, CudaLibrary};
use crate::hip::{
    HipLibrary, hipError_t, hipFunction_t, hipGraph_t, hipGraphExec_t, hipGraphNode_t, hipStream_t,
    hipStreamCaptureMode, hipStreamCaptureStatus,
};

/// A driver library could not be opened or lacks a symbol rocmforge needs.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{library} could not be loaded; tried: {}", format_tried(.tried))]
pub struct LoadError {
    /// `"HIP runtime (libamdhip64)"` or `"CUDA driver (libcuda)"`.
    pub library: &'static str,
    /// Each candidate path with the loader's reason for refusing it.
    pub tried: Vec<(String, String)>,
}

fn format_tried(tried: &[(String, String)]) -> String {
    tried.iter().map(|(path, why)| format!("{path} ({why})")).collect::<Vec<_>>().join("; ")
}

impl std::fmt::Debug for HipLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HipLibrary")
    }
}

impl std::fmt::Debug for CudaLibrary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CudaLibrary")
    }
}

/// Env var naming an exact HIP runtime library to load instead of searching.
pub const HIP_LIBRARY_ENV: &str = "ROCMFORGE_HIP_LIBRARY";
/// Env var naming an exact CUDA driver library to load instead of searching.
pub const CUDA_LIBRARY_ENV: &str = "ROCMFORGE_CUDA_LIBRARY";

pub(crate) fn candidates(env: &str, names: &[&str], dirs: &[PathBuf]) -> Vec<OsString> {
    if let Some(exact) = std::env::var_os(env).filter(|v| !v.is_empty()) {
        return vec![exact];
    }
    let mut out: Vec<OsString> = names.iter().map(OsString::from).collect();
    for dir in dirs {
        for name in names {
            out.push(dir.join(name).into_os_string());
        }
    }
    out
}

pub(crate) fn open<T>(
    library: &'static str,
    candidates: Vec<OsString>,
    bind: impl Fn(libloading::Library) -> Result<T, libloading::Error>,
) -> Result<(T, OsString), LoadError> {
    let mut tried = Vec::new();
    for path in candidates {
        // SAFETY: opening a driver library runs its initialisers; the candidates are the
        // vendor's own library names (or a path the user chose through the env override).
        let opened = unsafe { libloading::Library::new(&path) };
        match opened.and_then(&bind) {
            Ok(lib) => return Ok((lib, path)),
            Err(e) => tried.push((path.to_string_lossy().into_owned(), e.to_string())),
        }
    }
    Err(LoadError { library, tried })
}

/// HIP runtime sonames, newest first: the suffix is HIP's major version (ROCm 7 ships
/// `libamdhip64.so.7`), then the development link, which TheRock's installs do not have.
pub const HIP_SONAMES: &[&str] =
    &["libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5", "libamdhip64.so"];

/// Where to look for the HIP runtime, in order: `$ROCMFORGE_HIP_LIBRARY` alone when set; else
/// each of [`HIP_SONAMES`] in `$ROCM_PATH/lib` and `$HIP_PATH/lib` (the user's choice first), on
/// the loader's path, in `<opt_rocm>/lib`, then in TheRock's per-release folders
/// `<opt_rocm>/core-<version>/lib`, newest version first.
pub fn hip_candidates(env: impl Fn(&str) -> Option<OsString>, opt_rocm: &Path) -> Vec<OsString> {
    let set = |name: &str| env(name).filter(|v| !v.is_empty());
    if let Some(exact) = set(HIP_LIBRARY_ENV) {
        return vec![exact];
    }
    let in_dir = |dir: &Path| HIP_SONAMES.iter().map(|n| dir.join(n).into_os_string()).collect::<Vec<_>>();
    let mut out: Vec<OsString> = Vec::new();
    for var in ["ROCM_PATH", "HIP_PATH"] {
        if let Some(root) = set(var) {
            out.extend(in_dir(&PathBuf::from(root).join("lib")));
        }
    }
    out.extend(HIP_SONAMES.iter().map(OsString::from));
    out.extend(in_dir(&opt_rocm.join("lib")));
    for core in therock_cores(opt_rocm) {
        out.extend(in_dir(&core.join("lib")));
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|c| seen.insert(c.clone()));
    out
}

/// TheRock's `<opt_rocm>/core-<version>` folders, newest version first (numeric comparison of
/// the dot-separated parts, so `core-7.10` sorts above `core-7.9`).
fn therock_cores(opt_rocm: &Path) -> Vec<PathBuf> {
    let mut cores: Vec<(Vec<u64>, PathBuf)> = std::fs::read_dir(opt_rocm)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let version = name.strip_prefix("core-")?;
            let parts: Vec<u64> = version.split(['.', '-']).map_while(|p| p.parse().ok()).collect();
            e.path().is_dir().then_some((parts, e.path()))
        })
        .collect();
    cores.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    cores.into_iter().map(|(_, p)| p).collect()
}

/// The HIP runtime, opened: the generated table of required entry points, the optional ones,
/// and the file the loader actually mapped.
#[derive(Debug)]
pub struct HipLoaded {
    pub lib: HipLibrary,
    pub extras: HipExtras,
    /// The library's real path (for a bare soname, where the loader found it): the vendor BLAS is
    /// opened from the same folder, so one process never mixes two ROCm installations.
    pub path: PathBuf,
}

/// `hipGetDeviceProperties` / `hipGetDevicePropertiesR0600`: both write the layout of their
/// release into an opaque buffer the caller sizes from `hip_facts::PROPS_LAYOUTS`.
pub type HipGetDeviceProperties = unsafe extern "C" fn(*mut c_void, c_int) -> hipError_t;

/// HIP entry points that not every supported release exports (`hip_facts::HIP_SYMBOLS` says
/// which release added each), resolved one by one.
#[derive(Debug, Clone, Copy)]
pub struct HipExtras {
    pub get_device_properties: Option<HipGetDeviceProperties>,
    pub get_device_properties_r0600: Option<HipGetDeviceProperties>,
    pub malloc_async: Option<unsafe extern "C" fn(*mut *mut c_void, usize, hipStream_t) -> hipError_t>,
    pub free_async: Option<unsafe extern "C" fn(*mut c_void, hipStream_t) -> hipError_t>,
    /// The default memory pool and the two calls that keep its freed memory mapped or give it
    /// back (`hipMemPool_t` is an opaque pointer; `hipMemPoolAttr` an enum of C `int` size).
    pub device_get_default_mem_pool: Option<unsafe extern "C" fn(*mut *mut c_void, c_int) -> hipError_t>,
    pub mem_pool_set_attribute: Option<unsafe extern "C" fn(*mut c_void, c_int, *mut c_void) -> hipError_t>,
    pub mem_pool_trim_to: Option<unsafe extern "C" fn(*mut c_void, usize) -> hipError_t>,
    /// Stream capture and graphs (`rocm_runtime::Graph`). AMD's runtime has exported them since
    /// 4.3; AMD's HIP for NVIDIA defines them only where nvcc compiles the caller, so a
    /// HIP-for-NVIDIA library may lack them (ours exports them: `xtask/hip_nvidia/exports.cpp`).
    pub stream_begin_capture: Option<unsafe extern "C" fn(hipStream_t, hipStreamCaptureMode) -> hipError_t>,
    pub stream_end_capture: Option<unsafe extern "C" fn(hipStream_t, *mut hipGraph_t) -> hipError_t>,
    pub stream_is_capturing:
        Option<unsafe extern "C" fn(hipStream_t, *mut hipStreamCaptureStatus) -> hipError_t>,
    pub graph_instantiate: Option<
        unsafe extern "C" fn(
            *mut hipGraphExec_t,
            hipGraph_t,
            *mut hipGraphNode_t,
            *mut std::os::raw::c_char,
            usize,
        ) -> hipError_t,
    >,
    pub graph_launch: Option<unsafe extern "C" fn(hipGraphExec_t, hipStream_t) -> hipError_t>,
    pub graph_exec_destroy: Option<unsafe extern "C" fn(hipGraphExec_t) -> hipError_t>,
    pub graph_destroy: Option<unsafe extern "C" fn(hipGraph_t) -> hipError_t>,
    /// A launch whose blocks are all resident at once, or refused (`Launch::cooperative`).
    pub module_launch_cooperative_kernel: Option<HipModuleLaunchCooperativeKernel>,
}

/// `hipModuleLaunchCooperativeKernel(f, grid x y z, block x y z, shared bytes, stream, params)`.
pub type HipModuleLaunchCooperativeKernel = unsafe extern "C" fn(
    hipFunction_t,
    std::os::raw::c_uint,
    std::os::raw::c_uint,
    std::os::raw::c_uint,
    std::os::raw::c_uint,
    std::os::raw::c_uint,
    std::os::raw::c_uint,
    std::os::raw::c_uint,
    hipStream_t,
    *mut *mut c_void,
) -> hipError_t;

/// Opens the HIP runtime from the first of [`hip_candidates`] that loads and exports every
/// required entry point.
///
/// # Safety
/// Loading runs the library's initialisers, and every bound symbol is trusted to have the
/// signature of the headers the bindings were generated from.
pub unsafe fn load_hip() -> Result<HipLoaded, LoadError> {
    let list = hip_candidates(|v| std::env::var_os(v), Path::new("/opt/rocm"));
    const NAME: &str = "HIP runtime (libamdhip64)";
    // SAFETY: see this function's contract.
    let (lib, candidate) = open(NAME, list, |lib| unsafe { HipLibrary::from_library(lib) })?;
    // A second handle to the same library (reference-counted by the loader) for the optional
    // symbols; kept for the process, like the one inside `lib`, so the pointers stay valid.
    // SAFETY: the library at `candidate` was opened a moment ago.
    let extra = unsafe { libloading::Library::new(&candidate) }.map_err(|e| LoadError {
        library: NAME,
        tried: vec![(candidate.to_string_lossy().into_owned(), e.to_string())],
    })?;
    // SAFETY: the types are those AMD's headers declare for these symbols.
    let extras = unsafe {
        HipExtras {
            get_device_properties: extra.get(b"hipGetDeviceProperties\0").map(|s| *s).ok(),
            get_device_properties_r0600: extra.get(b"hipGetDevicePropertiesR0600\0").map(|s| *s).ok(),
            malloc_async: extra.get(b"hipMallocAsync\0").map(|s| *s).ok(),
            free_async: extra.get(b"hipFreeAsync\0").map(|s| *s).ok(),
            device_get_default_mem_pool: extra.get(b"hipDeviceGetDefaultMemPool\0").map(|s| *s).ok(),
            mem_pool_set_attribute: extra.get(b"hipMemPoolSetAttribute\0").map(|s| *s).ok(),
            mem_pool_trim_to: extra.get(b"hipMemPoolTrimTo\0").map(|s| *s).ok(),
            stream_begin_capture: extra.get(b"hipStreamBeginCapture\0").map(|s| *s).ok(),
            stream_end_capture: extra.get(b"hipStreamEndCapture\0").map(|s| *s).ok(),
            stream_is_capturing: extra.get(b"hipStreamIsCapturing\0").map(|s| *s).ok(),
            graph_instantiate: extra.get(b"hipGraphInstantiate\0").map(|s| *s).ok(),
            graph_launch: extra.get(b"hipGraphLaunch\0").map(|s| *s).ok(),
            graph_exec_destroy: extra.get(b"hipGraphExecDestroy\0").map(|s| *s).ok(),
            graph_destroy: extra.get(b"hipGraphDestroy\0").map(|s| *s).ok(),
            module_launch_cooperative_kernel: extra
                .get(b"hipModuleLaunchCooperativeKernel\0")
                .map(|s| *s)
                .ok(),
        }
    };
    std::mem::forget(extra);
    let path = loaded_path(lib.hipInit as *const c_void).unwrap_or_else(|| PathBuf::from(&candidate));
    Ok(HipLoaded { lib, extras, path })
}

/// The file that holds `symbol`, as the dynamic loader mapped it (`dladdr`).
// dladdr compares the address with the loader's mappings; it never reads through it.
#[allow(clippy::not_unsafe_ptr_arg_deref)]
pub fn loaded_path(symbol: *const c_void) -> Option<PathBuf> {
    #[repr(C)]
    struct DlInfo {
        fname: *const std::os::raw::c_char,
        fbase: *mut c_void,
        sname: *const std::os::raw::c_char,
        saddr: *mut c_void,
    }
    unsafe extern "C" {
        fn dladdr(addr: *const c_void, info: *mut DlInfo) -> c_int;
    }
    let mut info = DlInfo {
        fname: std::ptr::null(),
        fbase: std::ptr::null_mut(),
        sname: std::ptr::null(),
        saddr: std::ptr::null_mut(),
    };
    // SAFETY: dladdr only reads the loader's tables and fills `info`; any address is allowed.
    if unsafe { dladdr(symbol, &mut info) } == 0 || info.fname.is_null() {
        return None;
    }
    // SAFETY: a non-null `dli_fname` is a NUL-terminated path owned by the loader.
    let name = unsafe { std::ffi::CStr::from_ptr(info.fname) };
    let path = PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes()));
    Some(std::fs::canonicalize(&path).unwrap_or(path))
}

/// Driver entry points that not every supported driver has, resolved one by one.
#[derive(Debug, Clone, Copy)]
pub struct CudaExtras {
    /// `cuFuncGetParamInfo` (CUDA 12.4+): parameter offsets and sizes, for launch checks.
    pub func_get_param_info:
        Option<unsafe extern "C" fn(CUfunction, usize, *mut usize, *mut usize) -> CUresult>,
    /// `cuEventElapsedTime_v2` (12.8+) or, on older drivers, `cuEventElapsedTime`.
    pub event_elapsed_time: unsafe extern "C" fn(*mut f32, CUevent, CUevent) -> CUresult,
}

/// Opens the CUDA driver: `$ROCMFORGE_CUDA_LIBRARY` if set, else `libcuda.so.1`, `libcuda.so`.
///
/// # Safety
/// As [`load_hip`].
pub unsafe fn load_cuda() -> Result<(CudaLibrary, CudaExtras), LoadError> {
    let names = ["libcuda.so.1", "libcuda.so"];
    let list = candidates(CUDA_LIBRARY_ENV, &names, &[]);
    const NAME: &str = "CUDA driver (libcuda)";
    // SAFETY: see this function's contract.
    let (lib, path) = open(NAME, list, |lib| unsafe { CudaLibrary::from_library(lib) })?;
    // A second handle to the same library (reference-counted by the loader) for the symbols
    // the generated struct cannot hold because not every driver exports them.
    // SAFETY: the library at `path` was opened a moment ago.
    let extra = unsafe { libloading::Library::new(&path) }.and_then(|extra| {
        // SAFETY: the types are those declared in cuda.h for these symbols.
        unsafe {
            let param_info = extra.get(b"cuFuncGetParamInfo\0").map(|s| *s).ok();
            let elapsed = extra
                .get(b"cuEventElapsedTime_v2\0")
                .or_else(|_| extra.get(b"cuEventElapsedTime\0"))
                .map(|s| *s)?;
            // The handle is kept alive for the process: `lib` holds the library open too,
            // and forgetting this one keeps the function pointers above valid.
            std::mem::forget(extra);
            Ok(CudaExtras { func_get_param_info: param_info, event_elapsed_time: elapsed })
        }
    });
    match extra {
        Ok(extras) => Ok((lib, extras)),
        Err(e) => Err(LoadError {
            library: NAME,
            tried: vec![(path.to_string_lossy().into_owned(), e.to_string())],
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_an_error_naming_the_path() {
        // SAFETY: the path does not exist, so nothing is loaded.
        let err = open("test", vec![OsString::from("/nonexistent/libnothing.so")], |lib| {
            // SAFETY: never reached.
            unsafe { CudaLibrary::from_library(lib) }
        })
        .expect_err("loading must fail");
        let text = err.to_string();
        assert!(text.contains("/nonexistent/libnothing.so"), "{text}");
        assert_eq!(err.tried.len(), 1);
    }

    #[test]
    fn a_library_without_the_symbols_is_an_error_naming_one() {
        // libc is on every Linux machine and exports none of the driver's symbols.
        let err = open("test", vec![OsString::from("libc.so.6")], |lib| {
            // SAFETY: from_library only looks symbols up; it fails on the first missing one.
            unsafe { HipLibrary::from_library(lib) }
        })
        .expect_err("loading must fail");
        assert!(err.to_string().contains("hip"), "{err}");
    }

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let map: std::collections::HashMap<String, OsString> =
            pairs.iter().map(|(k, v)| (k.to_string(), OsString::from(v))).collect();
        move |k| map.get(k).cloned()
    }

    fn strings(list: Vec<OsString>) -> Vec<String> {
        list.into_iter().map(|s| s.to_string_lossy().into_owned()).collect()
    }

    #[test]
    fn hip_sonames_go_newest_first_in_each_folder() {
        let list = strings(hip_candidates(env_of(&[]), Path::new("/nonexistent/rocm")));
        assert_eq!(
            list,
            [
                "libamdhip64.so.7",
                "libamdhip64.so.6",
                "libamdhip64.so.5",
                "libamdhip64.so",
                "/nonexistent/rocm/lib/libamdhip64.so.7",
                "/nonexistent/rocm/lib/libamdhip64.so.6",
                "/nonexistent/rocm/lib/libamdhip64.so.5",
                "/nonexistent/rocm/lib/libamdhip64.so",
            ]
        );
    }

    #[test]
    fn rocm_path_and_hip_path_come_before_the_loader_path() {
        let env = env_of(&[("ROCM_PATH", "/r"), ("HIP_PATH", "/h"), ("UNRELATED", "/x")]);
        let list = strings(hip_candidates(env, Path::new("/nonexistent/rocm")));
        assert_eq!(&list[0], "/r/lib/libamdhip64.so.7");
        assert_eq!(&list[3], "/r/lib/libamdhip64.so");
        assert_eq!(&list[4], "/h/lib/libamdhip64.so.7");
        assert_eq!(&list[8], "libamdhip64.so.7");
        // An empty variable is no choice at all.
        let list = strings(hip_candidates(env_of(&[("ROCM_PATH", "")]), Path::new("/nonexistent")));
        assert_eq!(&list[0], "libamdhip64.so.7");
    }

    #[test]
    fn the_hip_override_is_the_only_candidate() {
        let env = env_of(&[(HIP_LIBRARY_ENV, "/exact/libamdhip64.so.6"), ("ROCM_PATH", "/r")]);
        assert_eq!(strings(hip_candidates(env, Path::new("/opt/rocm"))), ["/exact/libamdhip64.so.6"]);
    }

    #[test]
    fn therock_release_folders_are_searched_newest_first() {
        let root = std::env::temp_dir().join(format!("rocmforge-therock-{}", std::process::id()));
        for dir in ["core-7.9.0", "core-7.10.1", "core-6.4", "lib", "core-notes.txt.d"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        std::fs::write(root.join("core-8.0"), b"a file, not a release folder").unwrap();
        let list = strings(hip_candidates(env_of(&[]), &root));
        let folders: Vec<&str> = list
            .iter()
            .filter(|c| c.ends_with("libamdhip64.so.7"))
            .map(|c| c.trim_end_matches("/lib/libamdhip64.so.7"))
            .collect();
        let r = root.to_string_lossy();
        assert_eq!(
            folders,
            [
                "libamdhip64.so.7".to_string(),
                r.to_string(),
                format!("{r}/core-7.10.1"),
                format!("{r}/core-7.9.0"),
                format!("{r}/core-6.4"),
                format!("{r}/core-notes.txt.d"),
            ]
        );
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn loaded_path_finds_the_file_of_a_symbol() {
        // `dladdr` of a libc function names libc's file.
        unsafe extern "C" {
            fn strlen(s: *const std::os::raw::c_char) -> usize;
        }
        let path = loaded_path(strlen as *const c_void).expect("libc is mapped");
        assert!(path.to_string_lossy().contains("libc"), "{}", path.display());
        assert!(path.is_absolute() && path.is_file(), "{}", path.display());
    }

    #[test]
    fn the_env_override_replaces_the_search() {
        let list = candidates("ROCMFORGE_TEST_UNSET_VAR_FOR_SURE", &["a.so", "b.so"], &[PathBuf::from("/x")]);
        assert_eq!(list, vec![OsString::from("a.so"), "b.so".into(), "/x/a.so".into(), "/x/b.so".into()]);
    }
}
