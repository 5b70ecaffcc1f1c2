//! `gpu-test --sanitize`: the vendor checker, the GPU tests it runs, and what its logs report.

use std::fs;
use std::path::{Path, PathBuf};

use rocm_runtime::Platform;

use crate::Result;

/// compute-sanitizer's tools `--sanitize` runs by default.
pub(super) const SANITIZERS: [&str; 4] = ["memcheck", "racecheck", "synccheck", "initcheck"];

/// The kernels racecheck instruments: ours, whose entry points all start `rf_` (`extern "C"`, so
/// unmangled). The vendor libraries' kernels (cuBLAS GEMMs) keep their shared-memory protocols to
/// themselves, and instrumenting them made each GEMM test take minutes; memcheck, synccheck and
/// initcheck still check every kernel, the vendor's included (what we hand cuBLAS is ours).
const RACECHECK_KERNELS: &str = "regex=^rf_";

/// The command nextest starts each test binary under (its target runner): `checker` running
/// `tool`, one log per process in `logs`.
pub(super) fn runner(checker: &Path, tool: &str, logs: &Path) -> String {
    // The runtime checks every API result itself (and probes kernel parameters until the driver
    // says no), so API errors are not reports; memory and ordering errors are. Listing tests
    // makes no CUDA call, hence --require-cuda-init no; the reports go to log files so the test
    // list nextest reads on stdout stays clean.
    let tool_options = match tool {
        // Device allocations alive at exit are leaks: the runtime frees everything it made.
        "memcheck" => " --leak-check full".to_string(),
        "racecheck" => format!(" --kernel-name {RACECHECK_KERNELS}"),
        _ => String::new(),
    };
    format!(
        "{} --tool {tool} --error-exitcode 99 --report-api-errors no --require-cuda-init no \
         --log-file {}/%p.log{tool_options}",
        checker.display(),
        logs.display()
    )
}

/// The canary's test-name filter: a GPU test that reads past its input under memcheck on
/// purpose (`rocm-kernels`' `stream_read::sanitizer_canary_reads_one_vector_past_its_input`).
/// Sanitized runs leave it out and run it on its own, where memcheck must report it.
const CANARY: &str = "test(/sanitizer_canary_/)";

/// The nextest arguments that run the canary alone.
pub(super) fn canary_only() -> Vec<String> {
    vec!["-E".to_string(), format!("binary(/^gpu_/) and {CANARY}")]
}

/// Whether `tool` checks only our kernels, so runs with the vendor BLAS turned off
/// ([`rocm_runtime::VENDOR_BLAS_ENV`]) and without the tests of the vendor path (named `vendor`):
/// racecheck instruments only `rf_` kernels ([`RACECHECK_KERNELS`]) and faulted in a cuBLAS test
/// even with none instrumented; initcheck does not see what cuBLAS's Hopper kernels write, so it
/// reported reads of their outputs as uninitialised.
pub(super) fn checks_our_kernels_only(tool: &str) -> bool {
    matches!(tool, "racecheck" | "initcheck")
}

/// The nextest arguments of a `tool` run: `args` limited to the GPU test binaries, without
/// the canary (and without the vendor path's tests for [`checks_our_kernels_only`] tools).
/// nextest unions repeated `-E` expressions, so each of the user's is intersected with the GPU
/// binaries instead of adding one of our own (which would run every GPU test).
pub(super) fn gpu_tests_only(args: &[String], tool: &str) -> Vec<String> {
    let vendor = if checks_our_kernels_only(tool) { " and not test(/vendor/)" } else { "" };
    let gpu = format!("binary(/^gpu_/) and not {CANARY}{vendor}");
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
                out.extend(["-E".to_string(), format!("({expr}) and {gpu}")]);
                filtered = true;
            }
            None => out.push(arg.clone()),
        }
    }
    if !filtered {
        out.extend(["-E".to_string(), gpu]);
    }
    out
}

/// Logs printed in full when a run reports errors; the rest are named (all stay on disk).
const LOGS_PRINTED: usize = 3;

/// Counts the checked processes in a folder of compute-sanitizer logs (`*.log`) and the errors
/// their summaries report, printing the first logs that report any and naming the others.
pub(super) fn summarise_sanitizer_logs(dir: &Path) -> Result<(usize, u64)> {
    let (mut processes, mut errors, mut reporting) = (0, 0, 0);
    let mut logs: Vec<PathBuf> =
        fs::read_dir(dir)?.map(|e| e.map(|e| e.path())).collect::<std::io::Result<_>>()?;
    logs.retain(|p| p.extension().is_some_and(|e| e == "log"));
    logs.sort();
    for log in logs {
        let text = fs::read_to_string(&log)?;
        let reported = sanitizer_errors(&text);
        // Processes that never initialised CUDA (test listing) write no summary.
        if text.contains("SUMMARY") {
            processes += 1;
        }
        if reported > 0 {
            reporting += 1;
            if reporting <= LOGS_PRINTED {
                println!("{text}");
            } else {
                println!("gpu-test: {reported} more error(s) in {}", log.display());
            }
        }
        errors += reported;
    }
    Ok((processes, errors))
}

/// The error count in a compute-sanitizer log: `ERROR SUMMARY: N errors` (memcheck, synccheck)
/// or `RACECHECK SUMMARY: ... (N errors, M warnings)`.
fn sanitizer_errors(log: &str) -> u64 {
    log.lines()
        // memcheck adds `ERROR SUMMARY: N errors were not printed` past its print limit: the
        // same errors again.
        .filter(|l| l.contains("SUMMARY") && !l.contains("not printed"))
        .filter_map(|l| {
            let words: Vec<&str> = l.split(|c: char| c.is_whitespace() || c == '(' || c == ',').collect();
            words.windows(2).find(|w| w[1].starts_with("error")).and_then(|w| w[0].parse::<u64>().ok())
        })
        .sum()
}

/// The platform's memory and race checker.
pub(super) fn sanitizer(platform: Platform) -> Result<PathBuf> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::strings;

    #[test]
    fn sanitizer_summaries_are_counted() {
        assert_eq!(sanitizer_errors("========= ERROR SUMMARY: 0 errors\n"), 0);
        assert_eq!(sanitizer_errors("========= ERROR SUMMARY: 3 errors\n"), 3);
        assert_eq!(sanitizer_errors("========= ERROR SUMMARY: 1 error\n"), 1);
        assert_eq!(sanitizer_errors("RACECHECK SUMMARY: 2 hazards displayed (2 errors, 0 warnings)"), 2);
        assert_eq!(sanitizer_errors("no summary at all"), 0);
        let truncated = "========= ERROR SUMMARY: 35420 errors were not printed. Use --print-limit option\n\
                         ========= ERROR SUMMARY: 35520 errors\n";
        assert_eq!(sanitizer_errors(truncated), 35520);
    }

    #[test]
    fn sanitizer_runs_intersect_the_users_filters_with_the_gpu_binaries() {
        assert_eq!(
            gpu_tests_only(&[], "memcheck"),
            strings(&["-E", "binary(/^gpu_/) and not test(/sanitizer_canary_/)"])
        );
        assert_eq!(
            gpu_tests_only(&[], "initcheck"),
            strings(&["-E", "binary(/^gpu_/) and not test(/sanitizer_canary_/) and not test(/vendor/)"])
        );
        assert_eq!(
            gpu_tests_only(
                &strings(&["-E", "test(/mxfp/)", "--no-fail-fast", "-E=binary(gpu_runtime)"]),
                "synccheck"
            ),
            strings(&[
                "-E",
                "(test(/mxfp/)) and binary(/^gpu_/) and not test(/sanitizer_canary_/)",
                "--no-fail-fast",
                "-E",
                "(binary(gpu_runtime)) and binary(/^gpu_/) and not test(/sanitizer_canary_/)"
            ])
        );
    }
}
