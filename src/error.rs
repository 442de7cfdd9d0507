//! The crate's one error type.
//!
//! Every fallible call in wgtile returns [`Result<T>`]. Variants separate
//! *invalid input* (the caller can fix the call: [`Error::ShapeMismatch`],
//! [`Error::InvalidArgument`], [`Error::DTypeMismatch`]) from *this adapter
//! cannot* ([`Error::UnsupportedFeature`], [`Error::LimitExceeded`]) and from
//! failures of the GPU stack itself ([`Error::Shader`], [`Error::Gpu`],
//! [`Error::BufferMapping`], ...).

use crate::dtype::DType;

/// Everything that can go wrong in wgtile.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No adapter matched the requested backend / name filter.
    #[error("no GPU adapter found ({0})")]
    NoAdapter(String),

    /// The adapter was found but refused to create a device.
    #[error("the adapter refused to create a device: {0}")]
    RequestDevice(String),

    /// Two shapes that must agree do not.
    #[error("shape mismatch in {op}: {lhs:?} vs {rhs:?} ({why})")]
    ShapeMismatch {
        /// The operation that checked the shapes.
        op: &'static str,
        /// The first shape involved.
        lhs: Vec<usize>,
        /// The second shape involved.
        rhs: Vec<usize>,
        /// Which dimensions disagree and how.
        why: String,
    },

    /// A tensor (or host slice) has a dtype the call does not accept.
    #[error("dtype mismatch in {op}: expected {expected}, got {got}")]
    DTypeMismatch {
        /// The operation that checked the dtypes.
        op: &'static str,
        /// The dtype the call needs.
        expected: DType,
        /// The dtype it was given.
        got: DType,
    },

    /// An integer tensor (i32, u32) given to an op that computes in
    /// floating point.
    #[error("{op} takes floating-point tensors (f32, f16, bf16), not {got}")]
    NotFloat {
        /// The operation (or its argument) that refused the tensor.
        op: String,
        /// The integer dtype it was given.
        got: DType,
    },

    /// An argument is invalid for a reason other than shape or dtype
    /// (rank over the supported maximum, a host slice of the wrong length...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The adapter lacks a feature the call needs (for example `shader-f16`).
    #[error("unsupported on this adapter: {what} needs the `{feature}` feature")]
    UnsupportedFeature {
        /// The wgpu feature's name.
        feature: &'static str,
        /// What needed it.
        what: String,
    },

    /// The call would exceed one of the adapter's limits.
    #[error("{what} needs {requested} but the adapter's `{limit}` is {max}")]
    LimitExceeded {
        /// The wgpu limit's name, as in `wgpu::Limits`.
        limit: &'static str,
        /// What was asked for.
        requested: u64,
        /// The adapter's value for that limit.
        max: u64,
        /// What needed it.
        what: String,
    },

    /// A WGSL module or compute pipeline failed to compile or validate.
    #[error("shader `{kernel}` failed: {message}")]
    Shader {
        /// The kernel's label.
        kernel: String,
        /// The compiler's or validator's message.
        message: String,
    },

    /// wgpu reported a validation or out-of-memory error for submitted work.
    #[error("GPU error during {during}: {message}")]
    Gpu {
        /// What wgtile was doing.
        during: String,
        /// wgpu's message.
        message: String,
    },

    /// Reading a buffer back to the host failed.
    #[error("buffer mapping failed: {0}")]
    BufferMapping(String),

    /// The device was lost or a wait on it failed.
    #[error("device lost or poll failed: {0}")]
    DeviceLost(String),
}

/// `Result` with [`Error`] as the error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// `v` as the u32 the kernels index with, or [`Error::LimitExceeded`]
    /// naming `limit` and `what` it counts.
    pub(crate) fn u32_index(limit: &'static str, what: &str, v: usize) -> Result<u32> {
        u32::try_from(v).map_err(|_| Error::LimitExceeded {
            limit,
            requested: v as u64,
            max: u64::from(u32::MAX),
            what: what.to_string(),
        })
    }

    /// [`Error::NotFloat`] for an integer `dtype` (`what` names the op or
    /// its argument).
    pub(crate) fn require_float(dtype: DType, what: &str) -> Result<()> {
        if dtype.is_float() {
            Ok(())
        } else {
            Err(Error::NotFloat {
                op: what.to_string(),
                got: dtype,
            })
        }
    }

    pub(crate) fn shape(
        op: &'static str,
        lhs: &[usize],
        rhs: &[usize],
        why: impl Into<String>,
    ) -> Self {
        Error::ShapeMismatch {
            op,
            lhs: lhs.to_vec(),
            rhs: rhs.to_vec(),
            why: why.into(),
        }
    }

    pub(crate) fn gpu(during: impl Into<String>, err: wgpu::Error) -> Self {
        Error::Gpu {
            during: during.into(),
            message: err.to_string(),
        }
    }
}
