//! Element types: [`DType`] on the GPU side and [`Element`] for host slices.

use std::fmt;

/// The element type of a [`Tensor`](crate::Tensor).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
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
    ///
    /// Matmul, attention and the quantised GEMM of bf16 operands (its
    /// activations, more than 8 rows) on tensor cores run the f16 kernels
    /// after a range test on the GPU: values f16 holds convert
    /// exactly, and the few below 2^-17 that real data has (bf16's 8
    /// significant bits past f16's subnormals) move to a neighbouring
    /// multiple of 2^-24. Where a finite value is beyond f16's range (65504),
    /// or an operand holds such a small value and none of 2^-10 or more,
    /// the f32 kernels run on f32 copies instead. So each operand's values
    /// move by at most 2^-14 of its largest magnitude, 0 for f16 values.
    /// Other adapters run f32 copies through the f32 kernels, exact.
    BF16,
    /// 32-bit signed integers (token ids, indices, counts). Only the ops
    /// that say so take them ([`Context::gather`](crate::Context::gather)
    /// and `index_select` ids, `arange`, `cast` to and from the float
    /// dtypes, copies and views); every float op refuses them by name.
    I32,
    /// 32-bit unsigned integers, as [`DType::I32`].
    U32,
}

impl DType {
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 | DType::I32 | DType::U32 => 4,
            DType::F16 | DType::BF16 => 2,
        }
    }

    /// Whether this is a floating-point dtype (what arithmetic ops take).
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// The name: the WGSL scalar type for `f32` and `f16`; `bf16` has no
    /// WGSL type (kernels hold it in u32 words).
    pub const fn wgsl(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::U32 => "u32",
        }
    }

    /// Every floating-point dtype, for sweeps and tests.
    pub const ALL: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

    /// The integer dtypes.
    pub const INTEGERS: [DType; 2] = [DType::I32, DType::U32];

    /// The dtypes kernels compute in (bf16 is staged through these).
    pub(crate) const COMPUTE: [DType; 2] = [DType::F32, DType::F16];

    /// `v` rounded to this dtype (nearest even) and widened back to f32:
    /// the value a tensor of this dtype holds for `v`.
    /// For the integer dtypes: `v` truncated toward zero and saturated to
    /// the type's range (NaN gives 0), as `as` casts do.
    pub fn round(self, v: f32) -> f32 {
        match self {
            DType::F32 => v,
            DType::F16 => half::f16::from_f32(v).to_f32(),
            DType::BF16 => half::bf16::from_f32(v).to_f32(),
            DType::I32 => v as i32 as f32,
            DType::U32 => v as u32 as f32,
        }
    }

    /// A 32-bit word holding `value` in this dtype (two copies for the
    /// 16-bit types), rounded to nearest even: for fills.
    /// Integers take `value` as `as` does (truncated, saturated).
    pub(crate) fn fill_word(self, value: f32) -> u32 {
        let half = match self {
            DType::F32 => return value.to_bits(),
            DType::I32 => return (value as i32) as u32,
            DType::U32 => return value as u32,
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

/// A host element type that maps to a [`DType`]: `f32`, `half::f16`,
/// `half::bf16`, `i32` or `u32`.
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

impl Element for i32 {
    const DTYPE: DType = DType::I32;
    /// Truncated toward zero and saturated (`as`).
    fn from_f32(v: f32) -> Self {
        v as i32
    }
    /// Exact up to 2^24 in magnitude, rounded to nearest beyond.
    fn to_f32(self) -> f32 {
        self as f32
    }
}

impl Element for u32 {
    const DTYPE: DType = DType::U32;
    fn from_f32(v: f32) -> Self {
        v as u32
    }
    fn to_f32(self) -> f32 {
        self as f32
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
