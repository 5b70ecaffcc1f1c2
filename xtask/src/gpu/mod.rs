//! `cargo xtask gpu-test` and `cargo xtask gpu-archive`.
//!
//! - `gpu-test` builds the kernels for the platform of this machine and runs the workspace's tests
//!   under the nextest `gpu` profile with `ROCMFORGE_REQUIRE_GPU=1`, so a missing GPU is a failure
//!   and never a run that passes by skipping everything.
//! - `gpu-archive` packs what a GPU host without cargo needs into one folder: a nextest archive
//!   (test binaries with their kernels embedded), the nextest binary and lean builds of xtask and
//!   rocm-bench (benchmarks, with the same kernels embedded). `DIR/xtask gpu-test --archive DIR`,
//!   run from the root of a checkout, runs it there.
//!
//! `test.rs` runs the suite (with `devices.rs` counting the GPUs and choosing how many tests
//! share each, `report.rs` reading the runs' JUnit reports and `sanitizer.rs` the checkers'
//! reports), `archive.rs` packs it; this file holds what both sides agree on (the profiles, the
//! archive's name, the `gpu` test group of the nextest config) and the cargo plumbing: finding
//! nextest and the target folder, running and showing commands.

mod archive;
mod devices;
mod report;
mod sanitizer;
mod test;

pub use archive::archive;
pub use test::test;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Result;
use devices::JOBS_PER_GPU_ENV;

/// The nextest archive inside the folder `gpu-archive` writes.
const ARCHIVE_FILE: &str = "rocmforge-gpu.tar.zst";
/// The cargo profile GPU suites are built with (workspace `Cargo.toml`: optimised, stripped).
const CARGO_PROFILE: &str = "gpu";
/// The nextest profile GPU tests run under (`.config/nextest.toml`), and that file.
const NEXTEST_PROFILE: &str = "gpu";
const NEXTEST_CONFIG: &str = ".config/nextest.toml";
/// The test group GPU tests share (`.config/nextest.toml`).
const TEST_GROUP: &str = "gpu";
/// Where nextest writes the `gpu` profile's JUnit report, from the workspace root (for an
/// archive, the checkout it is remapped to): `[store] dir`, the profile, `[profile.gpu.junit]
/// path`. Not under CARGO_TARGET_DIR: nextest puts its store under the workspace root.
const JUNIT_REPORT: &str = "target/nextest/gpu/junit.xml";
/// Where `gpu-test --sanitize` keeps each tool's logs and JUnit report, under the workspace root.
const SANITIZER_LOGS: &str = "target/nextest/gpu/sanitizer";

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

fn run_checked(mut cmd: Command) -> Result<()> {
    println!("+ {}", shown(&cmd));
    let status =
        cmd.status().map_err(|e| format!("cannot run {}: {e}", cmd.get_program().to_string_lossy()))?;
    if !status.success() {
        return Err(format!("`{}` failed ({status})", shown(&cmd)).into());
    }
    Ok(())
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

/// Runs `gpus * jobs_per_gpu` GPU tests at once: with more than one, nextest gets a copy of the
/// repository config whose `gpu` test group has that many slots. The test kit puts slot
/// `NEXTEST_TEST_GROUP_SLOT` on device `slot % devices`, so the tests spread evenly over the
/// GPUs; it also learns how many share each GPU ([`JOBS_PER_GPU_ENV`]). `sanitized`: the run is
/// under a compute-sanitizer, and the copy's per-test limit is [`SANITIZED_PERIODS`] periods
/// instead of the profile's (the checker slows the heaviest tests to minutes).
///
/// `--config-file` replaces `.config/nextest.toml` rather than layering on it, hence a full copy.
/// `--tool-config-file` cannot do this: tool configs rank below the repository config, and may
/// only define test groups of their own (`@tool:` names).
pub(super) fn add_nextest_config(
    cmd: &mut Command,
    root: &Path,
    gpus: usize,
    jobs_per_gpu: usize,
    sanitized: bool,
) -> Result<Option<PathBuf>> {
    cmd.env(JOBS_PER_GPU_ENV, jobs_per_gpu.to_string());
    let slots = gpus.saturating_mul(jobs_per_gpu);
    if slots <= 1 && !sanitized {
        return Ok(None);
    }
    let config = root.join(NEXTEST_CONFIG);
    let mut text =
        fs::read_to_string(&config).map_err(|e| format!("cannot read {}: {e}", config.display()))?;
    if slots > 1 {
        text = set_group_max_threads(&text, TEST_GROUP, slots).ok_or_else(|| {
            format!("{} has no `max-threads` in [test-groups.{TEST_GROUP}]", config.display())
        })?;
    }
    if sanitized {
        text = set_terminate_after(&text, NEXTEST_PROFILE, SANITIZED_PERIODS).ok_or_else(|| {
            format!(
                "{} has no `slow-timeout` with `terminate-after` in [profile.{NEXTEST_PROFILE}]",
                config.display()
            )
        })?;
    }
    let path =
        std::env::temp_dir().join(format!("rocmforge-nextest-{slots}slots-{}.toml", std::process::id()));
    fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    cmd.arg("--config-file").arg(&path);
    Ok(Some(path))
}

/// Slow-timeout periods (of 60 s) after which a sanitized GPU test is killed: 10 minutes, twice a
/// plain run's limit. Under racecheck the heaviest tests (flash attention in f32, the MXFP4
/// matmuls, the model's decode graphs) take 2-4 minutes on an H100 (docs/gpu-runs.md).
const SANITIZED_PERIODS: u32 = 10;

/// `text` with the `terminate-after` of `[profile.<profile>]`'s `slow-timeout` set to `n`;
/// `None` if it has none.
fn set_terminate_after(text: &str, profile: &str, n: u32) -> Option<String> {
    const KEY: &str = "terminate-after";
    patch_first_line(text, &format!("[profile.{profile}]"), |line| {
        let at = line.find(KEY).filter(|_| line.trim_start().starts_with("slow-timeout"))?;
        let rest = &line[at + KEY.len()..];
        let value_end = rest.find([',', '}']).unwrap_or(rest.len());
        Some(format!("{}{KEY} = {n}{}", &line[..at], &rest[value_end..]))
    })
}

/// `text` with `max-threads` of `[test-groups.<group>]` set to `n`; `None` if it has none.
fn set_group_max_threads(text: &str, group: &str, n: usize) -> Option<String> {
    patch_first_line(text, &format!("[test-groups.{group}]"), |line| {
        let rest = line.trim_start().strip_prefix("max-threads")?;
        rest.trim_start().starts_with('=').then(|| format!("max-threads = {n}"))
    })
}

/// `text` with the first line of its `header` section that `patch` rewrites (`Some`) replaced;
/// `None` if `patch` rewrites no line of that section. A TOML section runs from its header
/// (comments after it allowed) to the next `[`.
fn patch_first_line(text: &str, header: &str, patch: impl Fn(&str) -> Option<String>) -> Option<String> {
    let (mut in_section, mut done) = (false, false);
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            in_section = trimmed.split('#').next().map(str::trim) == Some(header);
        }
        match (in_section && !done).then(|| patch(line)).flatten() {
            Some(patched) => {
                out.push_str(&patched);
                done = true;
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    done.then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_shown_quoted() {
        let mut cmd = Command::new("nextest");
        cmd.args(["run", "-E", "binary(/^gpu_/)"]).env("A", "1");
        assert_eq!(shown(&cmd), "A=1 nextest run -E 'binary(/^gpu_/)'");
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
    fn terminate_after_is_set_in_the_named_profile_only() {
        let text = "[profile.ci]\nslow-timeout = { period = \"60s\", terminate-after = 5 }\n\n\
                    [profile.gpu]\nslow-timeout = { period = \"60s\", terminate-after = 5, grace-period = \"10s\" }\n";
        let patched = set_terminate_after(text, "gpu", 10).unwrap();
        assert_eq!(
            patched,
            "[profile.ci]\nslow-timeout = { period = \"60s\", terminate-after = 5 }\n\n\
             [profile.gpu]\nslow-timeout = { period = \"60s\", terminate-after = 10, grace-period = \"10s\" }\n"
        );
        assert!(set_terminate_after("[profile.gpu]\nretries = 0\n", "gpu", 10).is_none());
    }

    #[test]
    fn the_repository_config_has_a_gpu_group_to_patch() {
        let text = fs::read_to_string(repository_root().join(NEXTEST_CONFIG)).unwrap();
        let patched = set_group_max_threads(&text, TEST_GROUP, 3).expect("[test-groups.gpu] max-threads");
        assert!(patched.contains("max-threads = 3"));
        let patched = set_terminate_after(&text, NEXTEST_PROFILE, SANITIZED_PERIODS).expect("[profile.gpu]");
        assert!(patched.contains("terminate-after = 10"));
    }

    #[test]
    fn the_junit_report_is_where_the_repository_config_puts_it() {
        let text = fs::read_to_string(repository_root().join(NEXTEST_CONFIG)).unwrap();
        let store = toml_string(&text, "[store]", "dir").expect("[store] dir");
        let path = toml_string(&text, &format!("[profile.{NEXTEST_PROFILE}.junit]"), "path")
            .expect("[profile.gpu.junit] path");
        assert_eq!(format!("{store}/{NEXTEST_PROFILE}/{path}"), JUNIT_REPORT);
    }

    /// The checkout this test runs in. At run time, not `env!`: nextest points
    /// CARGO_MANIFEST_DIR at the remapped checkout when the test runs from an archive on
    /// another host.
    fn repository_root() -> PathBuf {
        let xtask_dir = std::env::var_os("CARGO_MANIFEST_DIR").map(PathBuf::from);
        xtask_dir.and_then(|d| d.parent().map(Path::to_path_buf)).unwrap_or_else(crate::workspace_root)
    }

    /// The string `key = "..."` of the TOML table `header`, for the simple lines of our config.
    fn toml_string(text: &str, header: &str, key: &str) -> Option<String> {
        let mut in_table = false;
        for line in text.lines().map(str::trim) {
            if line.starts_with('[') {
                in_table = line.split('#').next().map(str::trim) == Some(header);
            } else if let Some((k, v)) = line.split_once('=').filter(|_| in_table)
                && k.trim() == key
            {
                return Some(v.split('#').next()?.trim().trim_matches('"').to_string());
            }
        }
        None
    }
}
