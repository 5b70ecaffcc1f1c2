//! [`Stream::fork`]: two streams of one device that work side by side on each other's buffers.
//!
//! A buffer belongs to one stream, and everything it takes part in is queued there: that is
//! what orders its uses and its free without any tracking. Overlapping two kinds of work (a
//! memory-bound dequantisation next to a compute-bound GEMM, say) needs two streams touching
//! the same buffers, so the rule is widened for the length of a closure:
//!
//! ```no_run
//! # fn main() -> rocm_runtime::Result<()> {
//! # let backend = rocm_runtime::Backend::open(0)?;
//! # let blas = rocm_runtime::Blas::open(&backend)?;
//! use rocm_runtime::GemmDesc;
//! let (main, side) = (backend.create_stream()?, backend.create_stream()?);
//! let (a, b) = (main.upload(&[1.0f32; 64 * 64])?, main.upload(&[0.5f32; 64 * 64])?);
//! let mut c = side.alloc::<f32>(64 * 64)?;
//! main.fork(&side, || -> rocm_runtime::Result<()> {
//!     blas.gemm(&GemmDesc::new(64, 64, 64), &a, &b, &mut c)?; // on `side`, `main`'s inputs
//!     let done = side.record_event()?;
//!     main.wait_event(&done)?; // what `main` queues from here on comes after the product
//!     Ok(())
//! })??;
//! # Ok(()) }
//! ```
//!
//! # Soundness
//!
//! What must never happen is a buffer's memory being freed, and reused, while work queued on
//! the other stream still uses it. [`Stream::fork`] keeps that from happening:
//!
//! 1. **Joined at both ends.** Before `work` runs, each stream waits for the work queued on
//!    the other so far; after it returns (or panics), the same again. So work queued inside is
//!    ordered after everything before the fork and before everything after it, on both
//!    streams.
//! 2. **Frees wait for the join.** A buffer of either stream dropped while the fork is open
//!    (on any thread) is freed only after the closing join, by then ordered after every use
//!    either stream queued.
//! 3. **Only the forking thread borrows across.** A launch (kernel or vendor BLAS) on one stream
//!    may use the other's buffers only from the thread running `work`, so every such use is
//!    queued before the closing join; anywhere else it is the usual
//!    [`crate::Error::StreamMismatch`].
//! 4. **No graphs meanwhile.** A graph would hold the other stream's allocations without that
//!    stream knowing; a fork is refused while either stream records, and a capture is refused
//!    on a stream while it is forked. (The joins' events cannot be recorded into a graph
//!    either.)
//!
//! If the closing join fails (a driver error), both streams are synchronised instead; if that
//! fails too, the buffers dropped during the fork are never freed: leaked memory, never memory
//! reused under a running kernel.
//!
//! Ordering *inside* the fork is the caller's: a buffer written on one stream and read on the
//! other needs an event between them ([`Stream::record_event`], [`Stream::wait_event`]),
//! exactly as two kernels on two streams would. Without one the read sees old or partly
//! written data, device memory of a plain-data type (garbage values, never Rust undefined
//! behaviour); with one it sees everything written before the event.

use std::thread::ThreadId;

use crate::error::{Error, Result};
use crate::graph::Allocation;
use crate::stream::Stream;

/// A stream's open forks: its partners (each with the thread that may use the pair's buffers
/// across), and the allocations of its buffers dropped while any fork was open.
#[derive(Debug, Default)]
pub(crate) struct Lending {
    partners: Vec<(u64, ThreadId)>,
    deferred: Vec<Allocation>,
}

impl Lending {
    /// Whether a buffer of this stream dropped now must wait for a join; takes it if so.
    pub(crate) fn defer(&mut self, allocation: Allocation) -> Option<Allocation> {
        if self.partners.is_empty() {
            return Some(allocation);
        }
        self.deferred.push(allocation);
        None
    }

    pub(crate) fn is_open(&self) -> bool {
        !self.partners.is_empty()
    }

    /// Whether the current thread runs a fork of this stream with stream `partner`.
    pub(crate) fn lends_to(&self, partner: u64) -> bool {
        let me = std::thread::current().id();
        self.partners.iter().any(|&(p, t)| p == partner && t == me)
    }

    pub(crate) fn open(&mut self, partner: u64, thread: ThreadId) {
        self.partners.push((partner, thread));
    }

    /// Ends one fork with `partner`; the deferred allocations once no fork is left.
    pub(crate) fn close(&mut self, partner: u64, thread: ThreadId) -> Vec<Allocation> {
        if let Some(i) = self.partners.iter().position(|&entry| entry == (partner, thread)) {
            self.partners.swap_remove(i);
        }
        if self.partners.is_empty() { std::mem::take(&mut self.deferred) } else { Vec::new() }
    }
}

/// Why [`Stream::fork`] is refused on a recording stream.
const FORK_IN_CAPTURE: &str = "a graph would hold the other stream's buffers without it knowing, and the \
                               joins cannot be recorded; fork before or after the capture";

impl Stream {
    /// Runs `work` with this stream and `other` (of the same device) forked: joined before and
    /// after it, and, on the calling thread, each stream's launches may use the other's
    /// buffers. Buffers of either dropped meanwhile are freed after the closing join. See the
    /// [module documentation](crate::fork) for the rules and why they are sound.
    ///
    /// Refused while either stream records a graph. Returns `work`'s value, or the error of
    /// the opening join (then `work` has not run) or of the closing one (then both streams
    /// were synchronised instead, or, if even that failed, the error says so).
    pub fn fork<R>(&self, other: &Stream, work: impl FnOnce() -> R) -> Result<R> {
        if self.same_as(other) {
            return Ok(work());
        }
        if !std::sync::Arc::ptr_eq(self.backend(), other.backend()) {
            return Err(Error::InvalidArgument("forking two streams of different devices".into()));
        }
        let thread = std::thread::current().id();
        self.capture_state().open_fork(self.id(), other.id(), thread, FORK_IN_CAPTURE)?;
        if let Err(e) = other.capture_state().open_fork(other.id(), self.id(), thread, FORK_IN_CAPTURE) {
            self.close_fork(other, thread);
            return Err(e);
        }
        let fork = OpenFork { a: self, b: other, thread };
        self.join(other)?; // on error, `fork`'s drop closes it (nothing queued yet needs more)
        let value = work();
        let closed = fork.close();
        closed.map(|()| value)
    }

    /// Ends this stream's fork with `other` and frees what waited for it.
    fn close_fork(&self, other: &Stream, thread: ThreadId) {
        for allocation in self.capture_state().close_fork(other.id(), thread) {
            self.release_allocation(allocation);
        }
    }
}

/// An open fork, closed (joined, then deferred frees released) when dropped: also on a panic in
/// the closure.
struct OpenFork<'s> {
    a: &'s Stream,
    b: &'s Stream,
    thread: ThreadId,
}

impl OpenFork<'_> {
    fn close(self) -> Result<()> {
        let result = self.finish();
        std::mem::forget(self);
        result
    }

    /// The closing join (or, when its events fail, both streams synchronised), then the frees
    /// that waited for it. When neither works, nothing orders the two streams, and the buffers
    /// dropped during the fork stay allocated for good (the fork is never closed).
    fn finish(&self) -> Result<()> {
        self.a
            .join(self.b)
            .or_else(|e| {
                tracing::warn!(error = %e, "the closing join of a fork failed; synchronising both streams");
                self.a.synchronize().and_then(|()| self.b.synchronize())
            })
            .map(|()| {
                self.a.close_fork(self.b, self.thread);
                self.b.close_fork(self.a, self.thread);
            })
    }
}

impl Drop for OpenFork<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.finish() {
            tracing::error!(error = %e, "a fork could not be joined; its dropped buffers are leaked");
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
    fn frees_wait_until_the_last_fork_of_a_stream_closes() {
        let me = std::thread::current().id();
        let mut lending = Lending::default();
        assert_eq!(lending.defer(allocation(1)), Some(allocation(1)), "no fork: freed at once");
        lending.open(7, me);
        lending.open(9, me);
        assert!(lending.is_open());
        assert_eq!(lending.defer(allocation(2)), None);
        assert!(lending.close(7, me).is_empty(), "the fork with stream 9 still runs");
        assert_eq!(lending.defer(allocation(3)), None);
        assert_eq!(lending.close(9, me), [allocation(2), allocation(3)]);
        assert!(!lending.is_open());
        assert_eq!(lending.defer(allocation(4)), Some(allocation(4)));
    }

    #[test]
    fn only_the_forking_thread_borrows_across() {
        let mut lending = Lending::default();
        lending.open(7, std::thread::current().id());
        assert!(lending.lends_to(7));
        assert!(!lending.lends_to(8), "another stream");
        std::thread::scope(|s| {
            s.spawn(|| assert!(!lending.lends_to(7), "another thread"));
        });
    }
}
