//! `cargo xtask gpu-test`: the suite run here with cargo, or from a `gpu-archive` folder
//! without it; once, or once per sanitizer tool.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use rocm_runtime::Platform;

use super::devices::{detect_gpu, gpu_count, parse_gpus};
use super::sanitizer::{SANITIZERS, canary_only, gpu_tests_only, sanitizer, summarise_sanitizer_logs};
use super::{ARCHIVE_FILE, CARGO_PROFILE, NEXTEST_CONFIG, NEXTEST_PROFILE, shown};
use crate::Result;
use crate::flags::Flags;
use crate::{hip_nvidia, kernels};

const TEST_USAGE: &str = "usage: cargo xtask gpu-test [--archive DIR] [--gpus N] [--hip-nvidia] [--sanitize[=memcheck,racecheck,synccheck]] [-- nextest args]";
/// The test group GPU tests share (`.config/nextest.toml`).
const TEST_GROUP: &str = "gpu";

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

fn parse_test_args(args: &[String]) -> Result<TestArgs> {
    let mut flags = Flags::new(args, TEST_USAGE);
    let archive = flags.value("--archive")?.map(PathBuf::from);
    let gpus = match flags.value("--gpus")? {
        Some(n) => Some(parse_gpus(&n).map_err(|e| flags.invalid("--gpus", e))?),
        None => None,
    };
    let sanitize = match flags.optional_value("--sanitize") {
        None => Vec::new(),
        Some(None) => SANITIZERS.iter().map(|t| t.to_string()).collect(),
        Some(Some(tools)) => sanitizer_list(&tools).map_err(|e| flags.invalid("--sanitize", e))?,
    };
    let hip_nvidia = flags.switch("--hip-nvidia");
    let nextest = flags.rest_after_dashdash();
    flags.finish()?;
    Ok(TestArgs { archive, gpus, sanitize, hip_nvidia, nextest })
}

/// `--sanitize=TOOLS`: a comma-separated list of [`SANITIZERS`] (empty: none).
fn sanitizer_list(tools: &str) -> std::result::Result<Vec<String>, String> {
    let tools: Vec<String> =
        tools.split(',').map(str::trim).filter(|t| !t.is_empty()).map(String::from).collect();
    match tools.iter().find(|t| !SANITIZERS.contains(&t.as_str())) {
        Some(bad) => Err(format!("unknown tool `{bad}` (tools: {})", SANITIZERS.join(", "))),
        None => Ok(tools),
    }
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
        cmd.env("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER", &runner)
            .env(rocm_runtime::SANITIZER_ENV, tool)
            .args(gpu_tests_only(&args.nextest));
        println!("gpu-test: sanitizer {tool}");
        let code = run_nextest(cmd, config)?;
        let (processes, errors) = summarise_sanitizer_logs(&logs)?;
        println!("gpu-test: {tool}: {processes} test process(es) checked, {errors} error(s) reported");
        if code != 0 || errors != 0 {
            failed.push(tool.clone());
        }
        if tool == "memcheck" && !canary_caught(&make, &runner, &logs)? {
            failed.push("memcheck (the planted out-of-bounds read went unreported)".into());
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

/// Runs the sanitizer canary alone under memcheck (`runner`): true when memcheck reported its
/// planted out-of-bounds read. A check that reports nothing there would pass any suite.
fn canary_caught(
    make: &impl Fn() -> Result<(Command, Option<PathBuf>)>,
    runner: &str,
    logs: &Path,
) -> Result<bool> {
    let _ = fs::remove_dir_all(logs);
    fs::create_dir_all(logs)?;
    let (mut cmd, config) = make()?;
    cmd.env("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER", runner)
        .env(rocm_runtime::SANITIZER_ENV, "memcheck")
        .args(canary_only());
    println!("gpu-test: memcheck canary (a test that reads past its input on purpose; it must be reported)");
    // The canary's process exits with memcheck's error code, so nextest reports it failed: that
    // is the expected outcome, and the logs say whether memcheck saw the read.
    run_nextest(cmd, config)?;
    let (processes, errors) = summarise_sanitizer_logs(logs)?;
    let caught = processes == 1 && errors > 0;
    println!(
        "gpu-test: memcheck canary: {}",
        if caught {
            format!("caught ({errors} error(s) reported), as it must be")
        } else {
            format!("NOT caught ({processes} process(es), {errors} error(s))")
        }
    );
    Ok(caught)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::strings;

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
}
