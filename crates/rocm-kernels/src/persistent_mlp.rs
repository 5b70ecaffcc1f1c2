//! `persistent_mlp` (`kernels/persistent_mlp.hip`): a decode step's MLP block for one token in
//! one cooperative launch, q8_0 weights, f16 or bf16 activations (NVIDIA sm_80 and later):
//!
//! ```text
//! h = h + delta; xn = rmsnorm(h) * norm; act = silu(gate xn) * (up xn); y = down act
//! ```
//!
//! what a chain does in four launches (`rmsnorm_residual`, the gate-and-up products, `swiglu`, the
//! down product), with the chain's own product loop. The first slice of issue 21's persistent
//! decode layer (docs/model.md, "The persistent layer's floor"; docs/kernels/persistent_mlp.md).

use rocm_runtime::{DeviceBuffer, LaunchConfig, MatrixCores, Stream, bf16, f16};

use crate::KernelModule;
use crate::abi::persistent_mlp as abi;
use crate::dtype::{Dtype, kernel_name};
use crate::error::{Result, ensure};
use crate::launchable::{Launchable, Needs};
use crate::loader;
use crate::quant::GgmlFormat;
use crate::quant::matvec::q8_0_one_vector_loop;

const NAME: &str = "persistent_mlp";
const ENTRY: &str = "rf_persistent_mlp_q8_0";
const GROUPS: usize = abi::RF_PMLP_GROUPS as usize;
const COUNTERS: usize = abi::RF_PMLP_COUNTERS as usize;
/// Each scratch part starts on its own 256 bytes.
const ALIGN: usize = 256;

/// An MLP's weights: the RMSNorm's weight (`[hidden]`), gate and up (`[ffn, hidden]` q8_0 rows)
/// and down (`[hidden, ffn]`).
#[derive(Debug)]
pub struct MlpWeights<'a, T: Dtype> {
    pub norm: &'a DeviceBuffer<T>,
    pub gate: &'a DeviceBuffer<u8>,
    pub up: &'a DeviceBuffer<u8>,
    pub down: &'a DeviceBuffer<u8>,
}

/// The persistent MLP for one shape: the launch's plan and its scratch (the gate and up sums, and
/// the counters of the grid barriers and the tile claims, which are zero between launches: each
/// launch's last block puts them back, so one plan serves every launch and graph replay on its
/// stream).
#[derive(Debug)]
pub struct PersistentMlp {
    hidden: usize,
    ffn: usize,
    eps: f32,
    grid: u32,
    groups: u32,
    threads: u32,
    shared: u32,
    scratch: DeviceBuffer<u8>,
    counters: DeviceBuffer<u32>,
    timeout: DeviceBuffer<u32>,
}

fn aligned(bytes: usize) -> usize {
    bytes.div_ceil(ALIGN) * ALIGN
}

impl PersistentMlp {
    /// Whether [`PersistentMlp::new`] can succeed on `stream`'s device for some shape: NVIDIA
    /// sm_80 and later (the products' loop: mma.sync, cp.async) with cooperative launches.
    pub fn runs_on(stream: &Stream) -> bool {
        let info = stream.backend().info();
        info.matrix_cores == MatrixCores::MmaSync && info.cooperative_launch
    }

    /// The plan for `hidden` and `ffn` on `stream`'s device, refused with the reason where the
    /// device cannot run it ([`PersistentMlp::runs_on`]) or a width is not a multiple of 256 of
    /// at least 1024 (whole chunks of the products' loop, one for each of its warps).
    pub fn new(stream: &Stream, hidden: usize, ffn: usize, eps: f32) -> Result<Self> {
        ensure(Self::runs_on(stream), NAME, || {
            "needs NVIDIA sm_80 or later (the products' mma.sync loop) and cooperative launches".into()
        })?;
        let (warps, chunk, loop_shared) = q8_0_one_vector_loop();
        let least = warps * chunk;
        ensure(
            [hidden, ffn].iter().all(|&n| n >= least && n.is_multiple_of(chunk) && n <= u32::MAX as usize),
            NAME,
            || format!("hidden {hidden} and ffn {ffn} must be multiples of {chunk} of at least {least}"),
        )?;
        ensure(eps.is_finite() && eps >= 0.0, NAME, || format!("eps {eps} is not a finite value >= 0"))?;
        let info = stream.backend().info();
        // One block an SM of as many groups of the products' loop as its shared memory holds
        // (each group stands in for a block of a launch of the loop), and s and xn (f32 and
        // 16-bit elements).
        let optin = info.shared_mem_per_block_optin as usize;
        let row = 6 * hidden;
        let groups = (optin.saturating_sub(row) / loop_shared).min(GROUPS);
        ensure(groups > 0, NAME, || {
            format!(
                "hidden {hidden} needs {} bytes of shared memory a block; the device allows {optin}",
                loop_shared + row
            )
        })?;
        let shared = groups * loop_shared + row;
        let grid = info.compute_units.max(1) as usize;
        // Gate and up's sums (16-bit elements).
        let scratch_bytes = 2 * aligned(2 * ffn);
        Ok(PersistentMlp {
            hidden,
            ffn,
            eps,
            grid: grid as u32,
            groups: groups as u32,
            threads: (groups * warps * 32) as u32,
            shared: shared as u32,
            scratch: stream.alloc::<u8>(scratch_bytes)?,
            counters: stream.alloc_zeroed(COUNTERS)?,
            timeout: stream.alloc_zeroed(1)?,
        })
    }

    /// The weight bytes one launch reads.
    pub fn weight_bytes(&self) -> u64 {
        3 * self.matrix_bytes() as u64
    }

    /// The bytes of one of the three q8_0 matrices (`[ffn, hidden]` or `[hidden, ffn]`).
    fn matrix_bytes(&self) -> usize {
        let q8_0 = GgmlFormat::Q8_0;
        self.hidden * self.ffn / q8_0.block_elems() * q8_0.block_bytes()
    }

    /// `h = h + delta` (`delta` absent: `h` as it is), then `act = silu(gate xn) * (up xn)` and
    /// `y = down act` of `xn = rmsnorm(h) * w.norm`, in one launch queued on `y`'s stream. `act`
    /// (`[ffn]`) holds the activation between the two products. The residual add and each
    /// element of the norm and of the activation have the bits of `rmsnorm_residual` and
    /// `swiglu`, and the products those of `quant_matvec` over them; the norm's sum of squares is
    /// added in the kernel's own order, the same in every run.
    pub fn run<T: Dtype>(
        &mut self,
        w: &MlpWeights<'_, T>,
        h: &mut DeviceBuffer<T>,
        delta: Option<&DeviceBuffer<T>>,
        act: &mut DeviceBuffer<T>,
        y: &mut DeviceBuffer<T>,
    ) -> Result<()> {
        ensure(T::NAME != "f32", NAME, || {
            "takes f16 or bf16 activations (the products' loop), not f32".into()
        })?;
        let (hidden, ffn) = (self.hidden, self.ffn);
        let weight_bytes = self.matrix_bytes();
        ensure([w.gate.len(), w.up.len(), w.down.len()] == [weight_bytes; 3], NAME, || {
            format!(
                "gate, up and down hold {}, {} and {} bytes; q8_0 [{ffn}, {hidden}] and [{hidden}, {ffn}] take \
                 {weight_bytes} each",
                w.gate.len(),
                w.up.len(),
                w.down.len()
            )
        })?;
        let vectors = [("h", h.len()), ("the norm", w.norm.len()), ("y", y.len())];
        for (what, len) in vectors.into_iter().chain(delta.map(|d| ("delta", d.len()))) {
            ensure(len == hidden, NAME, || format!("{what} holds {len} elements; hidden is {hidden}"))?;
        }
        ensure(act.len() == ffn, NAME, || format!("act holds {} elements; ffn is {ffn}", act.len()))?;
        let pointers = [w.norm.device_ptr(), w.gate.device_ptr(), w.up.device_ptr(), w.down.device_ptr()];
        let outputs = [h.device_ptr(), act.device_ptr(), y.device_ptr(), delta.map_or(0, |d| d.device_ptr())];
        ensure(pointers.iter().chain(&outputs).all(|p| p.is_multiple_of(16)), NAME, || {
            "every buffer must be 16-byte aligned".into()
        })?;
        let stream = y.stream().clone();
        let kernel = loader::kernel(&stream, KernelModule::PersistentMlp, &kernel_name::<T>(ENTRY))?;
        ensure(kernel.max_threads_per_block() >= self.threads, NAME, || {
            format!(
                "the kernel allows {} threads a block; it needs {}",
                kernel.max_threads_per_block(),
                self.threads
            )
        })?;
        let base = self.scratch.device_ptr();
        let args = abi::rf_pmlp_args {
            h: h.device_ptr(),
            delta: delta.map_or(0, |d| d.device_ptr()),
            norm: w.norm.device_ptr(),
            gate: w.gate.device_ptr(),
            up: w.up.device_ptr(),
            down: w.down.device_ptr(),
            gate_out: base,
            up_out: base + aligned(2 * ffn) as u64,
            act: act.device_ptr(),
            y: y.device_ptr(),
            counters: self.counters.device_ptr(),
            timeout: self.timeout.device_ptr(),
            hidden: hidden as u32,
            ffn: ffn as u32,
            eps: self.eps,
            groups: self.groups,
        };
        let config = LaunchConfig {
            grid: [self.grid, 1, 1],
            block: [self.threads, 1, 1],
            shared_mem_bytes: self.shared,
        };
        let launch = stream.launch(&kernel).arg(args).reads(w.norm).reads(w.gate).reads(w.up).reads(w.down);
        let launch = match delta {
            Some(d) => launch.reads(d),
            None => launch,
        };
        let launch = launch
            .writes(h)
            .writes(act)
            .writes(y)
            .writes(&mut self.scratch)
            .writes(&mut self.counters)
            .writes(&mut self.timeout)
            .cooperative();
        // SAFETY: rf_persistent_mlp_q8_0_<T>(rf_pmlp_args) for T f16 or bf16 (checked), one
        // block a compute unit of `groups` groups of RF_QMVM_WARPS warps (groups <=
        // RF_PMLP_GROUPS, the entry's bound) and `shared` bytes of dynamic shared memory (each
        // group's q8_0 one-vector loop memory, and 6 hidden for s and xn, within the opt-in
        // limit: new), launched cooperatively (every block resident or the launch fails, so the
        // grid barriers never wait for a block that has not started; one that waits over a
        // second anyway lets the block through and sets the flag: no hang). hidden and ffn are
        // multiples of 256 of at least 1024 (new): whole chunks of 16-byte vectors, one for each
        // of the loop's warps. It reads gate and up [0, ffn row_bytes(hidden)) and down
        // [0, hidden row_bytes(ffn)) (their lengths checked), norm, delta and h [0, hidden), act
        // [0, ffn) after the barrier that follows its writes; it writes act [0, ffn), y and h
        // [0, hidden) (lengths checked), the scratch (gate's and up's ffn sums: its length,
        // new), the RF_PMLP_COUNTERS counters and the flag. Every pointer is 16-byte aligned
        // (checked; the scratch's parts 256). h, act and y are `&mut` borrows, so none aliases
        // another or an input.
        unsafe { launch.launch(config)? };
        Ok(())
    }

    /// Whether a launch's barrier ever waited more than a second (its blocks were not all
    /// resident, which the cooperative launch rules out): its outputs are then void.
    pub fn timed_out(&self) -> Result<bool> {
        Ok(self.timeout.to_vec()?[0] != 0)
    }
}

/// The entries this module launches ([`crate::launchable`]).
pub(crate) fn launchable() -> Vec<Launchable> {
    [kernel_name::<f16>(ENTRY), kernel_name::<bf16>(ENTRY)]
        .into_iter()
        .map(|name| Launchable::new(KernelModule::PersistentMlp, name, Needs::MmaSync))
        .collect()
}
