//! [`Gpu`]: the adapter, device and queue with the facts wgtile reads from
//! them, and the device-level work every layer above shares: buffers,
//! tensors, submission inside error scopes, read-back. Knows no op and makes
//! no choice.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::ThreadId;

use super::pool::{Bindings, Pool, PooledBuffer};
use super::tensor::{BUFFER_ALIGN, check_rank, last_dim, numel};
use super::{AdapterProfile, Dispatch, Tensor};
use crate::dtype::DType;
use crate::error::{Error, Result};

/// One device and its queue, shared by a context and every tensor and plan
/// made on it.
pub(crate) struct Gpu {
    pub(crate) adapter: wgpu::Adapter,
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) profile: AdapterProfile,
    /// A 16-byte storage buffer bound where a kernel declares a binding the
    /// launch does not use (an epilogue term that is off).
    pub(crate) dummy: wgpu::Buffer,
    /// The same for read-write bindings (a buffer may not be bound read-only
    /// and read-write in one dispatch).
    pub(crate) dummy_rw: wgpu::Buffer,
    /// Set by wgpu's device-lost callback; every submission checks it.
    pub(crate) lost: Arc<AtomicBool>,
    /// The open batch (`Context::batch`): the dispatches its thread's ops
    /// recorded instead of submitting.
    pub(crate) batch: Mutex<Option<Batch>>,
    /// Command buffers submitted so far (for tests of batching).
    pub(crate) submissions: std::sync::atomic::AtomicU64,
    /// Free tensor buffers for reuse.
    pub(crate) pool: Arc<Pool>,
    /// Held from taking the pool's pending clears to `queue.submit`, so no
    /// other thread's command buffer can run a reused buffer's work first.
    pub(crate) submit_lock: Mutex<()>,
}

/// Steps (dispatches and clears) a batch records before it submits them
/// and records on (0 would be one submission at the end). On the H200 a
/// 12-layer MLP stack ran 1.21x op by op with 8 at one row and 1.12x at
/// 128, against 0.93x and 0.77x with one submission: the GPU starts while
/// later ops are built (docs/perf/models.md).
pub const BATCH_CHUNK: usize = 8;

fn batch_chunk() -> usize {
    crate::dev::overrides().batch_chunk.unwrap_or(BATCH_CHUNK)
}

/// One step of a batch: a dispatch, or the clear of a reused buffer (bound
/// while recorded, so the pool does not hand the buffer out again before
/// the batch submits).
pub(crate) enum Step {
    Run(Dispatch),
    Clear(Bindings),
}

/// Dispatches recorded by one thread's open batch, submitted together.
pub(crate) struct Batch {
    thread: ThreadId,
    /// Nested `batch` calls inside the outermost one.
    depth: u32,
    steps: Vec<Step>,
}

impl Drop for Gpu {
    /// Waits for submitted work before the device goes: a driver may still
    /// be running it on its own threads (lavapipe compiles each kernel on
    /// its queue thread when it first runs), and a process that exits
    /// meanwhile can crash in the driver's teardown.
    fn drop(&mut self) {
        if let Err(e) = self.wait() {
            log::debug!("dropping the device: {e}");
        }
    }
}

impl Gpu {
    /// Fails with [`Error::InvalidArgument`] unless `ours` and `theirs` are
    /// one device: the check behind every "made on this context" rule
    /// (tensors, plans). `what` names the argument.
    pub(crate) fn check_same(theirs: &Arc<Gpu>, ours: &Arc<Gpu>, what: &str) -> Result<()> {
        if Arc::ptr_eq(theirs, ours) {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "{what} was made on another Context: it works only with the context that made it"
            )))
        }
    }

    /// Fails with [`Error::UnsupportedFeature`] unless the device has `shader-f16`.
    pub(crate) fn require_f16(&self, what: &str) -> Result<()> {
        if self.profile.shader_f16 {
            Ok(())
        } else {
            Err(Error::UnsupportedFeature {
                feature: "shader-f16",
                what: what.to_string(),
            })
        }
    }

    /// Fails with [`Error::DeviceLost`] once the device is gone (driver
    /// reset, `Device::destroy`), so later calls fail fast instead of queueing
    /// work that never runs.
    pub(crate) fn ensure_alive(&self) -> Result<()> {
        // In the browser a GPU error can come after its call returned.
        if let Some((during, message)) = super::scope::take_deferred() {
            return Err(Error::Gpu {
                during: format!("{during} (reported by the next call)"),
                message,
            });
        }
        if self.lost.load(Ordering::Acquire) {
            Err(Error::DeviceLost(format!(
                "the device of {} was lost; create a new Context",
                self.profile.name
            )))
        } else {
            Ok(())
        }
    }

    /// `f` on this thread's open batch; `None` when it has none.
    fn own_batch<R>(&self, f: impl FnOnce(&mut Batch) -> R) -> Option<R> {
        let me = std::thread::current().id();
        let mut batch = self.batch.lock().unwrap_or_else(PoisonError::into_inner);
        batch.as_mut().filter(|b| b.thread == me).map(f)
    }

    /// Whether this thread has a batch open.
    pub(crate) fn in_batch(&self) -> bool {
        self.own_batch(|_| ()).is_some()
    }

    /// Blocks until all submitted work is done (an open batch of this
    /// thread submits what it recorded first).
    pub(crate) fn wait(&self) -> Result<()> {
        self.flush("wait")?;
        self.ensure_alive()?;
        self.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map(|_| ())
            .map_err(|e| Error::DeviceLost(e.to_string()))
    }

    /// Opens a batch on this thread (or a nested one inside it).
    pub(crate) fn begin_batch(&self) {
        let me = std::thread::current().id();
        let mut batch = self.batch.lock().unwrap_or_else(PoisonError::into_inner);
        match batch.as_mut() {
            Some(b) if b.thread == me => b.depth += 1,
            // Another thread's batch is open: this thread's ops submit as
            // they come (`record` only takes the owner's).
            Some(_) => {}
            None => {
                *batch = Some(Batch {
                    thread: me,
                    depth: 1,
                    steps: Vec::new(),
                });
            }
        }
    }

    /// Closes this thread's batch level; the outermost one submits what was
    /// recorded in one command buffer.
    pub(crate) fn end_batch(&self) -> Result<()> {
        // Some(true): the outermost level of this thread's batch.
        let outermost = self.own_batch(|b| {
            b.depth -= 1;
            b.depth == 0
        });
        if outermost != Some(true) {
            return Ok(());
        }
        let result = self.flush("batch");
        *self.batch.lock().unwrap_or_else(PoisonError::into_inner) = None;
        result
    }

    /// Records `dispatches` in this thread's open batch, after the clears
    /// of the buffers this thread's allocations reused: `None` when there
    /// is no batch, else whether the batch now holds a full chunk
    /// ([`BATCH_CHUNK`] steps) to submit.
    fn record(&self, dispatches: &[Dispatch]) -> Option<bool> {
        let chunk = batch_chunk();
        self.own_batch(|b| {
            let clears = self.pool.take_clears(true);
            b.steps.extend(
                clears
                    .into_iter()
                    .map(|c| Step::Clear(Bindings::new(vec![c]))),
            );
            b.steps.extend(dispatches.iter().cloned().map(Step::Run));
            chunk > 0 && b.steps.len() >= chunk
        })
    }

    /// The steps this thread's batch recorded so far, taken out.
    fn take_recorded(&self) -> Vec<Step> {
        self.own_batch(|b| std::mem::take(&mut b.steps))
            .unwrap_or_default()
    }

    /// Submits what this thread's batch recorded so far and the pool's
    /// pending clears (nothing if neither): before a `queue.write_buffer`,
    /// which would otherwise land before them.
    pub(crate) fn flush(&self, during: &str) -> Result<()> {
        self.flush_if(during, self.pool.has_clears())
    }

    /// Submits what this thread's batch recorded so far, if anything, or
    /// when `also` (with the pool's pending clears either way).
    fn flush_if(&self, during: &str, also: bool) -> Result<()> {
        let recorded = self.take_recorded();
        if recorded.is_empty() && !also {
            return Ok(());
        }
        self.submit_recorded(during, recorded, |_| {}).map(|_| ())
    }

    /// Encodes with `f` and submits, turning validation and out-of-memory
    /// errors into `Err` instead of wgpu's uncaptured-error path. Work an
    /// open batch of this thread recorded goes first, in the same command
    /// buffer.
    pub(crate) fn submit(
        &self,
        during: &str,
        f: impl FnOnce(&mut wgpu::CommandEncoder),
    ) -> Result<wgpu::SubmissionIndex> {
        let recorded = self.take_recorded();
        self.submit_recorded(during, recorded, f)
    }

    fn submit_recorded(
        &self,
        during: &str,
        recorded: Vec<Step>,
        f: impl FnOnce(&mut wgpu::CommandEncoder),
    ) -> Result<wgpu::SubmissionIndex> {
        self.ensure_alive()?;
        let device = &self.device;
        let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some(during),
        });
        let submit = self
            .submit_lock
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Every reused buffer not yet cleared is cleared first: its new
        // tensor is used by this command buffer or a later one.
        for buffer in self.pool.take_clears(false) {
            encoder.clear_buffer(&buffer, 0, None);
        }
        encode_steps(&mut encoder, &recorded);
        f(&mut encoder);
        let index = self.queue.submit([encoder.finish()]);
        drop(submit);
        self.submissions.fetch_add(1, Ordering::Relaxed);
        let validation = super::settle(during, validation.pop());
        let oom = super::settle(during, oom.pop());
        match validation.or(oom) {
            Some(e) => Err(Error::gpu(during, e)),
            None => Ok(index),
        }
    }

    /// `queue.write_buffer` inside validation and out-of-memory error scopes.
    /// An open batch's recorded work is submitted first (a write lands
    /// before the next submission's work, so it would jump ahead of it),
    /// and so is the buffer's own pending clear, if any.
    pub(crate) fn write_bytes(
        &self,
        during: &str,
        buffer: &PooledBuffer,
        bytes: &[u8],
    ) -> Result<()> {
        self.flush_if(during, buffer.clear_pending())?;
        self.ensure_alive()?;
        let oom = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        self.queue.write_buffer(buffer, 0, bytes);
        let validation = super::settle(during, validation.pop());
        let oom = super::settle(during, oom.pop());
        match validation.or(oom) {
            Some(e) => Err(Error::gpu(during, e)),
            None => Ok(()),
        }
    }

    /// Copies the first `bytes` bytes of `buffer` (which needs `COPY_SRC`) to the host.
    pub(crate) async fn read_bytes(&self, buffer: &wgpu::Buffer, bytes: u64) -> Result<Vec<u8>> {
        let copy = bytes.next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT);
        let staging = self.create_buffer(
            "wgtile readback",
            copy,
            wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        )?;
        self.submit("read back", |enc| {
            enc.copy_buffer_to_buffer(buffer, 0, &staging, 0, Some(copy));
        })?;
        let (tx, rx) = futures::channel::oneshot::channel();
        staging.map_async(wgpu::MapMode::Read, .., move |r| {
            let _ = tx.send(r);
        });
        #[cfg(not(target_arch = "wasm32"))]
        self.wait()?;
        rx.await
            .map_err(|_| Error::BufferMapping("the map callback was dropped".into()))?
            .map_err(|e| Error::BufferMapping(e.to_string()))?;
        let view = staging
            .get_mapped_range(..)
            .map_err(|e| Error::BufferMapping(e.to_string()))?;
        let out = view[..bytes as usize].to_vec();
        drop(view);
        staging.unmap();
        Ok(out)
    }

    /// Allocates a raw buffer inside an out-of-memory error scope.
    pub(crate) fn create_buffer(
        &self,
        label: &str,
        size: u64,
        usage: wgpu::BufferUsages,
    ) -> Result<wgpu::Buffer> {
        self.ensure_alive()?;
        let device = &self.device;
        let scope = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage,
            mapped_at_creation: false,
        });
        match super::settle(label, scope.pop()) {
            Some(e) => Err(Error::gpu(format!("allocating {size} bytes"), e)),
            None => Ok(buffer),
        }
    }

    /// A small uniform buffer holding `words` (padded to 16 bytes).
    pub(crate) fn uniform(&self, words: &[u32]) -> wgpu::Buffer {
        self.padded_buffer("wgtile params", wgpu::BufferUsages::UNIFORM, words)
    }

    /// A small read-only storage buffer holding `words` (padded to 16
    /// bytes, so never empty).
    pub(crate) fn storage_words(&self, words: &[u32]) -> wgpu::Buffer {
        self.padded_buffer("wgtile storage words", wgpu::BufferUsages::STORAGE, words)
    }

    /// `words` zero-padded to whole 16-byte words (at least one) in a buffer of `usage`.
    fn padded_buffer(&self, label: &str, usage: wgpu::BufferUsages, words: &[u32]) -> wgpu::Buffer {
        let mut data = words.to_vec();
        data.resize(words.len().next_multiple_of(4).max(4), 0);
        self.buffer_of(label, usage, &data)
    }

    /// A buffer of `usage` created holding `words`.
    pub(crate) fn buffer_of(
        &self,
        label: &str,
        usage: wgpu::BufferUsages,
        words: &[u32],
    ) -> wgpu::Buffer {
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: (words.len() * 4) as u64,
            usage,
            mapped_at_creation: true,
        });
        buffer
            .slice(..)
            .get_mapped_range_mut()
            .expect("a buffer mapped at creation maps")
            .copy_from_slice(bytemuck::cast_slice(words));
        buffer.unmap();
        buffer
    }

    /// Allocates an uninitialised-by-us (wgpu zeroes it) tensor, checking the
    /// adapter's limits first.
    pub(crate) fn alloc(
        self: &Arc<Self>,
        shape: &[usize],
        dtype: DType,
        label: &str,
    ) -> Result<Tensor> {
        self.alloc_strided(shape, last_dim(shape), dtype, label)
    }

    /// The bytes a tensor of `shape` with rows of `row_stride` elements
    /// takes, or the error naming the rank, overflow or adapter limit it
    /// breaks: checked before anything is allocated or generated.
    pub(crate) fn tensor_bytes(
        &self,
        shape: &[usize],
        row_stride: usize,
        dtype: DType,
    ) -> Result<u64> {
        check_rank(shape)?;
        let logical = numel(shape)?;
        let rows = if shape.is_empty() {
            1
        } else {
            numel(&shape[..shape.len() - 1])?
        };
        let n = if logical == 0 {
            0
        } else {
            rows.checked_mul(row_stride)
                .ok_or_else(|| Error::InvalidArgument(format!("shape {shape:?} overflows usize")))?
        };
        let bytes = (n as u64)
            .checked_mul(dtype.size() as u64)
            .ok_or_else(|| Error::InvalidArgument(format!("shape {shape:?} overflows u64")))?;
        let (max, limit) = self.profile.max_tensor_bytes();
        if bytes > max {
            return Err(Error::LimitExceeded {
                limit,
                requested: bytes,
                max,
                what: format!("a {dtype} tensor of shape {shape:?}"),
            });
        }
        Ok(bytes)
    }

    /// [`Gpu::alloc`] with rows of `row_stride` elements.
    pub(crate) fn alloc_strided(
        self: &Arc<Self>,
        shape: &[usize],
        row_stride: usize,
        dtype: DType,
        label: &str,
    ) -> Result<Tensor> {
        self.alloc_with(shape, row_stride, dtype, label, true)
    }

    /// [`Gpu::alloc_strided`]; without `zeroed` for an upload that writes
    /// every byte of the buffer ([`Tensor::size_bytes`] rounded up to 16)
    /// before any use: a reused buffer is then not cleared first.
    pub(crate) fn alloc_with(
        self: &Arc<Self>,
        shape: &[usize],
        row_stride: usize,
        dtype: DType,
        label: &str,
        zeroed: bool,
    ) -> Result<Tensor> {
        let bytes = self.tensor_bytes(shape, row_stride, dtype)?;
        let size = bytes.next_multiple_of(BUFFER_ALIGN).max(BUFFER_ALIGN);
        let buffer = match self.pool.take(size, zeroed) {
            Some(reused) => reused,
            None => self.pool.adopt(self.create_buffer(
                label,
                size,
                wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST,
            )?),
        };
        Ok(Tensor {
            gpu: self.clone(),
            buffer: Arc::new(buffer),
            shape: shape.to_vec(),
            dtype,
            row_stride,
        })
    }

    /// Encodes `dispatches` in one compute pass and submits them.
    /// In an open batch of this thread they are recorded instead.
    pub(crate) fn run_dispatches(&self, during: &str, dispatches: &[Dispatch]) -> Result<()> {
        if dispatches.is_empty() {
            return Ok(());
        }
        match self.record(dispatches) {
            // A long batch submits in chunks, so the GPU starts on the first
            // ops while later ones are still being built.
            Some(true) => return self.flush_if("batch", false),
            Some(false) => return Ok(()),
            None => {}
        }
        self.submit(during, |enc| {
            let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some(during),
                timestamp_writes: None,
            });
            for d in dispatches {
                d.encode(&mut pass);
            }
        })
        .map(|_| ())
    }
}

/// Encodes a batch's steps: dispatches in compute passes, a clear between
/// two passes.
fn encode_steps(encoder: &mut wgpu::CommandEncoder, steps: &[Step]) {
    let mut rest = steps;
    while let Some(first) = rest.first() {
        if let Step::Clear(bound) = first {
            for buffer in bound.buffers() {
                encoder.clear_buffer(buffer, 0, None);
            }
            rest = &rest[1..];
            continue;
        }
        let runs = rest
            .iter()
            .position(|s| matches!(s, Step::Clear(_)))
            .unwrap_or(rest.len());
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("wgtile batch"),
            timestamp_writes: None,
        });
        for step in &rest[..runs] {
            if let Step::Run(d) = step {
                d.encode(&mut pass);
            }
        }
        drop(pass);
        rest = &rest[runs..];
    }
}
