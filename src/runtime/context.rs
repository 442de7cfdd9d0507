//! Adapter and device selection: [`Context`], [`ContextOptions`], [`AdapterProfile`].
//!
//! The context owns the wgpu instance, adapter, device and queue, the
//! pipeline cache, and the adapter's profile (what the dispatcher reads to
//! choose kernels). It encodes and submits work; it never decides *which*
//! kernel runs (that is `tune`'s job).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::gpu::{AdapterProfile, Dispatch, Gpu, Plan, Tensor};
use crate::kernels::PipelineCache;

/// Features wgtile asks for whenever the adapter has them.
const WANTED_FEATURES: wgpu::Features = wgpu::Features::SHADER_F16
    .union(wgpu::Features::SUBGROUP)
    .union(wgpu::Features::SUBGROUP_BARRIER)
    .union(wgpu::Features::TIMESTAMP_QUERY)
    .union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS)
    .union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_PASSES);

/// How to pick the adapter and which optional features to enable.
///
/// Every field left at its default can also be set from the environment:
/// `WGTILE_BACKEND` (e.g. `vulkan`, `metal`, `dx12`, `gl`, `webgpu`; falls back to
/// wgpu's own `WGPU_BACKEND`), `WGTILE_ADAPTER` (a case-insensitive substring of
/// the adapter name) and `WGTILE_COOPERATIVE_MATRIX=1`.
#[derive(Clone, Debug)]
pub struct ContextOptions {
    /// Backends to consider; `None` reads `WGTILE_BACKEND`, then `WGPU_BACKEND`, then all.
    pub backends: Option<wgpu::Backends>,
    /// Case-insensitive substring the adapter name must contain; `None` reads `WGTILE_ADAPTER`.
    pub adapter: Option<String>,
    /// Which adapter to prefer when several match.
    pub power_preference: wgpu::PowerPreference,
    /// Enable `EXPERIMENTAL_COOPERATIVE_MATRIX` (tensor cores from WGSL) where the
    /// adapter has it. Experimental in wgpu, so opt-in; `None` reads
    /// `WGTILE_COOPERATIVE_MATRIX` (`1`/`true` enables).
    pub cooperative_matrix: Option<bool>,
    /// Features to leave off even when the adapter has them, to reproduce a weaker
    /// adapter (a browser without `shader-f16`, say) on a stronger one.
    pub disabled_features: wgpu::Features,
    /// Limits to request instead of the adapter's own (all of them by default).
    /// Asking for more than the adapter has fails with [`Error::RequestDevice`].
    pub limits: Option<wgpu::Limits>,
    /// The most bytes of free tensor buffers the context keeps for reuse
    /// (4 GiB by default; 0 turns the pool off). A tensor's buffer returns
    /// to the pool when its last tensor is dropped and is handed, zeroed on
    /// the GPU, to the next tensor of the same byte size: a new allocation
    /// costs the host far more than the clear.
    /// [`Context::release_buffer_pool`] frees what the pool holds.
    pub buffer_pool_bytes: u64,
}

/// [`ContextOptions::buffer_pool_bytes`]'s default.
pub const DEFAULT_BUFFER_POOL_BYTES: u64 = 4 << 30;

impl Default for ContextOptions {
    fn default() -> Self {
        Self {
            backends: None,
            adapter: None,
            power_preference: wgpu::PowerPreference::HighPerformance,
            cooperative_matrix: None,
            disabled_features: wgpu::Features::empty(),
            limits: None,
            buffer_pool_bytes: DEFAULT_BUFFER_POOL_BYTES,
        }
    }
}

impl ContextOptions {
    fn resolved_backends(&self) -> wgpu::Backends {
        if let Some(b) = self.backends {
            return b;
        }
        match &crate::config::get().backend {
            Some(s) => wgpu::Backends::from_comma_list(s),
            None => wgpu::Backends::from_env().unwrap_or(wgpu::Backends::all()),
        }
    }

    fn resolved_adapter(&self) -> Option<String> {
        self.adapter
            .clone()
            .or_else(|| crate::config::get().adapter.clone())
            .filter(|s| !s.trim().is_empty())
    }

    fn resolved_cooperative_matrix(&self) -> bool {
        self.cooperative_matrix
            .or(crate::config::get().cooperative_matrix)
            .unwrap_or(false)
    }
}

pub(crate) struct Inner {
    /// The device, shared with every tensor and plan made on it.
    pub(crate) gpu: Arc<Gpu>,
    pub(crate) pipelines: PipelineCache,
    /// Generated fused elementwise pipelines (see [`crate::fusion`]).
    pub(crate) fused: crate::kernels::GeneratedCache,
    /// Autotune decisions and their cache (see [`crate::tune::autotune`]).
    pub(crate) tuner: crate::tune::autotune::Autotuner,
}

/// The runtime's caches sit on one device: its fields read through.
impl std::ops::Deref for Inner {
    type Target = Gpu;
    fn deref(&self) -> &Gpu {
        &self.gpu
    }
}

/// The device-level work, as the ops call it.
impl Context {
    /// The one check that `t` was made on this context's device, for every
    /// tensor an op takes (operands, outputs, masks, weights, caches): wgpu
    /// would panic on a foreign buffer, or silently read one of this
    /// device's own buffers that has the same id. `what` names the argument.
    /// Also refuses integer tensors ([`Error::NotFloat`]): every op but
    /// the few that say otherwise computes in floating point. Those use
    /// [`Context::check_owned_any`].
    pub(crate) fn check_owned(&self, t: &Tensor, what: &str) -> Result<()> {
        t.check_device(&self.inner.gpu, what)?;
        Error::require_float(t.dtype(), what)
    }

    /// [`Context::check_owned`], and `t` of `dtype`
    /// ([`Error::DTypeMismatch`] otherwise).
    pub(crate) fn check_operand(&self, t: &Tensor, dtype: DType, op: &'static str) -> Result<()> {
        self.check_owned(t, op)?;
        if t.dtype() != dtype {
            return Err(Error::DTypeMismatch {
                op,
                expected: dtype,
                got: t.dtype(),
            });
        }
        Ok(())
    }

    /// [`Context::check_owned`] for ops that take any dtype (copies,
    /// writes, fills, indices).
    pub(crate) fn check_owned_any(&self, t: &Tensor, what: &str) -> Result<()> {
        t.check_device(&self.inner.gpu, what)
    }

    /// [`Context::check_owned`] for each of `tensors`.
    pub(crate) fn check_all_owned<'t>(
        &self,
        tensors: impl IntoIterator<Item = &'t Tensor>,
        what: &str,
    ) -> Result<()> {
        tensors
            .into_iter()
            .try_for_each(|t| self.check_owned(t, what))
    }

    pub(crate) fn require_f16(&self, what: &str) -> Result<()> {
        self.inner.gpu.require_f16(what)
    }

    pub(crate) fn submit(
        &self,
        during: &str,
        f: impl FnOnce(&mut wgpu::CommandEncoder),
    ) -> Result<wgpu::SubmissionIndex> {
        self.inner.gpu.submit(during, f)
    }

    pub(crate) fn create_buffer(
        &self,
        label: &str,
        size: u64,
        usage: wgpu::BufferUsages,
    ) -> Result<wgpu::Buffer> {
        self.inner.gpu.create_buffer(label, size, usage)
    }

    pub(crate) fn uniform(&self, words: &[u32]) -> wgpu::Buffer {
        self.inner.gpu.uniform(words)
    }

    pub(crate) fn storage_words(&self, words: &[u32]) -> wgpu::Buffer {
        self.inner.gpu.storage_words(words)
    }

    pub(crate) fn alloc(&self, shape: &[usize], dtype: DType, label: &str) -> Result<Tensor> {
        self.inner.gpu.alloc(shape, dtype, label)
    }

    /// A plan of `dispatches` on this device writing `output`, with no
    /// scratch; `flops` and `bytes` as [`Plan::flops`] and [`Plan::bytes`].
    pub(crate) fn plan(
        &self,
        label: String,
        dispatches: Vec<Dispatch>,
        output: Tensor,
        flops: u64,
        bytes: u64,
    ) -> Plan {
        Plan {
            gpu: self.inner.gpu.clone(),
            label,
            dispatches,
            output,
            flops,
            bytes,
            scratch: Vec::new(),
        }
    }

    pub(crate) fn run_dispatches(&self, during: &str, dispatches: &[Dispatch]) -> Result<()> {
        self.inner.gpu.run_dispatches(during, dispatches)
    }

    pub(crate) async fn read_bytes(&self, buffer: &wgpu::Buffer, bytes: u64) -> Result<Vec<u8>> {
        self.inner.gpu.read_bytes(buffer, bytes).await
    }
}

/// A GPU device ready for wgtile's kernels. Cheap to clone (an `Arc` inside),
/// `Send + Sync`, usable from several threads.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for Context {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Context")
            .field("adapter", &self.inner.profile.name)
            .field("backend", &self.inner.profile.backend)
            .finish()
    }
}

/// Native adapter ranking (the browser offers one adapter).
#[cfg(not(target_arch = "wasm32"))]
fn type_rank(t: wgpu::DeviceType, pref: wgpu::PowerPreference) -> u8 {
    use wgpu::DeviceType::*;
    match (pref, t) {
        (wgpu::PowerPreference::LowPower, IntegratedGpu) => 0,
        (wgpu::PowerPreference::LowPower, DiscreteGpu) => 1,
        (_, DiscreteGpu) => 0,
        (_, IntegratedGpu) => 1,
        (_, VirtualGpu) => 2,
        (_, Cpu) => 3,
        (_, Other) => 4,
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn backend_rank(b: wgpu::Backend) -> u8 {
    // Native compute backends before GL, which lacks compute features and
    // (on lavapipe) took seconds for a first dispatch.
    match b {
        wgpu::Backend::Vulkan | wgpu::Backend::Metal | wgpu::Backend::Dx12 => 0,
        wgpu::Backend::BrowserWebGpu => 1,
        _ => 2,
    }
}

impl Context {
    /// Picks an adapter and creates a device (see [`ContextOptions`] for how).
    pub async fn new(options: ContextOptions) -> Result<Self> {
        let backends = options.resolved_backends();
        // wgpu checks every indirect dispatch's arguments with a dispatch
        // and barriers of its own: 7 us per indirect dispatch on the H200
        // (run 169: a bf16 plan's armed-off fallback dispatches 10.8 us
        // each with the check, 3.7 without; the direct kernels unchanged).
        // wgtile's indirect arguments are 0 or a grid checked on the host
        // (`armed_either`), so the check is off on the instances it
        // creates, unless WGPU_VALIDATION_INDIRECT_CALL asks for it or DX12
        // may be picked (Windows; its pass also supplies `num_workgroups`
        // to indirect dispatches, which the shaders read).
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
        desc.backends = backends;
        let dx12 = cfg!(windows) && backends.contains(wgpu::Backends::DX12);
        if std::env::var_os("WGPU_VALIDATION_INDIRECT_CALL").is_none() && !dx12 {
            desc.flags
                .remove(wgpu::InstanceFlags::VALIDATION_INDIRECT_CALL);
        }
        let instance = wgpu::Instance::new(desc);
        let adapter = Self::pick_adapter(&instance, &options, backends).await?;
        let info = adapter.get_info();

        let mut features = adapter.features() & WANTED_FEATURES;
        let coop = options.resolved_cooperative_matrix()
            && adapter
                .features()
                .contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX);
        if coop {
            features |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
        }
        features = features.difference(options.disabled_features);
        let limits = options.limits.clone().unwrap_or_else(|| adapter.limits());
        let experimental_features = if coop {
            // SAFETY: the caller opted in; wgtile uses cooperative matrices only
            // in kernels validated by naga and only with configurations the
            // adapter reports.
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        };
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("wgtile"),
                required_features: features,
                required_limits: limits,
                experimental_features,
                memory_hints: wgpu::MemoryHints::Performance,
                trace: wgpu::Trace::Off,
            })
            .await
            .map_err(|e| {
                Error::RequestDevice(format!("{} ({:?}): {e}", info.name, info.backend))
            })?;

        // Errors outside an error scope must not abort the process (wgpu's
        // default handler panics): log them; every wgtile call scopes its own work.
        device.on_uncaptured_error(Arc::new(|e: wgpu::Error| {
            log::error!("uncaptured wgpu error: {e}");
        }));
        let lost = Arc::new(AtomicBool::new(false));
        let flag = lost.clone();
        device.set_device_lost_callback(move |reason, msg| {
            flag.store(true, Ordering::Release);
            log::warn!("wgpu device lost ({reason:?}): {msg}");
        });
        Ok(Self::from_parts(
            adapter,
            device,
            queue,
            lost,
            options.buffer_pool_bytes,
        ))
    }

    /// A context on an application's own wgpu device (a renderer's, another
    /// library's), so that both share buffers: wgtile's tensors are
    /// ordinary storage buffers of `device` ([`Tensor::buffer`]), and
    /// [`Context::tensor_from_buffer`] wraps one of the application's.
    ///
    /// What wgtile can do is read from the device: its features
    /// (`SHADER_F16` for f16, `SUBGROUP`, `TIMESTAMP_QUERY`, cooperative
    /// matrices) and its limits, not the adapter's; an op that needs a
    /// feature the device lacks returns [`Error::UnsupportedFeature`].
    /// wgtile installs no handlers on a shared device: the application's
    /// uncaptured-error and device-lost callbacks stay (wgtile scopes its
    /// own submissions, so its errors come back as `Err`), and a lost
    /// device shows as the errors of the calls after it. Work is submitted
    /// on `queue`, in the order the calls are made. Its buffer pool holds
    /// up to [`DEFAULT_BUFFER_POOL_BYTES`].
    pub fn from_wgpu(adapter: wgpu::Adapter, device: wgpu::Device, queue: wgpu::Queue) -> Self {
        Self::from_parts(
            adapter,
            device,
            queue,
            Arc::new(AtomicBool::new(false)),
            DEFAULT_BUFFER_POOL_BYTES,
        )
    }

    /// How many tensor buffers the pool reused and allocated, and the
    /// bytes it holds ([`ContextOptions::buffer_pool_bytes`]).
    pub fn buffer_pool_stats(&self) -> crate::gpu::BufferPoolStats {
        self.inner.gpu.pool.stats()
    }

    /// Frees every buffer the pool holds (tensors in use keep theirs):
    /// memory for another part of the application, as PyTorch's
    /// `empty_cache` gives it.
    pub fn release_buffer_pool(&self) {
        self.inner.gpu.pool.release();
    }

    fn from_parts(
        adapter: wgpu::Adapter,
        device: wgpu::Device,
        queue: wgpu::Queue,
        lost: Arc<AtomicBool>,
        pool_bytes: u64,
    ) -> Self {
        let profile = AdapterProfile::new(&adapter, &device);
        let unused = |label| {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: 16,
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            })
        };
        let dummy = unused("wgtile unused binding");
        let dummy_rw = unused("wgtile unused read-write binding");
        log::info!(
            "wgtile context on {} ({:?}, {:?})",
            profile.name,
            profile.backend,
            profile.device_type
        );
        Self {
            inner: Arc::new(Inner {
                gpu: Arc::new(Gpu {
                    adapter,
                    device,
                    queue,
                    profile,
                    dummy,
                    dummy_rw,
                    lost,
                    batch: std::sync::Mutex::new(None),
                    submissions: Default::default(),
                    pool: Arc::new(crate::gpu::Pool::new(pool_bytes)),
                    submit_lock: std::sync::Mutex::new(()),
                }),
                pipelines: PipelineCache::default(),
                fused: crate::kernels::GeneratedCache::default(),
                tuner: crate::tune::autotune::Autotuner::from_env(),
            }),
        }
    }

    #[cfg(not(target_arch = "wasm32"))]
    /// Blocking form of [`Context::new`] (native only).
    pub fn new_blocking(options: ContextOptions) -> Result<Self> {
        pollster::block_on(Self::new(options))
    }

    #[cfg(not(target_arch = "wasm32"))]
    async fn pick_adapter(
        instance: &wgpu::Instance,
        options: &ContextOptions,
        backends: wgpu::Backends,
    ) -> Result<wgpu::Adapter> {
        let wanted = options.resolved_adapter().map(|s| s.to_lowercase());
        let mut adapters = instance.enumerate_adapters(backends).await;
        let seen: Vec<String> = adapters
            .iter()
            .map(|a| {
                let i = a.get_info();
                format!("{} ({:?})", i.name, i.backend)
            })
            .collect();
        if let Some(w) = &wanted {
            adapters.retain(|a| a.get_info().name.to_lowercase().contains(w));
        }
        adapters.sort_by_key(|a| {
            let i = a.get_info();
            (
                type_rank(i.device_type, options.power_preference),
                backend_rank(i.backend),
            )
        });
        adapters.into_iter().next().ok_or_else(|| {
            Error::NoAdapter(format!(
                "backends {backends:?}, name filter {:?}; adapters seen: [{}]",
                wanted,
                seen.join(", ")
            ))
        })
    }

    #[cfg(target_arch = "wasm32")]
    async fn pick_adapter(
        instance: &wgpu::Instance,
        options: &ContextOptions,
        backends: wgpu::Backends,
    ) -> Result<wgpu::Adapter> {
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                power_preference: options.power_preference,
                force_fallback_adapter: false,
                compatible_surface: None,
                ..Default::default()
            })
            .await
            .map_err(|e| Error::NoAdapter(format!("backends {backends:?}: {e}")))?;
        if let Some(w) = options.resolved_adapter() {
            let name = adapter.get_info().name;
            if !name.to_lowercase().contains(&w.to_lowercase()) {
                return Err(Error::NoAdapter(format!(
                    "name filter {w:?} does not match {name:?}"
                )));
            }
        }
        Ok(adapter)
    }

    /// What the adapter is and offers.
    pub fn profile(&self) -> &AdapterProfile {
        &self.inner.profile
    }

    /// The autotuner: kernel choices measured once per shape bucket and cached
    /// (`WGTILE_AUTOTUNE`, `WGTILE_CACHE_DIR`).
    pub fn autotuner(&self) -> &crate::tune::autotune::Autotuner {
        &self.inner.tuner
    }

    /// The wgpu device (for interop; wgtile's own work goes through its ops).
    pub fn device(&self) -> &wgpu::Device {
        &self.inner.device
    }

    /// The wgpu queue.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.inner.queue
    }

    /// The wgpu adapter.
    pub fn adapter(&self) -> &wgpu::Adapter {
        &self.inner.adapter
    }

    /// Compiles a WGSL module and its compute pipeline on this device without
    /// running it, returning [`Error::Shader`] with the compiler's message when
    /// it fails. Useful to check user kernels (and wgtile's own) on an adapter.
    pub fn compile_wgsl(&self, label: &str, source: &str, entry_point: &str) -> Result<()> {
        crate::kernels::compile(&self.inner.device, label, source, entry_point, &[], false)
            .map(|_| ())
    }
}

impl Context {}
