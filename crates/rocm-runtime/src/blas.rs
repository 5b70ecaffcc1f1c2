//! Matrix products through the vendor BLAS: cuBLAS on NVIDIA, rocBLAS on AMD, loaded at run
//! time when present.
//!
//! [`Blas::open`] gives the process's handle for a device (created on first use, shared by
//! every thread). A handle has one current stream and one workspace, so each call takes the
//! handle's lock, points it at the output buffer's stream and at a workspace of that call, and
//! queues the GEMM: calls on different streams never share device memory, and the workspace is
//! an ordinary buffer, charged to the ledger and freed in stream order like any other.
//!
//! Matrices are row-major, as everywhere in rocmforge; the vendor libraries are column-major.
//! A row-major `C = op(A) op(B)` is the column-major `C^T = op(B)^T op(A)^T`, and a row-major
//! matrix read column-major is its transpose, so the call swaps the operands and keeps the
//! transpose flags ([`GemmDesc::col_major`]): no data is moved.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::backend::Backend;
use crate::buffer::{DeviceBuffer, DeviceCopy};
use crate::driver::{InitFailure, RawStream};
use crate::error::{Error, Result};

/// Whether an operand is used as stored or transposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Transpose {
    /// As stored.
    #[default]
    No,
    /// Transposed: `A` stored `[K, M]`, or `B` stored `[N, K]` (the layout of `nn.Linear`
    /// weights, for `y = x W^T`).
    Yes,
}

impl Transpose {
    pub fn is_transposed(self) -> bool {
        self == Transpose::Yes
    }
}

/// Storage types the GEMMs take. Products are accumulated in f32 for all three.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElementType {
    F32,
    F16,
    Bf16,
}

/// An element type the vendor GEMM is called with.
pub trait BlasElement: DeviceCopy {
    const TYPE: ElementType;
}

impl BlasElement for f32 {
    const TYPE: ElementType = ElementType::F32;
}
impl BlasElement for half::f16 {
    const TYPE: ElementType = ElementType::F16;
}
impl BlasElement for half::bf16 {
    const TYPE: ElementType = ElementType::Bf16;
}

/// One (optionally strided-batched) matrix product on row-major matrices:
///
/// `C[M, N] = alpha * op(A)[M, K] op(B)[K, N] + beta * C`
///
/// - `A` is stored `[M, K]` (`trans_a = No`, `lda >= K`) or `[K, M]` (`Yes`, `lda >= M`);
/// - `B` is stored `[K, N]` (`trans_b = No`, `ldb >= N`) or `[N, K]` (`Yes`, `ldb >= K`);
/// - `C` is `[M, N]` with `ldc >= N`; elements between a row's end and the next row's start
///   (when a leading dimension exceeds the width) are neither read nor written.
///
/// Leading dimensions and strides count elements. With `beta == 0`, `C` is not read (it may
/// hold anything, NaN included); with `alpha == 0` or `K == 0`, `C = beta * C` (the portable
/// kernel does not read `A` and `B` then; the vendor libraries' documentation promises less,
/// so give them finite inputs). Batch `i` uses `A + i * stride_a` and likewise; the outputs of a batch must
/// not overlap (`stride_c` at least one whole `C`), the inputs may (a stride of 0 shares one).
///
/// Each matrix starts `offset_a`, `offset_b`, `offset_c` elements into its buffer (0 unless set
/// by [`GemmDesc::with_offsets`]): a block of columns of a wider `C`, say, or the rows of a
/// weight that one product of several covers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemmDesc {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub trans_a: Transpose,
    pub trans_b: Transpose,
    pub lda: usize,
    pub ldb: usize,
    pub ldc: usize,
    pub alpha: f32,
    pub beta: f32,
    pub batch: usize,
    pub stride_a: usize,
    pub stride_b: usize,
    pub stride_c: usize,
    pub offset_a: usize,
    pub offset_b: usize,
    pub offset_c: usize,
}

impl GemmDesc {
    /// `C[M, N] = A[M, K] B[K, N]`, packed (leading dimensions the widths), alpha 1, beta 0,
    /// one matrix.
    pub fn new(m: usize, n: usize, k: usize) -> Self {
        let mut desc = GemmDesc {
            m,
            n,
            k,
            trans_a: Transpose::No,
            trans_b: Transpose::No,
            lda: k.max(1),
            ldb: n.max(1),
            ldc: n.max(1),
            alpha: 1.0,
            beta: 0.0,
            batch: 1,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
            offset_a: 0,
            offset_b: 0,
            offset_c: 0,
        };
        desc.pack_strides();
        desc
    }

    /// `y[M, N] = x[M, K] W^T` with `W` stored `[N, K]`: a linear layer's forward pass.
    pub fn linear(m: usize, n: usize, k: usize) -> Self {
        GemmDesc::new(m, n, k).with_transposes(Transpose::No, Transpose::Yes)
    }

    /// Sets both transposes; leading dimensions and batch strides become the packed ones for
    /// the new layouts (set custom ones after this).
    pub fn with_transposes(mut self, trans_a: Transpose, trans_b: Transpose) -> Self {
        self.trans_a = trans_a;
        self.trans_b = trans_b;
        self.lda = self.a_cols().max(1);
        self.ldb = self.b_cols().max(1);
        self.pack_strides();
        self
    }

    /// Sets the leading dimensions; batch strides become the packed ones for them.
    pub fn with_leading_dims(mut self, lda: usize, ldb: usize, ldc: usize) -> Self {
        (self.lda, self.ldb, self.ldc) = (lda, ldb, ldc);
        self.pack_strides();
        self
    }

    pub fn with_alpha_beta(mut self, alpha: f32, beta: f32) -> Self {
        (self.alpha, self.beta) = (alpha, beta);
        self
    }

    /// `batch` products, matrix `i` at `i * stride` elements from each buffer's start.
    pub fn with_batch(mut self, batch: usize, stride_a: usize, stride_b: usize, stride_c: usize) -> Self {
        (self.batch, self.stride_a, self.stride_b, self.stride_c) = (batch, stride_a, stride_b, stride_c);
        self
    }

    /// Where the matrices start in their buffers, in elements (strides, leading dimensions and
    /// lengths count from there).
    pub fn with_offsets(mut self, offset_a: usize, offset_b: usize, offset_c: usize) -> Self {
        (self.offset_a, self.offset_b, self.offset_c) = (offset_a, offset_b, offset_c);
        self
    }

    /// `batch` products of consecutive, packed-back-to-back matrices.
    pub fn with_packed_batch(mut self, batch: usize) -> Self {
        self.batch = batch;
        self.pack_strides();
        self
    }

    fn pack_strides(&mut self) {
        self.stride_a = self.single_a_len().unwrap_or(0);
        self.stride_b = self.single_b_len().unwrap_or(0);
        self.stride_c = self.single_c_len().unwrap_or(0);
    }

    /// Rows and columns of `A` as stored.
    fn a_rows(&self) -> usize {
        if self.trans_a.is_transposed() { self.k } else { self.m }
    }
    fn a_cols(&self) -> usize {
        if self.trans_a.is_transposed() { self.m } else { self.k }
    }
    /// Rows and columns of `B` as stored.
    fn b_rows(&self) -> usize {
        if self.trans_b.is_transposed() { self.n } else { self.k }
    }
    fn b_cols(&self) -> usize {
        if self.trans_b.is_transposed() { self.k } else { self.n }
    }

    fn single_a_len(&self) -> Option<usize> {
        strided_len(self.a_rows(), self.lda, self.a_cols())
    }
    fn single_b_len(&self) -> Option<usize> {
        strided_len(self.b_rows(), self.ldb, self.b_cols())
    }
    fn single_c_len(&self) -> Option<usize> {
        strided_len(self.m, self.ldc, self.n)
    }

    /// Elements the `A` buffer must hold, its offset included (`None` on overflow).
    pub fn a_len(&self) -> Option<usize> {
        self.offset_a.checked_add(batched_len(self.batch, self.stride_a, self.single_a_len()?)?)
    }
    /// Elements the `B` buffer must hold, its offset included (`None` on overflow).
    pub fn b_len(&self) -> Option<usize> {
        self.offset_b.checked_add(batched_len(self.batch, self.stride_b, self.single_b_len()?)?)
    }
    /// Elements the `C` buffer must hold, its offset included (`None` on overflow).
    pub fn c_len(&self) -> Option<usize> {
        self.offset_c.checked_add(batched_len(self.batch, self.stride_c, self.single_c_len()?)?)
    }

    /// The device addresses of the first `A`, `B` and `C` elements the product touches: each
    /// buffer's start plus its offset. Meaningful after [`GemmDesc::check_buffers`] passed for
    /// these buffers (then every offset lies inside its buffer).
    pub fn operand_addresses<T: DeviceCopy>(
        &self,
        a: &DeviceBuffer<T>,
        b: &DeviceBuffer<T>,
        c: &DeviceBuffer<T>,
    ) -> [u64; 3] {
        let at =
            |buffer: &DeviceBuffer<T>, offset: usize| buffer.device_ptr() + (offset * size_of::<T>()) as u64;
        [at(a, self.offset_a), at(b, self.offset_b), at(c, self.offset_c)]
    }

    /// Floating-point operations: `2 * M * N * K` per matrix.
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64 * self.batch as f64
    }

    /// True when there is no output element to compute.
    pub fn is_empty(&self) -> bool {
        self.m == 0 || self.n == 0 || self.batch == 0
    }

    /// Checks the description on its own: leading dimensions against widths, the 32-bit
    /// limits both vendor APIs (and the portable kernel) have, non-overlapping batch outputs.
    pub fn check(&self) -> Result<(), String> {
        let fits = |v: usize| v <= i32::MAX as usize;
        if ![self.m, self.n, self.k, self.lda, self.ldb, self.ldc, self.batch].into_iter().all(fits) {
            return Err(format!("{self:?}: sizes and leading dimensions must fit in 32 bits"));
        }
        if ![self.stride_a, self.stride_b, self.stride_c].into_iter().all(|s| s <= i64::MAX as usize) {
            return Err(format!("{self:?}: batch strides must fit in 63 bits"));
        }
        let checks = [
            ("lda", self.lda, self.a_cols(), if self.trans_a.is_transposed() { "M" } else { "K" }),
            ("ldb", self.ldb, self.b_cols(), if self.trans_b.is_transposed() { "K" } else { "N" }),
            ("ldc", self.ldc, self.n, "N"),
        ];
        for (name, ld, width, dim) in checks {
            if ld < width.max(1) {
                return Err(format!(
                    "{name} = {ld} is less than the row width {dim} = {width} (and at least 1)"
                ));
            }
        }
        if self.batch > 1 {
            let single = self.single_c_len().ok_or("the output overflows usize")?;
            if self.stride_c < single {
                return Err(format!(
                    "stride_c = {} would overlap the batch's outputs (one C spans {single} elements)",
                    self.stride_c
                ));
            }
        }
        for (name, len) in [("A", self.a_len()), ("B", self.b_len()), ("C", self.c_len())] {
            if len.is_none() {
                return Err(format!("{name} of {self:?} overflows usize"));
            }
        }
        Ok(())
    }

    /// [`GemmDesc::check`], then the buffers' lengths against what the description reaches.
    /// Longer buffers are fine (the matrices start at each buffer's offset).
    pub fn check_buffers(&self, a: usize, b: usize, c: usize) -> Result<(), String> {
        self.check()?;
        for (name, have, need) in [("A", a, self.a_len()), ("B", b, self.b_len()), ("C", c, self.c_len())] {
            let need = need.unwrap_or(usize::MAX);
            if have < need {
                return Err(format!("{name} has {have} elements, the product reaches {need}"));
            }
        }
        Ok(())
    }

    /// The same product as the column-major GEMM the vendor libraries compute: operands
    /// swapped (the first is the row-major `B`, the second the row-major `A`), transposes
    /// kept, `M` and `N` exchanged. Call after [`GemmDesc::check`] (the casts rely on it).
    pub fn col_major(&self) -> ColMajorGemm {
        ColMajorGemm {
            trans_first: self.trans_b,
            trans_second: self.trans_a,
            m: self.n as i32,
            n: self.m as i32,
            k: self.k as i32,
            ld_first: self.ldb as i32,
            ld_second: self.lda as i32,
            ldc: self.ldc as i32,
            stride_first: self.stride_b as i64,
            stride_second: self.stride_a as i64,
            stride_c: self.stride_c as i64,
            batch: self.batch as i32,
            alpha: self.alpha,
            beta: self.beta,
        }
    }
}

/// `(rows - 1) * ld + cols`, 0 for an empty matrix, `None` on overflow.
fn strided_len(rows: usize, ld: usize, cols: usize) -> Option<usize> {
    if rows == 0 || cols == 0 {
        return Some(0);
    }
    (rows - 1).checked_mul(ld)?.checked_add(cols)
}

/// `(batch - 1) * stride + single`, 0 for an empty batch or matrix.
fn batched_len(batch: usize, stride: usize, single: usize) -> Option<usize> {
    if batch == 0 || single == 0 {
        return Some(0);
    }
    (batch - 1).checked_mul(stride)?.checked_add(single)
}

/// A [`GemmDesc`] as the column-major call the vendor libraries take:
/// `C' = alpha * op(first) op(second) + beta * C'` with `C'` = the row-major `C` read
/// column-major (`m = N` rows, `n = M` columns), `first` = the row-major `B`, `second` = `A`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ColMajorGemm {
    pub trans_first: Transpose,
    pub trans_second: Transpose,
    pub m: i32,
    pub n: i32,
    pub k: i32,
    pub ld_first: i32,
    pub ld_second: i32,
    pub ldc: i32,
    pub stride_first: i64,
    pub stride_second: i64,
    pub stride_c: i64,
    pub batch: i32,
    pub alpha: f32,
    pub beta: f32,
}

/// Everything one vendor call needs: the column-major problem, the element type, and the
/// device addresses of its operands.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GemmCall {
    pub problem: ColMajorGemm,
    pub ty: ElementType,
    pub first: u64,
    pub second: u64,
    pub c: u64,
}

/// One vendor library's handle. Used only under [`Blas`]'s lock, with the device bound to
/// the calling thread.
pub(crate) trait VendorBlas: Send + std::fmt::Debug {
    /// A workspace size that serves every GEMM on this device.
    fn recommended_workspace(&self) -> usize;

    /// Workspace bytes the call wants: what the vendor recommends (cuBLAS) or what its size
    /// query reports (rocBLAS). Queues nothing.
    fn workspace_bytes(&mut self, call: &GemmCall) -> Result<usize>;

    /// Points the handle at `stream` and the workspace, then queues the GEMM.
    ///
    /// # Safety
    /// The operands of `call` are live device allocations of this device that the problem
    /// stays inside of, and `workspace..workspace + workspace_bytes` is one too; all stay
    /// allocated until the work queued on `stream` before their free has run.
    unsafe fn gemm(
        &mut self,
        stream: RawStream,
        call: &GemmCall,
        workspace: u64,
        workspace_bytes: usize,
    ) -> Result<()>;
}

/// The vendor BLAS handle of one device: cuBLAS (NVIDIA) or rocBLAS (AMD).
///
/// One per backend per process ([`Blas::open`]); `Send + Sync`, used from any thread. Calls
/// are serialised on the host by a lock (the handle holds one current stream) and ordered on
/// the device by the output buffer's stream, like kernel launches.
pub struct Blas {
    backend: Arc<Backend>,
    library: &'static str,
    recommended_workspace: usize,
    vendor: Mutex<Box<dyn VendorBlas>>,
}

impl Drop for Blas {
    fn drop(&mut self) {
        // The vendor handle (dropped after this) is destroyed on its own device.
        if let Err(e) = self.backend.driver().bind_thread() {
            tracing::warn!("binding the device to destroy its BLAS handle: {e}");
        }
    }
}

impl std::fmt::Debug for Blas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blas")
            .field("library", &self.library)
            .field("device", &self.backend.info().ordinal)
            .finish()
    }
}

/// Handles (or why there is none) by device ordinal. A handle lives until [`Blas::release_all`]
/// (and its last user) lets it go; never from an exit handler, which would race the driver's own
/// teardown.
type Registry = Vec<(usize, Result<Arc<Blas>, InitFailure>)>;

static HANDLES: Mutex<Registry> = Mutex::new(Vec::new());

impl Blas {
    /// The vendor BLAS of `backend`'s device, created on first use: loads the library
    /// (`ROCMFORGE_CUBLAS_LIBRARY` / `ROCMFORGE_ROCBLAS_LIBRARY` name an exact file) and creates
    /// a handle. A missing library is [`Error::Load`] naming every path tried; a failure stays
    /// the answer for the process. [`crate::VENDOR_BLAS_ENV`]`=off` refuses.
    pub fn open(backend: &Arc<Backend>) -> Result<Arc<Blas>> {
        if std::env::var(crate::VENDOR_BLAS_ENV).is_ok_and(|v| v == "off") {
            return Err(Error::VendorBlasOff);
        }
        let ordinal = backend.info().ordinal;
        let mut handles = HANDLES.lock();
        if let Some((_, state)) = handles.iter().find(|(o, _)| *o == ordinal) {
            return match state {
                Ok(blas) if Arc::ptr_eq(&blas.backend, backend) => Ok(blas.clone()),
                Ok(_) => Err(Error::InvalidArgument(format!("a second backend for device {ordinal}"))),
                Err(failure) => Err(failure.error()),
            };
        }
        let state = match Blas::create(backend) {
            Ok(blas) => Ok(Arc::new(blas)),
            // A missing library or a refused start is a property of the machine: remembered.
            // Anything else is reported and forgotten.
            Err(e) => Err(InitFailure::remembered(&e).ok_or(e)?),
        };
        handles.push((ordinal, state.clone()));
        state.map_err(|failure| failure.error())
    }

    /// Lets the process's handles go: each is destroyed (with the device memory the library
    /// holds for it, ~70 MiB for cuBLAS) once no caller holds an `Arc` of it, and the next
    /// [`Blas::open`] creates a new one. Remembered failures stay. For a program that ends its GPU
    /// work before it exits: tools that report what is alive at exit (compute-sanitizer's leak
    /// check) then find nothing; the test kit calls it when the last test scope of a process
    /// ends.
    pub fn release_all() {
        // Dropped outside the lock: destroying a handle calls the library.
        let released: Vec<Arc<Blas>> = {
            let mut handles = HANDLES.lock();
            let (ok, failed): (Registry, Registry) =
                std::mem::take(&mut *handles).into_iter().partition(|(_, s)| s.is_ok());
            *handles = failed;
            ok.into_iter().filter_map(|(_, s)| s.ok()).collect()
        };
        drop(released);
    }

    fn create(backend: &Arc<Backend>) -> Result<Blas> {
        let _span = tracing::debug_span!("blas_open", platform = %backend.platform()).entered();
        // Handles belong to the device current on the calling thread.
        backend.driver().bind_thread()?;
        let (library, vendor) = backend.driver().vendor_blas(&backend.info().arch)?;
        tracing::debug!(library, "vendor BLAS ready");
        backend.note_library_state();
        let recommended_workspace = vendor.recommended_workspace();
        Ok(Blas { backend: backend.clone(), library, recommended_workspace, vendor: Mutex::new(vendor) })
    }

    /// `"cuBLAS"` or `"rocBLAS"`.
    pub fn library(&self) -> &'static str {
        self.library
    }

    pub fn backend(&self) -> &Arc<Backend> {
        &self.backend
    }

    /// A workspace size that serves every GEMM on this device without a temporary: NVIDIA's
    /// recommendation for cuBLAS (32 MiB from Hopper on, 4 MiB before), 32 MiB for rocBLAS.
    pub fn recommended_workspace_bytes(&self) -> usize {
        self.recommended_workspace
    }

    /// Queues `C = alpha * op(A) op(B) + beta * C` (see [`GemmDesc`]) on `c`'s stream, with a
    /// workspace allocated on that stream for this call (charged to its account, freed in
    /// stream order after the GEMM).
    pub fn gemm<T: BlasElement>(
        &self,
        desc: &GemmDesc,
        a: &DeviceBuffer<T>,
        b: &DeviceBuffer<T>,
        c: &mut DeviceBuffer<T>,
    ) -> Result<()> {
        self.run(desc, a, b, c, None)
    }

    /// As [`Blas::gemm`], using `workspace` (a buffer of the same stream) when it is at least
    /// as large as the call needs, which [`Blas::recommended_workspace_bytes`] is meant to be;
    /// a temporary otherwise. For loops that should not allocate per call.
    pub fn gemm_with_workspace<T: BlasElement>(
        &self,
        desc: &GemmDesc,
        a: &DeviceBuffer<T>,
        b: &DeviceBuffer<T>,
        c: &mut DeviceBuffer<T>,
        workspace: &mut DeviceBuffer<u8>,
    ) -> Result<()> {
        self.run(desc, a, b, c, Some(workspace))
    }

    fn run<T: BlasElement>(
        &self,
        desc: &GemmDesc,
        a: &DeviceBuffer<T>,
        b: &DeviceBuffer<T>,
        c: &mut DeviceBuffer<T>,
        workspace: Option<&mut DeviceBuffer<u8>>,
    ) -> Result<()> {
        let stream = c.stream().clone();
        if !Arc::ptr_eq(stream.backend(), &self.backend) {
            return Err(Error::InvalidArgument(format!(
                "{}: the buffers belong to another device than this handle",
                self.library
            )));
        }
        stream.check_owns(a.stream())?;
        stream.check_owns(b.stream())?;
        if let Some(ws) = &workspace {
            stream.check_owns(ws.stream())?;
        }
        desc.check_buffers(a.len(), b.len(), c.len())
            .map_err(|why| Error::InvalidArgument(format!("{} GEMM: {why}", self.library)))?;
        if desc.is_empty() {
            return Ok(());
        }
        // In bounds: check_buffers proved offset + extent <= len for each.
        let [a_at, b_at, c_at] = desc.operand_addresses(a, b, c);
        let call = GemmCall { problem: desc.col_major(), ty: T::TYPE, first: b_at, second: a_at, c: c_at };
        let _span = tracing::trace_span!(
            "blas_gemm",
            library = self.library,
            m = desc.m,
            n = desc.n,
            k = desc.k,
            batch = desc.batch,
            stream = stream.id()
        )
        .entered();
        let _outside = stream.capture_state().outside(
            stream.id(),
            "a vendor BLAS GEMM",
            "capturing cuBLAS and rocBLAS calls into graphs is not verified on both platforms yet; \
             use the portable GEMM kernel inside a capture",
        )?;
        let mut vendor = self.vendor.lock();
        // cuBLAS and rocBLAS act on the thread's current device.
        stream.backend().driver().bind_thread()?;
        let need = vendor.workspace_bytes(&call)?;
        let temporary;
        let (ws_ptr, ws_len) = match workspace {
            Some(ws) if ws.len() >= need => (ws.device_ptr(), ws.len()),
            _ => {
                temporary = stream.alloc::<u8>(need)?;
                (temporary.device_ptr(), temporary.len())
            }
        };
        // SAFETY: the lengths were checked against everything the problem reaches; all buffers
        // (and the workspace) belong to `stream`, so their frees are queued behind this GEMM.
        stream.queue_unnamed_kernels(|| unsafe { vendor.gemm(stream.raw(), &call, ws_ptr, ws_len) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Column-major GEMM with BLAS semantics on flat memory, the way cuBLAS and rocBLAS
    /// read their arguments: element (r, c) of an `rows x cols` operand at `r + c * ld`.
    fn blas_col_major(p: &ColMajorGemm, first: &[f64], second: &[f64], c: &mut [f64]) {
        for batch in 0..p.batch as usize {
            let f = &first[batch * p.stride_first as usize..];
            let s = &second[batch * p.stride_second as usize..];
            let cc = &mut c[batch * p.stride_c as usize..];
            for col in 0..p.n as usize {
                for row in 0..p.m as usize {
                    let mut acc = 0.0;
                    for kk in 0..p.k as usize {
                        // op(first) is m x k, op(second) is k x n.
                        let fv = match p.trans_first {
                            Transpose::No => f[row + kk * p.ld_first as usize],
                            Transpose::Yes => f[kk + row * p.ld_first as usize],
                        };
                        let sv = match p.trans_second {
                            Transpose::No => s[kk + col * p.ld_second as usize],
                            Transpose::Yes => s[col + kk * p.ld_second as usize],
                        };
                        acc += fv * sv;
                    }
                    let out = &mut cc[row + col * p.ldc as usize];
                    let old = if p.beta == 0.0 { 0.0 } else { *out };
                    *out = p.alpha as f64 * acc + p.beta as f64 * old;
                }
            }
        }
    }

    /// The row-major definition, directly.
    fn row_major(d: &GemmDesc, a: &[f64], b: &[f64], c: &mut [f64]) {
        for batch in 0..d.batch {
            for i in 0..d.m {
                for j in 0..d.n {
                    let mut acc = 0.0;
                    for kk in 0..d.k {
                        let av = match d.trans_a {
                            Transpose::No => a[batch * d.stride_a + i * d.lda + kk],
                            Transpose::Yes => a[batch * d.stride_a + kk * d.lda + i],
                        };
                        let bv = match d.trans_b {
                            Transpose::No => b[batch * d.stride_b + kk * d.ldb + j],
                            Transpose::Yes => b[batch * d.stride_b + j * d.ldb + kk],
                        };
                        acc += av * bv;
                    }
                    let out = &mut c[batch * d.stride_c + i * d.ldc + j];
                    let old = if d.beta == 0.0 { 0.0 } else { *out };
                    *out = d.alpha as f64 * acc + d.beta as f64 * old;
                }
            }
        }
    }

    fn values(len: usize, seed: u64) -> Vec<f64> {
        // Small integers: every product and sum is exact, so the two orders agree exactly.
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % 7) as f64 - 3.0
            })
            .collect()
    }

    #[test]
    fn the_col_major_call_computes_the_row_major_product() {
        use Transpose::{No, Yes};
        for (ta, tb) in [(No, No), (No, Yes), (Yes, No), (Yes, Yes)] {
            for (m, n, k) in [(1, 1, 1), (3, 5, 2), (4, 1, 7), (2, 6, 3)] {
                let d = GemmDesc::new(m, n, k)
                    .with_transposes(ta, tb)
                    .with_leading_dims(
                        GemmDesc::new(m, n, k).with_transposes(ta, tb).lda + 2,
                        GemmDesc::new(m, n, k).with_transposes(ta, tb).ldb + 1,
                        n + 3,
                    )
                    .with_alpha_beta(2.0, -0.5)
                    .with_packed_batch(2);
                d.check().unwrap();
                let a = values(d.a_len().unwrap(), 1);
                let b = values(d.b_len().unwrap(), 2);
                let c0 = values(d.c_len().unwrap(), 3);
                let mut want = c0.clone();
                row_major(&d, &a, &b, &mut want);
                let mut got = c0.clone();
                blas_col_major(&d.col_major(), &b, &a, &mut got);
                assert_eq!(got, want, "{ta:?} {tb:?} {m}x{n}x{k}");
            }
        }
    }

    #[test]
    fn col_major_swaps_operands_and_dimensions() {
        let d = GemmDesc::linear(2, 5, 3).with_alpha_beta(0.5, 1.0);
        let p = d.col_major();
        assert_eq!((p.m, p.n, p.k), (5, 2, 3));
        assert_eq!((p.trans_first, p.trans_second), (Transpose::Yes, Transpose::No));
        assert_eq!((p.ld_first, p.ld_second, p.ldc), (3, 3, 5));
        assert_eq!((p.alpha, p.beta), (0.5, 1.0));
    }

    #[test]
    fn packed_lengths_and_leading_dimensions() {
        let d = GemmDesc::new(4, 3, 2);
        assert_eq!((d.lda, d.ldb, d.ldc), (2, 3, 3));
        assert_eq!((d.a_len(), d.b_len(), d.c_len()), (Some(8), Some(6), Some(12)));
        let t = GemmDesc::new(4, 3, 2).with_transposes(Transpose::Yes, Transpose::Yes);
        assert_eq!((t.lda, t.ldb), (4, 2));
        assert_eq!((t.a_len(), t.b_len()), (Some(8), Some(6)));
        // Gaps: the last row ends at its width, not at its leading dimension.
        let g = GemmDesc::new(4, 3, 2).with_leading_dims(5, 7, 9);
        assert_eq!((g.a_len(), g.b_len(), g.c_len()), (Some(17), Some(10), Some(30)));
        let batched = g.with_packed_batch(3);
        assert_eq!(batched.stride_c, 30);
        assert_eq!(batched.c_len(), Some(90));
        assert_eq!(GemmDesc::new(0, 3, 2).c_len(), Some(0));
        assert_eq!(GemmDesc::new(2, 3, 4).flops(), 48.0);
        // Offsets add to what each buffer must hold; strides count from them.
        let o = GemmDesc::new(4, 3, 2).with_offsets(1, 2, 3);
        assert_eq!((o.a_len(), o.b_len(), o.c_len()), (Some(9), Some(8), Some(15)));
        assert_eq!(o.with_packed_batch(2).c_len(), Some(27));
        assert_eq!(o.check_buffers(9, 8, 14).unwrap_err(), "C has 14 elements, the product reaches 15");
        assert_eq!(GemmDesc::new(4, 3, 2).with_offsets(usize::MAX, 0, 0).a_len(), None);
    }

    #[test]
    fn bad_descriptions_are_refused_with_a_reason() {
        let short_lda = GemmDesc::new(4, 3, 5).with_leading_dims(4, 3, 3);
        assert!(short_lda.check().unwrap_err().contains("lda = 4 is less than the row width K = 5"));
        let short_ldb = GemmDesc::linear(4, 3, 5).with_leading_dims(5, 4, 3);
        assert!(short_ldb.check().unwrap_err().contains("ldb = 4 is less than the row width K = 5"));
        let short_ldc = GemmDesc::new(4, 3, 5).with_leading_dims(5, 3, 2);
        assert!(short_ldc.check().unwrap_err().contains("ldc"));
        // K = 0 still needs leading dimensions of at least 1 (the BLAS rule); packed ones are.
        let zero_ld = GemmDesc::new(4, 3, 0).with_leading_dims(0, 3, 3);
        assert!(zero_ld.check().unwrap_err().contains("lda = 0"));
        assert_eq!(GemmDesc::new(4, 3, 0).lda, 1);
        assert!(GemmDesc::new(4, 3, 0).check().is_ok());
        let huge = GemmDesc::new(1 << 31, 1, 1);
        assert!(huge.check().unwrap_err().contains("32 bits"));
        let overlapping = GemmDesc::new(2, 2, 2).with_batch(2, 4, 4, 3);
        assert!(overlapping.check().unwrap_err().contains("overlap"));
        let shared_inputs = GemmDesc::new(2, 2, 2).with_batch(2, 0, 0, 4);
        assert!(shared_inputs.check().is_ok());
        let err = GemmDesc::new(2, 2, 2).check_buffers(4, 3, 4).unwrap_err();
        assert_eq!(err, "B has 3 elements, the product reaches 4");
        assert!(GemmDesc::new(2, 2, 2).check_buffers(5, 4, 100).is_ok());
    }
}
