//! Graphs: the work of one stream recorded once and replayed with one launch (CUDA graphs on
//! NVIDIA, HIP graphs on AMD), so a step that queues many small kernels pays the host's launch
//! cost once.
//!
//! [`Stream::capture`] runs a closure with the stream in capture mode: the kernels, device
//! copies and memsets it queues on the stream are recorded, not run, and come back as a
//! [`Graph`]. [`Graph::launch`] queues one replay on the same stream, ordered like any other
//! work there. [`Stream::capture_with`] also lends the graph a state (the buffers it reads and
//! writes), readable through [`Graph::state`] between replays.
//!
//! ```no_run
//! # fn main() -> rocm_runtime::Result<()> {
//! # let stream = rocm_runtime::Backend::open(0)?.create_stream()?;
//! struct Step {
//!     input: rocm_runtime::DeviceBuffer<f32>,
//!     output: rocm_runtime::DeviceBuffer<f32>,
//! }
//! let mut step = Step { input: stream.alloc_zeroed(4)?, output: stream.alloc(4)? };
//! let graph = stream.capture_with(&mut step, |_stream, step| {
//!     step.output.copy_from_device(&step.input)?; // recorded, not run
//!     step.output.fill_bytes(0)?; // kernel launches are recorded the same way
//!     step.output.copy_from_device(&step.input)
//! })?;
//! for token in 0..3 {
//!     // New inputs: a write of the contents, ordered on the stream between replays.
//!     graph.state().input.write_from_host(&[token as f32; 4])?;
//!     graph.launch()?;
//!     assert_eq!(graph.state().output.to_vec()?, [token as f32; 4]);
//! }
//! # Ok(()) }
//! ```
//!
//! # Soundness
//!
//! A graph holds device addresses. It is sound if every allocation its recorded work touches
//! stays allocated, and is not reused, until the graph is destroyed and its last replay ran;
//! and if nothing else lands in the recording. Four things make that so.
//!
//! 1. **Everything recorded is known.** Work can only reach a stream through the runtime, and
//!    every way that records it names its buffers: a launch's buffers (the unsafe contract of
//!    [`crate::Launch::launch`] is that a kernel touches only the buffers passed to it), a copy's
//!    or memset's own. While a stream records, each such operation adds the allocations it uses
//!    to the recording, and on success the graph *holds* them: a buffer dropped while a graph
//!    holds its allocation gives its memory to the graph instead of freeing it, and the last
//!    graph holding it frees it when it is dropped (after waiting for the stream, so after its
//!    replays). A graph likewise keeps the module of every kernel it launches loaded. Nothing
//!    here depends on how the closure reached a buffer (a borrow, an `Arc`, a
//!    global): the runtime, not the borrow checker, is what keeps the memory alive.
//! 2. **The borrow checker keeps the graph's view stable.** `record` is `FnOnce + 'a` and the
//!    graph is `Graph<'a, S>`: whatever the closure borrows stays borrowed while the graph
//!    lives, so a captured buffer cannot be dropped, moved or mutably borrowed (reallocated,
//!    swapped for another) meanwhile. That is what keeps a graph from silently reading a
//!    buffer that its owner believes replaced; 1 already keeps it from reading freed memory.
//!    New inputs go in through [`crate::DeviceBuffer::write_from_host`], which takes `&self`
//!    and can change the contents only, never the allocation. (Device memory is not Rust
//!    memory: writing it through a shared borrow races with nothing on the host, and on the
//!    device it is ordered on the buffer's stream like every other use.)
//! 3. **Only the recording thread records.** A stream is `Clone + Sync`. While it records,
//!    work queued on it from another thread (whose buffers the recording closure never saw)
//!    is refused, and a capture starts and ends under a lock that every operation on the
//!    stream holds while it checks and queues, so nothing checked as "not capturing" lands in
//!    a capture that starts meanwhile. Buffers of the stream dropped during the capture, on
//!    any thread, keep their memory until it ended (then the graph holds it, if it was used).
//! 4. **What cannot be recorded is refused** ([`crate::Error::CaptureRefused`]) on the stream
//!    while it records, by a check of the stream's own flag (no driver call per operation):
//!    - allocations on it: memory allocated inside a capture would be a graph-owned
//!      allocation, or be freed before the graph replays;
//!    - copies between the host and the device: the graph would read or write the host
//!      address at every replay, long after the borrow of that host memory has ended;
//!    - `Stream::synchronize`, `Stream::is_idle`, recording an event and waiting on one:
//!      nothing recorded has run, so there is nothing to wait for or to time, and a wait on
//!      work outside the capture cannot be recorded. (`Event::synchronize` needs no check:
//!      an event can only be recorded outside a capture.)
//!    - copies between two streams: they would pull the other stream into the capture;
//!    - vendor BLAS calls: not yet verified under capture on both platforms;
//!    - starting a second capture, or replaying a graph, on a stream that records.
//!
//! A closure that returns `Err` or panics still ends the capture: the partial graph is
//! destroyed, buffers it dropped are freed, the stream is usable again, and the error (or the
//! panic) is passed on. [`Graph::launch`] replays on the stream the graph was recorded on: the
//! graph's buffers belong to that stream, their other uses and their frees are ordered there,
//! and a replay on another stream would race with both. A graph is `Send` (it may be replayed
//! or dropped on any thread) but not `Sync`: neither vendor promises that one instance may be
//! launched from two threads at once.
//!
//! Captures are made in relaxed mode; `DeviceDriver::stream_begin_capture` says why.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::marker::PhantomData;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::thread::ThreadId;

use parking_lot::{Mutex, RecursiveRwLock, RecursiveRwLockReadGuard};

use crate::driver::{DevicePtr, RawGraph, RawGraphExec};
use crate::error::{Error, Result};
use crate::fork::Lending;
use crate::ledger::AllocationId;
use crate::module::Function;
use crate::stream::Stream;

/// Device memory whose buffer is gone and whose free is still to be queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Allocation {
    pub(crate) ptr: DevicePtr,
    pub(crate) id: AllocationId,
    pub(crate) bytes: u64,
}

#[cfg(test)]
impl Allocation {
    /// Allocation `n` of a unit test's bookkeeping (no device memory behind it).
    pub(crate) fn for_tests(n: u64) -> Self {
        Allocation { ptr: 0x1000 * n, id: AllocationId::for_tests(n), bytes: 64 }
    }
}

/// The driver objects of a graph, the allocations it holds and the kernels it launches.
#[derive(Debug)]
pub(crate) struct GraphParts {
    graph: RawGraph,
    /// `None` when instantiation failed.
    exec: Option<RawGraphExec>,
    holds: Vec<AllocationId>,
    /// Keeps the modules of the recorded kernels loaded (dropped after the graph).
    kernels: Vec<Function>,
}

/// What a capture collects while it runs.
#[derive(Debug, Default)]
struct Recording {
    /// Allocations the recorded work uses.
    used: HashSet<AllocationId>,
    /// Buffers of the stream dropped during the capture: freed, or held, once it ended.
    dropped: Vec<Allocation>,
    /// Graphs of the stream dropped during the capture: destroyed once it ended.
    graphs: Vec<GraphParts>,
    /// The kernels launched.
    kernels: Vec<Function>,
}

/// An allocation that live graphs use.
#[derive(Debug)]
struct Held {
    graphs: usize,
    /// Set once its buffer is dropped: the last graph to go frees it.
    dropped: Option<Allocation>,
}

/// What ending a capture leaves to do.
#[derive(Debug, Default)]
pub(crate) struct Ended {
    /// The allocations the new graph holds (empty unless the capture is kept).
    holds: Vec<AllocationId>,
    /// The kernels it launches.
    kernels: Vec<Function>,
    /// Frees that waited for the capture to end.
    frees: Vec<Allocation>,
    /// Graphs dropped during the capture.
    graphs: Vec<GraphParts>,
}

/// The bookkeeping of one stream's captures and of the allocations its graphs hold: plain
/// data, changed under the stream's [`CaptureState`] lock.
#[derive(Debug, Default)]
struct Book {
    recording: Option<Recording>,
    held: HashMap<AllocationId, Held>,
}

impl Book {
    fn begin(&mut self) {
        debug_assert!(self.recording.is_none());
        self.recording = Some(Recording::default());
    }

    fn uses(&mut self, id: AllocationId) {
        if let Some(recording) = self.recording.as_mut() {
            recording.used.insert(id);
        }
    }

    fn launches(&mut self, function: &Function) {
        if let Some(recording) = self.recording.as_mut() {
            recording.kernels.push(function.clone());
        }
    }

    /// A buffer of the stream was dropped: `Some` when its memory may be freed now, `None`
    /// when a capture or a graph keeps it.
    fn on_drop(&mut self, allocation: Allocation) -> Option<Allocation> {
        if let Some(recording) = self.recording.as_mut() {
            recording.dropped.push(allocation);
            return None;
        }
        match self.held.get_mut(&allocation.id) {
            Some(held) => {
                held.dropped = Some(allocation);
                None
            }
            None => Some(allocation),
        }
    }

    /// A graph of the stream is going: `Some` when it may be destroyed now, `None` when a
    /// capture is running (it is destroyed once that ended).
    fn retire(&mut self, parts: GraphParts) -> Option<GraphParts> {
        match self.recording.as_mut() {
            Some(recording) => {
                recording.graphs.push(parts);
                None
            }
            None => Some(parts),
        }
    }

    /// Ends the recording. When `keep`, the new graph holds what the recorded work used; the
    /// frees returned still go through [`Book::on_drop`] (an older graph may hold them).
    fn finish(&mut self, keep: bool) -> Ended {
        let Some(recording) = self.recording.take() else { return Ended::default() };
        let mut ended = Ended { graphs: recording.graphs, kernels: recording.kernels, ..Ended::default() };
        if keep {
            for &id in &recording.used {
                self.held.entry(id).or_insert(Held { graphs: 0, dropped: None }).graphs += 1;
            }
            ended.holds = recording.used.into_iter().collect();
        }
        for allocation in recording.dropped {
            match self.held.get_mut(&allocation.id) {
                Some(held) if ended.holds.contains(&allocation.id) => held.dropped = Some(allocation),
                _ => ended.frees.push(allocation),
            }
        }
        ended
    }

    /// A graph let go of `holds`: the allocations no graph holds any more whose buffers are gone.
    fn release(&mut self, holds: &[AllocationId]) -> Vec<Allocation> {
        let mut frees = Vec::new();
        for id in holds {
            let Some(held) = self.held.get_mut(id) else { continue };
            held.graphs -= 1;
            if held.graphs == 0 {
                frees.extend(self.held.remove(id).and_then(|h| h.dropped));
            }
        }
        frees
    }
}

/// Why an operation from another thread is refused while a stream records.
const OTHER_THREAD: &str = "another thread is recording a graph on it, and work queued from this thread would be \
                            recorded into that graph without the recording knowing its buffers";

/// A stream's capture state: whether it records, and which allocations its graphs hold.
#[derive(Debug, Default)]
pub(crate) struct CaptureState {
    /// The thread recording on the stream, if one is. Every operation on the stream holds a
    /// read lock while it checks this and queues its work (a recursive lock: an operation may
    /// call another); a capture starts and ends under the write lock.
    gate: RecursiveRwLock<Option<ThreadId>>,
    book: Mutex<Book>,
    /// The stream's open forks ([`crate::fork`]); changed from "none" only under the gate's
    /// write lock, so a capture and a fork never overlap.
    lending: Mutex<Lending>,
}

/// Held while capturable work is queued; see [`CaptureState::enqueue`].
pub(crate) struct Enqueue<'s> {
    _gate: RecursiveRwLockReadGuard<'s, Option<ThreadId>>,
    /// Set when the work is being recorded.
    book: Option<&'s Mutex<Book>>,
}

impl Enqueue<'_> {
    /// The queued work uses `allocation` (a buffer's; `None` for an empty buffer).
    pub(crate) fn uses(&self, allocation: Option<AllocationId>) {
        if let (Some(book), Some(id)) = (self.book, allocation) {
            book.lock().uses(id);
        }
    }

    /// The queued work launches `function`: a graph keeps its module loaded.
    pub(crate) fn launches(&self, function: &Function) {
        if let Some(book) = self.book {
            book.lock().launches(function);
        }
    }
}

/// Held while work that cannot be recorded is queued; see [`CaptureState::outside`].
pub(crate) type Outside<'s> = RecursiveRwLockReadGuard<'s, Option<ThreadId>>;

impl CaptureState {
    /// Before capturable work is queued on stream `stream`: refused when another thread
    /// records on it. Keep the guard until the work is queued.
    pub(crate) fn enqueue(&self, stream: u64, operation: &'static str) -> Result<Enqueue<'_>> {
        let gate = self.gate.read();
        let recording = match *gate {
            None => false,
            Some(thread) if thread == std::thread::current().id() => true,
            Some(_) => return Err(Error::CaptureRefused { stream, operation, reason: OTHER_THREAD }),
        };
        Ok(Enqueue { _gate: gate, book: recording.then_some(&self.book) })
    }

    /// Before work that cannot be recorded: refused, for `reason`, while the stream records.
    /// Keep the guard until the work is queued.
    pub(crate) fn outside(
        &self,
        stream: u64,
        operation: &'static str,
        reason: &'static str,
    ) -> Result<Outside<'_>> {
        let gate = self.gate.read();
        match *gate {
            None => Ok(gate),
            Some(_) => Err(Error::CaptureRefused { stream, operation, reason }),
        }
    }

    pub(crate) fn is_recording(&self) -> bool {
        self.gate.read().is_some()
    }

    /// Opens a fork of stream `stream` with stream `partner` on `thread`: refused, for
    /// `reason`, while the stream records.
    pub(crate) fn open_fork(
        &self,
        stream: u64,
        partner: u64,
        thread: ThreadId,
        reason: &'static str,
    ) -> Result<()> {
        let gate = self.gate.write();
        if gate.is_some() {
            return Err(Error::CaptureRefused {
                stream,
                operation: "forking it with another stream",
                reason,
            });
        }
        self.lending.lock().open(partner, thread);
        Ok(())
    }

    /// Closes a fork opened by [`CaptureState::open_fork`]; the allocations whose frees waited
    /// for it (once no fork of the stream is left open).
    pub(crate) fn close_fork(&self, partner: u64, thread: ThreadId) -> Vec<Allocation> {
        self.lending.lock().close(partner, thread)
    }

    /// Whether the current thread runs a fork of this stream with stream `partner`.
    pub(crate) fn lends_to(&self, partner: u64) -> bool {
        self.lending.lock().lends_to(partner)
    }
}

impl Stream {
    /// Whether a graph is being recorded on this stream now (by any thread).
    pub fn is_capturing(&self) -> bool {
        self.capture_state().is_recording()
    }

    /// A buffer of this stream was dropped: frees `allocation` in stream order, unless a
    /// capture or a graph keeps it (then the capture's end or the last graph frees it).
    pub(crate) fn release_allocation(&self, allocation: Allocation) {
        let state = self.capture_state();
        // Held across the free, so no capture starts between the check and the free.
        let _gate = state.gate.read();
        // While the stream is forked, the other stream may still use it: freed after the join.
        let Some(allocation) = state.lending.lock().defer(allocation) else { return };
        let free = state.book.lock().on_drop(allocation);
        if let Some(allocation) = free {
            crate::buffer::free_allocation(self, allocation);
        }
    }

    /// Destroys a graph of this stream (once its replays ran) and frees what only it held;
    /// while the stream records, after the capture ended.
    fn retire_graph(&self, parts: GraphParts) {
        let state = self.capture_state();
        let _gate = state.gate.read();
        let Some(parts) = state.book.lock().retire(parts) else { return };
        let driver = self.backend().driver();
        if let Some(exec) = parts.exec {
            // Replays may still be queued: CUDA frees a running instance after it finishes,
            // but HIP documents no such thing, so wait for them (only this stream's work).
            if let Err(e) = self.synchronize() {
                tracing::error!(stream = self.id(), error = %e, "waiting for a graph's replays failed");
            }
            // SAFETY: the instance came from graph_instantiate on this device, is owned by these
            // parts alone, and its replays have completed.
            if let Err(e) = unsafe { driver.graph_exec_destroy(exec) } {
                tracing::error!(stream = self.id(), error = %e, "destroying a graph instance failed");
            }
        }
        // SAFETY: the graph came from stream_end_capture on this device and is owned by these
        // parts alone; instances do not need it.
        if let Err(e) = unsafe { driver.graph_destroy(parts.graph) } {
            tracing::error!(stream = self.id(), error = %e, "destroying a graph failed");
        }
        // Only now may the kernels' modules unload.
        drop(parts.kernels);
        let frees = state.book.lock().release(&parts.holds);
        for allocation in frees {
            crate::buffer::free_allocation(self, allocation);
        }
    }

    /// Records the work `record` queues on this stream into a [`Graph`] instead of running it.
    ///
    /// Whatever `record` borrows stays borrowed while the graph lives (see the module docs for
    /// why that and the runtime's own bookkeeping make replays sound). An error or a panic in
    /// `record` ends the capture, destroys the partial graph and is passed on; the stream is
    /// usable afterwards. Operations that cannot be recorded fail inside `record` with
    /// [`Error::CaptureRefused`]; on a HIP library without graphs the capture fails with
    /// [`Error::GraphsUnsupported`].
    ///
    /// `record` may fail with any error a runtime [`Error`] converts into (a launcher's own
    /// error type, say); the capture's errors come back in that type.
    ///
    /// ```no_run
    /// # fn main() -> rocm_runtime::Result<()> {
    /// # let stream = rocm_runtime::Backend::open(0)?.create_stream()?;
    /// let input = stream.alloc_zeroed::<f32>(4)?;
    /// let mut output = stream.alloc::<f32>(4)?;
    /// let graph = stream.capture(|_| output.copy_from_device(&input))?;
    /// input.write_from_host(&[1.0; 4])?; // the contents only: the graph borrows `input`
    /// graph.launch()?;
    /// drop(graph); // ends the borrows
    /// assert_eq!(output.to_vec()?, [1.0; 4]);
    /// # Ok(()) }
    /// ```
    pub fn capture<'a, E, F>(&self, record: F) -> Result<Graph<'a>, E>
    where
        E: From<Error>,
        F: FnOnce(&Stream) -> Result<(), E> + 'a,
    {
        // A `Box` of a zero-sized value allocates nothing: this is a `&'static mut ()` for free.
        self.capture_with(Box::leak(Box::new(())), move |stream, _: &mut ()| record(stream))
    }

    /// As [`Stream::capture`], lending the graph `state`: `record` gets it mutably, and the
    /// graph keeps the borrow and gives it back shared ([`Graph::state`]), so outputs can be
    /// read and inputs written ([`crate::DeviceBuffer::write_from_host`]) between replays, but
    /// no buffer in it can be replaced or freed while the graph lives.
    pub fn capture_with<'a, S, E, F>(&self, state: &'a mut S, record: F) -> Result<Graph<'a, S>, E>
    where
        S: ?Sized,
        E: From<Error>,
        F: FnOnce(&Stream, &mut S) -> Result<(), E> + 'a,
    {
        let capture = self.capture_state();
        let driver = self.backend().driver();
        let _span = tracing::debug_span!("capture", stream = self.id()).entered();
        {
            let mut gate = capture.gate.write();
            if gate.is_some() {
                return Err(Error::CaptureRefused {
                    stream: self.id(),
                    operation: "starting another capture",
                    reason: "a stream records one graph at a time",
                }
                .into());
            }
            if capture.lending.lock().is_open() {
                return Err(Error::CaptureRefused {
                    stream: self.id(),
                    operation: "starting a capture",
                    reason: "the stream is forked with another (`Stream::fork`), whose buffers a graph could \
                             not hold; capture before or after the fork",
                }
                .into());
            }
            // Before the driver's capture starts, so a buffer dropped meanwhile waits for it.
            capture.book.lock().begin();
            if let Err(e) = driver.stream_begin_capture(self.raw()) {
                let ended = capture.book.lock().finish(false);
                drop(gate);
                self.settle(ended);
                return Err(e.into());
            }
            *gate = Some(std::thread::current().id());
        }
        let recorded = catch_unwind(AssertUnwindSafe(|| record(self, &mut *state)));
        let (graph, mut ended) = {
            let mut gate = capture.gate.write();
            let graph = driver.stream_end_capture(self.raw());
            *gate = None;
            let keep = matches!((&recorded, &graph), (Ok(Ok(())), Ok(_)));
            (graph, capture.book.lock().finish(keep))
        };
        // Ending a capture ends it whatever happened inside (both vendors say so); checked
        // where it costs nothing that matters.
        debug_assert!(
            !driver.stream_is_capturing(self.raw()).unwrap_or(false),
            "stream {} still capturing after its capture ended",
            self.id()
        );
        let holds = std::mem::take(&mut ended.holds);
        let kernels = std::mem::take(&mut ended.kernels);
        self.settle(ended);
        let parts = graph.map(|graph| GraphParts { graph, exec: None, holds, kernels });
        let failed = |parts: Result<GraphParts, Error>| {
            if let Ok(parts) = parts {
                self.retire_graph(parts);
            }
        };
        match recorded {
            Err(panic) => {
                failed(parts);
                resume_unwind(panic)
            }
            Ok(Err(e)) => {
                failed(parts);
                return Err(e);
            }
            Ok(Ok(())) => {}
        }
        let mut parts = parts?;
        match driver.graph_instantiate(parts.graph) {
            Ok(exec) => parts.exec = Some(exec),
            Err(e) => {
                self.retire_graph(parts);
                return Err(e.into());
            }
        }
        Ok(Graph { stream: self.clone(), parts: Some(parts), state, _not_sync: PhantomData })
    }

    /// Queues the frees and graph destructions that waited for a capture to end.
    fn settle(&self, ended: Ended) {
        for allocation in ended.frees {
            self.release_allocation(allocation);
        }
        for parts in ended.graphs {
            self.retire_graph(parts);
        }
    }
}

/// Work recorded on a stream by [`Stream::capture`] or [`Stream::capture_with`], replayed by
/// [`Graph::launch`]. `'a` is the lifetime of everything the recording borrowed, and `S` the
/// state lent to it (`()` for [`Stream::capture`]).
///
/// Dropping a graph waits for its stream (so for its replays), then destroys it and frees the
/// memory of buffers dropped while it held them.
///
/// The borrow checker keeps what a graph recorded alive and in place:
///
/// ```compile_fail,E0505
/// # fn main() -> rocm_runtime::Result<()> {
/// # let stream = rocm_runtime::Backend::open(0)?.create_stream()?;
/// let input = stream.alloc_zeroed::<f32>(4)?;
/// let mut output = stream.alloc::<f32>(4)?;
/// let graph = stream.capture(|_| output.copy_from_device(&input))?;
/// drop(input); // error: `input` is borrowed by the graph
/// graph.launch()?;
/// # Ok(()) }
/// ```
///
/// ```compile_fail,E0505
/// # fn main() -> rocm_runtime::Result<()> {
/// # let stream = rocm_runtime::Backend::open(0)?.create_stream()?;
/// let input = stream.alloc_zeroed::<f32>(4)?;
/// let mut output = stream.alloc::<f32>(4)?;
/// let graph = stream.capture(|_| output.copy_from_device(&input))?;
/// let moved = input; // error: `input` is borrowed by the graph
/// graph.launch()?;
/// # drop(moved);
/// # Ok(()) }
/// ```
///
/// ```compile_fail,E0502
/// # fn main() -> rocm_runtime::Result<()> {
/// # let stream = rocm_runtime::Backend::open(0)?.create_stream()?;
/// let mut input = stream.alloc_zeroed::<f32>(4)?;
/// let mut output = stream.alloc::<f32>(4)?;
/// let graph = stream.capture(|_| output.copy_from_device(&input))?;
/// input = stream.alloc_zeroed::<f32>(4)?; // error: `input` is borrowed by the graph
/// input.fill(1.0)?;
/// graph.launch()?;
/// # Ok(()) }
/// ```
///
/// ```compile_fail,E0499
/// # fn main() -> rocm_runtime::Result<()> {
/// # let stream = rocm_runtime::Backend::open(0)?.create_stream()?;
/// let input = stream.alloc_zeroed::<f32>(4)?;
/// let mut output = stream.alloc::<f32>(4)?;
/// let graph = stream.capture(|_| output.copy_from_device(&input))?;
/// output.fill(0.0)?; // error: the graph borrows `output` mutably
/// graph.launch()?;
/// # Ok(()) }
/// ```
///
/// A graph is `Send` and not `Sync`:
///
/// ```compile_fail
/// fn sync<T: Sync>() {}
/// sync::<rocm_runtime::Graph<'static>>();
/// ```
pub struct Graph<'a, S: ?Sized = ()> {
    stream: Stream,
    /// Taken by `Drop`.
    parts: Option<GraphParts>,
    state: &'a mut S,
    /// Not `Sync`: one instance is launched from one thread at a time.
    _not_sync: PhantomData<Cell<()>>,
}

impl<S: ?Sized> std::fmt::Debug for Graph<'_, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let holds = self.parts.as_ref().map_or(0, |p| p.holds.len());
        f.debug_struct("Graph").field("stream", &self.stream.id()).field("allocations", &holds).finish()
    }
}

impl<S: ?Sized> Graph<'_, S> {
    /// Queues one replay on the stream the graph was recorded on, after the work queued there
    /// before; later work there runs after it.
    pub fn launch(&self) -> Result<()> {
        let parts = self.parts.as_ref().expect("a graph has its parts until dropped");
        let exec = parts.exec.expect("a graph is instantiated");
        let _outside = self.stream.capture_state().outside(
            self.stream.id(),
            "replaying a graph",
            "a replay recorded into another graph would need that graph to keep this one's \
             allocations alive, which the runtime does not track",
        )?;
        let _span = tracing::trace_span!("graph_launch", stream = self.stream.id()).entered();
        // SAFETY: every allocation the recorded work touches is in `parts.holds`, and the
        // stream's capture book keeps each allocated until this graph is retired, which waits
        // for the stream (so for this replay) before releasing them.
        self.stream.queue_unnamed_kernels(|| unsafe {
            self.stream.backend().driver().graph_launch(exec, self.stream.raw())
        })
    }

    /// The state lent to the recording, shared: read outputs, write inputs' contents.
    pub fn state(&self) -> &S {
        self.state
    }

    /// The stream the graph was recorded on, which replays it.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }
}

impl<S: ?Sized> Drop for Graph<'_, S> {
    fn drop(&mut self) {
        if let Some(parts) = self.parts.take() {
            self.stream.retire_graph(parts);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn allocation(n: u64) -> Allocation {
        Allocation::for_tests(n)
    }

    #[test]
    fn outside_captures_and_graphs_drops_free_at_once() {
        let mut book = Book::default();
        assert_eq!(book.on_drop(allocation(1)), Some(allocation(1)));
    }

    #[test]
    fn a_kept_capture_holds_what_it_used_until_its_last_graph_goes() {
        let mut book = Book::default();
        book.begin();
        book.uses(allocation(1).id);
        book.uses(allocation(2).id);
        // Dropped during the capture: 2 was used (the graph keeps it), 3 was not (freed later).
        assert_eq!(book.on_drop(allocation(2)), None);
        assert_eq!(book.on_drop(allocation(3)), None);
        let first = book.finish(true);
        assert_eq!(first.frees, [allocation(3)]);
        let mut holds = first.holds.clone();
        holds.sort_by_key(|id| format!("{id:?}"));
        assert_eq!(holds, [allocation(1).id, allocation(2).id]);
        // A second graph uses 1 too.
        book.begin();
        book.uses(allocation(1).id);
        let second = book.finish(true);
        // 1's buffer goes while both graphs hold it; neither the drop nor the first graph frees it.
        assert_eq!(book.on_drop(allocation(1)), None);
        assert_eq!(book.release(&first.holds), [allocation(2)]);
        assert_eq!(book.release(&second.holds), [allocation(1)]);
        assert!(book.held.is_empty());
        assert_eq!(book.on_drop(allocation(4)), Some(allocation(4)));
    }

    #[test]
    fn a_failed_capture_holds_nothing_and_frees_what_was_dropped() {
        let mut book = Book::default();
        book.begin();
        book.uses(allocation(1).id);
        assert_eq!(book.on_drop(allocation(1)), None);
        let ended = book.finish(false);
        assert!(ended.holds.is_empty() && book.held.is_empty());
        assert_eq!(ended.frees, [allocation(1)]);
        assert!(book.recording.is_none());
    }

    #[test]
    fn graphs_dropped_during_a_capture_wait_for_its_end() {
        let mut book = Book::default();
        let parts = |n| GraphParts {
            graph: RawGraph(n as *mut std::ffi::c_void),
            exec: None,
            holds: vec![allocation(n).id],
            kernels: Vec::new(),
        };
        assert!(book.retire(parts(1)).is_some());
        book.begin();
        assert!(book.retire(parts(2)).is_none());
        let ended = book.finish(true);
        assert_eq!(ended.graphs.len(), 1);
        assert_eq!(ended.graphs[0].holds, [allocation(2).id]);
    }

    #[test]
    fn the_recording_thread_records_and_others_are_refused() {
        let state = CaptureState::default();
        // Not recording: everything passes.
        assert!(state.enqueue(7, "a kernel launch").is_ok_and(|e| e.book.is_none()));
        assert!(state.outside(7, "allocating", "why").is_ok());
        *state.gate.write() = Some(std::thread::current().id());
        state.book.lock().begin();
        {
            let enqueue = state.enqueue(7, "a kernel launch").unwrap();
            enqueue.uses(Some(allocation(5).id));
            enqueue.uses(None);
        }
        assert!(state.book.lock().recording.as_ref().unwrap().used.contains(&allocation(5).id));
        let refused = state.outside(7, "allocating", "memory would be freed before replay").unwrap_err();
        assert_eq!(
            refused.to_string(),
            "stream 7 is recording a graph, so allocating is refused: memory would be freed before replay"
        );
        assert!(state.is_recording());
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let refused = state.enqueue(7, "a kernel launch").err().unwrap();
                let text = refused.to_string();
                assert!(
                    text.starts_with(
                        "stream 7 is recording a graph, so a kernel launch is refused: another thread"
                    ),
                    "{text}"
                );
            });
        });
        // Reads are recursive: an operation may call another while it holds the gate.
        let outer = state.enqueue(7, "a memset").unwrap();
        let inner = state.enqueue(7, "a memset").unwrap();
        drop((outer, inner));
    }
}
