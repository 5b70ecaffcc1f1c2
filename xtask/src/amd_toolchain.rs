//! `cargo xtask amd-toolchain`: a Debian forky chroot holding a current AMD kernel toolchain
//! (forky's hipcc 7.0.2 on clang 21 with the ROCm 7.0.2 device libraries, libamdhip64-dev 6.4.3,
//! and the LLVM tools that read code objects), for hosts whose own hipcc is too old for the GPUs
//! people have (bookworm's hipcc 5.2 builds no RDNA 3 or 4, no gfx942 or gfx950).
//!
//! The chroot lives in `$ROCMFORGE_AMD_CHROOT` (relative paths from the workspace root) or
//! `<workspace>/target/amd-toolchain/forky`. The command is idempotent: a finished chroot is
//! reused, one whose `debootstrap` stopped part-way is removed and made again, and one whose
//! package installation stopped part-way is finished. It is finished when the marker file
//! `etc/rocmforge-amd-toolchain` exists; `cargo xtask kernels` uses it only then.
//!
//! Commands run inside through [`Chroot::command`]: a private mount namespace (`unshare`), where
//! `/proc`, a fresh `/tmp` and the bind mounts a command needs exist only for that command, so no
//! mount outlives it and nothing below `target/` is ever left mounted.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::Result;
use crate::flags::Flags;

const USAGE: &str = "usage: cargo xtask amd-toolchain [--rebuild]

Creates (or reuses, or finishes) a Debian forky chroot holding forky's hipcc, libamdhip64-dev
and the LLVM tools that read code objects, then prints what it holds. `cargo xtask kernels`
builds the AMD kernels with it whenever it exists. Needs root (debootstrap, chroot) and the
debootstrap package.

  --rebuild   remove the chroot first and make it from scratch

environment:
  ROCMFORGE_AMD_CHROOT   the chroot folder (default <workspace>/target/amd-toolchain/forky)
  ROCMFORGE_DEBIAN_MIRROR  Debian mirror (default http://deb.debian.org/debian)
";

pub const SUITE: &str = "forky";
const DEFAULT_MIRROR: &str = "http://deb.debian.org/debian";

/// What is installed in the chroot. `hipcc` depends on clang-21, lld-21 and the ROCm device
/// libraries; llvm-21 brings llvm-readelf-21 and llvm-objdump-21, clang-21 the
/// clang-offload-bundler that lists and unpacks `.hsaco` bundles.
pub const PACKAGES: &[&str] = &["hipcc", "libamdhip64-dev", "rocm-device-libs-21", "clang-21", "llvm-21"];

/// Tools the chroot must have, checked after installing.
const TOOLS: &[&str] = &[
    "/usr/bin/hipcc",
    "/usr/bin/clang-21",
    "/usr/bin/llvm-readelf-21",
    "/usr/bin/llvm-objdump-21",
    "/usr/bin/clang-offload-bundler-21",
];

/// Written last, once everything is installed and a kernel compiled: its presence means the
/// chroot is complete. It holds the package versions, which the kernel build records in its stamp.
const MARKER: &str = "etc/rocmforge-amd-toolchain";

/// The snapshot mirrors this project reaches can serve a `Release` file past its `Valid-Until`
/// (it is still signed and checked); apt would refuse it.
const APT_CONF: (&str, &str) = (
    "etc/apt/apt.conf.d/99rocmforge",
    "// Written by cargo xtask amd-toolchain: mirrors may be snapshots past Valid-Until.\nAcquire::Check-Valid-Until \"false\";\n",
);

/// The chroot folder: `$ROCMFORGE_AMD_CHROOT` or `<workspace>/target/amd-toolchain/forky`.
pub fn chroot_dir() -> PathBuf {
    let root = crate::workspace_root();
    match std::env::var_os("ROCMFORGE_AMD_CHROOT").filter(|v| !v.is_empty()) {
        Some(dir) => root.join(dir),
        None => root.join("target").join("amd-toolchain").join(SUITE),
    }
}

/// The marker's contents if the chroot at `dir` is complete: the marker names every package of
/// [`PACKAGES`] (a newer list makes the next `amd-toolchain` run install the rest) and every tool
/// is there.
pub fn marker(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(MARKER)).ok()?;
    let installed = |pkg: &str| text.lines().any(|l| l.split_whitespace().next() == Some(pkg));
    let tools = TOOLS.iter().all(|t| dir.join(t.trim_start_matches('/')).is_file());
    (tools && PACKAGES.iter().all(|p| installed(p))).then_some(text)
}

fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

pub fn is_root() -> bool {
    effective_uid() == Some(0)
}

/// A folder of the host made visible inside the chroot for one command.
pub struct Bind<'a> {
    pub host: &'a Path,
    /// Absolute path inside the chroot; created if missing.
    pub inside: &'a str,
    pub read_only: bool,
}

/// Run by `unshare` in the new mount namespace: $1 the chroot, $2 the working folder inside,
/// then (host, inside, ro|rw) triples, `--`, and the command with its environment assignments.
const ENTER: &str = r#"set -e
root=$1 cwd=$2
shift 2
mount -t proc proc "$root/proc"
mount -t tmpfs -o mode=1777 tmpfs "$root/tmp"
while [ "$1" != -- ]; do
    [ -d "$root$2" ] || mkdir -p "$root$2"
    mount --bind "$1" "$root$2"
    if [ "$3" = ro ]; then mount -o remount,bind,ro "$root$2"; fi
    shift 3
done
shift
exec chroot "$root" /bin/sh -c 'cd "$0" && exec /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 "$@"' "$cwd" "$@"
"#;

/// A complete chroot, and how to enter it.
#[derive(Debug, Clone)]
pub struct Chroot {
    pub root: PathBuf,
    /// The marker's contents: the installed package versions.
    pub versions: String,
    /// As root: a mount namespace. Otherwise a user namespace where we are root, if the kernel
    /// allows them to unprivileged users.
    user_namespace: bool,
}

impl Chroot {
    /// The chroot at `dir` if it is complete and can be entered here (checked by running `true`).
    pub fn open(dir: &Path) -> Result<Chroot> {
        let versions = marker(dir).ok_or_else(|| {
            format!("{} is not a complete toolchain chroot: run `cargo xtask amd-toolchain`", dir.display())
        })?;
        let chroot = Chroot { root: dir.to_path_buf(), versions, user_namespace: !is_root() };
        let out = chroot.command("/", &[], &["true"]).stdin(Stdio::null()).output()?;
        if !out.status.success() {
            return Err(format!(
                "cannot enter the chroot {} ({}): {}",
                dir.display(),
                if chroot.user_namespace {
                    "not root, and a user namespace with its own mounts was refused"
                } else {
                    "a private mount namespace with /proc could not be set up"
                },
                String::from_utf8_lossy(&out.stderr).trim()
            )
            .into());
        }
        Ok(chroot)
    }

    /// `argv` (leading `NAME=value` words set its environment, which is otherwise only PATH,
    /// HOME and LC_ALL) run in `cwd` inside the chroot, with `binds` mounted.
    pub fn command<S: AsRef<str>>(&self, cwd: &str, binds: &[Bind], argv: &[S]) -> Command {
        let mut cmd = Command::new("unshare");
        if self.user_namespace {
            cmd.args(["--user", "--map-root-user"]);
        }
        cmd.args(["--mount", "--propagation", "private", "--pid", "--fork", "--kill-child", "--"]);
        cmd.args(["/bin/sh", "-c", ENTER, "rocmforge-enter"]).arg(&self.root).arg(cwd);
        for b in binds {
            cmd.arg(b.host).arg(b.inside).arg(if b.read_only { "ro" } else { "rw" });
        }
        cmd.arg("--");
        cmd.args(argv.iter().map(|a| a.as_ref()));
        cmd
    }

    /// The host path of hipcc inside the chroot (for messages; it runs only through `command`).
    pub fn hipcc(&self) -> PathBuf {
        self.root.join("usr/bin/hipcc")
    }

    /// `tool` (a path inside the chroot) on the first line of its `--version` output.
    pub fn version_line(&self, tool: &str) -> String {
        match self.command("/", &[], &[tool, "--version"]).stdin(Stdio::null()).output() {
            Ok(out) => {
                let text =
                    String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
                text.lines()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("(no version printed)")
                    .trim()
                    .to_string()
            }
            Err(e) => format!("(cannot run: {e})"),
        }
    }
}

/// Runs `cmd`, its output captured; an error holding that output if it fails.
fn run_quiet(what: &str, cmd: &mut Command) -> Result<String> {
    let out = cmd.stdin(Stdio::null()).output().map_err(|e| format!("{what}: cannot run: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    if !out.status.success() {
        return Err(format!("{what} failed ({}):\n{}", out.status, tail(&text, 40)).into());
    }
    Ok(text)
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// How far an earlier run got.
#[derive(Debug, PartialEq, Eq)]
enum State {
    /// Nothing there (or an empty folder).
    Missing,
    /// debootstrap did not finish: its working folder is still there, or there is no apt.
    Partial,
    /// A base system; the toolchain packages may be missing or half-installed.
    Base,
    /// Marker present and every tool there.
    Complete,
}

fn inspect(dir: &Path) -> State {
    let empty = std::fs::read_dir(dir).map_or(true, |mut d| d.next().is_none());
    if empty {
        State::Missing
    } else if dir.join("debootstrap").exists()
        || !dir.join("usr/bin/apt-get").is_file()
        || !dir.join("var/lib/dpkg/status").is_file()
    {
        State::Partial
    } else if marker(dir).is_some() {
        State::Complete
    } else {
        State::Base
    }
}

/// Mount points at or below `dir` (from /proc/self/mountinfo), deepest first.
fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut points: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| PathBuf::from(p.replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")))
        .filter(|p| p.starts_with(dir))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    points
}

/// Removes a chroot made by this command (or by debootstrap), never following a mount: anything
/// mounted below it is unmounted first, and the removal refused if that fails.
fn remove_chroot(dir: &Path) -> Result<()> {
    let canonical = std::fs::canonicalize(dir)?;
    // Only a folder debootstrap worked in, or a Debian root this command finished or left.
    let ours = ["debootstrap", MARKER, "etc/debian_version"].iter().any(|p| canonical.join(p).exists());
    if canonical.parent().is_none() || !ours {
        return Err(format!(
            "refusing to remove {}: it does not look like a chroot made by debootstrap; remove it yourself or \
             point ROCMFORGE_AMD_CHROOT elsewhere",
            canonical.display()
        )
        .into());
    }
    for point in mounts_under(&canonical) {
        println!("amd-toolchain: unmounting {}", point.display());
        let _ = Command::new("umount").arg("--lazy").arg(&point).status();
    }
    let left = mounts_under(&canonical);
    if !left.is_empty() {
        let list: Vec<String> = left.iter().map(|p| p.display().to_string()).collect();
        return Err(
            format!("cannot remove {}: still mounted: {}", canonical.display(), list.join(", ")).into()
        );
    }
    std::fs::remove_dir_all(&canonical).map_err(|e| format!("removing {}: {e}", canonical.display()))?;
    Ok(())
}

/// The debootstrap script for the suite: its own if this debootstrap knows it, else `sid`'s
/// (every current Debian suite uses the same one; bookworm's debootstrap predates forky).
fn debootstrap_script() -> Option<PathBuf> {
    let scripts = Path::new("/usr/share/debootstrap/scripts");
    [SUITE, "sid"].iter().map(|s| scripts.join(s)).find(|p| p.exists())
}

struct Timer {
    steps: Vec<(String, f64)>,
}

impl Timer {
    fn step<T>(&mut self, name: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
        println!("amd-toolchain: {name} ...");
        let start = Instant::now();
        let out = f();
        let secs = start.elapsed().as_secs_f64();
        println!("amd-toolchain: {name}: {}{secs:.1} s", if out.is_ok() { "" } else { "FAILED after " });
        self.steps.push((name.to_string(), secs));
        out
    }
}

pub fn run(args: &[String]) -> Result<()> {
    let mut flags = Flags::new(args, USAGE);
    if flags.help() {
        print!("{USAGE}");
        return Ok(());
    }
    let rebuild = flags.switch("--rebuild");
    flags.finish()?;
    let dir = chroot_dir();
    let start = Instant::now();
    let mut timer = Timer { steps: Vec::new() };
    let mut state = inspect(&dir);
    if rebuild && state != State::Missing {
        state = State::Partial;
    }
    println!(
        "amd-toolchain: {} ({})",
        dir.display(),
        match state {
            State::Missing => "missing: creating it",
            State::Partial if rebuild => "--rebuild: making it again",
            State::Partial => "left part-way by an earlier run: making it again",
            State::Base => "base system present: installing the toolchain",
            State::Complete => "complete",
        }
    );
    if state != State::Complete {
        if !is_root() {
            return Err(
                "making the chroot needs root (debootstrap, chroot): run as root, e.g. with sudo".into()
            );
        }
        if state == State::Partial {
            timer.step("remove the partial chroot", || remove_chroot(&dir))?;
            state = State::Missing;
        }
        if state == State::Missing {
            timer.step("debootstrap", || debootstrap(&dir))?;
        }
        install(&dir, &mut timer)?;
    }
    let chroot = Chroot::open(&dir)?;
    report(&chroot)?;
    if !timer.steps.is_empty() {
        println!("\namd-toolchain: times");
        for (name, secs) in &timer.steps {
            println!("  {name:<32} {secs:6.1} s");
        }
        println!("  {:<32} {:6.1} s", "total", start.elapsed().as_secs_f64());
    }
    Ok(())
}

fn debootstrap(dir: &Path) -> Result<()> {
    let script = debootstrap_script()
        .ok_or("debootstrap is not installed (Debian/Ubuntu: `apt-get install debootstrap`)")?;
    let mirror = std::env::var("ROCMFORGE_DEBIAN_MIRROR").ok().filter(|m| !m.is_empty());
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // In a private mount namespace: the /proc and /sys debootstrap mounts in the target vanish
    // with it, even when it is killed part-way.
    run_quiet(
        "debootstrap",
        Command::new("unshare")
            .args(["--mount", "--propagation", "private", "--", "debootstrap", "--variant=minbase", SUITE])
            .arg(dir)
            .arg(mirror.as_deref().unwrap_or(DEFAULT_MIRROR))
            .arg(script),
    )?;
    if dir.join("debootstrap").exists() {
        return Err(
            "debootstrap returned success but left its working folder: the chroot is incomplete".into()
        );
    }
    Ok(())
}

/// apt-get update and install inside the base system, then a test compile and the marker.
fn install(dir: &Path, timer: &mut Timer) -> Result<()> {
    let _ = std::fs::remove_file(dir.join(MARKER));
    std::fs::write(dir.join(APT_CONF.0), APT_CONF.1)?;
    // Services never start in a chroot; and the host's resolver, which may have changed since
    // debootstrap copied it.
    std::fs::write(dir.join("usr/sbin/policy-rc.d"), "#!/bin/sh\nexit 101\n")?;
    set_mode(&dir.join("usr/sbin/policy-rc.d"), 0o755)?;
    if let Ok(resolv) = std::fs::read("/etc/resolv.conf") {
        let target = dir.join("etc/resolv.conf");
        let _ = std::fs::remove_file(&target);
        std::fs::write(&target, resolv)?;
    }
    // Entering before the marker exists: open() would refuse, so build the handle directly.
    let chroot = Chroot { root: dir.to_path_buf(), versions: String::new(), user_namespace: false };
    let apt = |argv: &[&str]| {
        let mut full = vec!["DEBIAN_FRONTEND=noninteractive"];
        full.extend_from_slice(argv);
        chroot.command("/", &[], &full)
    };
    timer.step("dpkg --configure -a", || {
        run_quiet("dpkg --configure -a", &mut apt(&["dpkg", "--configure", "-a"]))
    })?;
    timer.step("apt-get update", || run_quiet("apt-get update", &mut apt(&["apt-get", "-q", "update"])))?;
    timer.step("apt-get install", || {
        let mut argv = vec!["apt-get", "-q", "-y", "--no-install-recommends", "install"];
        argv.extend_from_slice(PACKAGES);
        run_quiet("apt-get install", &mut apt(&argv))
    })?;
    timer.step("apt-get clean", || run_quiet("apt-get clean", &mut apt(&["apt-get", "clean"])))?;
    let missing: Vec<&str> =
        TOOLS.iter().copied().filter(|t| !dir.join(t.trim_start_matches('/')).is_file()).collect();
    if !missing.is_empty() {
        return Err(format!("installed, but these tools are missing: {}", missing.join(", ")).into());
    }
    let versions = timer.step("package versions", || package_versions(&chroot))?;
    timer.step("test compile (gfx1100, gfx942)", || smoke_test(&chroot))?;
    std::fs::write(dir.join(MARKER), versions)?;
    Ok(())
}

fn set_mode(path: &Path, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// `package version` lines for the installed toolchain packages (and clang-21's LLVM).
fn package_versions(chroot: &Chroot) -> Result<String> {
    let mut argv = vec!["dpkg-query", "-W", "-f", "${Package} ${Version} ${db:Status-Abbrev}\\n"];
    argv.extend_from_slice(PACKAGES);
    argv.push("libamdhip64-6");
    let text = run_quiet("dpkg-query", &mut chroot.command("/", &[], &argv))?;
    let mut lines = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let (Some(pkg), Some(version), Some(status)) = (words.next(), words.next(), words.next()) else {
            continue;
        };
        if status != "ii" {
            return Err(format!("package {pkg} is not fully installed ({status})").into());
        }
        lines.push(format!("{pkg} {version}"));
    }
    lines.sort();
    if lines.len() < PACKAGES.len() {
        return Err(format!("not every package is installed:\n{}", lines.join("\n")).into());
    }
    Ok(format!("suite {SUITE}\n{}\n", lines.join("\n")))
}

/// Compiles an empty kernel for one RDNA and one CDNA target, through the same bind-mounted
/// path the kernel build uses.
fn smoke_test(chroot: &Chroot) -> Result<()> {
    let scratch = std::env::temp_dir().join(format!("rocmforge-amd-toolchain-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)?;
    std::fs::write(
        scratch.join("probe.hip"),
        "extern \"C\" __global__ void rf_probe(int* p) { p[0] = 1; }\n",
    )?;
    let result = run_quiet(
        "hipcc test compile",
        &mut chroot.command(
            "/rocmforge/probe",
            &[Bind { host: &scratch, inside: "/rocmforge/probe", read_only: false }],
            &[
                "HIP_PLATFORM=amd",
                "hipcc",
                "--genco",
                "-O3",
                "-Wall",
                "-Werror",
                "--offload-arch=gfx1100",
                "--offload-arch=gfx942",
                "probe.hip",
                "-o",
                "probe.hsaco",
            ],
        ),
    )
    .and_then(|_| {
        let data = std::fs::read(scratch.join("probe.hsaco"))?;
        let objects = crate::amd_resources::read_bundle(&data)?;
        let targets: Vec<&str> = objects.iter().map(|o| o.target.as_str()).collect();
        if targets.len() != 2 || objects.iter().any(|o| o.entries.len() != 1) {
            return Err(format!("unexpected test object: {targets:?}").into());
        }
        Ok(())
    });
    let _ = std::fs::remove_dir_all(&scratch);
    result
}

/// What the chroot holds.
fn report(chroot: &Chroot) -> Result<()> {
    println!("amd-toolchain: ready: {}", chroot.root.display());
    for line in chroot.versions.lines() {
        println!("  {line}");
    }
    println!("  hipcc --version: {}", chroot.version_line("hipcc").trim());
    println!("  clang-21 --version: {}", chroot.version_line("/usr/bin/clang-21"));
    for tool in TOOLS {
        println!("  {tool}");
    }
    let size = dir_size(&chroot.root);
    println!("  size: {:.0} MiB", size as f64 / (1 << 20) as f64);
    Ok(())
}

fn dir_size(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(meta) = entry.path().symlink_metadata() else { continue };
        total += if meta.is_dir() { dir_size(&entry.path()) } else { meta.len() };
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states() {
        let dir = std::env::temp_dir().join(format!("rocmforge-amd-toolchain-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(inspect(&dir), State::Missing);
        std::fs::create_dir_all(&dir).unwrap();
        assert_eq!(inspect(&dir), State::Missing, "an empty folder");
        std::fs::create_dir_all(dir.join("debootstrap")).unwrap();
        std::fs::create_dir_all(dir.join("usr/bin")).unwrap();
        std::fs::create_dir_all(dir.join("var/lib/dpkg")).unwrap();
        std::fs::write(dir.join("usr/bin/apt-get"), "").unwrap();
        std::fs::write(dir.join("var/lib/dpkg/status"), "").unwrap();
        assert_eq!(inspect(&dir), State::Partial, "debootstrap's working folder left");
        std::fs::remove_dir_all(dir.join("debootstrap")).unwrap();
        assert_eq!(inspect(&dir), State::Base);
        std::fs::create_dir_all(dir.join("etc")).unwrap();
        let versions: String = PACKAGES.iter().map(|p| format!("{p} 1.0\n")).collect();
        let text = format!("suite forky\n{versions}");
        std::fs::write(dir.join(MARKER), &text).unwrap();
        assert_eq!(inspect(&dir), State::Base, "a marker without the tools");
        for tool in TOOLS {
            std::fs::write(dir.join(tool.trim_start_matches('/')), "").unwrap();
        }
        assert_eq!(inspect(&dir), State::Complete);
        assert_eq!(marker(&dir).as_deref(), Some(text.as_str()));
        std::fs::write(dir.join(MARKER), "suite forky\nhipcc 1.0\n").unwrap();
        assert_eq!(inspect(&dir), State::Base, "a marker from a shorter package list");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn chroot_dir_defaults_under_target() {
        if std::env::var_os("ROCMFORGE_AMD_CHROOT").is_none() {
            assert!(chroot_dir().ends_with("target/amd-toolchain/forky"));
        }
    }
}
