//! `cargo xtask gpu-test` and `cargo xtask gpu-archive`.
//!
//! - `gpu-test` builds the kernels for the platform of this machine and runs the workspace's tests
//!   under the nextest `gpu` profile with `ROCMFORGE_REQUIRE_GPU=1`, so a missing GPU is a failure
//!   and never a run that passes by skipping everything.
//! - `gpu-archive` packs what a GPU host without cargo needs into one folder: a nextest archive
//!   (test binaries with their kernels embedded), the nextest binary and lean builds of xtask and
//!   rocm-bench (benchmarks, with the same kernels embedded). `DIR/xtask gpu-test --archive DIR`,
//!   run from the root of a checkout, runs it there.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use rocm_runtime::Platform;

use crate::Result;
use crate::{hip_nvidia, kernels};

/// The nextest archive inside the folder `gpu-archive` writes.
const ARCHIVE_FILE: &str = "rocmforge-gpu.tar.zst";
/// What a remote GPU host accepts in one transfer.
const SIZE_LIMIT: u64 = 60 * 1024 * 1024;
/// The cargo profile GPU suites are built with (workspace `Cargo.toml`: optimised, stripped).
const CARGO_PROFILE: &str = "gpu";
/// The nextest profile and test group GPU tests run under (`.config/nextest.toml`).
const NEXTEST_PROFILE: &str = "gpu";
const TEST_GROUP: &str = "gpu";
const NEXTEST_CONFIG: &str = ".config/nextest.toml";

const TEST_USAGE: &str = "usage: cargo xtask gpu-test [--archive DIR] [--gpus N] [--hip-nvidia] [--sanitize[=memcheck,racecheck,synccheck]] [-- nextest args]";
const ARCHIVE_USAGE: &str = "usage: cargo xtask gpu-archive [--out DIR] [--platform amd|nvidia|all]";

/// Tells rocm-kernels' build script which platforms' code objects to embed (all when unset).
const EMBED_ENV: &str = "ROCMFORGE_EMBED_PLATFORMS";

// ---------------------------------------------------------------------------------------------
// gpu-test

#[derive(Debug, Default, PartialEq)]
struct TestArgs {
    archive: Option<PathBuf>,
    gpus: Option<usize>,
    /// `--sanitize[=TOOLS]`: the vendor checkers to run the GPU tests under.
    sanitize: Vec<String>,
    /// `--hip-nvidia`: drive the NVIDIA GPU through AMD's HIP for NVIDIA (`cargo xtask
    /// hip-nvidia`) and the runtime's HIP driver, instead of the CUDA driver.
    hip_nvidia: bool,
    nextest: Vec<String>,
}

/// compute-sanitizer's tools `--sanitize` runs by default.
const SANITIZERS: [&str; 3] = ["memcheck", "racecheck", "synccheck"];

fn parse_test_args(args: &[String]) -> Result<TestArgs> {
    let mut out = TestArgs::default();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if arg == "--" {
            out.nextest = rest.cloned().collect();
            break;
        } else if let Some(dir) = option_value(arg, "--archive", &mut rest)? {
            out.archive = Some(PathBuf::from(dir));
        } else if arg == "--hip-nvidia" {
            out.hip_nvidia = true;
        } else if arg == "--sanitize" {
            out.sanitize = SANITIZERS.iter().map(|t| t.to_string()).collect();
        } else if let Some(tools) = arg.strip_prefix("--sanitize=") {
            out.sanitize =
                tools.split(',').map(str::trim).filter(|t| !t.is_empty()).map(String::from).collect();
            if let Some(bad) = out.sanitize.iter().find(|t| !SANITIZERS.contains(&t.as_str())) {
                return Err(
                    format!("--sanitize: unknown tool `{bad}` (tools: {})", SANITIZERS.join(", ")).into()
                );
            }
        } else if let Some(n) = option_value(arg, "--gpus", &mut rest)? {
            out.gpus = Some(parse_gpus(&n).map_err(|e| format!("--gpus: {e}"))?);
        } else {
            return Err(format!("unexpected argument `{arg}`\n{TEST_USAGE}").into());
        }
    }
    Ok(out)
}

pub fn test(args: &[String]) -> Result<()> {
    let args = parse_test_args(args)?;
    if args.hip_nvidia {
        use_hip_nvidia(args.archive.as_deref())?;
    }
    match &args.archive {
        None => test_here(&args),
        Some(dir) => test_archive(dir, &args),
    }
}

/// Points this process, and so the test processes it starts, at the HIP-for-NVIDIA library:
/// `<archive>/hip-nvidia/` for an archived suite, else `target/hip-nvidia/` (built if missing).
fn use_hip_nvidia(archive: Option<&Path>) -> Result<()> {
    let library = match archive {
        Some(dir) => std::env::current_dir()?.join(dir).join("hip-nvidia").join(hip_nvidia::LIBRARY),
        None => {
            let root = crate::workspace_root();
            let out = hip_nvidia::default_out(&root);
            let library = out.join(hip_nvidia::LIBRARY);
            if !library.is_file() {
                hip_nvidia::build(&root, &hip_nvidia::Inputs::find(&root)?, &out)?;
            }
            library
        }
    };
    if !library.is_file() {
        return Err(format!(
            "--hip-nvidia: {} is missing (gpu-archive packs it where `cargo xtask hip-nvidia` can build it)",
            library.display()
        )
        .into());
    }
    println!("gpu-test: through AMD's HIP for NVIDIA: {}", library.display());
    // SAFETY: set before any thread is started; the tests inherit them.
    unsafe {
        std::env::set_var("ROCMFORGE_PLATFORM", "amd");
        std::env::set_var(rocm_sys::HIP_LIBRARY_ENV, &library);
    }
    Ok(())
}

/// Builds this machine's kernels and runs the suite with cargo.
fn test_here(args: &TestArgs) -> Result<()> {
    let gpu = detect_gpu().map_err(|why| why.to_string())?;
    let root = crate::workspace_root();
    println!("gpu-test: {} GPU platform, {} device(s)", gpu.platform_name(), gpu.devices);
    kernels::build(&[gpu.platform])?;

    let gpus = gpu_count(args.gpus, Some(&gpu));
    let platform = if args.hip_nvidia { Platform::Nvidia } else { gpu.platform };
    run_suite(args, platform, || {
        let mut cmd = Command::new(crate::cargo());
        cmd.current_dir(&root)
            .args(["nextest", "run", "--workspace", "--cargo-profile", CARGO_PROFILE])
            .args(["--profile", NEXTEST_PROFILE]);
        let config = add_group_config(&mut cmd, &root, gpus)?;
        cmd.env("ROCMFORGE_REQUIRE_GPU", "1").env("ROCMFORGE_PLATFORM", gpu.platform_name());
        Ok((cmd, config))
    })
}

/// Runs a suite packed by `gpu-archive`, without cargo. The checkout root is the current folder.
fn test_archive(dir: &Path, args: &TestArgs) -> Result<()> {
    let root = std::env::current_dir()?;
    if !root.join(NEXTEST_CONFIG).is_file() || !root.join("Cargo.toml").is_file() {
        return Err(format!(
            "run `gpu-test --archive` from the root of the rocmforge checkout (the folder holding \
             Cargo.toml and {NEXTEST_CONFIG}); {} is not it",
            root.display()
        )
        .into());
    }
    let dir = root.join(dir);
    let nextest = dir.join("cargo-nextest");
    let archive = dir.join(ARCHIVE_FILE);
    for needed in [&nextest, &archive] {
        if !needed.is_file() {
            return Err(format!(
                "{} is missing: make the folder with `cargo xtask gpu-archive` and copy all of it",
                needed.display()
            )
            .into());
        }
    }

    let gpu = detect_gpu();
    match &gpu {
        Ok(gpu) => println!("gpu-test: {} GPU platform, {} device(s)", gpu.platform_name(), gpu.devices),
        // Run anyway: under ROCMFORGE_REQUIRE_GPU=1 every GPU test then fails and says why.
        Err(why) => eprintln!("gpu-test: {why}\ngpu-test: running the suite anyway; its GPU tests will fail"),
    }
    let gpus = gpu_count(args.gpus, gpu.as_ref().ok());
    // The silicon decides the sanitizer: HIP for NVIDIA runs on an NVIDIA GPU.
    let platform = match &gpu {
        Ok(_) if args.hip_nvidia => Platform::Nvidia,
        Ok(gpu) => gpu.platform,
        Err(_) => Platform::Nvidia,
    };
    run_suite(args, platform, || {
        let mut cmd = Command::new(&nextest);
        cmd.current_dir(&root)
            .args(["nextest", "run", "--archive-file"])
            .arg(&archive)
            .arg("--workspace-remap")
            .arg(&root)
            .args(["--profile", NEXTEST_PROFILE]);
        let config = add_group_config(&mut cmd, &root, gpus)?;
        cmd.env("ROCMFORGE_REQUIRE_GPU", "1");
        if let (Ok(gpu), None) = (&gpu, std::env::var_os("ROCMFORGE_PLATFORM")) {
            cmd.env("ROCMFORGE_PLATFORM", gpu.platform_name());
        }
        Ok((cmd, config))
    })
}

/// Runs the suite once, or once per sanitizer tool (GPU tests only, each test binary started
/// under the checker through nextest's target runner). Exits with nextest's status on failure.
fn run_suite(
    args: &TestArgs,
    platform: Platform,
    make: impl Fn() -> Result<(Command, Option<PathBuf>)>,
) -> Result<()> {
    if args.sanitize.is_empty() {
        let (mut cmd, config) = make()?;
        cmd.args(&args.nextest);
        let code = run_nextest(cmd, config)?;
        if code != 0 {
            std::process::exit(code);
        }
        return Ok(());
    }
    let checker = sanitizer(platform)?;
    let logs = std::env::temp_dir().join(format!("rocmforge-sanitizer-{}", std::process::id()));
    let mut failed = Vec::new();
    for tool in &args.sanitize {
        let _ = fs::remove_dir_all(&logs);
        fs::create_dir_all(&logs)?;
        let (mut cmd, config) = make()?;
        // The runtime checks every API result itself (and probes kernel parameters until the
        // driver says no), so API errors are not reports; memory and ordering errors are.
        // Listing tests makes no CUDA call, hence --require-cuda-init no; the reports go to log
        // files so the test list nextest reads on stdout stays clean.
        let runner = format!(
            "{} --tool {tool} --error-exitcode 99 --report-api-errors no --require-cuda-init no \
             --log-file {}/%p.log{}",
            checker.display(),
            logs.display(),
            if tool == "memcheck" { " --leak-check full" } else { "" }
        );
        cmd.env("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER", runner)
            .env(rocm_runtime::SANITIZER_ENV, tool)
            .args(gpu_tests_only(&args.nextest));
        println!("gpu-test: sanitizer {tool}");
        let code = run_nextest(cmd, config)?;
        let (processes, errors) = summarise_sanitizer_logs(&logs)?;
        println!("gpu-test: {tool}: {processes} test process(es) checked, {errors} error(s) reported");
        if code != 0 || errors != 0 {
            failed.push(tool.clone());
        }
    }
    let _ = fs::remove_dir_all(&logs);
    if failed.is_empty() {
        println!("gpu-test: sanitizers clean: {}", args.sanitize.join(", "));
        Ok(())
    } else {
        Err(format!("the GPU suite failed under: {}", failed.join(", ")).into())
    }
}

/// The nextest arguments of a sanitizer run: `args` limited to the GPU test binaries. nextest
/// unions repeated `-E` expressions, so each of the user's is intersected with the GPU binaries
/// instead of adding one of our own (which would run every GPU test).
fn gpu_tests_only(args: &[String]) -> Vec<String> {
    const GPU: &str = "binary(/^gpu_/)";
    let mut out = Vec::with_capacity(args.len() + 2);
    let mut filtered = false;
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        let expr = match arg.as_str() {
            "-E" | "--filterset" | "--filter-expr" => rest.next().cloned(),
            other => ["-E=", "--filterset=", "--filter-expr="]
                .iter()
                .find_map(|p| other.strip_prefix(p))
                .map(str::to_string),
        };
        match expr {
            Some(expr) => {
                out.extend(["-E".to_string(), format!("({expr}) and {GPU}")]);
                filtered = true;
            }
            None => out.push(arg.clone()),
        }
    }
    if !filtered {
        out.extend(["-E".to_string(), GPU.to_string()]);
    }
    out
}

/// Counts the checked processes in a folder of compute-sanitizer logs and the errors their
/// summaries report, printing every log that reports any.
fn summarise_sanitizer_logs(dir: &Path) -> Result<(usize, u64)> {
    let (mut processes, mut errors) = (0, 0);
    for entry in fs::read_dir(dir)? {
        let text = fs::read_to_string(entry?.path())?;
        let reported = sanitizer_errors(&text);
        // Processes that never initialised CUDA (test listing) write no summary.
        if text.contains("SUMMARY") {
            processes += 1;
        }
        if reported > 0 {
            println!("{text}");
        }
        errors += reported;
    }
    Ok((processes, errors))
}

/// The error count in a compute-sanitizer log: `ERROR SUMMARY: N errors` (memcheck, synccheck)
/// or `RACECHECK SUMMARY: ... (N errors, M warnings)`.
fn sanitizer_errors(log: &str) -> u64 {
    log.lines()
        .filter(|l| l.contains("SUMMARY"))
        .filter_map(|l| {
            let words: Vec<&str> = l.split(|c: char| c.is_whitespace() || c == '(' || c == ',').collect();
            words.windows(2).find(|w| w[1].starts_with("error")).and_then(|w| w[0].parse::<u64>().ok())
        })
        .sum()
}

/// The platform's memory and race checker.
fn sanitizer(platform: Platform) -> Result<PathBuf> {
    match platform {
        Platform::Nvidia => {
            let roots = ["CUDA_HOME", "CUDA_PATH"].iter().filter_map(std::env::var_os).map(PathBuf::from);
            std::env::var_os("PATH")
                .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
                .unwrap_or_default()
                .into_iter()
                .chain(roots.chain([PathBuf::from("/usr/local/cuda")]).map(|r| r.join("bin")))
                .map(|d| d.join("compute-sanitizer"))
                .find(|p| p.is_file())
                .ok_or_else(|| {
                    "compute-sanitizer not found (it ships with the CUDA toolkit; set CUDA_HOME)".into()
                })
        }
        // ROCm's checker is an address-sanitizer build of the kernels and the runtime (ROCm 5.7+,
        // `-fsanitize=address -shared-libasan`, xnack on); hipcc 5.2, the one rocmforge builds
        // with in CI, cannot make one.
        Platform::Amd => {
            Err("--sanitize on AMD needs an address-sanitizer build (ROCm 5.7+), not available yet".into())
        }
    }
}

/// Runs nextest and returns its exit code. `config` (generated) is removed after.
fn run_nextest(mut cmd: Command, config: Option<PathBuf>) -> Result<i32> {
    println!("+ {}", shown(&cmd));
    let status = cmd.status();
    if let Some(config) = config {
        let _ = fs::remove_file(config);
    }
    let status = status.map_err(|e| format!("cannot run {}: {e}", cmd.get_program().to_string_lossy()))?;
    Ok(status.code().unwrap_or(1))
}

/// With more than one GPU, nextest gets a copy of the repository config whose `gpu` test group
/// runs `gpus` tests at once, so each test group slot (`NEXTEST_TEST_GROUP_SLOT`) is a device.
///
/// `--config-file` replaces `.config/nextest.toml` rather than layering on it, hence a full copy.
/// `--tool-config-file` cannot do this: tool configs rank below the repository config, and may
/// only define test groups of their own (`@tool:` names).
fn add_group_config(cmd: &mut Command, root: &Path, gpus: usize) -> Result<Option<PathBuf>> {
    println!("gpu-test: the `{TEST_GROUP}` test group runs {gpus} test(s) at once");
    if gpus <= 1 {
        return Ok(None);
    }
    let config = root.join(NEXTEST_CONFIG);
    let text = fs::read_to_string(&config).map_err(|e| format!("cannot read {}: {e}", config.display()))?;
    let patched = set_group_max_threads(&text, TEST_GROUP, gpus)
        .ok_or_else(|| format!("{} has no `max-threads` in [test-groups.{TEST_GROUP}]", config.display()))?;
    let path = std::env::temp_dir().join(format!("rocmforge-nextest-{gpus}gpus-{}.toml", std::process::id()));
    fs::write(&path, patched).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    cmd.arg("--config-file").arg(&path);
    Ok(Some(path))
}

/// `text` with `max-threads` of `[test-groups.<group>]` set to `n`; `None` if it has none.
fn set_group_max_threads(text: &str, group: &str, n: usize) -> Option<String> {
    let header = format!("[test-groups.{group}]");
    let (mut in_group, mut done) = (false, false);
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            in_group = trimmed.split('#').next().map(str::trim) == Some(header.as_str());
        }
        let is_key = trimmed.strip_prefix("max-threads").is_some_and(|r| r.trim_start().starts_with('='));
        if in_group && !done && is_key {
            out.push_str(&format!("max-threads = {n}"));
            done = true;
        } else {
            out.push_str(line);
        }
        out.push('\n');
    }
    done.then_some(out)
}

// ---------------------------------------------------------------------------------------------
// The GPU of this machine

/// The platform this machine's GPUs are on, as the runtime finds them.
#[derive(Debug)]
struct LocalGpu {
    platform: Platform,
    devices: usize,
}

impl LocalGpu {
    /// The name `ROCMFORGE_PLATFORM` uses.
    fn platform_name(&self) -> &'static str {
        self.platform.name()
    }
}

/// The platform to test, found the way the tests will find it (`rocm_runtime::detect`:
/// `ROCMFORGE_PLATFORM`, else AMD, then NVIDIA); the tests are then pinned to it.
fn detect_gpu() -> std::result::Result<LocalGpu, String> {
    rocm_runtime::detect()
        .map(|found| LocalGpu { platform: found.platform, devices: found.device_count })
        .map_err(|e| format!("no usable GPU on this machine: {e}"))
}

/// How many GPU tests run at once: `--gpus N`, else `ROCMFORGE_GPUS`, else the devices the driver
/// reports (which honours CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES, the same numbering the
/// tests see), else `nvidia-smi -L` or the AMD GPUs under /sys, else 1.
fn gpu_count(explicit: Option<usize>, gpu: Option<&LocalGpu>) -> usize {
    if let Some(n) = explicit {
        return n;
    }
    if let Ok(text) = std::env::var("ROCMFORGE_GPUS") {
        match parse_gpus(&text) {
            Ok(n) => return n,
            Err(e) => eprintln!("gpu-test: ignoring ROCMFORGE_GPUS: {e}"),
        }
    }
    if let Some(gpu) = gpu {
        return gpu.devices;
    }
    count_nvidia_smi().or_else(count_amd_sysfs).unwrap_or(1)
}

fn parse_gpus(text: &str) -> std::result::Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("`{text}` is not a positive number of GPUs")),
    }
}

fn count_nvidia_smi() -> Option<usize> {
    let out = Command::new("nvidia-smi").arg("-L").output().ok().filter(|o| o.status.success())?;
    let n = String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.starts_with("GPU ")).count();
    (n > 0).then_some(n)
}

/// AMD GPUs as the kernel driver lists them: KFD topology nodes with SIMDs (CPU nodes have none).
fn count_amd_sysfs() -> Option<usize> {
    let nodes = fs::read_dir("/sys/class/kfd/kfd/topology/nodes").ok()?;
    let n = nodes
        .filter_map(|node| fs::read_to_string(node.ok()?.path().join("properties")).ok())
        .filter(|props| {
            props.lines().any(|l| {
                l.strip_prefix("simd_count").and_then(|v| v.trim().parse::<u64>().ok()).is_some_and(|v| v > 0)
            })
        })
        .count();
    (n > 0).then_some(n)
}

// ---------------------------------------------------------------------------------------------
// gpu-archive

#[derive(Debug, Default, PartialEq)]
struct ArchiveArgs {
    out: Option<PathBuf>,
    /// `--platform`: embed only this platform's kernels (the remote host has one), which keeps
    /// the archive small; `None`: every platform whose compiler is here.
    platform: Option<Platform>,
}

fn parse_archive_args(args: &[String]) -> Result<ArchiveArgs> {
    let mut parsed = ArchiveArgs::default();
    let mut rest = args.iter();
    while let Some(arg) = rest.next() {
        if let Some(dir) = option_value(arg, "--out", &mut rest)? {
            parsed.out = Some(PathBuf::from(dir));
        } else if let Some(p) = option_value(arg, "--platform", &mut rest)? {
            parsed.platform = match p.as_str() {
                "all" => None,
                name => Some(
                    Platform::ALL
                        .into_iter()
                        .find(|x| x.name() == name)
                        .ok_or_else(|| format!("unknown platform `{name}`\n{ARCHIVE_USAGE}"))?,
                ),
            };
        } else {
            return Err(format!("unexpected argument `{arg}`\n{ARCHIVE_USAGE}").into());
        }
    }
    Ok(parsed)
}

pub fn archive(args: &[String]) -> Result<()> {
    let root = crate::workspace_root();
    let parsed = parse_archive_args(args)?;
    let out = match parsed.out {
        Some(dir) => std::env::current_dir()?.join(dir),
        None => root.join(".gpu"),
    };
    fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    let nextest = find_nextest()?;

    // (a) Kernels for every platform whose compiler is here; the test binaries embed them.
    let mut platforms = kernels::available_platforms();
    if let Some(only) = parsed.platform {
        if !platforms.contains(&only) {
            let why = format!("no {only} kernel compiler here; `cargo xtask doctor` says what to install");
            return Err(why.into());
        }
        platforms = vec![only];
    }
    if platforms.is_empty() {
        return Err("no kernel compiler found (hipcc for AMD, nvcc for NVIDIA): an archive without \
                    kernels cannot test a GPU; `cargo xtask doctor` says what to install"
            .into());
    }
    let names: Vec<_> = platforms.iter().map(|p| p.name()).collect();
    println!("gpu-archive: building kernels for {}", names.join(" and "));
    kernels::build(&platforms)?;

    // (b) The nextest archive of the workspace's tests.
    let archive = out.join(ARCHIVE_FILE);
    for stale in [ARCHIVE_FILE, "cargo-nextest", "xtask", "rocm-bench", "README.txt"] {
        let _ = fs::remove_file(out.join(stale));
    }
    let mut cmd = Command::new(crate::cargo());
    // Every test binary embeds the kernels: only those of the platforms asked for.
    let embed = names.join(",");
    cmd.current_dir(&root)
        .env(EMBED_ENV, &embed)
        .args(["nextest", "archive", "--workspace", "--cargo-profile", CARGO_PROFILE, "--archive-file"])
        .arg(&archive);
    run_checked(cmd)?;

    // (c) The nextest binary, and xtask and rocm-bench built lean (dev builds weigh tens of MB).
    // rocm-bench embeds the kernels like the test binaries, so it gets the same profile and
    // EMBED_ENV: the cargo build of rocm-kernels the archive made is reused, and the benchmarks
    // launch the kernels the tests test. xtask embeds none; EMBED_ENV is harmless to it.
    let mut cmd = Command::new(crate::cargo());
    cmd.current_dir(&root).env(EMBED_ENV, &embed).args([
        "build",
        "--quiet",
        "--package",
        "xtask",
        "--package",
        "rocm-bench",
        "--profile",
        CARGO_PROFILE,
    ]);
    run_checked(cmd)?;
    let built = target_dir(&root)?.join(CARGO_PROFILE);
    copy_exe(&nextest, &out.join("cargo-nextest"))?;
    for exe in ["xtask", "rocm-bench"] {
        copy_exe(&built.join(format!("{exe}{}", std::env::consts::EXE_SUFFIX)), &out.join(exe))?;
    }

    // (c2) AMD's HIP for NVIDIA, so an NVIDIA host can run the suite through the HIP driver too
    // (`gpu-test --hip-nvidia`).
    let _ = fs::remove_dir_all(out.join("hip-nvidia"));
    if platforms.contains(&Platform::Nvidia) {
        match hip_nvidia::Inputs::find(&root) {
            Ok(inputs) => {
                hip_nvidia::build(&root, &inputs, &out.join("hip-nvidia"))?;
            }
            Err(why) => println!("gpu-archive: leaving out the HIP-for-NVIDIA library: {why}"),
        }
    }

    // (d) How to run it.
    let shown_dir = out.strip_prefix(&root).unwrap_or(&out).display().to_string();
    fs::write(out.join("README.txt"), readme(&shown_dir, &names, &root))?;

    // (e) What it weighs.
    check_size(&out, &archive)
}

fn readme(dir: &str, platforms: &[&str], root: &Path) -> String {
    let commit = git(root, &["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    let dirty = git(root, &["status", "--porcelain", "--untracked-files=no"]).is_some_and(|s| !s.is_empty());
    let dirty = if dirty { " (with uncommitted changes)" } else { "" };
    format!(
        "rocmforge GPU test suite, packed by `cargo xtask gpu-archive`.\n\
         \n\
         Built from commit {commit}{dirty}, with kernels for: {platforms}.\n\
         \n\
         {ARCHIVE_FILE}  nextest archive of the workspace's tests (cargo profile `{CARGO_PROFILE}`,\n\
         {pad}  kernels embedded in the test binaries)\n\
         cargo-nextest          the nextest that made the archive\n\
         xtask                  rocmforge's task runner\n\
         rocm-bench             kernel benchmarks (`{dir}/xtask bench [FILTER...]` runs it); its\n\
         \x20                      `kernels` command lists the kernels embedded, as in the tests\n\
         \n\
         On the GPU host, from the root of a checkout of the same commit (the folder holding\n\
         Cargo.toml and .config/nextest.toml), with this folder copied to {dir}/; no cargo needed:\n\
         \n\
         \x20   {dir}/xtask gpu-test --archive {dir}\n\
         \n\
         It runs the suite under the nextest `{NEXTEST_PROFILE}` profile with ROCMFORGE_REQUIRE_GPU=1: a GPU\n\
         test that finds no GPU fails. Options: --gpus N (GPU tests run at once; default\n\
         ROCMFORGE_GPUS, else the devices the driver reports); nextest arguments after `--`, e.g.\n\
         \n\
         \x20   {dir}/xtask gpu-test --archive {dir} -- -E 'binary(/^gpu_/)'\n",
        platforms = platforms.join(", "),
        pad = " ".repeat(ARCHIVE_FILE.len()),
    )
}

/// Prints the folder's files and total; fails over [`SIZE_LIMIT`], naming the largest.
fn check_size(out: &Path, archive: &Path) -> Result<()> {
    let mut files: Vec<(u64, String)> = Vec::new();
    for entry in fs::read_dir(out)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        let size = if meta.is_dir() { dir_size(&entry.path()) } else { meta.len() };
        files.push((size, entry.file_name().to_string_lossy().into_owned()));
    }
    files.sort_by(|a, b| b.cmp(a));
    let total: u64 = files.iter().map(|f| f.0).sum();
    println!("gpu-archive: {}", out.display());
    for (size, name) in &files {
        println!("  {:>9}  {name}", mib(*size));
    }
    println!("  {:>9}  total (limit {})", mib(total), mib(SIZE_LIMIT));
    if total <= SIZE_LIMIT {
        println!("gpu-archive: done; on the GPU host run what {}/README.txt says", out.display());
        return Ok(());
    }
    let largest: Vec<String> = files.iter().take(3).map(|(s, n)| format!("{n} ({})", mib(*s))).collect();
    let mut msg = format!(
        "{} weighs {}, over the {} a GPU host accepts; largest: {}",
        out.display(),
        mib(total),
        mib(SIZE_LIMIT),
        largest.join(", ")
    );
    let members = largest_archive_members(archive, 5);
    if !members.is_empty() {
        msg.push_str(&format!("; largest in {ARCHIVE_FILE} (uncompressed): {}", members.join(", ")));
    }
    Err(msg.into())
}

fn dir_size(dir: &Path) -> u64 {
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => dir_size(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

/// The largest members of the archive, best effort (needs GNU tar with zstd).
fn largest_archive_members(archive: &Path, n: usize) -> Vec<String> {
    let Ok(out) = Command::new("tar").arg("--zstd").arg("-tvf").arg(archive).output() else {
        return Vec::new();
    };
    let mut members: Vec<(u64, String)> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            Some((cols.get(2)?.parse().ok()?, cols.last()?.to_string()))
        })
        .collect();
    members.sort_by(|a, b| b.cmp(a));
    members.into_iter().take(n).map(|(s, name)| format!("{name} ({})", mib(s))).collect()
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// cargo-nextest as cargo would find it: on PATH, next to cargo, or in `$CARGO_HOME/bin`.
fn find_nextest() -> Result<PathBuf> {
    let exe = format!("cargo-nextest{}", std::env::consts::EXE_SUFFIX);
    let mut dirs: Vec<PathBuf> =
        std::env::var_os("PATH").map(|p| std::env::split_paths(&p).collect()).unwrap_or_default();
    if let Some(dir) =
        std::env::var_os("CARGO").and_then(|c| PathBuf::from(c).parent().map(Path::to_path_buf))
    {
        dirs.push(dir);
    }
    if let Some(home) = std::env::var_os("CARGO_HOME") {
        dirs.push(PathBuf::from(home).join("bin"));
    } else if let Some(home) = std::env::var_os("HOME") {
        dirs.push(PathBuf::from(home).join(".cargo/bin"));
    }
    dirs.into_iter().map(|d| d.join(&exe)).find(|p| p.is_file()).ok_or_else(|| {
        "cargo-nextest not found (PATH, next to cargo, $CARGO_HOME/bin): `cargo install cargo-nextest --locked`"
            .into()
    })
}

/// Copies an executable; strips the copy's symbols when `strip` is at hand (size only).
fn copy_exe(from: &Path, to: &Path) -> Result<()> {
    fs::copy(from, to).map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), to.display()))?;
    let _ = Command::new("strip").arg(to).output();
    Ok(())
}

/// The cargo target folder, as cargo resolves it (CARGO_TARGET_DIR, config, `<root>/target`).
fn target_dir(root: &Path) -> Result<PathBuf> {
    let out = Command::new(crate::cargo())
        .current_dir(root)
        .args(["metadata", "--no-deps", "--format-version", "1"])
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    let json = String::from_utf8_lossy(&out.stdout);
    let key = "\"target_directory\":\"";
    let start = json.find(key).ok_or("cargo metadata printed no target_directory")? + key.len();
    let end = json[start..].find('"').ok_or("cargo metadata: unterminated target_directory")? + start;
    Ok(PathBuf::from(json[start..end].replace("\\\\", "\\")))
}

// ---------------------------------------------------------------------------------------------
// Small helpers

/// The value of `--name VALUE` or `--name=VALUE` when `arg` is that option, else `None`.
fn option_value(arg: &str, name: &str, rest: &mut std::slice::Iter<'_, String>) -> Result<Option<String>> {
    if arg == name {
        return rest.next().cloned().map(Some).ok_or_else(|| format!("{name} needs a value").into());
    }
    Ok(arg.strip_prefix(name).and_then(|r| r.strip_prefix('=')).map(str::to_owned))
}

fn run_checked(mut cmd: Command) -> Result<()> {
    println!("+ {}", shown(&cmd));
    let status =
        cmd.status().map_err(|e| format!("cannot run {}: {e}", cmd.get_program().to_string_lossy()))?;
    if !status.success() {
        return Err(format!("`{}` failed ({status})", shown(&cmd)).into());
    }
    Ok(())
}

fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out =
        Command::new("git").current_dir(root).args(args).output().ok().filter(|o| o.status.success())?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// A command as a shell line, for the log.
fn shown(cmd: &Command) -> String {
    let mut line = String::new();
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            line.push_str(&format!("{}={} ", k.to_string_lossy(), v.to_string_lossy()));
        }
    }
    line.push_str(&cmd.get_program().to_string_lossy());
    for arg in cmd.get_args() {
        let arg = arg.to_string_lossy();
        if arg.is_empty() || arg.contains(|c: char| c.is_whitespace() || "'\"()|&;<>$*?".contains(c)) {
            line.push_str(&format!(" '{}'", arg.replace('\'', r"'\''")));
        } else {
            line.push(' ');
            line.push_str(&arg);
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn test_args_take_archive_gpus_and_pass_the_rest_through() {
        let args = parse_test_args(&strings(&[
            "--archive",
            ".gpu",
            "--gpus=2",
            "--hip-nvidia",
            "--",
            "-E",
            "--gpus",
        ]))
        .unwrap();
        assert_eq!(
            args,
            TestArgs {
                archive: Some(".gpu".into()),
                gpus: Some(2),
                sanitize: Vec::new(),
                hip_nvidia: true,
                nextest: strings(&["-E", "--gpus"])
            }
        );
        assert_eq!(parse_test_args(&[]).unwrap(), TestArgs::default());
    }

    #[test]
    fn sanitizer_summaries_are_counted() {
        assert_eq!(sanitizer_errors("========= ERROR SUMMARY: 0 errors\n"), 0);
        assert_eq!(sanitizer_errors("========= ERROR SUMMARY: 3 errors\n"), 3);
        assert_eq!(sanitizer_errors("========= ERROR SUMMARY: 1 error\n"), 1);
        assert_eq!(sanitizer_errors("RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)"), 2);
        assert_eq!(sanitizer_errors("no summary at all"), 0);
    }

    #[test]
    fn sanitizer_runs_intersect_the_users_filters_with_the_gpu_binaries() {
        assert_eq!(gpu_tests_only(&[]), strings(&["-E", "binary(/^gpu_/)"]));
        assert_eq!(
            gpu_tests_only(&strings(&["-E", "test(/mxfp/)", "--no-fail-fast", "-E=binary(gpu_runtime)"])),
            strings(&[
                "-E",
                "(test(/mxfp/)) and binary(/^gpu_/)",
                "--no-fail-fast",
                "-E",
                "(binary(gpu_runtime)) and binary(/^gpu_/)"
            ])
        );
    }

    #[test]
    fn sanitize_takes_all_tools_or_a_list() {
        assert_eq!(parse_test_args(&strings(&["--sanitize"])).unwrap().sanitize, SANITIZERS);
        assert_eq!(parse_test_args(&strings(&["--sanitize=racecheck"])).unwrap().sanitize, ["racecheck"]);
        assert!(parse_test_args(&strings(&["--sanitize=valgrind"])).is_err());
    }

    #[test]
    fn bad_test_args_are_errors() {
        assert!(parse_test_args(&strings(&["--gpus", "0"])).is_err());
        assert!(parse_test_args(&strings(&["--gpus"])).is_err());
        assert!(parse_test_args(&strings(&["--archives", "x"])).is_err());
        assert!(parse_archive_args(&strings(&["x"])).is_err());
        assert_eq!(parse_archive_args(&strings(&["--out", "d"])).unwrap().out, Some(PathBuf::from("d")));
        let nvidia = parse_archive_args(&strings(&["--platform=nvidia"])).unwrap();
        assert_eq!(nvidia.platform, Some(Platform::Nvidia));
        assert_eq!(parse_archive_args(&strings(&["--platform", "all"])).unwrap().platform, None);
        assert!(parse_archive_args(&strings(&["--platform", "cpu"])).is_err());
    }

    #[test]
    fn max_threads_is_set_in_the_named_group_only() {
        let text = "[test-groups.other]\nmax-threads = 1\n\n[test-groups.gpu] # GPUs\nmax-threads = 1\n";
        let patched = set_group_max_threads(text, "gpu", 4).unwrap();
        assert_eq!(
            patched,
            "[test-groups.other]\nmax-threads = 1\n\n[test-groups.gpu] # GPUs\nmax-threads = 4\n"
        );
        assert!(set_group_max_threads("[test-groups.other]\nmax-threads = 1\n", "gpu", 2).is_none());
    }

    #[test]
    fn the_repository_config_has_a_gpu_group_to_patch() {
        // At run time, not `env!`: nextest points CARGO_MANIFEST_DIR at the remapped checkout
        // when the test runs from an archive on another host.
        let xtask_dir = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from);
        let root =
            xtask_dir.and_then(|d| d.parent().map(Path::to_path_buf)).unwrap_or_else(crate::workspace_root);
        let config = root.join(NEXTEST_CONFIG);
        let text = fs::read_to_string(config).unwrap();
        let patched = set_group_max_threads(&text, TEST_GROUP, 3).expect("[test-groups.gpu] max-threads");
        assert!(patched.contains("max-threads = 3"));
    }

    #[test]
    fn commands_are_shown_quoted() {
        let mut cmd = Command::new("nextest");
        cmd.args(["run", "-E", "binary(/^gpu_/)"]).env("A", "1");
        assert_eq!(shown(&cmd), "A=1 nextest run -E 'binary(/^gpu_/)'");
    }
}
