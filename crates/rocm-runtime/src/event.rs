//! Events: points in a stream to wait on or to time between.

use std::sync::Arc;

use crate::backend::Backend;
use crate::driver::RawEvent;
use crate::error::{Error, Result};
use crate::stream::Stream;

/// A driver event. Created recorded by [`Stream::record_event`].
pub struct Event {
    backend: Arc<Backend>,
    raw: RawEvent,
    timing: bool,
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Event").field("timing", &self.timing).finish()
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: this event was created on this backend and is owned by this value alone.
        if let Err(e) = unsafe { self.backend.driver().event_destroy(self.raw) } {
            tracing::error!(error = %e, "destroying an event failed");
        }
    }
}

impl Event {
    pub(crate) fn new(backend: Arc<Backend>, timing: bool) -> Result<Self> {
        let raw = backend.driver().event_create(timing)?;
        Ok(Event { backend, raw, timing })
    }

    pub(crate) fn raw(&self) -> RawEvent {
        self.raw
    }

    pub(crate) fn record(&self, stream: &Stream) -> Result<()> {
        self.check_backend(stream.backend())?;
        let _outside = stream.capture_state().outside(
            stream.id(),
            "recording an event",
            "an event recorded in a capture marks no work that has run, so waiting on it or timing \
             it would mean nothing",
        )?;
        self.backend.driver().event_record(self.raw, stream.raw())
    }

    pub(crate) fn check_backend(&self, backend: &Arc<Backend>) -> Result<()> {
        if Arc::ptr_eq(&self.backend, backend) {
            Ok(())
        } else {
            Err(Error::InvalidArgument("the event belongs to another device".into()))
        }
    }

    /// Blocks until the work before this event has completed.
    pub fn synchronize(&self) -> Result<()> {
        self.backend.driver().event_synchronize(self.raw)
    }

    /// `true` when the work before this event has completed (does not block).
    pub fn is_complete(&self) -> Result<bool> {
        crate::driver::ready(self.backend.driver().event_query(self.raw))
    }

    /// Milliseconds of device time from `start` to this event; waits for this event first.
    pub fn elapsed_ms_since(&self, start: &Event) -> Result<f32> {
        if !self.timing || !start.timing {
            return Err(Error::InvalidArgument("timing needs two timing events".into()));
        }
        start.check_backend(&self.backend)?;
        self.synchronize()?;
        self.backend.driver().event_elapsed_ms(start.raw, self.raw)
    }
}
