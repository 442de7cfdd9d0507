//! The [`Context`] methods that create tensors (upload, zeros, fill,
//! random, padded rows, contiguous copies) and the fill kernels they use.

use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::gpu::{Dispatch, Tensor, check_rank, last_dim, numel, uniform_values};
use crate::kernels::{Kernel, Spec};
use crate::runtime::Context;

impl Context {
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
        let t =
            self.inner
                .gpu
                .alloc_with(shape, stride, T::DTYPE, "wgtile padded tensor", false)?;
        let mut padded = vec![<T as bytemuck::Zeroable>::zeroed(); t.storage_len()];
        for (dst, src) in padded.chunks_mut(stride).zip(data.chunks(last)) {
            dst[..last].copy_from_slice(src);
        }
        self.upload_whole(&t, bytemuck::cast_slice::<T, u8>(&padded));
        Ok(t)
    }

    /// A contiguous copy of `t` (the tensor itself, shared, when it already is).
    pub fn contiguous(&self, t: &Tensor) -> Result<Tensor> {
        self.check_owned_any(t, "contiguous")?;
        if t.dtype() == DType::F16 && !t.is_contiguous() {
            // The copy kernel works in the element type.
            self.require_f16("contiguous copies of f16 tensors")?;
        }
        if t.is_contiguous() {
            return Ok(t.clone());
        }
        if t.dtype() == DType::BF16 {
            // The cast kernel copies bit patterns (no element arithmetic).
            return self.cast(t, DType::BF16);
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
        let t =
            self.inner
                .gpu
                .alloc_with(shape, last_dim(shape), T::DTYPE, "wgtile tensor", false)?;
        self.upload_whole(&t, bytemuck::cast_slice::<T, u8>(data));
        Ok(t)
    }

    /// Writes `bytes`, zero-padded to the whole buffer, into a tensor made
    /// by `alloc_with(.., false)` (a reused buffer is not cleared: every byte is
    /// written here).
    /// The 4-byte-aligned head goes from `bytes` as it is (no host copy of
    /// a large upload), the rest and the zeros after it as a short tail.
    fn upload_whole(&self, t: &Tensor, bytes: &[u8]) {
        let head = bytes.len() & !3;
        if head > 0 {
            self.inner.queue.write_buffer(&t.buffer, 0, &bytes[..head]);
        }
        let mut tail = bytes[head..].to_vec();
        tail.resize(t.buffer.size() as usize - head, 0);
        if !tail.is_empty() {
            self.inner.queue.write_buffer(&t.buffer, head as u64, &tail);
        }
    }

    /// Writes `data` (the tensor's dtype: `f32`, `half::f16` or
    /// `half::bf16`, all its logical elements, row-major) into `t`, after
    /// the work already submitted and before the work submitted after this
    /// call. `t` must be contiguous and of this context.
    pub fn write<T: Element>(&self, t: &Tensor, data: &[T]) -> Result<()> {
        self.check_owned_any(t, "write")?;
        t.require_contiguous("write")?;
        if T::DTYPE != t.dtype() {
            return Err(Error::DTypeMismatch {
                op: "write",
                expected: t.dtype(),
                got: T::DTYPE,
            });
        }
        if data.len() != t.numel() {
            return Err(Error::InvalidArgument(format!(
                "write: host slice has {} elements but the tensor {:?} has {}",
                data.len(),
                t.shape(),
                t.numel()
            )));
        }
        if data.is_empty() {
            return Ok(());
        }
        let mut bytes = bytemuck::cast_slice::<T, u8>(data).to_vec();
        bytes.resize(bytes.len().next_multiple_of(4), 0);
        self.inner.gpu.write_bytes("write", &t.buffer, &bytes)
    }

    /// Writes f32 host values into `t`, converted to its dtype: f32 as they
    /// are, f16 and bf16 rounded to nearest even on the host (what
    /// [`Context::tensor_from_f32`] does; NaN stays NaN, values past the
    /// format's range become infinities). Ordered as [`Context::write`]:
    /// after the work already submitted, before the work submitted after
    /// this call. `t` must be contiguous and of this context; `data` must
    /// hold all its elements. An integer tensor is [`Error::NotFloat`]
    /// (ids are written as `i32` / `u32` with [`Context::write`]).
    pub fn write_f32(&self, t: &Tensor, data: &[f32]) -> Result<()> {
        Error::require_float(t.dtype(), "write_f32")?;
        match t.dtype() {
            DType::F16 => {
                let h: Vec<half::f16> = data.iter().map(|&v| half::f16::from_f32(v)).collect();
                self.write(t, &h)
            }
            DType::BF16 => {
                let h: Vec<half::bf16> = data.iter().map(|&v| half::bf16::from_f32(v)).collect();
                self.write(t, &h)
            }
            _ => self.write(t, data),
        }
    }

    #[cfg(not(target_arch = "wasm32"))]
    /// Blocks until every submitted op has finished (native only; in the
    /// browser await [`Context::synchronize_async`]). Reads back
    /// (`to_vec`) wait by themselves; this is for timing on the host and
    /// for handing buffers to other users of a shared device.
    pub fn synchronize(&self) -> Result<()> {
        self.inner.gpu.wait()
    }

    /// Resolves when every submitted op has finished.
    pub async fn synchronize_async(&self) -> Result<()> {
        self.inner.gpu.ensure_alive()?;
        let (tx, rx) = futures::channel::oneshot::channel();
        self.inner.queue.on_submitted_work_done(move || {
            let _ = tx.send(());
        });
        #[cfg(not(target_arch = "wasm32"))]
        self.inner.gpu.wait()?;
        rx.await
            .map_err(|_| Error::DeviceLost("the queue dropped its completion callback".into()))
    }

    /// Wraps `buffer`, a storage buffer of this context's device (shared
    /// through [`Context::from_wgpu`]), as a contiguous tensor of `shape`
    /// and `dtype`: no copy; wgtile's kernels read and write it in place.
    ///
    /// The buffer needs `STORAGE`, `COPY_SRC` and `COPY_DST` usage and at
    /// least the tensor's bytes rounded up to 16 (kernels load whole
    /// 16-byte words at the end); both are checked. It must be a buffer of
    /// this context's device, which wgpu gives no way to check: a buffer of
    /// another device of the same instance fails validation at first use
    /// (an `Err`), one of another `wgpu::Instance` makes wgpu itself panic.
    pub fn tensor_from_buffer(
        &self,
        buffer: &wgpu::Buffer,
        shape: impl AsRef<[usize]>,
        dtype: DType,
    ) -> Result<Tensor> {
        let shape = shape.as_ref();
        let bytes = self.inner.gpu.tensor_bytes(shape, last_dim(shape), dtype)?;
        let need = bytes
            .next_multiple_of(crate::gpu::BUFFER_ALIGN)
            .max(crate::gpu::BUFFER_ALIGN);
        let usage = wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_SRC
            | wgpu::BufferUsages::COPY_DST;
        if !buffer.usage().contains(usage) {
            return Err(Error::InvalidArgument(format!(
                "tensor_from_buffer: the buffer's usage {:?} lacks {:?} (STORAGE, COPY_SRC and COPY_DST are needed)",
                buffer.usage(),
                usage.difference(buffer.usage())
            )));
        }
        if buffer.size() < need {
            return Err(Error::InvalidArgument(format!(
                "tensor_from_buffer: a {dtype} tensor of shape {shape:?} needs {need} bytes \
                 (its {bytes} rounded up to 16), the buffer has {}",
                buffer.size()
            )));
        }
        Ok(Tensor {
            gpu: self.inner.gpu.clone(),
            buffer: std::sync::Arc::new(crate::gpu::PooledBuffer::unpooled(buffer.clone())),
            shape: shape.to_vec(),
            dtype,
            row_stride: last_dim(shape),
        })
    }

    /// A tensor of zeros.
    pub fn zeros(&self, shape: impl AsRef<[usize]>, dtype: DType) -> Result<Tensor> {
        // wgpu zero-initialises new buffers; the pool clears reused ones.
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
        self.check_owned_any(t, "fill")?;
        self.fill_words(&t.buffer, t.dtype.fill_word(value))
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
        self.check_owned(t, "fill_random")?;
        let half = match t.dtype() {
            DType::F32 => 0,
            DType::F16 => 1,
            DType::BF16 => 2,
            got @ (DType::I32 | DType::U32) => {
                return Err(Error::NotFloat {
                    op: "fill_random".into(),
                    got,
                });
            }
        };
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

    /// Uniform random values in `[low, high)` from `seed` (SplitMix64 on the
    /// host, so the same seed gives the same tensor on every adapter; see
    /// [`uniform_values`]). `low == high` gives that value everywhere;
    /// `low > high`, a non-finite bound or a range `high - low` beyond f32
    /// is [`Error::InvalidArgument`].
    pub fn rand_uniform(
        &self,
        shape: impl AsRef<[usize]>,
        low: f32,
        high: f32,
        dtype: DType,
        seed: u64,
    ) -> Result<Tensor> {
        Error::require_float(dtype, "rand_uniform")?;
        let shape = shape.as_ref();
        if !(low <= high && (high - low).is_finite()) {
            return Err(Error::InvalidArgument(format!(
                "rand_uniform needs finite bounds with low <= high (and a finite high - low), \
                 got [{low}, {high})"
            )));
        }
        // The size check first: the host values of a huge shape would not fit
        // in host memory either.
        self.inner.gpu.tensor_bytes(shape, last_dim(shape), dtype)?;
        let values = uniform_values(numel(shape)?, low, high, seed);
        self.tensor_from_f32(&values, shape, dtype)
    }

    /// Normal random values of `mean` and standard deviation `std` from
    /// `seed` (on the host, so the same seed gives the same tensor on every
    /// adapter; see [`normal_values`](crate::normal_values)), rounded to
    /// `dtype`. A mean or deviation that is not finite, or a negative
    /// deviation, is [`Error::InvalidArgument`].
    pub fn rand_normal(
        &self,
        shape: impl AsRef<[usize]>,
        mean: f32,
        std: f32,
        dtype: DType,
        seed: u64,
    ) -> Result<Tensor> {
        Error::require_float(dtype, "rand_normal")?;
        let shape = shape.as_ref();
        if !(mean.is_finite() && std.is_finite() && std >= 0.0) {
            return Err(Error::InvalidArgument(format!(
                "rand_normal needs a finite mean and a finite, non-negative deviation, got mean {mean}, std {std}"
            )));
        }
        self.inner.gpu.tensor_bytes(shape, last_dim(shape), dtype)?;
        let values = crate::gpu::normal_values(numel(shape)?, mean, std, seed);
        self.tensor_from_f32(&values, shape, dtype)
    }

    /// Uploads f32 host values as a `dtype` tensor of `shape`, rounded to
    /// nearest even on the host for `f16` and `bf16` (what the `half`
    /// crate's `from_f32` gives; NaN stays NaN).
    pub fn tensor_from_f32(
        &self,
        data: &[f32],
        shape: impl AsRef<[usize]>,
        dtype: DType,
    ) -> Result<Tensor> {
        match dtype {
            DType::F32 => self.tensor(data, shape),
            DType::F16 => {
                let h: Vec<half::f16> = data.iter().map(|&v| half::f16::from_f32(v)).collect();
                self.tensor(&h, shape)
            }
            DType::BF16 => {
                let h: Vec<half::bf16> = data.iter().map(|&v| half::bf16::from_f32(v)).collect();
                self.tensor(&h, shape)
            }
            DType::I32 => {
                let h: Vec<i32> = data.iter().map(|&v| v as i32).collect();
                self.tensor(&h, shape)
            }
            DType::U32 => {
                let h: Vec<u32> = data.iter().map(|&v| v as u32).collect();
                self.tensor(&h, shape)
            }
        }
    }
}
