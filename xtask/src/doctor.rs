//! `cargo xtask doctor`: what this machine offers rocmforge, and what is missing with how to
//! get it. Never fails for a missing GPU or toolchain: it reports them.

use rocm_runtime::{Backend, Blas, Bytes, PLATFORM_ENV, Platform};

use crate::Result;
use crate::flags::Flags;
use crate::kernels::{self, PlatformToolchain};
use crate::toolchain;

pub fn run(args: &[String]) -> Result<()> {
    Flags::new(args, "usage: cargo xtask doctor").finish()?;
    println!("rocmforge doctor");
    let choice = std::env::var(PLATFORM_ENV).unwrap_or_else(|_| "auto".into());
    println!("{PLATFORM_ENV}: {choice}");
    report_devices();
    report_toolchains();
    report_kernels();
    Ok(())
}

fn report_devices() {
    let detected = match rocm_runtime::detect() {
        Ok(d) => d,
        Err(e) => {
            println!("devices: none ({e})");
            return;
        }
    };
    println!("platform: {} ({} device(s))", detected.platform, detected.device_count);
    for skipped in &detected.skipped {
        println!("  skipped {skipped}");
    }
    for ordinal in 0..detected.device_count {
        let backend = match Backend::open(ordinal) {
            Ok(b) => b,
            Err(e) => {
                println!("device {ordinal}: cannot open: {e}");
                continue;
            }
        };
        let i = backend.info();
        println!("device {ordinal}: {} ({}), pci bus {}", i.name, i.arch, i.pci_bus_id);
        if i.drives_display {
            println!(
                "  drives a display: GPU test runs default to a small budget and one test at a time on it \
                 (gpu-test --jobs-per-gpu N overrides)"
            );
        }
        let library = backend.driver_library().map(|p| p.display().to_string()).unwrap_or_else(|| "?".into());
        println!(
            "  host API: {} ({library}), loads {} code objects",
            backend.driver_description(),
            i.code_objects
        );
        println!(
            "  compute units {}, warp {}, max threads/block {}, shared memory/block {} ({} opt-in), L2 {}",
            i.compute_units,
            i.warp_size,
            i.max_threads_per_block,
            Bytes(i.shared_mem_per_block as u64),
            Bytes(i.shared_mem_per_block_optin as u64),
            Bytes(i.l2_cache_bytes as u64)
        );
        let runtime = backend.runtime_version().map(|v| format!(", runtime {v}")).unwrap_or_default();
        let ordered = if i.stream_ordered_memory { "active" } else { "off" };
        println!(
            "  driver {}{runtime}, stream-ordered memory: {ordered}, matrix cores: {:?}",
            backend.driver_version(),
            i.matrix_cores
        );
        for fallback in backend.fallbacks() {
            println!("  fallback: {fallback}");
        }
        match backend.memory_info() {
            Ok(m) => println!("  memory: free {}, total {}", Bytes(m.free), Bytes(m.total)),
            Err(e) => println!("  memory: unknown ({e})"),
        }
        let budget = backend.ledger().budget();
        let share = 100.0 * budget as f64 / backend.free_at_start().max(1) as f64;
        println!("  memory guard budget: {} ({share:.0}% of free at start)", Bytes(budget));
        // The vendor BLAS is loaded at run time; without it GEMMs (the model's projections)
        // take the portable kernel, which is correct but tens of times slower.
        match Blas::open(&backend) {
            Ok(blas) => println!("  vendor BLAS: {} (GEMMs use it)", blas.library()),
            Err(e) => println!("  vendor BLAS: not available, GEMMs use the portable kernel ({e})"),
        }
    }
}

fn report_toolchains() {
    match toolchain::hipcc() {
        Some(p) => println!("hipcc: {} ({})", p.display(), toolchain::version_line(&p, "--version")),
        None => println!("hipcc: not found: {}", toolchain::install_hint("hipcc")),
    }
    match toolchain::nvcc() {
        Some(p) => {
            let version = toolchain::version_line(&p, "--version");
            println!("nvcc: {} ({version})", p.display());
            let (major, minor) = toolchain::NVCC_FOR_WEIGHT_POLICY;
            if toolchain::nvcc_release(&version).is_some_and(|r| r < (major, minor)) {
                println!(
                    "  note: nvcc before {major}.{minor} miscompiles cp.async with an L2 policy, so its kernels copy \
                     weights without their evict-first policy: correct, but decode is slower \
                     (kernels/include/rocmforge_mma.h, rf_cp_async16_policy)"
                );
            }
        }
        None => println!("nvcc: not found: {}", toolchain::install_hint("nvcc")),
    }
    match crate::kernel_symbols::cuobjdump() {
        Some(p) => println!("cuobjdump: {} (lists each fatbin's entry points)", p.display()),
        None => println!(
            "cuobjdump: not found: `cargo xtask kernels --platform nvidia` needs it to record entry points: {}",
            toolchain::install_hint("cuobjdump")
        ),
    }
    let show = |dir: Option<std::path::PathBuf>| dir.map_or("not found".into(), |p| p.display().to_string());
    println!(
        "headers for bindgen: hip {}, cuda {}",
        show(toolchain::hip_include_dir()),
        show(toolchain::cuda_include_dir())
    );
}

fn report_kernels() {
    println!("kernel objects in {}:", kernels::output_dir().display());
    for platform in Platform::ALL {
        let dir = kernels::output_dir().join(platform.name());
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == platform.object_extension()))
            .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
            .collect();
        names.sort();
        if names.is_empty() {
            println!("  {platform}: none built (cargo xtask kernels --platform {platform})");
        } else {
            println!("  {platform}: {}", names.join(", "));
        }
    }
    // xtask embeds no kernels (it does not link rocm-kernels, so it never rebuilds with them):
    // what a build embeds, which can differ from what is on disk now, is rocm-bench's to say.
    println!(
        "kernels embedded in a build: `cargo run --release -p rocm-bench -- kernels` \
         (in a gpu-archive: `.gpu/rocm-bench kernels`)"
    );
}
