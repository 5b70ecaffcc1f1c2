//! `cargo xtask gpu-archive`: the GPU suite packed into one folder for a host without cargo.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use rocm_runtime::Platform;

use super::{ARCHIVE_FILE, CARGO_PROFILE, NEXTEST_PROFILE, find_nextest, run_checked, target_dir};
use crate::Result;
use crate::flags::Flags;
use crate::{hip_nvidia, kernels};

/// What a remote GPU host accepts in one transfer.
const SIZE_LIMIT: u64 = 60 * 1024 * 1024;

const ARCHIVE_USAGE: &str =
    "usage: cargo xtask gpu-archive [--out DIR] [--platform amd|nvidia|all] [--with-generate]";

/// Tells rocm-kernels' build script which platforms' code objects to embed (all when unset).
const EMBED_ENV: &str = "ROCMFORGE_EMBED_PLATFORMS";

#[derive(Debug, Default, PartialEq)]
struct ArchiveArgs {
    out: Option<PathBuf>,
    /// `--platform`: embed only this platform's kernels (the remote host has one), which keeps
    /// the archive small; `None`: every platform whose compiler is here.
    platform: Option<Platform>,
    /// `--with-generate`: rocm-model's `generate` example too. Like rocm-bench it embeds every
    /// kernel (~10 MiB), which with the suite is past what a host accepts at once, so it comes
    /// only when asked for.
    generate: bool,
}

fn parse_archive_args(args: &[String]) -> Result<ArchiveArgs> {
    let mut flags = Flags::new(args, ARCHIVE_USAGE);
    let out = flags.value("--out")?.map(PathBuf::from);
    let platform = match flags.value("--platform")?.as_deref() {
        None | Some("all") => None,
        Some(name) => Some(
            Platform::ALL
                .into_iter()
                .find(|x| x.name() == name)
                .ok_or_else(|| flags.invalid("--platform", format!("unknown platform `{name}`")))?,
        ),
    };
    let generate = flags.switch("--with-generate");
    flags.finish()?;
    Ok(ArchiveArgs { out, platform, generate })
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
    for stale in [ARCHIVE_FILE, "cargo-nextest", "xtask", "rocm-bench", "generate", "README.txt"] {
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
    recompress(&archive);

    // (c) The nextest binary, and xtask, rocm-bench and (`--with-generate`) rocm-model's
    // `generate` example built lean (dev builds weigh tens of MB). `--bins` is needed beside
    // `--example`: naming one target kind makes cargo build only that kind.
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
        "--bins",
        "--profile",
        CARGO_PROFILE,
    ]);
    if parsed.generate {
        cmd.args(["--package", "rocm-model", "--example", "generate"]);
    }
    run_checked(cmd)?;
    let built = target_dir(&root)?.join(CARGO_PROFILE);
    copy_exe(&nextest, &out.join("cargo-nextest"))?;
    let mut exes = vec!["xtask", "rocm-bench"];
    if parsed.generate {
        exes.push("examples/generate");
    }
    for exe in exes {
        let name = exe.rsplit('/').next().unwrap_or(exe);
        copy_exe(&built.join(format!("{exe}{}", std::env::consts::EXE_SUFFIX)), &out.join(name))?;
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
    fs::write(out.join("README.txt"), readme(&shown_dir, &names, &root, parsed.generate))?;

    // (e) What it weighs.
    check_size(&out, &archive)
}

/// Recompresses the nextest archive with zstd's long-distance matching, where the `zstd` tool is
/// here. Every test binary embeds the same kernels (megabytes each); nextest's own compression
/// keeps an 8 MiB window, which cannot see one binary's copy from the next (38.8 MiB of a 60
/// MiB transfer), while a 128 MiB window does (11.5 MiB). Decoders accept windows up to 2^27
/// without being told, nextest's included. Without the tool the archive stays as nextest made it.
fn recompress(archive: &Path) {
    let smaller = archive.with_extension("zst.long");
    let command = format!(
        "zstd -d -c -q '{}' | zstd -19 --long=27 -T0 -q -f -o '{}'",
        archive.display(),
        smaller.display()
    );
    match Command::new("sh").args(["-c", &command]).status() {
        Ok(status) if status.success() => {
            if let Err(e) = fs::rename(&smaller, archive) {
                println!("gpu-archive: keeping nextest's compression: {e}");
            }
        }
        _ => {
            let _ = fs::remove_file(&smaller);
            println!("gpu-archive: no `zstd` tool here: the archive keeps nextest's compression (larger)");
        }
    }
}

fn readme(dir: &str, platforms: &[&str], root: &Path, generate: bool) -> String {
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
         {generate_line}\
         \n\
         On the GPU host, from the root of a checkout of the same commit (the folder holding\n\
         Cargo.toml and .config/nextest.toml), with this folder copied to {dir}/; no cargo needed:\n\
         \n\
         \x20   {dir}/xtask gpu-test --archive {dir}\n\
         \n\
         It runs the suite under the nextest `{NEXTEST_PROFILE}` profile with ROCMFORGE_REQUIRE_GPU=1: a GPU\n\
         test that finds no GPU fails. Several tests run at once on each GPU. Options: --gpus N\n\
         (default ROCMFORGE_GPUS, else the devices the driver reports); --jobs-per-gpu N or\n\
         --serial (default: the CPUs per GPU, at most 16; 1 where a GPU drives a display);\n\
         --repeat N (a table of the tests that failed in some runs); --junit PATH; --partition K/N\n\
         (this host's share of N hosts); nextest arguments after `--`, e.g.\n\
         \n\
         \x20   {dir}/xtask gpu-test --archive {dir} -- -E 'binary(/^gpu_/)'\n\
         \n\
         docs/gpu-runs.md in the checkout says more.\n",
        platforms = platforms.join(", "),
        pad = " ".repeat(ARCHIVE_FILE.len()),
        generate_line = if generate {
            format!(
                "generate               rocm-model's example: token ids in, generated ids and tokens/s out\n\
                 \x20                      (`{dir}/generate --help`; a synthetic model without a GGUF)\n"
            )
        } else {
            String::new()
        },
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

/// Copies an executable; strips the copy's symbols when `strip` is at hand (size only).
fn copy_exe(from: &Path, to: &Path) -> Result<()> {
    fs::copy(from, to).map_err(|e| format!("cannot copy {} to {}: {e}", from.display(), to.display()))?;
    let _ = Command::new("strip").arg(to).output();
    Ok(())
}

fn git(root: &Path, args: &[&str]) -> Option<String> {
    let out =
        Command::new("git").current_dir(root).args(args).output().ok().filter(|o| o.status.success())?;
    Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flags::strings;

    #[test]
    fn bad_archive_args_are_errors() {
        assert!(parse_archive_args(&strings(&["x"])).is_err());
        assert_eq!(parse_archive_args(&strings(&["--out", "d"])).unwrap().out, Some(PathBuf::from("d")));
        let nvidia = parse_archive_args(&strings(&["--platform=nvidia"])).unwrap();
        assert_eq!(nvidia.platform, Some(Platform::Nvidia));
        assert_eq!(parse_archive_args(&strings(&["--platform", "all"])).unwrap().platform, None);
        assert!(parse_archive_args(&strings(&["--platform", "cpu"])).is_err());
        assert!(!parse_archive_args(&strings(&[])).unwrap().generate);
        assert!(parse_archive_args(&strings(&["--with-generate"])).unwrap().generate);
    }

    #[test]
    fn the_readme_lists_every_file_packed() {
        let text = readme(".gpu", &["nvidia"], Path::new("/nonexistent"), false);
        assert!(!text.contains("generate "), "{text}");
        let with = readme(".gpu", &["nvidia"], Path::new("/nonexistent"), true);
        assert!(with.lines().any(|l| l.starts_with("generate ")), "{with}");
        for file in [ARCHIVE_FILE, "cargo-nextest", "xtask", "rocm-bench"] {
            assert!(text.lines().any(|l| l.starts_with(&format!("{file} "))), "{file} in:\n{text}");
        }
        assert!(text.contains(".gpu/xtask bench"), "{text}");
    }
}
