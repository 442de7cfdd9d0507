//! [`Tensor`]: a GPU storage buffer with a row-major shape and a dtype, and
//! its read-back.

use std::fmt;
use std::sync::Arc;

use super::Gpu;
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};

/// Highest rank a tensor may have.
pub use crate::problem::MAX_RANK;

/// Buffers are allocated in multiples of this many bytes, so vec4 loads and
/// 4-byte copy alignment never need a special case at the tail.
pub(crate) const BUFFER_ALIGN: u64 = 16;

/// An n-dimensional array on the GPU (row-major, rank 0 to [`MAX_RANK`]).
///
/// Rows (the last dimension) are normally contiguous. A tensor made by
/// [`Context::tensor_padded`](crate::Context::tensor_padded) keeps its logical shape but stores each row in
/// [`Tensor::row_stride`] elements, a multiple the caller chose (the 50257 ->
/// 50304 vocabulary trick): the padding elements are never read as values, so
/// their contents do not matter. Matmul reads such tensors in place; other
/// ops ask for [`Context::contiguous`](crate::Context::contiguous) first.
///
/// Cloning is cheap and shares the buffer. A tensor keeps its device alive.
#[derive(Clone)]
pub struct Tensor {
    pub(crate) gpu: Arc<Gpu>,
    pub(crate) buffer: Arc<super::pool::PooledBuffer>,
    pub(crate) shape: Vec<usize>,
    pub(crate) dtype: DType,
    /// Elements from one row's start to the next (>= the last dimension).
    pub(crate) row_stride: usize,
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
    /// Fails with [`Error::InvalidArgument`] unless this tensor lives on
    /// `gpu`'s device (`what` names the argument).
    pub(crate) fn check_device(&self, gpu: &Arc<Gpu>, what: &str) -> Result<()> {
        Gpu::check_same(&self.gpu, gpu, what)
    }

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
        let raw = self.gpu.read_bytes(&self.buffer, bytes).await?;
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

    #[cfg(not(target_arch = "wasm32"))]
    /// Blocking form of [`Tensor::to_vec`] (native only).
    pub fn to_vec_blocking<T: Element>(&self) -> Result<Vec<T>> {
        pollster::block_on(self.to_vec())
    }

    /// The data as `f32` whatever the dtype (`f16` and `bf16` widen
    /// exactly; integers convert as `as f32` does).
    pub async fn to_f32_vec(&self) -> Result<Vec<f32>> {
        Ok(match self.dtype {
            DType::F32 => self.to_vec::<f32>().await?,
            DType::F16 => self
                .to_vec::<half::f16>()
                .await?
                .into_iter()
                .map(f32::from)
                .collect(),
            DType::BF16 => self
                .to_vec::<half::bf16>()
                .await?
                .into_iter()
                .map(f32::from)
                .collect(),
            // Exact up to 2^24 in magnitude.
            DType::I32 => self
                .to_vec::<i32>()
                .await?
                .into_iter()
                .map(|v| v as f32)
                .collect(),
            DType::U32 => self
                .to_vec::<u32>()
                .await?
                .into_iter()
                .map(|v| v as f32)
                .collect(),
        })
    }

    #[cfg(not(target_arch = "wasm32"))]
    /// Blocking form of [`Tensor::to_f32_vec`] (native only).
    pub fn to_f32_vec_blocking(&self) -> Result<Vec<f32>> {
        pollster::block_on(self.to_f32_vec())
    }
}

/// The last dimension (1 for rank 0).
pub(crate) fn last_dim(shape: &[usize]) -> usize {
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
/// [`Context::rand_uniform`](crate::Context::rand_uniform) uploads, for building host references.
pub fn uniform_values(n: usize, low: f32, high: f32, seed: u64) -> Vec<f32> {
    let mut rng = SplitMix64(seed);
    (0..n)
        .map(|_| low + (high - low) * rng.next_f32())
        .collect()
}

/// `n` samples of the normal distribution of `mean` and standard deviation
/// `std` from `seed` (Box-Muller in f64 over the generator
/// [`uniform_values`] uses, rounded to f32): exactly what
/// [`Context::rand_normal`](crate::Context::rand_normal) uploads, for
/// building host references. Unlike [`uniform_values`]' grid of 24-bit
/// steps they take every magnitude near zero, as weights and activations
/// do (bf16 values below 2^-17, which f16 cannot hold exactly, for
/// instance).
pub fn normal_values(n: usize, mean: f32, std: f32, seed: u64) -> Vec<f32> {
    let mut rng = SplitMix64(seed);
    let unit = |r: &mut SplitMix64| (r.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
    (0..n)
        .map(|_| {
            // u1 in (0, 1]: its logarithm is finite.
            let u1 = 1.0 - unit(&mut rng);
            let u2 = unit(&mut rng);
            let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            (f64::from(mean) + f64::from(std) * z) as f32
        })
        .collect()
}
