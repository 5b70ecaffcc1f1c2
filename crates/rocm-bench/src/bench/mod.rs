//! `rocm-bench bench [FILTER...]` (or `cargo xtask bench`, which forwards here): kernel speed on
//! the local GPU, as a table.
//!
//! Each kernel family has a module here named like its kernel (`bench/rmsnorm.rs` for
//! `kernels/rmsnorm.hip`) returning [`Row`]s. Every row states the minimal traffic (each input
//! read once, each output written once) or the flops, the median time, and the GB/s as a
//! fraction of the device-to-device copy bandwidth measured in the same run (`copy` row). Times
//! are device events around each launch, after warm-up, median of many; inputs are random and
//! several times the L2 size. Speed is measured here, never asserted in tests.
//!
//! Each timed launch is queued behind a short spin kernel (`spin_cycles`), so the start event
//! fires when the GPU reaches the launch, not while it waits for the host to build it: without
//! it every row carried the host's launch latency (about 9 us on an H200 host, 0.12 of copy
//! bandwidth on a 63 us kernel). `scripts/bench_torch.py` does the same with
//! `torch.cuda._sleep`, so both tables time the kernels alone.

mod causal_mask;
mod copy;
mod flash_attention;
mod gemm;
mod layer_read;
mod model;
mod mxfp;
mod persistent_mlp;
mod quant_gemm;
mod quant_matvec;
mod rmsnorm;
mod rope;
mod softmax;
mod swiglu;

use std::cell::RefCell;
use std::sync::Arc;

use rocm_kernels::Dtype;
use rocm_runtime::{Backend, DeviceBuffer, Stream};
use rocm_testkit::Rng;

use crate::Result;

/// One measured configuration.
#[derive(Debug, Clone)]
pub struct Row {
    pub kernel: String,
    pub dtype: &'static str,
    pub shape: String,
    /// Median milliseconds per launch.
    pub ms: f64,
    /// Minimal bytes moved (each input read once, each output written once).
    pub bytes: u64,
    /// Floating-point operations, for compute-bound kernels.
    pub flops: Option<f64>,
}

impl Row {
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 / (self.ms * 1e6)
    }
}

/// What a family's benchmark gets: the device, its own stream, seeded data.
pub struct Bench {
    pub backend: Arc<Backend>,
    pub stream: Stream,
    pub rng: Rng,
    /// Timed launches per configuration (after warm-up).
    pub iters: usize,
    /// Where the spin kernel ahead of each timed launch writes the cycles it waited.
    spin_out: RefCell<DeviceBuffer<u64>>,
}

/// Cycles the spin kernel ahead of each timed launch waits: 50 us at 2 GHz, more than the host
/// needs to queue the start event, the launch and the end event.
const SPIN_CYCLES: u64 = 100_000;

impl Bench {
    /// `len` uniform values in `[lo, hi)`, rounded to the storage type.
    pub fn random<T: Dtype>(&mut self, len: usize, lo: f32, hi: f32) -> Vec<T> {
        self.rng.f32_vec(len, lo, hi).into_iter().map(T::from_f32).collect()
    }

    /// `len` random bytes (never a constant: some memory systems compress uniform data).
    pub fn random_bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len.div_ceil(8)).flat_map(|_| self.rng.next_u64().to_le_bytes()).take(len).collect()
    }

    /// Median milliseconds of `stream_read` over `bufs`, the i-th launch reading `bufs[i % len]`,
    /// with 8 blocks of 256 threads a compute unit (the device's thread limit): the read-only
    /// ceiling rows.
    pub fn time_read(&mut self, bufs: &[DeviceBuffer<u8>]) -> Result<f64> {
        let mut partial = self.read_partials()?;
        let mut i = 0;
        self.time(|| {
            i += 1;
            Ok(rocm_kernels::stream_read::stream_read(&bufs[i % bufs.len()], &mut partial)?)
        })
    }

    /// The partial sums `stream_read` writes, one a block: 8 blocks of 256 threads a compute
    /// unit (the device's thread limit), the grid of every read-only ceiling row.
    pub fn read_partials(&self) -> Result<DeviceBuffer<u32>> {
        Ok(self.stream.alloc::<u32>(8 * self.backend.info().compute_units.max(1) as usize)?)
    }

    /// `len` uniform values in `[lo, hi)` of the storage type, on the device.
    pub fn upload_random<T: Dtype>(&mut self, len: usize, lo: f32, hi: f32) -> Result<DeviceBuffer<T>> {
        let host = self.random::<T>(len, lo, hi);
        Ok(self.stream.upload(&host)?)
    }

    /// Median milliseconds of `launch`, timed with device events around each call, each call
    /// queued behind the spin kernel (see the module's comment).
    pub fn time(&self, mut launch: impl FnMut() -> Result<()>) -> Result<f64> {
        for _ in 0..3 {
            launch()?;
        }
        self.stream.synchronize()?;
        let mut times = Vec::with_capacity(self.iters);
        for _ in 0..self.iters {
            rocm_kernels::spin::spin_cycles(SPIN_CYCLES, &mut self.spin_out.borrow_mut())?;
            let start = self.stream.record_event()?;
            launch()?;
            let end = self.stream.record_event()?;
            times.push(end.elapsed_ms_since(&start)? as f64);
        }
        times.sort_by(f64::total_cmp);
        Ok(times[times.len() / 2])
    }
}

type Family = fn(&mut Bench) -> Result<Vec<Row>>;

/// Every benchmark, in the order the table prints them. `copy` first: the others are judged
/// against it.
const FAMILIES: &[(&str, Family)] = &[
    ("copy", copy::run),
    ("rmsnorm", rmsnorm::run),
    ("softmax", softmax::run),
    ("swiglu", swiglu::run),
    ("rope", rope::run),
    ("causal_mask", causal_mask::run),
    ("flash_attention", flash_attention::run),
    ("mxfp", mxfp::run),
    ("quant_matvec", quant_matvec::run),
    ("quant_gemm", quant_gemm::run),
    ("gemm", gemm::run),
    ("model", model::run),
];

/// Families that run only when a filter names them: `model` builds and loads gigabytes of
/// weights per type.
const ONLY_WHEN_NAMED: &[&str] = &["model"];

/// The rows of one storage type of a family (its `dtype::<T>`).
pub type RowsOf = fn(&mut Bench) -> Result<Vec<Row>>;

/// A family's rows for each storage type, in the order given: its `dtype::<T>` for f32, f16
/// and bf16, one after the other.
pub fn rows_of_each(b: &mut Bench, per_dtype: &[RowsOf]) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for rows_of in per_dtype {
        rows.extend(rows_of(b)?);
    }
    Ok(rows)
}

/// The items of `all` a benchmark runs: every one, or those the comma-separated list in the
/// environment variable `var` names (`name` gives an item's name; case does not matter). A name
/// that matches no item is refused, so that a typo does not measure nothing.
pub fn env_selection<T: Copy>(var: &str, all: &[T], name: impl Fn(T) -> &'static str) -> Result<Vec<T>> {
    let Ok(list) = std::env::var(var) else { return Ok(all.to_vec()) };
    list.split(',')
        .map(|n| {
            let n = n.trim();
            all.iter().copied().find(|&t| name(t).eq_ignore_ascii_case(n)).ok_or_else(|| {
                let names: Vec<&str> = all.iter().map(|&t| name(t)).collect();
                format!("{var}: `{n}` is not one of {names:?}").into()
            })
        })
        .collect()
}

pub fn run(args: &[String]) -> Result<()> {
    let mut filters = Vec::new();
    let mut iters = 50;
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--iters" => iters = it.next().and_then(|v| v.parse().ok()).ok_or("--iters takes a number")?,
            "--list" => {
                FAMILIES.iter().for_each(|(name, _)| println!("{name}"));
                return Ok(());
            }
            f if f.starts_with('-') => return Err(format!("unknown option {f}").into()),
            f => filters.push(f.to_string()),
        }
    }
    let backend = Backend::open(0).map_err(|e| format!("no GPU to benchmark on: {e}"))?;
    let stream = backend.create_stream()?;
    let spin_out = RefCell::new(stream.alloc::<u64>(1)?);
    let mut bench = Bench { backend, stream, rng: Rng::new(0xbe4c), iters: iters.max(1), spin_out };
    let info = bench.backend.info();
    println!("device: {} ({}), {} compute units", info.name, info.arch, info.compute_units);
    let mut rows = Vec::new();
    let mut ran_model = false;
    for (name, family) in FAMILIES {
        let by_default = filters.is_empty() && !ONLY_WHEN_NAMED.contains(name);
        let wanted = *name == "copy" || by_default || filters.iter().any(|f| name.contains(f.as_str()));
        if wanted {
            rows.extend(family(&mut bench)?);
            ran_model |= *name == "model";
        }
    }
    print_table(&rows);
    if ran_model {
        // PyTorch running Hugging Face's layer at the same shapes, after the table.
        model::torch_rows(bench.iters);
    }
    Ok(())
}

fn print_table(rows: &[Row]) {
    let copy = rows.iter().find(|r| r.kernel == "copy").map(Row::gbps).unwrap_or(f64::NAN);
    println!(
        "{:<28} {:<5} {:<24} {:>10} {:>9} {:>8} {:>9}",
        "kernel", "dtype", "shape", "time(us)", "GB/s", "of copy", "TFLOP/s"
    );
    for r in rows {
        let tflops = r.flops.map(|f| format!("{:.1}", f / (r.ms * 1e9))).unwrap_or_default();
        println!(
            "{:<28} {:<5} {:<24} {:>10.1} {:>9.0} {:>8.2} {:>9}",
            r.kernel,
            r.dtype,
            r.shape,
            r.ms * 1e3,
            r.gbps(),
            r.gbps() / copy,
            tflops
        );
    }
}
