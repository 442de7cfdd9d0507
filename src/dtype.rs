//! Element types: [`DType`] on the GPU side and [`Element`] for host slices.

use std::fmt;

/// The element type of a [`Tensor`](crate::Tensor).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary16 (needs the adapter's `shader-f16` feature for compute).
    F16,
}

impl DType {
    /// Bytes per element.
    pub const fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::F16 => 2,
        }
    }

    /// The WGSL scalar type name.
    pub const fn wgsl(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
        }
    }

    /// Every dtype, for sweeps and tests.
    pub const ALL: [DType; 2] = [DType::F32, DType::F16];
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.wgsl())
    }
}

/// A host element type that maps to a [`DType`]: `f32` or `half::f16`.
pub trait Element: bytemuck::Pod + Copy + Send + Sync + fmt::Debug + 'static {
    /// The matching GPU dtype.
    const DTYPE: DType;
    /// Converts from `f32` (rounding to nearest for `f16`).
    fn from_f32(v: f32) -> Self;
    /// Converts to `f32` (exact for both types).
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
