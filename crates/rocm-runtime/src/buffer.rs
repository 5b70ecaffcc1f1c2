//! Typed device buffers: owned, ordered on the stream that allocated them, freed on drop.

use std::marker::PhantomData;
use std::panic::Location;

use crate::driver::DevicePtr;
use crate::error::{Bytes, Error, Result};
use crate::graph::Allocation;
use crate::ledger::AllocationId;
use crate::stream::Stream;

/// Why host copies are refused while a stream records a graph.
const HOST_COPY_IN_CAPTURE: &str = "a graph would copy from or to the host address again at every \
    replay, long after the host memory was given back; copy before the capture or between replays \
    (`DeviceBuffer::write_from_host` writes a graph's inputs)";

/// Why copies between two streams are refused while either records a graph.
const CROSS_STREAM_IN_CAPTURE: &str = "a graph records one stream, and ordering against another \
    would pull that stream into the capture; copy between streams before or after it";

/// Element types a device buffer may hold: plain data for which every bit pattern is a valid
/// value (so reading back memory a kernel did not write is garbage, never undefined behaviour).
pub trait DeviceCopy: bytemuck::Pod + Send + Sync {}
impl<T: bytemuck::Pod + Send + Sync> DeviceCopy for T {}

/// `len` elements of `T` in device memory, owned, belonging to one [`Stream`].
///
/// Every operation is queued on that stream, and dropping the buffer queues its free there
/// too, so the memory is released only after the work already queued on it. Using a buffer
/// from another stream is an error, except for copies, which order the two streams.
pub struct DeviceBuffer<T: DeviceCopy> {
    ptr: DevicePtr,
    len: usize,
    stream: Stream,
    allocation: Option<AllocationId>,
    _elements: PhantomData<T>,
}

impl<T: DeviceCopy> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceBuffer")
            .field("type", &std::any::type_name::<T>())
            .field("len", &self.len)
            .field("stream", &self.stream.id())
            .finish()
    }
}

impl<T: DeviceCopy> DeviceBuffer<T> {
    pub(crate) fn alloc(stream: &Stream, len: usize, site: &'static Location<'static>) -> Result<Self> {
        let bytes = len.checked_mul(size_of::<T>()).ok_or_else(|| {
            Error::InvalidArgument(format!("{len} elements of {} overflow usize", std::any::type_name::<T>()))
        })? as u64;
        let _outside = stream.capture_state().outside(
            stream.id(),
            "allocating",
            "memory allocated during a capture would be freed before the graph replays it; allocate \
             before the capture",
        )?;
        let mut buffer =
            DeviceBuffer { ptr: 0, len, stream: stream.clone(), allocation: None, _elements: PhantomData };
        if bytes == 0 {
            return Ok(buffer);
        }
        let backend = stream.backend();
        let _span = tracing::debug_span!("alloc", bytes, site = %site, stream = stream.id()).entered();
        let ledger = backend.ledger();
        let memory = || backend.memory_info().map(|m| (m.free, m.total)).unwrap_or((0, 0));
        let id = ledger
            .reserve(bytes, site, std::any::type_name::<T>(), stream.account(), memory)
            .map_err(Error::OverBudget)?;
        let driver = backend.driver();
        let allocated = if driver.stream_ordered_memory() {
            driver.alloc_async(bytes, stream.raw())
        } else {
            driver.alloc_sync(bytes)
        };
        match allocated {
            Ok(ptr) => {
                buffer.ptr = ptr;
                buffer.allocation = Some(id);
                Ok(buffer)
            }
            Err(e) => {
                ledger.release(id);
                Err(e)
            }
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Size in bytes.
    pub fn size_bytes(&self) -> usize {
        self.len * size_of::<T>()
    }

    /// The stream this buffer belongs to.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// The device address (0 for an empty buffer), for interop and kernel arguments.
    pub fn device_ptr(&self) -> u64 {
        self.ptr
    }

    /// The ledger's record of this buffer's memory (`None` for an empty buffer).
    pub(crate) fn allocation_id(&self) -> Option<AllocationId> {
        self.allocation
    }

    fn check_len(&self, other: usize, what: &str) -> Result<()> {
        if other == self.len {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "{what}: {other} elements given for a buffer of {} {}",
                self.len,
                std::any::type_name::<T>()
            )))
        }
    }

    /// Copies `src` into this buffer. Returns once `src` may be reused (the copy is complete).
    pub fn copy_from_host(&mut self, src: &[T]) -> Result<()> {
        self.write_from_host(src)
    }

    /// [`DeviceBuffer::copy_from_host`] through a shared borrow: for buffers a [`crate::Graph`]
    /// borrows, such as its inputs between replays. It changes the contents only, never the
    /// allocation the graph recorded, and is ordered on the buffer's stream after the replays
    /// queued before it (and before those queued after). Returns once the copy is complete.
    pub fn write_from_host(&self, src: &[T]) -> Result<()> {
        Self::write_each_from_host(&[(self, src)], "write_from_host")
    }

    /// [`DeviceBuffer::write_from_host`] of several buffers of one stream, each `(buffer, src)`:
    /// the copies are queued one after another and waited for once, where separate calls wait
    /// once each (a decode step's positions, slots, block tables and lengths: a round trip to
    /// the device saved per input). Every length and every buffer's stream are checked before
    /// anything is queued. Returns once every queued copy is complete, also when a copy fails to
    /// queue (so no source is released while the device may still read it).
    pub fn write_all_from_host(writes: &[(&DeviceBuffer<T>, &[T])]) -> Result<()> {
        Self::write_each_from_host(writes, "write_all_from_host")
    }

    /// Both host writes: checks, queues each non-empty copy, waits once (not at all when
    /// nothing was queued). `what` names the caller in errors.
    fn write_each_from_host(writes: &[(&DeviceBuffer<T>, &[T])], what: &str) -> Result<()> {
        let Some((first, _)) = writes.first() else { return Ok(()) };
        let stream = &first.stream;
        for (buffer, src) in writes {
            buffer.check_len(src.len(), what)?;
            if !buffer.stream.same_as(stream) {
                return Err(Error::StreamMismatch { stream: stream.id(), buffer_stream: buffer.stream.id() });
            }
        }
        let _outside =
            stream.capture_state().outside(stream.id(), "copying from the host", HOST_COPY_IN_CAPTURE)?;
        let bytes: usize = writes.iter().map(|(b, _)| b.size_bytes()).sum();
        if bytes == 0 {
            return Ok(());
        }
        let _span =
            tracing::trace_span!("copy_htod", bytes, copies = writes.len(), stream = stream.id()).entered();
        let mut queued = Ok(());
        for (buffer, src) in writes.iter().filter(|(b, _)| b.len > 0) {
            // SAFETY: the destination is `buffer`'s allocation of `size_bytes()`; `src` holds
            // as many readable bytes (lengths checked above) and outlives the copy: every
            // queued copy is waited for below before returning, whether or not a later one
            // failed to queue.
            queued = unsafe {
                stream.backend().driver().copy_htod(
                    buffer.ptr,
                    src.as_ptr().cast(),
                    buffer.size_bytes(),
                    stream.raw(),
                )
            };
            if queued.is_err() {
                break;
            }
        }
        let waited = stream.synchronize();
        queued.and(waited)
    }

    /// Copies this buffer into `dst`, waiting for the stream's queued work and the copy.
    pub fn copy_to_host(&self, dst: &mut [T]) -> Result<()> {
        self.check_len(dst.len(), "copy_to_host")?;
        let _outside = self.stream.capture_state().outside(
            self.stream.id(),
            "copying to the host",
            HOST_COPY_IN_CAPTURE,
        )?;
        if self.len == 0 {
            return Ok(());
        }
        let bytes = self.size_bytes();
        let _span = tracing::trace_span!("copy_dtoh", bytes, stream = self.stream.id()).entered();
        // SAFETY: `dst` has room for `bytes` and is borrowed until we return, after the stream
        // (and so the copy) has completed.
        unsafe {
            self.stream.backend().driver().copy_dtoh(
                dst.as_mut_ptr().cast(),
                self.ptr,
                bytes,
                self.stream.raw(),
            )?;
        }
        self.stream.synchronize()
    }

    /// This buffer's contents, read back to the host.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        let mut out = vec![T::zeroed(); self.len];
        self.copy_to_host(&mut out)?;
        Ok(out)
    }

    /// Copies `src` (of any stream of the same device) into this buffer. When the streams
    /// differ, each waits for the other's queued work, so neither buffer is reused or freed
    /// while the copy runs.
    pub fn copy_from_device(&mut self, src: &DeviceBuffer<T>) -> Result<()> {
        self.check_len(src.len, "copy_from_device")?;
        if !std::sync::Arc::ptr_eq(self.stream.backend(), src.stream.backend()) {
            return Err(Error::InvalidArgument("device-to-device copy between two devices".into()));
        }
        if self.len == 0 {
            return Ok(());
        }
        let bytes = self.size_bytes();
        let _span = tracing::trace_span!("copy_dtod", bytes, stream = self.stream.id()).entered();
        self.ordered_with(src, |dst| {
            // SAFETY: both are live allocations of `bytes`; the caller orders the copy after the
            // source's queued work and the source's later work (its free) after the copy.
            unsafe { dst.stream.backend().driver().copy_dtod(dst.ptr, src.ptr, bytes, dst.stream.raw()) }
        })
    }

    /// Runs `copy`, which queues a copy from `src` on this buffer's stream, ordered with
    /// `src`'s stream both ways when the streams differ; on one stream it may be recorded
    /// into a graph (both allocations are noted), across two it is refused while either
    /// stream records.
    fn ordered_with(&self, src: &DeviceBuffer<T>, copy: impl FnOnce(&Self) -> Result<()>) -> Result<()> {
        if self.stream.same_as(&src.stream) {
            let enqueue = self.stream.capture_state().enqueue(self.stream.id(), "a device copy")?;
            enqueue.uses(self.allocation);
            enqueue.uses(src.allocation);
            return copy(self);
        }
        let operation = "copying between two streams";
        let _mine =
            self.stream.capture_state().outside(self.stream.id(), operation, CROSS_STREAM_IN_CAPTURE)?;
        let _theirs =
            src.stream.capture_state().outside(src.stream.id(), operation, CROSS_STREAM_IN_CAPTURE)?;
        self.stream.join(&src.stream)?;
        copy(self)?;
        self.stream.join(&src.stream)
    }

    /// Copies `len` elements of `src` from element `src_start` into this buffer at element
    /// `dst_start` (one row of a matrix, say). Ranges past either buffer are refused before
    /// anything is queued; streams are ordered as for [`DeviceBuffer::copy_from_device`].
    pub fn copy_range_from_device(
        &mut self,
        dst_start: usize,
        src: &DeviceBuffer<T>,
        src_start: usize,
        len: usize,
    ) -> Result<()> {
        let fits =
            |start: usize, buffer_len: usize| start.checked_add(len).is_some_and(|end| end <= buffer_len);
        if !fits(dst_start, self.len) || !fits(src_start, src.len) {
            return Err(Error::InvalidArgument(format!(
                "copy_range_from_device: {len} elements from {src_start} of a buffer of {} into {dst_start} of a \
                 buffer of {}",
                src.len, self.len
            )));
        }
        if !std::sync::Arc::ptr_eq(self.stream.backend(), src.stream.backend()) {
            return Err(Error::InvalidArgument("device-to-device copy between two devices".into()));
        }
        if len == 0 {
            return Ok(());
        }
        let element = size_of::<T>() as u64;
        let (dst, from) = (self.ptr + dst_start as u64 * element, src.ptr + src_start as u64 * element);
        self.ordered_with(src, |this| {
            // SAFETY: both ranges lie inside live allocations (checked above), ordered as in
            // `copy_from_device`.
            unsafe {
                this.stream.backend().driver().copy_dtod(dst, from, len * size_of::<T>(), this.stream.raw())
            }
        })
    }

    /// Sets every byte to `value` (0xFF poisons f32/f16/bf16 data with NaN).
    pub fn fill_bytes(&mut self, value: u8) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        let enqueue = self.stream.capture_state().enqueue(self.stream.id(), "a memset")?;
        enqueue.uses(self.allocation);
        // SAFETY: the range is this buffer's allocation.
        unsafe {
            self.stream.backend().driver().memset_d8(self.ptr, value, self.size_bytes(), self.stream.raw())
        }
    }

    /// Fills the buffer with NaN-pattern bytes (0xFF), so a kernel that leaves an element
    /// unwritten shows up in the comparison.
    pub fn poison(&mut self) -> Result<()> {
        self.fill_bytes(0xFF)
    }

    /// Sets every element to `value` (element types of 1, 2 or 4 bytes).
    pub fn fill(&mut self, value: T) -> Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        let driver = self.stream.backend().driver();
        let bytes = bytemuck::bytes_of(&value);
        let (ptr, len, stream) = (self.ptr, self.len, self.stream.raw());
        let enqueue = self.stream.capture_state().enqueue(self.stream.id(), "a memset")?;
        enqueue.uses(self.allocation);
        // SAFETY: each range is this buffer's allocation, aligned for the element size.
        unsafe {
            match *bytes {
                [b] => driver.memset_d8(ptr, b, len, stream),
                [a, b] => driver.memset_d16(ptr, u16::from_ne_bytes([a, b]), len, stream),
                [a, b, c, d] => driver.memset_d32(ptr, u32::from_ne_bytes([a, b, c, d]), len, stream),
                _ => Err(Error::InvalidArgument(format!(
                    "fill supports 1-, 2- and 4-byte elements, not {} ({})",
                    std::any::type_name::<T>(),
                    Bytes(size_of::<T>() as u64)
                ))),
            }
        }
    }
}

impl<T: DeviceCopy> Drop for DeviceBuffer<T> {
    fn drop(&mut self) {
        let Some(id) = self.allocation.take() else { return };
        let allocation = Allocation { ptr: self.ptr, id, bytes: self.size_bytes() as u64 };
        // Freed now, or, while a capture runs or a graph uses it, when that is over.
        self.stream.release_allocation(allocation);
    }
}

/// Frees the memory of a dropped buffer of `stream` in stream order and releases it in the
/// ledger. Called once per allocation, by [`Stream::release_allocation`] (no capture runs on
/// the stream and no graph holds the allocation) or by the last graph holding it.
pub(crate) fn free_allocation(stream: &Stream, allocation: Allocation) {
    let backend = stream.backend();
    let driver = backend.driver();
    let freed = if driver.stream_ordered_memory() {
        // SAFETY: `ptr` was allocated with alloc_async on this stream's device and is freed once
        // (its buffer's `allocation` was taken); every use of it was queued on its own stream,
        // directly or by the replays of graphs that are gone, so the free queued there runs
        // after them; no capture is recording the stream (the caller holds its gate).
        unsafe { driver.free_async(allocation.ptr, stream.raw()) }
    } else {
        // Without memory pools a free is immediate: wait for the owning stream's work first.
        // SAFETY: as above, with alloc_sync; the wait means no queued work uses it.
        stream.synchronize().and_then(|()| unsafe { driver.free_sync(allocation.ptr) })
    };
    if let Err(e) = freed {
        tracing::error!(error = %e, bytes = allocation.bytes, "freeing a device buffer failed");
    }
    backend.ledger().release(allocation.id);
}
