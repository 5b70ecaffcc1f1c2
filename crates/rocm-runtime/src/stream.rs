//! Owned streams: the unit of ordering, and the only thing rocmforge ever waits on.

use std::panic::Location;
use std::sync::Arc;

use parking_lot::{Mutex, MutexGuard};

use crate::backend::Backend;
use crate::buffer::{DeviceBuffer, DeviceCopy};
use crate::driver::RawStream;
use crate::error::{Error, Result};
use crate::event::Event;
use crate::graph::CaptureState;
use crate::launch::{KernelWrites, Launch};
use crate::ledger::Account;
use crate::module::Function;

/// A stream this process created and owns. Cloning shares it; the driver stream is destroyed
/// when the last clone and the last buffer allocated on it are gone.
///
/// Streams are non-blocking: they never wait for the legacy default stream, and
/// [`Stream::synchronize`] waits for this stream's work only, never for the whole device (where
/// another program, a desktop compositor say, may be running).
#[derive(Clone)]
pub struct Stream {
    inner: Arc<StreamInner>,
}

struct StreamInner {
    backend: Arc<Backend>,
    raw: RawStream,
    id: u64,
    account: Option<Account>,
    /// Whether a graph is being recorded on it, and what its graphs hold ([`crate::graph`]).
    capture: CaptureState,
    /// What the last kernel queued on it may write: a dependent launch that reads a buffer
    /// before its wait is ordinary when that kernel writes the buffer ([`crate::launch`]).
    last_kernel_writes: Mutex<KernelWrites>,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("id", &self.inner.id)
            .field("device", &self.inner.backend.info().ordinal)
            .field("account", &self.inner.account.as_ref().map(|a| a.name()))
            .finish()
    }
}

impl Drop for StreamInner {
    fn drop(&mut self) {
        // SAFETY: this stream was created on this backend and the last handle to it goes now
        // (buffers and launches hold a `Stream`, so none is left). The driver lets queued work
        // finish before it releases the stream.
        if let Err(e) = unsafe { self.backend.driver().stream_destroy(self.raw) } {
            tracing::error!(stream = self.id, error = %e, "destroying a stream failed");
        }
    }
}

impl Stream {
    pub(crate) fn new(backend: Arc<Backend>, account: Option<Account>) -> Result<Self> {
        let raw = backend.driver().stream_create()?;
        let id = backend.next_stream_id();
        let capture = CaptureState::default();
        let last_kernel_writes = Mutex::new(KernelWrites::default());
        Ok(Stream { inner: Arc::new(StreamInner { backend, raw, id, account, capture, last_kernel_writes }) })
    }

    pub fn backend(&self) -> &Arc<Backend> {
        &self.inner.backend
    }

    /// A new stream of the same device, charged to the same account: for work beside this
    /// one's ([`Stream::fork`]).
    pub fn sibling(&self) -> Result<Stream> {
        Stream::new(self.inner.backend.clone(), self.inner.account.clone())
    }

    /// A number that identifies this stream within its backend.
    pub fn id(&self) -> u64 {
        self.inner.id
    }

    /// The account this stream's allocations are charged to.
    pub fn account(&self) -> Option<&Account> {
        self.inner.account.as_ref()
    }

    pub(crate) fn raw(&self) -> RawStream {
        self.inner.raw
    }

    pub(crate) fn capture_state(&self) -> &CaptureState {
        &self.inner.capture
    }

    /// What the last kernel queued on this stream may write, held while the next is queued.
    pub(crate) fn last_kernel_writes(&self) -> MutexGuard<'_, KernelWrites> {
        self.inner.last_kernel_writes.lock()
    }

    /// Runs `queue`, which queues kernels that name no outputs (a vendor BLAS call, a graph
    /// replay), with the record of the last kernel's writes held, and records that anything may
    /// have been written: a launch after them reads nothing before its wait.
    pub(crate) fn queue_unnamed_kernels<R>(&self, queue: impl FnOnce() -> R) -> R {
        let mut last_writes = self.last_kernel_writes();
        let result = queue();
        *last_writes = KernelWrites::Unknown;
        result
    }

    /// Whether `other` is this same stream.
    pub fn same_as(&self, other: &Stream) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Blocks until all work queued on this stream has completed. Other streams, ours or
    /// anyone's, are not waited for.
    pub fn synchronize(&self) -> Result<()> {
        let _outside = self.inner.capture.outside(
            self.id(),
            "synchronizing the stream",
            "nothing recorded has run yet; synchronize after the capture, or after a replay",
        )?;
        let _span = tracing::trace_span!("stream_synchronize", stream = self.id()).entered();
        self.inner.backend.driver().stream_synchronize(self.raw())
    }

    /// `true` when all queued work has completed (does not block).
    pub fn is_idle(&self) -> Result<bool> {
        let _outside = self.inner.capture.outside(
            self.id(),
            "asking whether the stream is idle",
            "a recording stream runs nothing, and querying it would invalidate the capture",
        )?;
        crate::driver::ready(self.inner.backend.driver().stream_query(self.raw()))
    }

    /// Allocates `len` elements, uninitialised, ordered on this stream and charged to its
    /// account. Fails with [`Error::OverBudget`] when the memory guard refuses.
    #[track_caller]
    pub fn alloc<T: DeviceCopy>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        DeviceBuffer::alloc(self, len, Location::caller())
    }

    /// Allocates `len` elements set to zero bytes.
    #[track_caller]
    pub fn alloc_zeroed<T: DeviceCopy>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let mut buffer = DeviceBuffer::alloc(self, len, Location::caller())?;
        buffer.fill_bytes(0)?;
        Ok(buffer)
    }

    /// Allocates a buffer holding a copy of `data`.
    #[track_caller]
    pub fn upload<T: DeviceCopy>(&self, data: &[T]) -> Result<DeviceBuffer<T>> {
        let mut buffer = DeviceBuffer::alloc(self, data.len(), Location::caller())?;
        buffer.copy_from_host(data)?;
        Ok(buffer)
    }

    /// Records a timing event at this point of the stream.
    pub fn record_event(&self) -> Result<Event> {
        let event = Event::new(self.inner.backend.clone(), true)?;
        event.record(self)?;
        Ok(event)
    }

    /// Makes later work on this stream wait until `event` has completed.
    pub fn wait_event(&self, event: &Event) -> Result<()> {
        event.check_backend(&self.inner.backend)?;
        let _outside = self.inner.capture.outside(
            self.id(),
            "waiting on an event",
            "a wait on work outside the capture cannot be recorded into the graph",
        )?;
        self.inner.backend.driver().stream_wait_event(self.raw(), event.raw())
    }

    /// Makes later work on each stream wait for the work queued so far on the other.
    pub(crate) fn join(&self, other: &Stream) -> Result<()> {
        if self.same_as(other) {
            return Ok(());
        }
        let mine = Event::new(self.inner.backend.clone(), false)?;
        let theirs = Event::new(self.inner.backend.clone(), false)?;
        mine.record(self)?;
        theirs.record(other)?;
        other.wait_event(&mine)?;
        self.wait_event(&theirs)
    }

    /// Starts a kernel launch on this stream; see [`Launch`].
    pub fn launch<'a>(&'a self, function: &'a Function) -> Launch<'a> {
        Launch::new(self, function)
    }

    /// Fails unless `buffer_stream` is this stream, or one this thread has forked it with
    /// ([`Stream::fork`]).
    pub(crate) fn check_owns(&self, buffer_stream: &Stream) -> Result<()> {
        if self.same_as(buffer_stream) || self.inner.capture.lends_to(buffer_stream.id()) {
            Ok(())
        } else {
            Err(Error::StreamMismatch { stream: self.id(), buffer_stream: buffer_stream.id() })
        }
    }
}
