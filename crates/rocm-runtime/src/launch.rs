//! The typed launch builder: arguments collected with their sizes, checked, then launched.

use std::ffi::c_void;
use std::sync::{Arc, OnceLock};

use crate::buffer::{DeviceBuffer, DeviceCopy};
use crate::driver::LaunchMode;
use crate::error::{Error, Result};
use crate::ledger::AllocationId;
use crate::module::Function;
use crate::stream::Stream;

/// Grid, block and dynamic shared memory of one launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_mem_bytes: u32,
}

impl LaunchConfig {
    /// One-dimensional: `block` threads a block and enough blocks to cover `elements`, capped
    /// at `max_blocks` (kernels use grid-stride loops, so fewer blocks still cover everything).
    pub fn linear(elements: usize, block: u32, max_blocks: u32) -> Self {
        let blocks = elements.div_ceil(block.max(1) as usize).clamp(1, max_blocks.max(1) as usize) as u32;
        LaunchConfig { grid: [blocks, 1, 1], block: [block, 1, 1], shared_mem_bytes: 0 }
    }

    fn threads_per_block(&self) -> u64 {
        self.block.iter().map(|&b| b as u64).product()
    }
}

/// One kernel argument's bytes, kept in 8-byte-aligned storage that does not move while the
/// argument list grows (the driver reads each through a pointer).
struct ArgValue {
    storage: Box<[u64]>,
    size: usize,
}

/// A kernel launch being assembled; made by [`Stream::launch`].
///
/// Arguments are added in the kernel's parameter order. Buffers must belong to the launching
/// stream, which is what makes their use safe after the launch returns: their frees are
/// queued behind the kernel on the same stream. Errors are held until [`Launch::launch`].
#[must_use = "a launch does nothing until `launch` is called"]
pub struct Launch<'a> {
    stream: &'a Stream,
    function: &'a Function,
    args: Vec<ArgValue>,
    /// The allocations of the buffers passed: a capture records them ([`crate::graph`]).
    allocations: Vec<AllocationId>,
    /// The allocations it may write ([`Launch::buffer_mut`], [`Launch::writes`]).
    writes: Vec<AllocationId>,
    /// The allocations it reads before its wait ([`Launch::reads_before_wait`]).
    early_reads: Vec<AllocationId>,
    /// Marked by [`Launch::dependent`].
    dependent: bool,
    /// Marked by [`Launch::cooperative`].
    cooperative: bool,
    error: Option<Error>,
}

/// Set to `0` to make every [`Launch::dependent`] launch an ordinary one: the A/B switch of the
/// benchmarks, and a way to rule dependent launches out when chasing a fault.
pub const DEPENDENT_LAUNCH_ENV: &str = "ROCMFORGE_DEPENDENT_LAUNCH";

/// Whether [`DEPENDENT_LAUNCH_ENV`] leaves dependent launches on (read once a process).
fn dependent_launch_allowed() -> bool {
    static ALLOWED: OnceLock<bool> = OnceLock::new();
    *ALLOWED.get_or_init(|| std::env::var(DEPENDENT_LAUNCH_ENV).map_or(true, |v| v.trim() != "0"))
}

impl std::fmt::Debug for Launch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Launch")
            .field("kernel", &self.function.name())
            .field("args", &self.args.len())
            .finish()
    }
}

impl<'a> Launch<'a> {
    pub(crate) fn new(stream: &'a Stream, function: &'a Function) -> Self {
        let error = (!Arc::ptr_eq(stream.backend(), function.backend()))
            .then(|| Error::InvalidArgument(format!("`{}` was loaded on another device", function.name())));
        Launch {
            stream,
            function,
            args: Vec::new(),
            allocations: Vec::new(),
            writes: Vec::new(),
            early_reads: Vec::new(),
            dependent: false,
            cooperative: false,
            error,
        }
    }

    /// Lets the kernel begin before the one ahead of it on the stream ends, where the device
    /// has programmatic dependent launch ([`DeviceInfo::dependent_launch`]; an ordinary launch
    /// elsewhere, or with [`DEPENDENT_LAUNCH_ENV`] = 0). Its blocks may start as soon as those
    /// of the kernel ahead call `rf_launch_dependents()` or exit, and do what needs nothing of
    /// that kernel (the first copies of a weight) while it finishes.
    ///
    /// Part of [`Launch::launch`]'s contract then: the kernel calls `rf_wait_prior_grid()`
    /// (kernels/include/rocmforge_dependent_launch.h) before it reads anything an earlier
    /// launch writes and before it writes anything at all.
    ///
    /// [`DeviceInfo::dependent_launch`]: crate::DeviceInfo::dependent_launch
    pub fn dependent(mut self) -> Self {
        self.dependent = true;
        self
    }

    /// Launches every block at once or not at all: the driver refuses a grid whose blocks
    /// cannot all be resident together (CUDA's cooperative launch; HIP's
    /// `hipModuleLaunchCooperativeKernel`, from HIP 5.5) with an error, where an ordinary
    /// launch would queue the blocks that do not fit behind the others. What a kernel needs
    /// whose blocks wait for each other (a grid-wide barrier): with an ordinary launch such a
    /// kernel hangs the device once a block waits for one that never starts.
    ///
    /// Not together with [`Launch::dependent`]: a cooperative kernel's blocks must find the
    /// device free of the kernel ahead (refused at launch).
    pub fn cooperative(mut self) -> Self {
        self.cooperative = true;
        self
    }

    fn push_bytes(&mut self, bytes: &[u8]) {
        let mut storage = vec![0u64; bytes.len().div_ceil(8).max(1)].into_boxed_slice();
        bytemuck::cast_slice_mut::<u64, u8>(&mut storage)[..bytes.len()].copy_from_slice(bytes);
        self.args.push(ArgValue { storage, size: bytes.len() });
    }

    /// A by-value argument: a scalar or a `#[repr(C)]` plain-data struct.
    pub fn arg<A: bytemuck::Pod>(mut self, value: A) -> Self {
        self.push_bytes(bytemuck::bytes_of(&value));
        self
    }

    fn push_buffer<T: DeviceCopy>(&mut self, buffer: &DeviceBuffer<T>) {
        self.use_buffer(buffer);
        self.push_bytes(&buffer.device_ptr().to_ne_bytes());
    }

    /// Checks that `buffer` belongs to the launching stream and notes its allocation.
    fn use_buffer<T: DeviceCopy>(&mut self, buffer: &DeviceBuffer<T>) {
        if self.error.is_none() {
            self.error = self.stream.check_owns(buffer.stream()).err();
        }
        self.allocations.extend(buffer.allocation_id());
    }

    /// A buffer the kernel only reads.
    pub fn buffer<T: DeviceCopy>(mut self, buffer: &'a DeviceBuffer<T>) -> Self {
        self.push_buffer(buffer);
        self
    }

    /// A buffer the kernel writes.
    pub fn buffer_mut<T: DeviceCopy>(mut self, buffer: &'a mut DeviceBuffer<T>) -> Self {
        self.writes.extend(buffer.allocation_id());
        self.push_buffer(buffer);
        self
    }

    /// A buffer the kernel reads through a pointer inside a struct argument: checked to belong
    /// to the launching stream like [`Launch::buffer`], but adds no argument.
    pub fn reads<T: DeviceCopy>(mut self, buffer: &'a DeviceBuffer<T>) -> Self {
        self.use_buffer(buffer);
        self
    }

    /// A buffer the kernel writes through a pointer inside a struct argument (see
    /// [`Launch::reads`]).
    pub fn writes<T: DeviceCopy>(mut self, buffer: &'a mut DeviceBuffer<T>) -> Self {
        self.writes.extend(buffer.allocation_id());
        self.reads(buffer)
    }

    /// A buffer a [`Launch::dependent`] kernel reads before it waits for the kernel ahead (a
    /// weight's first copies, a block table), through a pointer argument or inside a struct;
    /// it adds no argument (pass it with [`Launch::buffer`] too where it is one). Such a read
    /// races with that kernel only if it writes the buffer, so the launch checks: where the
    /// last kernel queued on the stream may write it ([`Launch::buffer_mut`],
    /// [`Launch::writes`]; or kernels the runtime did not queue itself, such as a vendor BLAS
    /// call or a graph replay), the kernel is launched as an ordinary one, which waits first.
    /// Kernels further back need no check: the kernel ahead waited for them before it let this
    /// one start.
    pub fn reads_before_wait<T: DeviceCopy>(mut self, buffer: &'a DeviceBuffer<T>) -> Self {
        self.early_reads.extend(buffer.allocation_id());
        self.reads(buffer)
    }

    /// Checks the configuration and the arguments, then queues the kernel on the stream.
    ///
    /// # Safety
    /// The arguments must match the kernel's parameters in type and order (sizes are checked
    /// where the driver reports them), and the kernel must access memory only inside the
    /// buffers passed to it, for the sizes they have: the caller vouches for the kernel's
    /// indexing. A [`Launch::dependent`] kernel waits for the grid ahead of it first (see
    /// there). The typed launchers in `rocm-kernels` are the safe way to call this.
    pub unsafe fn launch(self, config: LaunchConfig) -> Result<()> {
        if let Some(e) = self.error {
            return Err(e);
        }
        let function = self.function;
        if self.cooperative && self.dependent {
            return Err(Error::InvalidArgument(format!(
                "launch of `{}`: a cooperative launch cannot also be dependent (its blocks must all \
                 be resident, so none may wait behind the kernel ahead)",
                function.name()
            )));
        }
        let info = self.stream.backend().info();
        if self.cooperative && !info.cooperative_launch {
            return Err(Error::InvalidArgument(format!(
                "launch of `{}`: {} ({}) has no cooperative launches through this driver",
                function.name(),
                info.name,
                info.arch
            )));
        }
        let static_shared = function.static_shared_bytes();
        check_config(
            &config,
            info.max_grid,
            function.max_threads_per_block(),
            info.shared_mem_per_block_optin,
            static_shared,
        )
        .map_err(|why| Error::InvalidArgument(format!("launch of `{}`: {why}", function.name())))?;
        if let Some(expected) = function.param_sizes() {
            let got: Vec<usize> = self.args.iter().map(|a| a.size).collect();
            if got != expected {
                return Err(Error::LaunchArguments {
                    kernel: function.name().to_string(),
                    expected: expected.to_vec(),
                    got,
                });
            }
        }
        let driver = self.stream.backend().driver();
        // Without the opt-in a kernel gets its static shared memory plus dynamic memory up to the
        // default per-block limit in all; past it, the dynamic part must be allowed explicitly.
        if u64::from(static_shared) + u64::from(config.shared_mem_bytes)
            > u64::from(info.shared_mem_per_block)
        {
            driver.function_set_max_dynamic_shared(function.raw(), config.shared_mem_bytes)?;
        }
        // Held until the kernel is queued: a capture cannot start or end meanwhile.
        let enqueue = self.stream.capture_state().enqueue(self.stream.id(), "a kernel launch")?;
        for &id in &self.allocations {
            enqueue.uses(Some(id));
        }
        enqueue.launches(function);
        let mut params: Vec<*mut c_void> =
            self.args.iter().map(|a| a.storage.as_ptr() as *mut c_void).collect();
        let _span = tracing::trace_span!(
            "launch",
            kernel = function.name(),
            grid = ?config.grid,
            block = ?config.block,
            stream = self.stream.id()
        )
        .entered();
        // Held until the kernel is queued, so that no launch from another thread comes between
        // the check and the record.
        let mut last_writes = self.stream.last_kernel_writes();
        let dependent = self.dependent
            && info.dependent_launch
            && dependent_launch_allowed()
            && !last_writes.conflicts_with(&self.early_reads);
        // SAFETY: `params` holds one pointer per argument into storage alive for this call
        // (the driver copies the values at launch); the rest, a dependent kernel's wait
        // included, is the caller's contract.
        unsafe {
            driver.launch(
                function.raw(),
                config.grid,
                config.block,
                config.shared_mem_bytes,
                self.stream.raw(),
                &mut params,
                LaunchMode { dependent, cooperative: self.cooperative },
            )
        }?;
        *last_writes = KernelWrites::Known(self.writes);
        Ok(())
    }
}

/// What the last kernel queued on a stream may write, as far as the runtime knows: the
/// allocations its [`Launch`] named as written, or anything at all after work the runtime
/// queued without naming its outputs (a vendor BLAS call, a graph replay).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KernelWrites {
    Known(Vec<AllocationId>),
    Unknown,
}

impl Default for KernelWrites {
    /// A new stream has queued no kernel.
    fn default() -> Self {
        KernelWrites::Known(Vec::new())
    }
}

impl KernelWrites {
    /// Whether reading any of `early_reads` before the wait could race with that kernel.
    fn conflicts_with(&self, early_reads: &[AllocationId]) -> bool {
        match self {
            KernelWrites::Known(writes) => early_reads.iter().any(|id| writes.contains(id)),
            KernelWrites::Unknown => !early_reads.is_empty(),
        }
    }
}

fn check_config(
    config: &LaunchConfig,
    max_grid: [u32; 3],
    max_threads: u32,
    max_shared: u32,
    static_shared: u32,
) -> Result<(), String> {
    if config.grid.contains(&0) || config.block.contains(&0) {
        return Err(format!("empty grid {:?} or block {:?}", config.grid, config.block));
    }
    if let Some(axis) = (0..3).find(|&i| config.grid[i] > max_grid[i]) {
        return Err(format!("grid {:?} exceeds the device's {:?} on axis {axis}", config.grid, max_grid));
    }
    if config.threads_per_block() > max_threads as u64 {
        return Err(format!("block {:?} exceeds the kernel's {max_threads} threads", config.block));
    }
    if u64::from(config.shared_mem_bytes) + u64::from(static_shared) > u64::from(max_shared) {
        return Err(format!(
            "{} bytes of dynamic shared memory on top of the kernel's {static_shared} static exceed the \
             device's {max_shared}",
            config.shared_mem_bytes
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn early_reads_conflict_only_with_what_the_kernel_ahead_writes() {
        let [a, b, c] = [1, 2, 3].map(AllocationId::for_tests);
        let known = KernelWrites::Known(vec![a, b]);
        assert!(known.conflicts_with(&[c, b]));
        assert!(!known.conflicts_with(&[c]));
        assert!(!known.conflicts_with(&[]));
        assert!(!KernelWrites::default().conflicts_with(&[a]));
        assert!(KernelWrites::Unknown.conflicts_with(&[c]));
        assert!(!KernelWrites::Unknown.conflicts_with(&[]));
    }

    #[test]
    fn linear_configs_cover_and_cap() {
        assert_eq!(LaunchConfig::linear(1000, 256, 1024).grid, [4, 1, 1]);
        assert_eq!(LaunchConfig::linear(0, 256, 1024).grid, [1, 1, 1]);
        assert_eq!(LaunchConfig::linear(usize::MAX, 256, 4096).grid, [4096, 1, 1]);
    }

    #[test]
    fn configs_beyond_the_limits_are_refused() {
        let ok = LaunchConfig { grid: [10, 1, 1], block: [256, 1, 1], shared_mem_bytes: 0 };
        let grid = [i32::MAX as u32, 65535, 65535];
        assert!(check_config(&ok, grid, 1024, 48 << 10, 0).is_ok());
        let big_block = LaunchConfig { block: [1024, 2, 1], ..ok };
        assert!(check_config(&big_block, grid, 1024, 48 << 10, 0).unwrap_err().contains("threads"));
        let empty = LaunchConfig { grid: [0, 1, 1], ..ok };
        assert!(check_config(&empty, grid, 1024, 48 << 10, 0).is_err());
        let tall = LaunchConfig { grid: [1, 70000, 1], ..ok };
        assert!(check_config(&tall, grid, 1024, 48 << 10, 0).unwrap_err().contains("axis 1"));
        let shared = LaunchConfig { shared_mem_bytes: 1 << 20, ..ok };
        assert!(check_config(&shared, grid, 1024, 48 << 10, 0).is_err());
        // Static shared memory counts against the same limit.
        let some = LaunchConfig { shared_mem_bytes: 40 << 10, ..ok };
        assert!(check_config(&some, grid, 1024, 48 << 10, 8 << 10).is_ok());
        assert!(check_config(&some, grid, 1024, 48 << 10, (8 << 10) + 1).unwrap_err().contains("static"));
    }
}
