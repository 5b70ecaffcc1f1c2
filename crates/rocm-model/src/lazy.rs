//! Lazy upload: tensors stay in the file mapping until first used on the device.
//!
//! A [`DeviceTensors`] belongs to one [`Stream`], as a [`DeviceBuffer`] does: the buffers it
//! uploads are allocated (through the runtime's ledger and memory guard) and ordered on that
//! stream, so kernels launched on it may use them directly. Each tensor is uploaded at most
//! once and cached until evicted. Several threads may share one `DeviceTensors`; uploads are
//! serialised by its lock, so two threads asking for the same tensor never upload it twice.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use rocm_runtime::{Bytes, DeviceBuffer, Stream};

use crate::gguf::{GgufError, GgufFile, Result};

/// The tensors of one [`GgufFile`] that have been uploaded to one stream's device.
pub struct DeviceTensors {
    file: Arc<GgufFile>,
    stream: Stream,
    resident: Mutex<HashMap<String, Arc<DeviceBuffer<u8>>>>,
}

impl std::fmt::Debug for DeviceTensors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let resident = self.resident.lock();
        f.debug_struct("DeviceTensors")
            .field("file", &self.file.path())
            .field("stream", &self.stream.id())
            .field("resident", &resident.len())
            .finish()
    }
}

impl DeviceTensors {
    /// Nothing is uploaded until asked for.
    pub fn new(file: Arc<GgufFile>, stream: Stream) -> Self {
        DeviceTensors { file, stream, resident: Mutex::new(HashMap::new()) }
    }

    pub fn file(&self) -> &Arc<GgufFile> {
        &self.file
    }

    /// The stream the buffers belong to.
    pub fn stream(&self) -> &Stream {
        &self.stream
    }

    /// The device copy of tensor `name` (its raw bytes, as in the file), uploading it the
    /// first time. A refusal by the memory guard is [`GgufError::Device`] naming the tensor and
    /// its size, with the guard's figures (requested, budget, in use, free, total).
    #[track_caller]
    pub fn get_or_upload(&self, name: &str) -> Result<Arc<DeviceBuffer<u8>>> {
        let info = self.file.tensor(name)?;
        let mut resident = self.resident.lock();
        if let Some(buffer) = resident.get(name) {
            return Ok(buffer.clone());
        }
        let bytes = self.file.tensor_bytes(info);
        let _span = tracing::debug_span!("upload_tensor", tensor = name, bytes = bytes.len()).entered();
        // Called here, not in a closure, so the ledger records the caller's location.
        let buffer = self.stream.upload(bytes).map_err(|source| GgufError::Device {
            tensor: name.to_string(),
            bytes: info.n_bytes(),
            source: Box::new(source),
        })?;
        let buffer = Arc::new(buffer);
        resident.insert(name.to_string(), buffer.clone());
        Ok(buffer)
    }

    /// Uploads every tensor not yet resident. Checks first that they fit what the memory guard
    /// has left ([`GgufError::ModelOverBudget`] otherwise, nothing uploaded); if an upload
    /// fails anyway (another user allocated meanwhile), the tensors this call uploaded are
    /// evicted again before the error is returned.
    #[track_caller]
    pub fn upload_all(&self) -> Result<()> {
        let missing: Vec<_> = {
            let resident = self.resident.lock();
            self.file.tensors().iter().filter(|t| !resident.contains_key(t.name())).collect()
        };
        let needed: u64 = missing.iter().map(|t| t.n_bytes()).sum();
        let ledger = self.stream.backend().ledger();
        let (budget, in_use) = (ledger.budget(), ledger.in_use());
        if needed > budget.saturating_sub(in_use) {
            return Err(GgufError::ModelOverBudget { tensors: missing.len(), needed, budget, in_use });
        }
        let mut uploaded = Vec::new();
        for t in missing {
            match self.get_or_upload(t.name()) {
                Ok(_) => uploaded.push(t.name()),
                Err(e) => {
                    uploaded.iter().for_each(|name| {
                        self.evict(name);
                    });
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Whether tensor `name` is on the device.
    pub fn is_resident(&self, name: &str) -> bool {
        self.resident.lock().contains_key(name)
    }

    /// Drops the cached device copy of `name`; returns whether there was one. The memory is
    /// freed (stream-ordered, after the work queued on it) once no caller holds the buffer.
    pub fn evict(&self, name: &str) -> bool {
        self.resident.lock().remove(name).is_some()
    }

    /// Evicts every tensor; returns how many there were.
    pub fn evict_all(&self) -> usize {
        let mut resident = self.resident.lock();
        let n = resident.len();
        resident.clear();
        n
    }

    /// Tensors on the device.
    pub fn resident_count(&self) -> usize {
        self.resident.lock().len()
    }

    /// Bytes of the tensors on the device.
    pub fn resident_bytes(&self) -> u64 {
        self.resident.lock().values().map(|b| b.size_bytes() as u64).sum()
    }

    /// A one-line summary for logs.
    pub fn summary(&self) -> String {
        format!(
            "{} of {} tensors resident ({})",
            self.resident_count(),
            self.file.tensors().len(),
            Bytes(self.resident_bytes())
        )
    }
}
