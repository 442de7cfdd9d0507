//! [`Tensor`]: a GPU storage buffer with a row-major shape and a dtype, and
//! the [`Context`] methods that create tensors and read them back.

use std::fmt;
use std::sync::Arc;

use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::kernels::{Dispatch, Kernel, Spec};
use crate::runtime::Context;

/// Highest rank a tensor may have.
pub use crate::problem::MAX_RANK;

/// Buffers are allocated in multiples of this many bytes, so vec4 loads and
/// 4-byte copy alignment never need a special case at the tail.
const BUFFER_ALIGN: u64 = 16;

/// An n-dimensional array on the GPU (row-major, rank 0 to [`MAX_RANK`]).
///
/// Rows (the last dimension) are normally contiguous. A tensor made by
/// [`Context::tensor_padded`] keeps its logical shape but stores each row in
/// [`Tensor::row_stride`] elements, a multiple the caller chose (the 50257 ->
/// 50304 vocabulary trick): the padding elements are never read as values, so
/// their contents do not matter. Matmul reads such tensors in place; other
/// ops ask for [`Context::contiguous`] first.
///
/// Cloning is cheap and shares the buffer. A tensor keeps its [`Context`] alive.
#[derive(Clone)]
pub struct Tensor {
    pub(crate) ctx: Context,
    pub(crate) buffer: Arc<wgpu::Buffer>,
    shape: Vec<usize>,
    dtype: DType,
    /// Elements from one row's start to the next (>= the last dimension).
    row_stride: usize,
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tensor")
            .field("shape", &self.shape)
            .field("dtype", &self.dtype)
            .finish()
    }
}

/// Number of elements of `shape`, or an error when it overflows `usize`.
pub(crate) fn numel(shape: &[usize]) -> Result<usize> {
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| Error::InvalidArgument(format!("shape {shape:?} overflows usize")))
}

impl Tensor {
    /// The shape, outermost dimension first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// True when some dimension is zero.
    pub fn is_empty(&self) -> bool {
        self.numel() == 0
    }

    /// Bytes of element data as stored (rows of [`Tensor::row_stride`]
    /// elements; without the allocation's tail padding).
    pub fn size_bytes(&self) -> u64 {
        (self.storage_len() * self.dtype.size()) as u64
    }

    /// Elements from the start of one row (last dimension) to the next: the
    /// last dimension for a contiguous tensor, more for a padded one.
    pub fn row_stride(&self) -> usize {
        self.row_stride
    }

    /// Whether rows are stored back to back (no row padding).
    pub fn is_contiguous(&self) -> bool {
        self.row_stride == last_dim(&self.shape)
    }

    /// Elements the buffer holds for this tensor, padding included.
    pub(crate) fn storage_len(&self) -> usize {
        let rows: usize = match self.shape.split_last() {
            Some((_, outer)) => outer.iter().product(),
            None => 1,
        };
        if self.numel() == 0 {
            0
        } else {
            rows * self.row_stride
        }
    }

    /// `Err` naming `op` when the tensor has padded rows (ops other than
    /// matmul read their inputs as contiguous).
    pub(crate) fn require_contiguous(&self, op: &str) -> Result<()> {
        if self.is_contiguous() {
            Ok(())
        } else {
            Err(Error::InvalidArgument(format!(
                "{op} takes contiguous tensors, but this {:?} tensor stores rows of {} elements \
                 (made by tensor_padded); use Context::contiguous first",
                self.shape, self.row_stride
            )))
        }
    }

    /// The underlying wgpu buffer (at least `size_bytes`, padded to 16 bytes).
    pub fn buffer(&self) -> &wgpu::Buffer {
        &self.buffer
    }

    /// The context this tensor lives on.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Same data, another shape with the same number of elements.
    pub fn reshape(&self, shape: impl AsRef<[usize]>) -> Result<Tensor> {
        let shape = shape.as_ref();
        check_rank(shape)?;
        self.require_contiguous("reshape")?;
        if numel(shape)? != self.numel() {
            return Err(Error::shape(
                "reshape",
                &self.shape,
                shape,
                "element counts differ",
            ));
        }
        Ok(Tensor {
            shape: shape.to_vec(),
            row_stride: last_dim(shape),
            ..self.clone()
        })
    }

    /// Copies the data to the host. `T` must match the dtype.
    pub async fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype {
            return Err(Error::DTypeMismatch {
                op: "to_vec",
                expected: self.dtype,
                got: T::DTYPE,
            });
        }
        let bytes = self.size_bytes();
        if bytes == 0 {
            return Ok(Vec::new());
        }
        let raw = self.ctx.read_bytes(&self.buffer, bytes).await?;
        let stored = bytemuck::pod_collect_to_vec::<u8, T>(&raw);
        if self.is_contiguous() {
            return Ok(stored);
        }
        // Padded rows: keep the first `last` elements of each.
        let last = last_dim(&self.shape);
        Ok(stored
            .chunks(self.row_stride)
            .flat_map(|row| row[..last].iter().copied())
            .collect())
    }

    /// Blocking form of [`Tensor::to_vec`] (native only).
    pub fn to_vec_blocking<T: Element>(&self) -> Result<Vec<T>> {
        pollster::block_on(self.to_vec())
    }

    /// The data as `f32` whatever the dtype (`f16` widens exactly).
    pub fn to_f32_vec_blocking(&self) -> Result<Vec<f32>> {
        match self.dtype {
            DType::F32 => self.to_vec_blocking::<f32>(),
            DType::F16 => Ok(self
                .to_vec_blocking::<half::f16>()?
                .into_iter()
                .map(f32::from)
                .collect()),
        }
    }
}

/// The last dimension (1 for rank 0).
fn last_dim(shape: &[usize]) -> usize {
    shape.last().copied().unwrap_or(1)
}

pub(crate) fn check_rank(shape: &[usize]) -> Result<()> {
    if shape.len() > MAX_RANK {
        return Err(Error::InvalidArgument(format!(
            "shape {shape:?} has rank {}, the maximum is {MAX_RANK}",
            shape.len()
        )));
    }
    Ok(())
}

/// SplitMix64: a small, well-mixed generator so seeded tensors are identical on
/// every adapter and platform.
struct SplitMix64(u64);

impl SplitMix64 {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1) with 24 bits of precision.
    fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
    }
}

/// `n` values uniform in `[low, high)` from `seed`: exactly what
/// [`Context::rand_uniform`] uploads, for building host references.
pub fn uniform_values(n: usize, low: f32, high: f32, seed: u64) -> Vec<f32> {
    let mut rng = SplitMix64(seed);
    (0..n)
        .map(|_| low + (high - low) * rng.next_f32())
        .collect()
}

impl Context {
    /// Allocates a raw buffer inside an out-of-memory error scope.
    pub(crate) fn create_buffer(
        &self,
        label: &str,
        size: u64,
        usage: wgpu::BufferUsages,
    ) -> Result<wgpu::Buffer> {
        self.ensure_alive()?;
        let device = &self.inner.device;
        let scope = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage,
            mapped_at_creation: false,
        });
        match pollster::block_on(scope.pop()) {
            Some(e) => Err(Error::gpu(format!("allocating {size} bytes"), e)),
            None => Ok(buffer),
        }
    }

    /// A small uniform buffer holding `words` (padded to 16 bytes).
    pub(crate) fn uniform(&self, words: &[u32]) -> wgpu::Buffer {
        let mut data = words.to_vec();
        data.resize(words.len().next_multiple_of(4).max(4), 0);
        self.buffer_of("wgtile params", wgpu::BufferUsages::UNIFORM, &data)
    }

    /// Allocates an uninitialised-by-us (wgpu zeroes it) tensor, checking the
    /// adapter's limits first.
    pub(crate) fn alloc(&self, shape: &[usize], dtype: DType, label: &str) -> Result<Tensor> {
        self.alloc_strided(shape, last_dim(shape), dtype, label)
    }

    /// A read-only storage buffer holding `words` (at least one: a storage
    /// binding cannot be empty).
    pub(crate) fn storage_u32(&self, words: &[u32]) -> wgpu::Buffer {
        debug_assert!(!words.is_empty(), "a storage binding cannot be empty");
        self.buffer_of("wgtile storage words", wgpu::BufferUsages::STORAGE, words)
    }

    /// A buffer of `usage` created holding `words`.
    fn buffer_of(&self, label: &str, usage: wgpu::BufferUsages, words: &[u32]) -> wgpu::Buffer {
        let buffer = self.inner.device.create_buffer(&wgpu::BufferDescriptor {
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

    /// [`Context::alloc`] with rows of `row_stride` elements.
    fn alloc_strided(
        &self,
        shape: &[usize],
        row_stride: usize,
        dtype: DType,
        label: &str,
    ) -> Result<Tensor> {
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
        let (max, limit) = self.profile().max_tensor_bytes();
        if bytes > max {
            return Err(Error::LimitExceeded {
                limit,
                requested: bytes,
                max,
                what: format!("a {dtype} tensor of shape {shape:?}"),
            });
        }
        let size = bytes.next_multiple_of(BUFFER_ALIGN).max(BUFFER_ALIGN);
        let buffer = self.create_buffer(
            label,
            size,
            wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
        )?;
        Ok(Tensor {
            ctx: self.clone(),
            buffer: Arc::new(buffer),
            shape: shape.to_vec(),
            dtype,
            row_stride,
        })
    }

    /// Uploads `data` (`f32` or `half::f16`, the logical elements of `shape`,
    /// row-major) into a tensor whose rows are stored padded to a multiple of
    /// `multiple` elements, zero-filled: the vocabulary trick (a 50257-wide
    /// output layer stored 50304 wide) done once at allocation, so matmul
    /// reads it with aligned loads and the padding layer copies nothing. The
    /// logical shape is kept: `to_vec` returns `data`, matmul results have
    /// the logical shape. Needs rank >= 2 and `multiple >= 1`.
    ///
    /// A `multiple` that is not a power of two also moves rows off a
    /// power-of-two pitch: an f16 left operand `[M, K]` with K a power of
    /// two, stored with `multiple = K + 32`, ran the tensor-core kernel
    /// 2-4.5% faster on the H200 (K = 2048, 4096, 8192; docs/perf/log-2026-11.md,
    /// run 118). The padding layer does not copy for it: a copy
    /// of A costs about what it saves.
    pub fn tensor_padded<T: Element>(
        &self,
        data: &[T],
        shape: impl AsRef<[usize]>,
        multiple: usize,
    ) -> Result<Tensor> {
        let shape = shape.as_ref();
        check_rank(shape)?;
        if shape.len() < 2 || multiple == 0 {
            return Err(Error::InvalidArgument(format!(
                "tensor_padded needs rank >= 2 and a multiple >= 1, not shape {shape:?} and multiple {multiple}"
            )));
        }
        let n = numel(shape)?;
        if data.len() != n {
            return Err(Error::InvalidArgument(format!(
                "host slice has {} elements but shape {shape:?} needs {n}",
                data.len()
            )));
        }
        let last = last_dim(shape);
        let stride = last.checked_next_multiple_of(multiple).ok_or_else(|| {
            Error::InvalidArgument(format!("rows of {last} padded to {multiple} overflow"))
        })?;
        let t = self.alloc_strided(shape, stride, T::DTYPE, "wgtile padded tensor")?;
        if n > 0 {
            let mut padded = vec![<T as bytemuck::Zeroable>::zeroed(); t.storage_len()];
            for (dst, src) in padded.chunks_mut(stride).zip(data.chunks(last)) {
                dst[..last].copy_from_slice(src);
            }
            let mut bytes = bytemuck::cast_slice::<T, u8>(&padded).to_vec();
            bytes.resize(bytes.len().next_multiple_of(4), 0);
            self.inner.queue.write_buffer(&t.buffer, 0, &bytes);
        }
        Ok(t)
    }

    /// A contiguous copy of `t` (the tensor itself, shared, when it already is).
    pub fn contiguous(&self, t: &Tensor) -> Result<Tensor> {
        if t.is_contiguous() {
            return Ok(t.clone());
        }
        let out = self.alloc(t.shape(), t.dtype(), "wgtile contiguous")?;
        let last = last_dim(t.shape());
        let rows = t.numel() / last.max(1);
        let dispatches = self.pad_copy_dispatches(&[crate::runtime::PadCopy {
            src: t,
            from: (rows, t.row_stride),
            dst: &out,
            to: (rows, last),
            batches: 1,
        }])?;
        self.run_dispatches("contiguous", &dispatches)?;
        Ok(out)
    }

    /// Uploads `data` (`f32` or `half::f16`) as a tensor of `shape`.
    pub fn tensor<T: Element>(&self, data: &[T], shape: impl AsRef<[usize]>) -> Result<Tensor> {
        let shape = shape.as_ref();
        check_rank(shape)?;
        let n = numel(shape)?;
        if data.len() != n {
            return Err(Error::InvalidArgument(format!(
                "host slice has {} elements but shape {shape:?} needs {n}",
                data.len()
            )));
        }
        let t = self.alloc(shape, T::DTYPE, "wgtile tensor")?;
        if n > 0 {
            let mut bytes = bytemuck::cast_slice::<T, u8>(data).to_vec();
            bytes.resize(bytes.len().next_multiple_of(4), 0);
            self.inner.queue.write_buffer(&t.buffer, 0, &bytes);
        }
        Ok(t)
    }

    /// A tensor of zeros.
    pub fn zeros(&self, shape: impl AsRef<[usize]>, dtype: DType) -> Result<Tensor> {
        // wgpu zero-initialises new buffers.
        self.alloc(shape.as_ref(), dtype, "wgtile zeros")
    }

    /// A tensor with every element `value` (rounded for `f16`), filled on the GPU.
    pub fn full(&self, shape: impl AsRef<[usize]>, value: f32, dtype: DType) -> Result<Tensor> {
        let t = self.alloc(shape.as_ref(), dtype, "wgtile full")?;
        self.fill(&t, value)?;
        Ok(t)
    }

    /// Overwrites every element of `t` with `value` (NaN to poison outputs).
    pub fn fill(&self, t: &Tensor, value: f32) -> Result<()> {
        let pattern = match t.dtype {
            DType::F32 => value.to_bits(),
            DType::F16 => {
                let h = u32::from(half::f16::from_f32(value).to_bits());
                h | (h << 16)
            }
        };
        self.fill_words(&t.buffer, pattern)
    }

    /// Fills the whole buffer with a 32-bit pattern.
    pub(crate) fn fill_words(&self, buffer: &wgpu::Buffer, pattern: u32) -> Result<()> {
        let d = self.fill_dispatch(buffer, pattern)?;
        self.run_dispatches("fill", std::slice::from_ref(&d))
    }

    /// Fills `t` on the GPU with values uniform in [-1, 1), hashed from
    /// `seed` and the element position (`shaders/fill.wgsl`, entry `random`):
    /// the same values on every adapter, with no host generation or upload.
    /// [`Context::rand_uniform`] draws different values (SplitMix64 on the
    /// host, reproducible with [`uniform_values`]); this one is for large
    /// inputs where speed matters (the autotuner's timing inputs).
    pub fn fill_random(&self, t: &Tensor, seed: u32) -> Result<()> {
        let half = u32::from(t.dtype() == DType::F16);
        let d = self.fill_dispatch_with(Kernel::FillRandom, &t.buffer, seed, half)?;
        self.run_dispatches("random fill", std::slice::from_ref(&d))
    }

    pub(crate) fn fill_dispatch(&self, buffer: &wgpu::Buffer, pattern: u32) -> Result<Dispatch> {
        self.fill_dispatch_with(Kernel::Fill, buffer, pattern, 0)
    }

    fn fill_dispatch_with(
        &self,
        kernel: Kernel,
        buffer: &wgpu::Buffer,
        pattern: u32,
        half: u32,
    ) -> Result<Dispatch> {
        const WG: u32 = 256;
        let words = (buffer.size() / 4) as u32;
        let groups = words.div_ceil(WG);
        let max = self.profile().max_workgroups_per_dim;
        let gx = groups.min(max);
        let gy = groups.div_ceil(gx.max(1));
        let pipeline = self
            .inner
            .pipelines
            .get(&self.inner.device, &Spec::new(kernel).override_("WG", WG))?;
        let params = self.uniform(&[words, pattern, gx, half]);
        Ok(Dispatch::new(
            &self.inner.device,
            pipeline,
            &[&params, buffer],
            [gx, gy, 1],
        ))
    }

    /// Encodes `dispatches` in one compute pass and submits them.
    pub(crate) fn run_dispatches(&self, during: &str, dispatches: &[Dispatch]) -> Result<()> {
        if dispatches.is_empty() {
            return Ok(());
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

    /// Uniform random values in `[low, high)` from `seed` (SplitMix64 on the
    /// host, so the same seed gives the same tensor on every adapter; see
    /// [`uniform_values`]).
    pub fn rand_uniform(
        &self,
        shape: impl AsRef<[usize]>,
        low: f32,
        high: f32,
        dtype: DType,
        seed: u64,
    ) -> Result<Tensor> {
        let shape = shape.as_ref();
        check_rank(shape)?;
        let values = uniform_values(numel(shape)?, low, high, seed);
        match dtype {
            DType::F32 => self.tensor(&values, shape),
            DType::F16 => {
                let h: Vec<half::f16> = values.iter().map(|&v| half::f16::from_f32(v)).collect();
                self.tensor(&h, shape)
            }
        }
    }
}
