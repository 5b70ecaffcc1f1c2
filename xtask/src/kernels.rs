//! `cargo xtask kernels [--platform amd|nvidia|all|auto]`: compile every `kernels/*.hip` into one
//! code object per platform, which `rocm-kernels` embeds at build time.
//!
//! - NVIDIA: `nvcc -x cu --fatbin`, SASS for each SM arch plus PTX for the newest, so newer GPUs
//!   JIT the PTX. `<out>/nvidia/<stem>.fatbin`.
//! - AMD: `hipcc --genco`, one offload bundle holding a code object per gfx target.
//!   `<out>/amd/<stem>.hsaco`. With the chroot of `cargo xtask amd-toolchain` (forky's hipcc 7.0.2,
//!   clang 21), every target of [`AMD_TARGETS`], compiled inside the chroot with `kernels/` and
//!   `<out>/amd` bind-mounted in a private mount namespace; without it, the host's hipcc and the
//!   targets among [`AMD_ARCH_CANDIDATES`] it accepts. With the chroot, processor-specific targets
//!   are code object v5 and generic ones v6, in the same bundle (`amd_code_object_args`), so HIP
//!   from ROCm 5.x on finds code it loads; the host's hipcc keeps its own default. Then the
//!   resource table of every code object (registers, spills, LDS, scratch; `amd_resources`) is
//!   checked against the committed `docs/kernels/amd-resources.md` and rewritten.
//!
//! `<out>` is `$ROCMFORGE_KERNELS_DIR` (relative paths are taken from the workspace root, as
//! `rocm-kernels`' build script does) or `<workspace>/target/kernels`. Warnings are errors on both
//! compilers: the same source must be clean everywhere. A kernel is rebuilt when its source or a
//! header it includes (directly or not: `crates/rocm-kernels/kernel_includes.rs`) is newer than its
//! object, or when the compiler, flags or target list changed since the last build (recorded in
//! `<out>/<platform>/.build-stamp`).

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Instant, SystemTime};

use rocm_runtime::Platform;

use crate::amd_toolchain::{Bind, Chroot};
use crate::flags::Flags;
use crate::toolchain::{self, AmdCompiler};
use crate::{Result, amd_resources, amd_toolchain, kernel_files, kernel_symbols};

const USAGE: &str = "usage: cargo xtask kernels [--platform amd|nvidia|all|auto]

  auto (default)  every platform whose compiler is installed; an error if there is none
  all             both platforms; an error names what to install for a missing compiler
  amd | nvidia    that platform only

environment:
  ROCMFORGE_KERNELS_DIR   output folder (default <workspace>/target/kernels)
  ROCMFORGE_NVIDIA_ARCHS  SM archs, e.g. \"80,90a\" (default 80,90a; SASS for each, arch-neutral PTX
                          for the newest)
  ROCMFORGE_AMD_ARCHS     gfx targets, e.g. \"gfx90a,gfx1030\" (default with the chroot of
                          `cargo xtask amd-toolchain`: gfx90a gfx942 gfx950 gfx1030 gfx1100 gfx1101
                          gfx1102 gfx1151 gfx1200 gfx1201 gfx10-3-generic gfx11-generic; with the
                          host's hipcc: those of gfx908, gfx90a, gfx940, gfx942, gfx1030, gfx1100
                          it accepts)
  ROCMFORGE_AMD_CHROOT    the toolchain chroot (default <workspace>/target/amd-toolchain/forky)
  ROCMFORGE_ACCEPT_SPILLS =1: record new register spills in docs/kernels/amd-resources.md instead
                          of failing
";

/// SM archs built when `ROCMFORGE_NVIDIA_ARCHS` is not set: Ampere and Hopper. Hopper as `90a`,
/// the arch-specific target: its SASS runs on sm_90 devices only, and only it has the warpgroup
/// (`wgmma`) kernels; launchers fall back to the mma.sync kernels where those entries are absent.
const DEFAULT_NVIDIA_ARCHS: &[&str] = &["80", "90a"];

/// gfx targets built with the chroot's toolchain when `ROCMFORGE_AMD_ARCHS` is not set:
/// - CDNA 2-4: gfx90a (MI210, MI250), gfx942 (MI300A/X, MI325X), gfx950 (MI350X, MI355X);
/// - RDNA 2: gfx1030 (RX 6800 to 6950 XT); RDNA 3: gfx1100 (RX 7900), gfx1101 (RX 7800/7700 XT),
///   gfx1102 (RX 7600); RDNA 3.5: gfx1151 (Strix Halo); RDNA 4: gfx1200 (RX 9060), gfx1201
///   (RX 9070);
/// - generic targets for the RDNA 2 and 3 chips with no code object of their own:
///   gfx10-3-generic (gfx1031-1036: RX 6700/6600/6500, Steam Deck, Ryzen 6000/7000 graphics) and
///   gfx11-generic (gfx1103, gfx1150, gfx1152, gfx1153: Ryzen 7040/8040 and AI 300 graphics).
///   They need code object v6 and a runtime that knows generic targets (HIP 6.4 does); every
///   other target is built as v5, which HIP loads from ROCm 5.0 on ([`amd_code_object_args`]).
///   gfx12-generic is left out: its only chips, gfx1200 and gfx1201, have their own; so is
///   gfx9-4-generic (gfx942 and gfx950 are built).
///
/// Not probed: the chroot's compiler is known to accept all of them, and a target it refused
/// should fail the build rather than vanish from it.
pub const AMD_TARGETS: &[&str] = &[
    "gfx90a",
    "gfx942",
    "gfx950",
    "gfx1030",
    "gfx1100",
    "gfx1101",
    "gfx1102",
    "gfx1151",
    "gfx1200",
    "gfx1201",
    "gfx10-3-generic",
    "gfx11-generic",
];

/// gfx targets tried with the host's hipcc when `ROCMFORGE_AMD_ARCHS` is not set: CDNA 1-3 and
/// RDNA 2-3. Each is probed, since older hipcc releases reject the newer ones (bookworm's 5.2
/// builds gfx908, gfx90a, gfx940 and gfx1030 of them).
const AMD_ARCH_CANDIDATES: &[&str] = &["gfx908", "gfx90a", "gfx940", "gfx942", "gfx1030", "gfx1100"];

/// `-compress-all`: the fatbin's cubins and PTX are stored compressed (the driver inflates them
/// at load, as it has since CUDA 11). Every test binary embeds every kernel, and the unrolled
/// attention kernels alone are 3.7 MB uncompressed, 0.76 MB compressed.
const NVCC_FLAGS: &[&str] =
    &["-x", "cu", "--fatbin", "-O3", "-std=c++17", "-Werror", "all-warnings", "-Xfatbin=-compress-all"];
const HIPCC_FLAGS: &[&str] = &["--genco", "-O3", "-std=c++17", "-Wall", "-Werror"];

/// The code object version of processor-specific targets built with the chroot's clang, which
/// would write v6 (its default) for every target: v5 is the newest the HIP runtimes of ROCm 5.x
/// load (`rocm_sys::hip_facts::CODE_OBJECT_VERSIONS`), and HIP 6.x and 7.x load it too.
const AMD_CODE_OBJECT_VERSION: u8 = 5;
/// The code object version of generic targets (`gfx11-generic`): the first that has them.
const AMD_GENERIC_CODE_OBJECT_VERSION: u8 = 6;

/// Whether a gfx target ID names a generic processor (`gfx11-generic`, `gfx9-4-generic:xnack+`).
fn is_generic_target(target: &str) -> bool {
    target.split(':').next().is_some_and(|p| p.ends_with("-generic"))
}

/// A target ID with its features in the canonical (alphabetical) order, as clang spells the
/// offload target it binds `-Xarch_` options to: `gfx9-4-generic:xnack+:sramecc-` gives
/// `gfx9-4-generic:sramecc-:xnack+`.
fn canonical_target_id(target: &str) -> String {
    let mut parts = target.split(':');
    let processor = parts.next().unwrap_or_default();
    let mut features: Vec<&str> = parts.collect();
    features.sort_by_key(|f| f.trim_end_matches(['+', '-']));
    std::iter::once(processor).chain(features).collect::<Vec<_>>().join(":")
}

/// The chroot's code object flags for `targets`, one compile for all of them:
/// `-mcode-object-version=5`, then `-Xarch_<target> -mcode-object-version=6` for each generic
/// target, which clang's driver applies to that offload target alone (its device libraries'
/// ABI version included). Clang itself bundles the two versions into one offload bundle. A
/// `-Xarch_` that names no target is an unused argument, which `-Werror` makes a build error
/// rather than a silent v5 build (the backend refuses generic targets below v6 anyway).
fn amd_code_object_args(targets: &[String]) -> Vec<String> {
    let mut args = vec![format!("-mcode-object-version={AMD_CODE_OBJECT_VERSION}")];
    for target in targets.iter().filter(|t| is_generic_target(t)) {
        args.push(format!("-Xarch_{}", canonical_target_id(target)));
        args.push(format!("-mcode-object-version={AMD_GENERIC_CODE_OBJECT_VERSION}"));
    }
    args
}

/// How the code object versions of `targets` read in the build log.
fn amd_code_object_summary(targets: &[String]) -> String {
    let generic: Vec<&str> = targets.iter().filter(|t| is_generic_target(t)).map(String::as_str).collect();
    if generic.is_empty() {
        format!("code object v{AMD_CODE_OBJECT_VERSION}")
    } else {
        format!(
            "code object v{AMD_CODE_OBJECT_VERSION}; v{AMD_GENERIC_CODE_OBJECT_VERSION} for {}",
            generic.join(", ")
        )
    }
}

/// How kernels are built for each platform (`rocm_runtime::Platform`).
pub trait PlatformToolchain: Copy {
    /// Extension of the code objects built for this platform.
    fn object_extension(self) -> &'static str;
    fn compiler_name(self) -> &'static str;
    /// The compiler for this platform, if one is installed.
    fn compiler(self) -> Option<PathBuf>;
    fn missing_compiler(self) -> String;
}

impl PlatformToolchain for Platform {
    fn object_extension(self) -> &'static str {
        match self {
            Platform::Amd => "hsaco",
            Platform::Nvidia => "fatbin",
        }
    }

    fn compiler_name(self) -> &'static str {
        match self {
            Platform::Amd => "hipcc",
            Platform::Nvidia => "nvcc",
        }
    }

    fn compiler(self) -> Option<PathBuf> {
        match self {
            Platform::Amd => toolchain::amd_compiler().map(|c| c.hipcc()),
            Platform::Nvidia => toolchain::nvcc(),
        }
    }

    fn missing_compiler(self) -> String {
        format!(
            "{} kernels need {}, which was not found: {}",
            self.name(),
            self.compiler_name(),
            toolchain::install_hint(self.compiler_name())
        )
    }
}

fn parse_platform(s: &str) -> Option<Platform> {
    Platform::ALL.into_iter().find(|p| p.name() == s)
}

/// Which platforms the command line asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Selection {
    Auto,
    All,
    Only(Platform),
}

/// `None` means `--help` was asked for.
fn parse_args(args: &[String]) -> Result<Option<Selection>> {
    let mut flags = Flags::new(args, USAGE);
    if flags.help() {
        return Ok(None);
    }
    let selection = match flags.value("--platform")?.as_deref() {
        None | Some("auto") => Selection::Auto,
        Some("all") => Selection::All,
        Some(v) => Selection::Only(parse_platform(v).ok_or_else(|| {
            flags.invalid("--platform", format!("unknown platform `{v}`: expected amd, nvidia, all or auto"))
        })?),
    };
    flags.finish()?;
    Ok(Some(selection))
}

/// The platforms to build for `selection`, given those whose compiler is installed.
fn resolve(selection: Selection, available: &[Platform]) -> Result<Vec<Platform>> {
    let wanted: Vec<Platform> = match selection {
        Selection::Auto => {
            if available.is_empty() {
                let hints: Vec<String> = Platform::ALL.iter().map(|p| p.missing_compiler()).collect();
                return Err(format!("no kernel compiler found.\n  {}", hints.join("\n  ")).into());
            }
            return Ok(available.to_vec());
        }
        Selection::All => Platform::ALL.to_vec(),
        Selection::Only(p) => vec![p],
    };
    let missing: Vec<String> =
        wanted.iter().filter(|p| !available.contains(p)).map(|p| p.missing_compiler()).collect();
    if !missing.is_empty() {
        return Err(missing.join("\n").into());
    }
    Ok(wanted)
}

pub fn run(args: &[String]) -> Result<()> {
    let Some(selection) = parse_args(args)? else {
        print!("{USAGE}");
        return Ok(());
    };
    build(&resolve(selection, &available_platforms())?)
}

/// The platforms whose compiler is installed on this machine.
pub fn available_platforms() -> Vec<Platform> {
    Platform::ALL.into_iter().filter(|p| p.compiler().is_some()).collect()
}

/// Where code objects go: `$ROCMFORGE_KERNELS_DIR` (relative to the workspace root) or
/// `<workspace>/target/kernels`.
pub fn output_dir() -> PathBuf {
    let root = crate::workspace_root();
    match std::env::var_os("ROCMFORGE_KERNELS_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => root.join(dir),
        None => root.join("target").join("kernels"),
    }
}

/// Path of the code object built from `kernels/<stem>.hip` for `platform`.
pub fn object_path(platform: Platform, stem: &str) -> PathBuf {
    output_dir().join(platform.name()).join(format!("{stem}.{}", platform.object_extension()))
}

/// Kernel sources (`kernels/*.hip`), sorted.
fn sources(kernels_dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(kernels_dir).map_err(|e| format!("{}: {e}", kernels_dir.display()))? {
        let path = entry?.path();
        if path.is_file() && path.extension().is_some_and(|e| e == "hip") {
            let stem = path
                .file_stem()
                .and_then(|s| s.to_str())
                .ok_or_else(|| format!("{}: kernel file names must be UTF-8 identifiers", path.display()))?;
            out.push((stem.to_string(), path.clone()));
        }
    }
    out.sort();
    Ok(out)
}

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// An object is current when it exists and is newer than everything it was compiled from.
fn is_up_to_date(object: Option<SystemTime>, inputs: &[Option<SystemTime>]) -> bool {
    match object {
        Some(obj) => inputs.iter().all(|t| t.is_some_and(|t| t < obj)),
        None => false,
    }
}

/// Parses a comma- or space-separated list.
fn split_list(list: &str) -> Vec<&str> {
    list.split(|c: char| c == ',' || c.is_whitespace()).filter(|s| !s.is_empty()).collect()
}

/// An SM arch (`80`, `sm_90`, `compute_90a`): two or three digits and an optional letter suffix.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct SmArch {
    number: u32,
    suffix: String,
}

impl fmt::Display for SmArch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.number, self.suffix)
    }
}

fn parse_nvidia_archs(list: &str) -> Result<Vec<SmArch>> {
    let mut archs = Vec::new();
    for token in split_list(list) {
        let bare = token.strip_prefix("sm_").or_else(|| token.strip_prefix("compute_")).unwrap_or(token);
        let digits_end = bare.find(|c: char| !c.is_ascii_digit()).unwrap_or(bare.len());
        let (digits, suffix) = bare.split_at(digits_end);
        let valid = (2..=3).contains(&digits.len())
            && suffix.len() <= 1
            && suffix.chars().all(|c| c.is_ascii_lowercase());
        if !valid {
            return Err(format!("`{token}` is not an SM arch (expected e.g. 80, 90, sm_90a)").into());
        }
        archs.push(SmArch { number: digits.parse()?, suffix: suffix.to_string() });
    }
    if archs.is_empty() {
        return Err("no SM arch given".into());
    }
    archs.sort();
    archs.dedup();
    Ok(archs)
}

/// `-gencode` flags: SASS for every arch, plus (with `ptx`) PTX for the newest arch in its
/// arch-neutral form (`90a` gives `compute_90`: arch-specific `a`/`f` PTX does not run on later
/// GPUs), so GPUs newer than the list still load the fatbin.
fn nvidia_gencode_args(archs: &[SmArch], ptx: bool) -> Vec<String> {
    let mut args = Vec::new();
    for a in archs {
        args.push("-gencode".to_string());
        args.push(format!("arch=compute_{a},code=sm_{a}"));
    }
    if let Some(newest) = archs.last().filter(|_| ptx) {
        args.push("-gencode".to_string());
        args.push(format!("arch=compute_{n},code=compute_{n}", n = newest.number));
    }
    args
}

/// A gfx processor: `gfx` + lowercase hex digits (`gfx90a`, `gfx1151`), or a generic family
/// (`gfx11-generic`, `gfx10-3-generic`).
fn is_gfx_processor(processor: &str) -> bool {
    let Some(name) = processor.strip_prefix("gfx") else { return false };
    match name.strip_suffix("-generic") {
        Some(family) => {
            let parts: Vec<&str> = family.split('-').collect();
            parts.len() <= 2 && parts.iter().all(|p| !p.is_empty() && p.chars().all(|c| c.is_ascii_digit()))
        }
        None => !name.is_empty() && name.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()),
    }
}

/// A gfx target ID: a gfx processor, then optional `:feature+` / `:feature-` parts.
fn parse_amd_archs(list: &str) -> Result<Vec<String>> {
    let mut archs: Vec<String> = Vec::new();
    for token in split_list(list) {
        let mut parts = token.split(':');
        let proc_ok = is_gfx_processor(parts.next().unwrap_or_default());
        let features_ok = parts.all(|f| {
            f.len() > 1
                && (f.ends_with('+') || f.ends_with('-'))
                && f[..f.len() - 1].chars().all(|c| c.is_ascii_lowercase())
        });
        if !proc_ok || !features_ok {
            return Err(format!(
                "`{token}` is not a gfx target (expected e.g. gfx90a, gfx1030, gfx11-generic, gfx90a:xnack-)"
            )
            .into());
        }
        if !archs.iter().any(|a| a == token) {
            archs.push(token.to_string());
        }
    }
    if archs.is_empty() {
        return Err("no gfx target given".into());
    }
    Ok(archs)
}

/// The `--offload-arch` targets among `candidates` that this hipcc accepts, found by compiling an
/// empty kernel for each (in parallel) into a scratch folder.
fn probe_amd_archs(hipcc: &Path, candidates: &[&str]) -> Result<Vec<String>> {
    let scratch = std::env::temp_dir().join(format!("rocmforge-hipcc-probe-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    let source = scratch.join("probe.hip");
    std::fs::write(&source, "__global__ void rf_probe() {}\n")?;
    let accepted: Vec<bool> = std::thread::scope(|s| {
        let handles: Vec<_> = candidates
            .iter()
            .map(|arch| {
                let (source, scratch) = (&source, &scratch);
                s.spawn(move || {
                    Command::new(hipcc)
                        .env("HIP_PLATFORM", "amd")
                        .arg("--genco")
                        .arg(format!("--offload-arch={arch}"))
                        .arg("-o")
                        .arg(scratch.join(format!("{arch}.hsaco")))
                        .arg(source)
                        .output()
                        .is_ok_and(|o| o.status.success())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(false)).collect()
    });
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(candidates.iter().zip(accepted).filter(|(_, ok)| *ok).map(|(a, _)| a.to_string()).collect())
}

/// How the target list is chosen, recorded in the stamp so a change rebuilds everything.
enum ArchSpec {
    Nvidia(Vec<SmArch>),
    /// `ROCMFORGE_AMD_ARCHS`.
    AmdListed(Vec<String>),
    /// [`AMD_TARGETS`], with the chroot's compiler.
    AmdDefault,
    /// Those of [`AMD_ARCH_CANDIDATES`] the host's hipcc accepts.
    AmdProbe,
}

fn arch_spec(compiler: &Compiler) -> Result<ArchSpec> {
    let var = match compiler {
        Compiler::Nvcc(_) => "ROCMFORGE_NVIDIA_ARCHS",
        _ => "ROCMFORGE_AMD_ARCHS",
    };
    let value = std::env::var(var).ok().filter(|v| !v.trim().is_empty());
    let in_var = |e: Box<dyn std::error::Error>| format!("{var}: {e}");
    Ok(match (compiler, value) {
        (Compiler::Nvcc(_), Some(v)) => ArchSpec::Nvidia(parse_nvidia_archs(&v).map_err(in_var)?),
        (Compiler::Nvcc(_), None) => ArchSpec::Nvidia(parse_nvidia_archs(&DEFAULT_NVIDIA_ARCHS.join(","))?),
        (_, Some(v)) => ArchSpec::AmdListed(parse_amd_archs(&v).map_err(in_var)?),
        (Compiler::ChrootHipcc(_), None) => ArchSpec::AmdDefault,
        (Compiler::Hipcc(_), None) => ArchSpec::AmdProbe,
    })
}

impl ArchSpec {
    fn describe(&self) -> String {
        match self {
            ArchSpec::Nvidia(archs) => nvidia_gencode_args(archs, true).join(" "),
            ArchSpec::AmdListed(archs) => format!("listed: {}", archs.join(",")),
            ArchSpec::AmdDefault => format!("default: {}", AMD_TARGETS.join(",")),
            ArchSpec::AmdProbe => format!("probed among: {}", AMD_ARCH_CANDIDATES.join(",")),
        }
    }

    /// The AMD targets when the list is known without probing hipcc.
    fn amd_targets(&self) -> Option<Vec<String>> {
        match self {
            ArchSpec::AmdListed(archs) => Some(archs.clone()),
            ArchSpec::AmdDefault => Some(AMD_TARGETS.iter().map(|t| t.to_string()).collect()),
            ArchSpec::Nvidia(_) | ArchSpec::AmdProbe => None,
        }
    }

    /// Whether `kernels/<stem>.hip` is built for this platform: always, unless the file is for
    /// other chips ([`kernel_files`]): then only when the target list, where it is known without
    /// probing, has one of them.
    fn builds(&self, platform: Platform, stem: &str) -> bool {
        let Some(only) = kernel_files::only(stem) else { return true };
        if only.platform() != platform {
            return false;
        }
        match (self, self.amd_targets()) {
            (ArchSpec::Nvidia(archs), _) => archs.iter().any(|a| only.keeps_sm(a.number, &a.suffix)),
            (_, Some(targets)) => targets.iter().any(|t| only.keeps_gfx(t)),
            (_, None) => true,
        }
    }

    /// The platform's target list (probing hipcc if it was not given).
    fn targets(&self, compiler: &Path) -> Result<Targets> {
        Ok(match self {
            ArchSpec::Nvidia(archs) => Targets::Nvidia(archs.clone()),
            ArchSpec::AmdListed(archs) => Targets::Amd(archs.clone()),
            ArchSpec::AmdDefault => Targets::Amd(AMD_TARGETS.iter().map(|t| t.to_string()).collect()),
            ArchSpec::AmdProbe => {
                let archs = probe_amd_archs(compiler, AMD_ARCH_CANDIDATES)?;
                if archs.is_empty() {
                    return Err(format!(
                        "{} accepts none of the gfx targets {}; set ROCMFORGE_AMD_ARCHS to the ones it supports",
                        compiler.display(),
                        AMD_ARCH_CANDIDATES.join(", ")
                    )
                    .into());
                }
                Targets::Amd(archs)
            }
        })
    }
}

/// The targets one compile builds for.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Targets {
    Nvidia(Vec<SmArch>),
    Amd(Vec<String>),
}

impl Targets {
    /// Those `kernels/<stem>.hip` is built for ([`kernel_files`]); empty when none.
    fn for_file(&self, stem: &str) -> Targets {
        let Some(only) = kernel_files::only(stem) else { return self.clone() };
        match self {
            Targets::Nvidia(archs) => Targets::Nvidia(
                archs.iter().filter(|a| only.keeps_sm(a.number, &a.suffix)).cloned().collect(),
            ),
            Targets::Amd(targets) => {
                Targets::Amd(targets.iter().filter(|t| only.keeps_gfx(t)).cloned().collect())
            }
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Targets::Nvidia(archs) => archs.is_empty(),
            Targets::Amd(targets) => targets.is_empty(),
        }
    }

    /// The compiler's target flags for `kernels/<stem>.hip`, code object versions included
    /// (the chroot's compiler: [`amd_code_object_args`]; the host's hipcc keeps its default).
    fn args(&self, compiler: &Compiler, stem: &str) -> Vec<String> {
        match self {
            Targets::Nvidia(archs) => {
                nvidia_gencode_args(archs, kernel_files::only(stem).is_none_or(|o| o.ptx()))
            }
            Targets::Amd(targets) => {
                let mut args: Vec<String> = targets.iter().map(|a| format!("--offload-arch={a}")).collect();
                if matches!(compiler, Compiler::ChrootHipcc(_)) {
                    args.extend(amd_code_object_args(targets));
                }
                args
            }
        }
    }

    /// How the build log names them, for `kernels/<stem>.hip`.
    fn describe(&self, compiler: &Compiler, stem: &str) -> String {
        match self {
            Targets::Nvidia(archs) => {
                let ptx = if kernel_files::only(stem).is_none_or(|o| o.ptx()) { " (+ PTX)" } else { "" };
                archs.iter().map(|a| format!("sm_{a}")).collect::<Vec<_>>().join(", ") + ptx
            }
            Targets::Amd(targets) if matches!(compiler, Compiler::ChrootHipcc(_)) => {
                format!("{} ({})", targets.join(", "), amd_code_object_summary(targets))
            }
            Targets::Amd(targets) => targets.join(", "),
        }
    }
}

/// A platform's compiler, as the build runs it.
enum Compiler {
    Nvcc(PathBuf),
    /// The host's hipcc.
    Hipcc(PathBuf),
    /// forky's hipcc in the chroot of `cargo xtask amd-toolchain`.
    ChrootHipcc(Chroot),
}

impl Compiler {
    fn find(platform: Platform) -> Option<Compiler> {
        match platform {
            Platform::Nvidia => toolchain::nvcc().map(Compiler::Nvcc),
            Platform::Amd => toolchain::amd_compiler().map(|c| match c {
                AmdCompiler::Chroot(chroot) => Compiler::ChrootHipcc(chroot),
                AmdCompiler::Host(path) => Compiler::Hipcc(path),
            }),
        }
    }

    /// The compiler's path on this machine, for messages and probing.
    fn path(&self) -> PathBuf {
        match self {
            Compiler::Nvcc(p) | Compiler::Hipcc(p) => p.clone(),
            Compiler::ChrootHipcc(c) => c.hipcc(),
        }
    }

    fn flags(&self) -> &'static [&'static str] {
        match self {
            Compiler::Nvcc(_) => NVCC_FLAGS,
            _ => HIPCC_FLAGS,
        }
    }

    /// The code object flags for `spec`'s targets ([`amd_code_object_args`]): the chroot's
    /// compiler only; the host's hipcc keeps its own default.
    fn code_object_args(&self, spec: &ArchSpec) -> Vec<String> {
        match (self, spec.amd_targets()) {
            (Compiler::ChrootHipcc(_), Some(targets)) => amd_code_object_args(&targets),
            _ => Vec::new(),
        }
    }

    /// How the compiler is named in the stamp: a host compiler by path and modification time (so
    /// an upgrade in place counts); the chroot by its folder and installed package versions.
    fn identity(&self) -> String {
        match self {
            Compiler::Nvcc(p) | Compiler::Hipcc(p) => {
                let time = std::fs::canonicalize(p)
                    .ok()
                    .and_then(|c| mtime(&c))
                    .and_then(|t| t.duration_since(SystemTime::UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_secs());
                format!("{} (modified {time})", p.display())
            }
            Compiler::ChrootHipcc(c) => {
                let versions: Vec<&str> = c.versions.lines().collect();
                format!("hipcc in the chroot {} ({})", c.root.display(), versions.join(", "))
            }
        }
    }

    /// The job compiling `kernels/<stem>.hip` into `object` with `target_args`.
    fn job(
        &self,
        platform: Platform,
        stem: &str,
        root: &Path,
        object: PathBuf,
        target_args: &[String],
    ) -> Job {
        let tmp = object.with_extension(format!("{}.tmp", platform.object_extension()));
        let mut args: Vec<String> = self.flags().iter().map(|s| s.to_string()).collect();
        args.push("-I".into());
        args.push("kernels/include".into());
        args.extend(target_args.iter().cloned());
        args.push(format!("kernels/{stem}.hip"));
        args.push("-o".into());
        match self {
            Compiler::Nvcc(p) | Compiler::Hipcc(p) => {
                args.push(tmp.to_string_lossy().into_owned());
                let shown = command_line(&p.to_string_lossy(), &args);
                let env = if platform == Platform::Amd { vec![("HIP_PLATFORM", "amd")] } else { Vec::new() };
                let args = args.into_iter().map(OsString::from).collect();
                Job {
                    platform,
                    stem: stem.to_string(),
                    program: p.clone().into(),
                    args,
                    env,
                    shown,
                    tmp,
                    object,
                }
            }
            Compiler::ChrootHipcc(chroot) => {
                // Inside: kernels/ read-only and <out>/amd at /rocmforge, compiled from there.
                let out_dir = object.parent().unwrap_or(root).to_path_buf();
                let file_name = tmp.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                args.push(format!("out/{file_name}"));
                let shown = format!(
                    "(in the chroot {}, from /rocmforge: kernels/ and out/ are {} and {}) {}",
                    chroot.root.display(),
                    root.join("kernels").display(),
                    out_dir.display(),
                    command_line("hipcc", &args)
                );
                let mut argv = vec!["HIP_PLATFORM=amd".to_string(), "hipcc".to_string()];
                argv.extend(args);
                let kernels_dir = root.join("kernels");
                let binds = [
                    Bind { host: &kernels_dir, inside: "/rocmforge/kernels", read_only: true },
                    Bind { host: &out_dir, inside: "/rocmforge/out", read_only: false },
                ];
                let cmd = chroot.command("/rocmforge", &binds, &argv);
                Job {
                    platform,
                    stem: stem.to_string(),
                    program: cmd.get_program().to_os_string(),
                    args: cmd.get_args().map(|a| a.to_os_string()).collect(),
                    env: Vec::new(),
                    shown,
                    tmp,
                    object,
                }
            }
        }
    }
}

/// What the objects of one platform were built with: the compiler, the flags (code object
/// versions included) and the target list.
fn stamp_text(compiler: &Compiler, spec: &ArchSpec) -> String {
    let mut flags: Vec<String> = compiler.flags().iter().map(|f| f.to_string()).collect();
    flags.extend(compiler.code_object_args(spec));
    format!(
        "compiler: {}\nflags: {}\ntargets: {}\n{}",
        compiler.identity(),
        flags.join(" "),
        spec.describe(),
        kernel_files::stamp_line()
    )
}

/// A command line as a shell would take it.
fn command_line(program: &str, args: &[String]) -> String {
    let quote = |s: &str| {
        if s.is_empty() || s.contains(|c: char| c.is_whitespace() || "\"'$\\".contains(c)) {
            format!("'{}'", s.replace('\'', r"'\''"))
        } else {
            s.to_string()
        }
    };
    let mut line = quote(program);
    for a in args {
        line.push(' ');
        line.push_str(&quote(a));
    }
    line
}

/// One kernel to compile for one platform.
struct Job {
    platform: Platform,
    stem: String,
    program: OsString,
    /// Everything after the program, `-o <tmp>` (as the compiler sees that path) included.
    args: Vec<OsString>,
    env: Vec<(&'static str, &'static str)>,
    /// The compile as shown when it fails.
    shown: String,
    /// Where the compiler writes, renamed to `object` on success.
    tmp: PathBuf,
    object: PathBuf,
}

impl Job {
    /// Compiles into a temporary file renamed into place on success, so a failed or interrupted
    /// compile never leaves an object that looks up to date.
    fn run(&self, root: &Path) -> std::result::Result<(u64, String), String> {
        let tmp = &self.tmp;
        let mut cmd = Command::new(&self.program);
        cmd.current_dir(root).args(&self.args).envs(self.env.iter().copied()).stdin(Stdio::null());
        let output =
            cmd.output().map_err(|e| format!("cannot run {}: {e}", Path::new(&self.program).display()))?;
        let text =
            String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
        if !output.status.success() {
            let _ = std::fs::remove_file(tmp);
            return Err(format!("{}\n$ {}\n{}", output.status, self.shown, text.trim_end()));
        }
        if let Some(why) = refused_advisory(&text) {
            let _ = std::fs::remove_file(tmp);
            return Err(format!("{why}\n$ {}\n{}", self.shown, text.trim_end()));
        }
        std::fs::rename(tmp, &self.object).map_err(|e| format!("{}: {e}", self.object.display()))?;
        let size = std::fs::metadata(&self.object).map(|m| m.len()).unwrap_or(0);
        Ok((size, text))
    }
}

/// Compiler advisories that are errors here. ptxas reports serialised `wgmma` (it waits out each
/// product before the next) as information only, yet it cost the flash-attention warpgroup
/// kernel 15% where it could not prove a warpgroup's products convergent (C7520, version 10 in
/// docs/kernels/attention.md); and a head_dim-64 build whose accumulators did not fit its
/// 104-register math threads (C7512) ran at 343 TFLOP/s where the kept one runs at 401-409
/// (version 11).
fn refused_advisory(output: &str) -> Option<&'static str> {
    REFUSED_ADVISORIES.iter().find(|(code, _)| output.contains(code)).map(|&(_, why)| why)
}

/// (the advisory's code as ptxas prints it, what to tell the author).
const REFUSED_ADVISORIES: [(&str, &str); 2] = [
    ("(C7520)", "ptxas serialised wgmma instructions (C7520); keep every warpgroup on one path to them"),
    (
        "(C7512)",
        "ptxas serialised wgmma instructions for want of registers (C7512); give the math warps more \
         (setmaxnreg, fewer threads) or hold fewer accumulators",
    ),
];

fn display_path(path: &Path, root: &Path) -> String {
    path.strip_prefix(root).unwrap_or(path).display().to_string()
}

/// Compiles every `kernels/*.hip` for each of `platforms`, skipping objects that are up to date.
/// Prints one line per kernel per platform; on a compile failure prints the compiler's output and
/// returns an error once every other kernel has been tried. An AMD build then checks and writes
/// the resource table (`amd_resources`).
pub fn build(platforms: &[Platform]) -> Result<()> {
    if platforms.is_empty() {
        return Err("no platform to build kernels for".into());
    }
    let started = Instant::now();
    let root = crate::workspace_root();
    let kernels_dir = root.join("kernels");
    let include_dir = kernels_dir.join("include");
    let sources = sources(&kernels_dir)?;
    if sources.is_empty() {
        return Err(format!("no kernel sources in {}", kernels_dir.display()).into());
    }
    let out_dir = output_dir();

    let mut jobs = Vec::new();
    // Platforms whose stamp is written once all of their jobs succeed.
    let mut stamps: Vec<(Platform, PathBuf, String)> = Vec::new();
    let mut amd: Option<(Compiler, ArchSpec)> = None;
    for &platform in platforms {
        let compiler = Compiler::find(platform).ok_or_else(|| platform.missing_compiler())?;
        let spec = arch_spec(&compiler)?;
        let dir = out_dir.join(platform.name());
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let files: Vec<&(String, PathBuf)> =
            sources.iter().filter(|(stem, _)| spec.builds(platform, stem)).collect();
        remove_stale(&dir, platform, &files, &root)?;

        let stamp_path = dir.join(".build-stamp");
        let stamp = stamp_text(&compiler, &spec);
        let stamp_current = std::fs::read_to_string(&stamp_path).is_ok_and(|s| s == stamp);
        let mut pending = Vec::new();
        for (stem, source) in files.iter().copied() {
            let object = object_path(platform, stem);
            let inputs: Vec<_> = crate::kernel_includes::kernel_inputs(source, &include_dir)
                .iter()
                .map(|p| mtime(p))
                .collect();
            if stamp_current && is_up_to_date(mtime(&object), &inputs) {
                println!("kernels: {platform:<6} {stem:<24} up to date    {}", display_path(&object, &root));
            } else {
                pending.push((stem, object));
            }
        }
        if !pending.is_empty() {
            let targets = spec.targets(&compiler.path())?;
            println!(
                "kernels: {platform:<6} {} targets: {}",
                compiler.path().display(),
                targets.describe(&compiler, "")
            );
            for (stem, object) in pending {
                let file_targets = targets.for_file(stem);
                if file_targets.is_empty() {
                    // Only where the list was probed: `builds` kept the file without knowing it.
                    println!(
                        "kernels: {platform:<6} {stem:<24} not built: it is for {}, none of the targets",
                        kernel_files::only(stem).map_or("", |o| o.describe())
                    );
                    continue;
                }
                if file_targets != targets {
                    println!(
                        "kernels: {platform:<6} {stem:<24} targets: {}",
                        file_targets.describe(&compiler, stem)
                    );
                }
                let args = file_targets.args(&compiler, stem);
                jobs.push(compiler.job(platform, stem, &root, object, &args));
            }
            stamps.push((platform, stamp_path, stamp));
        }
        if platform == Platform::Amd {
            amd = Some((compiler, spec));
        }
    }

    let failures = run_jobs(&jobs, &root);
    if !jobs.is_empty() {
        println!("kernels: compiled {} object(s) in {:.1} s", jobs.len(), started.elapsed().as_secs_f64());
    }
    for (platform, stamp_path, stamp) in stamps {
        if !failures.iter().any(|(p, _)| *p == platform) {
            std::fs::write(&stamp_path, stamp).map_err(|e| format!("{}: {e}", stamp_path.display()))?;
        }
    }
    if !failures.is_empty() {
        let names: Vec<String> = failures.iter().map(|(p, s)| format!("{p}/{s}")).collect();
        return Err(format!("{} kernel(s) failed to compile: {}", failures.len(), names.join(", ")).into());
    }
    // Each object's entry points by target, for rocm-kernels' host test of what launchers pick:
    // written for every object newer than its record (so a build from before records existed
    // gets them too).
    for &platform in platforms {
        for (stem, _) in &sources {
            let object = object_path(platform, stem);
            let record = kernel_symbols::record_path(&object);
            if object.is_file() && !is_up_to_date(mtime(&record), &[mtime(&object)]) {
                kernel_symbols::record(platform, &object)?;
            }
        }
    }
    if let Some((compiler, spec)) = amd {
        let stems: Vec<String> = sources
            .iter()
            .map(|(s, _)| s.clone())
            .filter(|s| object_path(Platform::Amd, s).is_file())
            .collect();
        amd_resource_table(&compiler, &spec, &out_dir.join(Platform::Amd.name()), &stems, &root)?;
    }
    Ok(())
}

/// Reads the resources of every AMD code object, prints each target's wavefront size, and with
/// the chroot's compiler checks them against the committed table: an entry spilling where the
/// table records no spill fails the build (unless `ROCMFORGE_ACCEPT_SPILLS=1`). The table is
/// rewritten only from a build of the default targets with the chroot's compiler, the build it
/// describes.
fn amd_resource_table(
    compiler: &Compiler,
    spec: &ArchSpec,
    dir: &Path,
    stems: &[String],
    root: &Path,
) -> Result<()> {
    let resources = amd_resources::read_all(dir, stems)?;
    for line in amd_resources::target_summary(&resources) {
        println!("kernels: amd    {line}");
    }
    let Compiler::ChrootHipcc(chroot) = compiler else {
        println!(
            "kernels: amd    {} not checked: it records the chroot toolchain's code objects \
             (`cargo xtask amd-toolchain`), and these come from the host's hipcc",
            amd_resources::TABLE_PATH
        );
        return Ok(());
    };
    let table_path = root.join(amd_resources::TABLE_PATH);
    let committed = std::fs::read_to_string(&table_path).ok();
    let now = amd_resources::spills(&resources);
    let new = match &committed {
        Some(md) => {
            let known_targets = amd_resources::parse_table_targets(md);
            let checked: amd_resources::Spills = now
                .iter()
                .filter(|((_, _, t), _)| known_targets.contains(t))
                .map(|(k, v)| (k.clone(), *v))
                .collect();
            amd_resources::new_spills(&checked, &amd_resources::parse_table_spills(md))
        }
        None => Vec::new(),
    };
    let accept = std::env::var(amd_resources::ACCEPT_VAR).is_ok_and(|v| v == "1");
    if !new.is_empty() {
        let list = new.iter().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n");
        if !accept {
            return Err(format!(
                "new register spills, where {} records none:\n{list}\nmake the kernel fit its registers, or accept the \
                 spills: {}=1 cargo xtask kernels --platform amd, and commit the table",
                amd_resources::TABLE_PATH,
                amd_resources::ACCEPT_VAR
            )
            .into());
        }
        println!("kernels: amd    accepting new spills ({}=1):\n{list}", amd_resources::ACCEPT_VAR);
    }
    if !matches!(spec, ArchSpec::AmdDefault) {
        println!(
            "kernels: amd    {} not rewritten: it describes the default targets, and ROCMFORGE_AMD_ARCHS chose others",
            amd_resources::TABLE_PATH
        );
        return Ok(());
    }
    let versions: Vec<&str> = chroot.versions.lines().filter(|l| !l.starts_with("suite ")).collect();
    let toolchain = format!("Debian {} chroot: {}", amd_toolchain::SUITE, versions.join(", "));
    let md = amd_resources::render(&resources, &toolchain);
    if committed.as_deref() == Some(md.as_str()) {
        println!("kernels: amd    {} unchanged", amd_resources::TABLE_PATH);
    } else {
        std::fs::write(&table_path, &md).map_err(|e| format!("{}: {e}", table_path.display()))?;
        println!("kernels: amd    wrote {}", amd_resources::TABLE_PATH);
    }
    Ok(())
}

/// Runs the compiles on every core; returns the (platform, kernel) pairs that failed.
fn run_jobs(jobs: &[Job], root: &Path) -> Vec<(Platform, String)> {
    let next = AtomicUsize::new(0);
    let failures = Mutex::new(Vec::new());
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(jobs.len().max(1));
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                while let Some(job) = jobs.get(next.fetch_add(1, Ordering::Relaxed)) {
                    let start = Instant::now();
                    let (platform, stem) = (job.platform, &job.stem);
                    match job.run(root) {
                        Ok((size, text)) => {
                            let secs = start.elapsed().as_secs_f64();
                            let mut line = format!(
                                "kernels: {platform:<6} {stem:<24} built {secs:5.1} s {} ({size} bytes)",
                                display_path(&job.object, root)
                            );
                            if !text.trim().is_empty() {
                                line = format!("{line}\n{}", text.trim_end());
                            }
                            println!("{line}");
                        }
                        Err(e) => {
                            eprintln!("kernels: {platform:<6} {stem:<24} FAILED: {e}");
                            failures.lock().unwrap_or_else(|p| p.into_inner()).push((platform, stem.clone()));
                        }
                    }
                }
            });
        }
    });
    let mut failures = failures.into_inner().unwrap_or_else(|p| p.into_inner());
    failures.sort();
    failures
}

/// Removes objects whose source is gone and temporaries of interrupted compiles, so nothing stale
/// gets embedded.
fn remove_stale(dir: &Path, platform: Platform, sources: &[&(String, PathBuf)], root: &Path) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let is_tmp = name.ends_with(".tmp");
        let ours = path.extension().is_some_and(|e| e == platform.object_extension() || e == "symbols");
        let orphan =
            ours && !sources.iter().any(|(stem, _)| path.file_stem().is_some_and(|s| s == stem.as_str()));
        if path.is_file() && (is_tmp || orphan) {
            std::fs::remove_file(&path)?;
            println!("kernels: {platform:<6} removed stale {}", display_path(&path, root));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::strings as args;
    use std::time::Duration;

    #[test]
    fn platform_flag_forms() {
        assert_eq!(parse_args(&args(&[])).unwrap(), Some(Selection::Auto));
        assert_eq!(parse_args(&args(&["--platform", "amd"])).unwrap(), Some(Selection::Only(Platform::Amd)));
        assert_eq!(
            parse_args(&args(&["--platform=nvidia"])).unwrap(),
            Some(Selection::Only(Platform::Nvidia))
        );
        assert_eq!(parse_args(&args(&["--platform", "all"])).unwrap(), Some(Selection::All));
        assert_eq!(
            parse_args(&args(&["--platform", "all", "--platform", "auto"])).unwrap(),
            Some(Selection::Auto)
        );
        assert_eq!(parse_args(&args(&["--help"])).unwrap(), None);
    }

    #[test]
    fn bad_arguments_are_errors() {
        assert!(parse_args(&args(&["--platform"])).is_err());
        assert!(parse_args(&args(&["--platform", "intel"])).is_err());
        assert!(parse_args(&args(&["--platfrom=amd"])).is_err());
        assert!(parse_args(&args(&["amd"])).is_err());
    }

    #[test]
    fn auto_takes_what_is_installed() {
        use Platform::*;
        assert_eq!(resolve(Selection::Auto, &[Nvidia]).unwrap(), vec![Nvidia]);
        assert_eq!(resolve(Selection::Auto, &[Amd, Nvidia]).unwrap(), vec![Amd, Nvidia]);
        let err = resolve(Selection::Auto, &[]).unwrap_err().to_string();
        assert!(err.contains("hipcc") && err.contains("nvcc"), "{err}");
    }

    #[test]
    fn explicit_platform_needs_its_compiler() {
        use Platform::*;
        assert_eq!(resolve(Selection::Only(Amd), &[Amd]).unwrap(), vec![Amd]);
        assert_eq!(resolve(Selection::All, &[Amd, Nvidia]).unwrap(), vec![Amd, Nvidia]);
        let err = resolve(Selection::All, &[Amd]).unwrap_err().to_string();
        assert!(err.contains("nvcc") && !err.contains("hipcc"), "{err}");
        let err = resolve(Selection::Only(Amd), &[Nvidia]).unwrap_err().to_string();
        assert!(err.contains("hipcc") && err.contains("install"), "{err}");
    }

    #[test]
    fn nvidia_arch_list() {
        let archs = parse_nvidia_archs("90, sm_80,compute_90 86").unwrap();
        let names: Vec<String> = archs.iter().map(|a| a.to_string()).collect();
        assert_eq!(names, ["80", "86", "90"]);
        assert_eq!(
            parse_nvidia_archs("90a,100").unwrap().iter().map(|a| a.to_string()).collect::<Vec<_>>(),
            ["90a", "100"]
        );
        for bad in ["", " , ", "8", "sm80", "gfx90a", "90ab", "1000", "90A"] {
            assert!(parse_nvidia_archs(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn default_gencode_is_sass_for_each_and_ptx_for_the_newest() {
        let archs = parse_nvidia_archs(&DEFAULT_NVIDIA_ARCHS.join(",")).unwrap();
        assert_eq!(
            nvidia_gencode_args(&archs, true).join(" "),
            [
                "-gencode arch=compute_80,code=sm_80",
                "-gencode arch=compute_90a,code=sm_90a",
                "-gencode arch=compute_90,code=compute_90"
            ]
            .join(" ")
        );
        let archs = parse_nvidia_archs("80,86").unwrap();
        assert!(nvidia_gencode_args(&archs, true).join(" ").ends_with("arch=compute_86,code=compute_86"));
    }

    #[test]
    fn serialised_wgmma_is_refused() {
        let advisory = "ptxas info    : (C7520) Potential Performance Loss: wgmma.mma_async instructions are \
                        serialized due to program dependence on compiler-inserted WG.AR in divergent path";
        assert!(refused_advisory(advisory).is_some());
        let registers = "ptxas info    : (C7512) Potential Performance Loss: wgmma.mma_async instructions are \
                         serialized due to insufficient register resources for the function 'f'";
        assert!(refused_advisory(registers).is_some());
        assert!(refused_advisory("ptxas info    : (C7519) warpgroup.arrive is injected").is_none());
    }

    #[test]
    fn amd_arch_list() {
        assert_eq!(parse_amd_archs("gfx90a, gfx1030 gfx90a").unwrap(), ["gfx90a", "gfx1030"]);
        assert_eq!(parse_amd_archs("gfx90a:xnack-:sramecc+").unwrap(), ["gfx90a:xnack-:sramecc+"]);
        assert_eq!(
            parse_amd_archs("gfx11-generic,gfx10-3-generic gfx1151").unwrap(),
            ["gfx11-generic", "gfx10-3-generic", "gfx1151"]
        );
        let defaults = parse_amd_archs(&AMD_TARGETS.join(",")).unwrap();
        assert_eq!(defaults.len(), AMD_TARGETS.len(), "every default target parses, none twice");
        for bad in [
            "",
            "gfx",
            "sm_80",
            "90",
            "gfx90a:xnack",
            "gfx90a:+",
            "GFX90A",
            "gfx90z",
            "gfx-generic",
            "gfx11-generic-",
            "gfx1-2-3-generic",
            "gfx1a-generic",
        ] {
            assert!(parse_amd_archs(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn specific_targets_are_v5_and_generic_ones_v6() {
        let defaults: Vec<String> = AMD_TARGETS.iter().map(|t| t.to_string()).collect();
        assert_eq!(
            amd_code_object_args(&defaults).join(" "),
            "-mcode-object-version=5 -Xarch_gfx10-3-generic -mcode-object-version=6 \
             -Xarch_gfx11-generic -mcode-object-version=6"
        );
        assert_eq!(
            amd_code_object_summary(&defaults),
            "code object v5; v6 for gfx10-3-generic, gfx11-generic"
        );
        let specific = parse_amd_archs("gfx90a:xnack-,gfx1100").unwrap();
        assert_eq!(amd_code_object_args(&specific), ["-mcode-object-version=5"]);
        assert_eq!(amd_code_object_summary(&specific), "code object v5");
        // clang binds -Xarch_ to the canonical spelling of the target ID.
        let generic = parse_amd_archs("gfx9-4-generic:xnack+:sramecc-").unwrap();
        assert_eq!(amd_code_object_args(&generic)[1], "-Xarch_gfx9-4-generic:sramecc-:xnack+");
        assert_eq!(canonical_target_id("gfx90a:sramecc+:xnack-"), "gfx90a:sramecc+:xnack-");
        assert_eq!(canonical_target_id("gfx11-generic"), "gfx11-generic");
        assert!(is_generic_target("gfx9-4-generic:xnack+") && !is_generic_target("gfx1151"));
    }

    #[test]
    fn staleness() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let t1 = t0 + Duration::from_secs(1);
        assert!(is_up_to_date(Some(t1), &[Some(t0), Some(t0)]));
        assert!(!is_up_to_date(Some(t1), &[Some(t0), Some(t1)]), "a header as new as the object");
        assert!(!is_up_to_date(Some(t0), &[Some(t1)]));
        assert!(!is_up_to_date(None, &[Some(t0)]), "object missing");
        assert!(!is_up_to_date(Some(t1), &[None]), "input unreadable");
    }

    #[test]
    fn sources_are_the_hip_files_sorted() {
        let found = sources(&crate::workspace_root().join("kernels")).unwrap();
        let stems: Vec<&str> = found.iter().map(|(s, _)| s.as_str()).collect();
        assert!(stems.contains(&"axpy") && stems.contains(&"fill"), "{stems:?}");
        assert!(stems.windows(2).all(|w| w[0] < w[1]));
    }
}
