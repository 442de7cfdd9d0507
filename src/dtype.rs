//! Element types: [`DType`] on the GPU side and [`Element`] for host slices.

use std::fmt;

/// The element type of a [`Tensor`](crate::Tensor).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary16 (needs the adapter's `shader-f16` feature for compute).
    F16,
    /// bfloat16: the top half of an f32 (8 exponent bits, 8 significant
    /// bits), the dtype most published checkpoints are stored in. A storage
    /// type: WGSL has no bf16, so kernels read the 16-bit patterns from u32
    /// words and widen them exactly to f32 (`bits << 16`); results are
    /// rounded to nearest even from f32 (NaN stays NaN, with its quiet bit
    /// set; overflow rounds to infinity as IEEE rounding does). Needs no
    /// adapter feature.
    BF16,
}

impl DType {
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }

    /// The name: the WGSL scalar type for `f32` and `f16`; `bf16` has no
    /// WGSL type (kernels hold it in u32 words).
    pub const fn wgsl(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
        }
    }

    /// Every dtype, for sweeps and tests.
    pub const ALL: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

    /// The dtypes kernels compute in (bf16 is staged through these).
    pub(crate) const COMPUTE: [DType; 2] = [DType::F32, DType::F16];

    /// `v` rounded to this dtype (nearest even) and widened back to f32:
    /// the value a tensor of this dtype holds for `v`.
    pub fn round(self, v: f32) -> f32 {
        match self {
            DType::F32 => v,
            DType::F16 => half::f16::from_f32(v).to_f32(),
            DType::BF16 => half::bf16::from_f32(v).to_f32(),
        }
    }

    /// A 32-bit word holding `value` in this dtype (two copies for the
    /// 16-bit types), rounded to nearest even: for fills.
    pub(crate) fn fill_word(self, value: f32) -> u32 {
        let half = match self {
            DType::F32 => return value.to_bits(),
            DType::F16 => half::f16::from_f32(value).to_bits(),
            DType::BF16 => half::bf16::from_f32(value).to_bits(),
        };
        u32::from(half) * 0x1_0001
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.wgsl())
    }
}

/// A host element type that maps to a [`DType`]: `f32`, `half::f16` or
/// `half::bf16`.
pub trait Element: bytemuck::Pod + Copy + Send + Sync + fmt::Debug + 'static {
    /// The matching GPU dtype.
    const DTYPE: DType;
    /// Converts from `f32` (rounding to nearest even for `f16` and `bf16`).
    fn from_f32(v: f32) -> Self;
    /// Converts to `f32` (exact for every type).
    fn to_f32(self) -> f32;
}

impl Element for f32 {
    const DTYPE: DType = DType::F32;
    fn from_f32(v: f32) -> Self {
        v
    }
    fn to_f32(self) -> f32 {
        self
    }
}

impl Element for half::f16 {
    const DTYPE: DType = DType::F16;
    fn from_f32(v: f32) -> Self {
        half::f16::from_f32(v)
    }
    fn to_f32(self) -> f32 {
        half::f16::to_f32(self)
    }
}

impl Element for half::bf16 {
    const DTYPE: DType = DType::BF16;
    fn from_f32(v: f32) -> Self {
        half::bf16::from_f32(v)
    }
    fn to_f32(self) -> f32 {
        half::bf16::to_f32(self)
    }
}
