//! `cargo xtask gpu-test`: the suite run here with cargo, or from a `gpu-archive` folder
//! without it; once, `--repeat N` times (`report.rs` counts what failed), or once per sanitizer
//! tool. Several tests share each GPU (`--jobs-per-gpu`; `devices.rs` picks the default).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use rocm_runtime::Platform;

use super::devices::{detect_gpu, gpu_count, jobs_per_gpu, parse_gpus, parse_jobs_per_gpu};
use super::report::{Repeats, collect_run, parse_partition, parse_repeat, partition_args};
use super::sanitizer::{
    SANITIZERS, canary_only, checks_our_kernels_only, gpu_tests_only, runner, sanitizer,
    summarise_sanitizer_logs,
};
use super::{
    ARCHIVE_FILE, CARGO_PROFILE, JUNIT_REPORT, NEXTEST_CONFIG, NEXTEST_PROFILE, SANITIZER_LOGS,
    add_nextest_config, shown,
};
use crate::Result;
use crate::flags::Flags;
use crate::{hip_nvidia, kernels};

const TEST_USAGE: &str = "usage: cargo xtask gpu-test [--archive DIR] [--gpus N] [--jobs-per-gpu N | --serial] \
     [--repeat N] [--junit PATH] [--partition K/N] [--hip-nvidia] [--sanitize[=memcheck,racecheck,synccheck,initcheck]] \
     [-- nextest args]";

#[derive(Debug, Default, PartialEq)]
struct TestArgs {
    archive: Option<PathBuf>,
    gpus: Option<usize>,
    /// `--jobs-per-gpu N`, or 1 for `--serial`; `None`: the default for the devices found.
    jobs_per_gpu: Option<usize>,
    /// `--repeat N`: how many times to run the suite (once when `None`).
    repeat: Option<usize>,
    /// `--junit PATH`: where to copy the JUnit report of the (last) run.
    junit: Option<PathBuf>,
    /// `--partition K/N`: run only this host's share K of N (nextest's `hash:K/N`).
    partition: Option<(usize, usize)>,
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
    let jobs_per_gpu = match flags.value("--jobs-per-gpu")? {
        Some(n) => Some(parse_jobs_per_gpu(&n).map_err(|e| flags.invalid("--jobs-per-gpu", e))?),
        None => None,
    };
    let repeat = match flags.value("--repeat")? {
        Some(n) => Some(parse_repeat(&n).map_err(|e| flags.invalid("--repeat", e))?),
        None => None,
    };
    let junit = flags.value("--junit")?.map(PathBuf::from);
    let partition = match flags.value("--partition")? {
        Some(p) => Some(parse_partition(&p).map_err(|e| flags.invalid("--partition", e))?),
        None => None,
    };
    let sanitize = match flags.optional_value("--sanitize") {
        None => Vec::new(),
        Some(None) => SANITIZERS.iter().map(|t| t.to_string()).collect(),
        Some(Some(tools)) => sanitizer_list(&tools).map_err(|e| flags.invalid("--sanitize", e))?,
    };
    let serial = flags.switch("--serial");
    let hip_nvidia = flags.switch("--hip-nvidia");
    let nextest = flags.rest_after_dashdash();
    let jobs_per_gpu = match (serial, jobs_per_gpu) {
        (true, Some(_)) => {
            return Err(flags.invalid("--serial", "is --jobs-per-gpu 1: give one or the other"));
        }
        (true, None) => Some(1),
        (false, jobs) => jobs,
    };
    // A sanitizer run is one nextest run per tool plus the canary's: which of them would
    // `--junit` keep, or `--repeat` repeat? Rather than guess, refuse.
    if !sanitize.is_empty() && (repeat.is_some() || junit.is_some()) {
        return Err(
            flags.invalid("--sanitize", "runs once per tool; --repeat and --junit are for plain runs")
        );
    }
    flags.finish()?;
    Ok(TestArgs { archive, gpus, jobs_per_gpu, repeat, junit, partition, sanitize, hip_nvidia, nextest })
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
    let jobs = jobs_per_gpu(args.jobs_per_gpu, gpus, Some(&gpu));
    let platform = if args.hip_nvidia { Platform::Nvidia } else { gpu.platform };
    run_suite(args, &root, platform, || {
        let mut cmd = Command::new(crate::cargo());
        cmd.current_dir(&root)
            .args(["nextest", "run", "--workspace", "--cargo-profile", CARGO_PROFILE])
            .args(["--profile", NEXTEST_PROFILE]);
        let config = add_nextest_config(&mut cmd, &root, gpus, jobs, !args.sanitize.is_empty())?;
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
    let jobs = jobs_per_gpu(args.jobs_per_gpu, gpus, gpu.as_ref().ok());
    // The silicon decides the sanitizer: HIP for NVIDIA runs on an NVIDIA GPU.
    let platform = match &gpu {
        Ok(_) if args.hip_nvidia => Platform::Nvidia,
        Ok(gpu) => gpu.platform,
        Err(_) => Platform::Nvidia,
    };
    run_suite(args, &root, platform, || {
        let mut cmd = Command::new(&nextest);
        cmd.current_dir(&root)
            .args(["nextest", "run", "--archive-file"])
            .arg(&archive)
            .arg("--workspace-remap")
            .arg(&root)
            .args(["--profile", NEXTEST_PROFILE]);
        let config = add_nextest_config(&mut cmd, &root, gpus, jobs, !args.sanitize.is_empty())?;
        cmd.env("ROCMFORGE_REQUIRE_GPU", "1");
        if let (Ok(gpu), None) = (&gpu, std::env::var_os("ROCMFORGE_PLATFORM")) {
            cmd.env("ROCMFORGE_PLATFORM", gpu.platform_name());
        }
        Ok((cmd, config))
    })
}

/// Runs the suite once or `--repeat` times ([`run_repeated`]), or once per sanitizer tool (GPU
/// tests only, each test binary started under the checker through nextest's target runner).
/// `root`: the workspace root nextest runs in (for an archive, the one it is remapped to).
fn run_suite(
    args: &TestArgs,
    root: &Path,
    platform: Platform,
    make: impl Fn() -> Result<(Command, Option<PathBuf>)>,
) -> Result<()> {
    if args.sanitize.is_empty() {
        return run_repeated(args, root, make);
    }
    let checker = sanitizer(platform)?;
    let mut failed = Vec::new();
    for tool in &args.sanitize {
        // Kept after the run (and replaced by the next): one log per test process, and the run's
        // JUnit report, whose per-test times show what the checker slowed down.
        let logs = root.join(SANITIZER_LOGS).join(tool);
        let _ = fs::remove_dir_all(&logs);
        fs::create_dir_all(&logs)?;
        let (mut cmd, config) = make()?;
        let runner = runner(&checker, tool, &logs);
        cmd.env("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER", &runner)
            .env(rocm_runtime::SANITIZER_ENV, tool)
            .args(partition_args(args.partition, &args.nextest))
            .args(gpu_tests_only(&args.nextest, tool));
        if checks_our_kernels_only(tool) {
            cmd.env(rocm_runtime::VENDOR_BLAS_ENV, "off");
        }
        println!("gpu-test: sanitizer {tool}");
        let _ = fs::remove_file(root.join(JUNIT_REPORT));
        let code = run_nextest(cmd, config)?;
        let _ = fs::copy(root.join(JUNIT_REPORT), logs.join("junit.xml"));
        let (processes, errors) = summarise_sanitizer_logs(&logs)?;
        println!(
            "gpu-test: {tool}: {processes} test process(es) checked, {errors} error(s) reported (logs: {})",
            logs.display()
        );
        if code != 0 || errors != 0 {
            failed.push(tool.clone());
        }
        if tool == "memcheck" && !canary_caught(&make, &checker, &logs.join("canary"))? {
            failed.push("memcheck (the planted out-of-bounds read went unreported)".into());
        }
    }
    if failed.is_empty() {
        println!("gpu-test: sanitizers clean: {}", args.sanitize.join(", "));
        Ok(())
    } else {
        Err(format!("the GPU suite failed under: {}", failed.join(", ")).into())
    }
}

/// Runs the suite `--repeat` times (once by default), reading each run's JUnit report, and with
/// more than one run prints the tests that failed and in how many runs. Exits with the status of
/// the last run that failed, if any did.
fn run_repeated(
    args: &TestArgs,
    root: &Path,
    make: impl Fn() -> Result<(Command, Option<PathBuf>)>,
) -> Result<()> {
    let runs = args.repeat.unwrap_or(1);
    let report = root.join(JUNIT_REPORT);
    let keep = match &args.junit {
        Some(path) => Some(std::env::current_dir()?.join(path)),
        None => None,
    };
    let mut repeats = Repeats::default();
    let mut failed_code = None;
    for run in 1..=runs {
        if runs > 1 {
            println!("gpu-test: run {run} of {runs}");
        }
        let (mut cmd, config) = make()?;
        cmd.args(partition_args(args.partition, &args.nextest)).args(&args.nextest);
        // A report an earlier run left must not stand in for one this run did not write.
        let _ = fs::remove_file(&report);
        let code = run_nextest(cmd, config)?;
        let cases = collect_run(&report, keep.as_deref(), run, runs)?;
        repeats.record(code, cases.as_deref());
        if code != 0 {
            failed_code = Some(code);
        }
    }
    if runs > 1 {
        print!("{}", repeats.render());
    }
    match failed_code {
        Some(code) => std::process::exit(code),
        None if repeats.any_failed() => Err("a run reported failed tests, yet nextest exited 0".into()),
        None => Ok(()),
    }
}

/// Runs the sanitizer canary alone under memcheck (`checker`), logging to `logs`: true when
/// memcheck reported its planted out-of-bounds read. A check that reports nothing there would
/// pass any suite.
fn canary_caught(
    make: &impl Fn() -> Result<(Command, Option<PathBuf>)>,
    checker: &Path,
    logs: &Path,
) -> Result<bool> {
    let _ = fs::remove_dir_all(logs);
    fs::create_dir_all(logs)?;
    let (mut cmd, config) = make()?;
    cmd.env("CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUNNER", runner(checker, "memcheck", logs))
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

/// Runs nextest and returns its exit code. `config` (generated) is removed after. The devices'
/// shared budgets are held for the run (`devices::hold_budgets`).
fn run_nextest(mut cmd: Command, config: Option<PathBuf>) -> Result<i32> {
    let budgets = super::devices::hold_budgets();
    println!("+ {}", shown(&cmd));
    let status = cmd.status();
    drop(budgets);
    if let Some(config) = config {
        let _ = fs::remove_file(config);
    }
    let status = status.map_err(|e| format!("cannot run {}: {e}", cmd.get_program().to_string_lossy()))?;
    Ok(status.code().unwrap_or(1))
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
            "--jobs-per-gpu",
            "4",
            "--repeat=3",
            "--junit",
            "out/junit.xml",
            "--partition",
            "2/3",
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
                jobs_per_gpu: Some(4),
                repeat: Some(3),
                junit: Some("out/junit.xml".into()),
                partition: Some((2, 3)),
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
    fn serial_is_one_test_per_gpu() {
        assert_eq!(parse_test_args(&strings(&["--serial"])).unwrap().jobs_per_gpu, Some(1));
        assert_eq!(parse_test_args(&strings(&["--jobs-per-gpu=1"])).unwrap().jobs_per_gpu, Some(1));
    }

    /// The error for `args`, which must be one.
    fn error(args: &[&str]) -> String {
        parse_test_args(&strings(args)).unwrap_err().to_string()
    }

    #[test]
    fn bad_test_args_are_errors() {
        assert!(parse_test_args(&strings(&["--gpus", "0"])).is_err());
        assert!(parse_test_args(&strings(&["--gpus"])).is_err());
        assert!(parse_test_args(&strings(&["--archives", "x"])).is_err());
        let e = error(&["--jobs-per-gpu", "0"]);
        assert!(e.starts_with("--jobs-per-gpu: zero tests per GPU runs nothing\nusage:"), "{e}");
        assert!(
            error(&["--jobs-per-gpu", "x"])
                .starts_with("--jobs-per-gpu: `x` is not a number of tests per GPU")
        );
        assert!(error(&["--repeat", "0"]).starts_with("--repeat: `0` is not a positive number of runs"));
        assert!(error(&["--repeat=-2"]).starts_with("--repeat: "));
        for bad in ["3/2", "0/2", "2", "a/b", "1/0", "/"] {
            let e = error(&["--partition", bad]);
            assert!(e.starts_with(&format!("--partition: `{bad}` is not K/N with 1 <= K <= N")), "{e}");
        }
        let e = error(&["--serial", "--jobs-per-gpu", "2"]);
        assert!(e.starts_with("--serial: is --jobs-per-gpu 1: give one or the other"), "{e}");
        assert!(error(&["--jobs-per-gpu=1", "--serial"]).starts_with("--serial: "));
        assert!(error(&["--serial=yes"]).starts_with("unexpected argument `--serial=yes`"));
        assert!(error(&["--sanitize", "--repeat", "2"]).starts_with("--sanitize: runs once per tool"));
        assert!(error(&["--sanitize=memcheck", "--junit", "j.xml"]).starts_with("--sanitize: "));
    }
}
