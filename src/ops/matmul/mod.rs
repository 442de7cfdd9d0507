//! Matrix multiplication: `[.., M, K] x [.., K, N] -> [.., M, N]` with NumPy
//! `matmul` semantics (batch dimensions broadcast, 1-D operands promoted and the
//! added dimension dropped), f32 or f16 (f16 accumulates in f32).

use std::sync::Arc;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::gpu::TimingOptions;
use crate::kernels::{Dispatch, Kernel, Spec};
pub use crate::problem::{MatmulShape, Padding};
use crate::runtime::Context;
pub use crate::runtime::{Activation, Epilogue};
use crate::runtime::PadCopy;
use crate::gpu::Plan;
use crate::gpu::Tensor;
use crate::tune::autotune::{AutotuneMode, Autotuner};
use crate::tune::pad::PadChoice;
pub use crate::tune::route::MatmulOptions;
use crate::kernels::codegen::fusion::EPILOGUE_DATA_CONSTANTS;
pub(crate) use crate::tune::route::f32_on_tensor_cores;
use crate::tune::{self, MatmulChoice, MatmulKernel};

mod autotune;
mod bf16;
mod dispatch;
mod gemv;
mod padded;
mod plan;

pub(crate) use crate::tune::gemv::{GemvVariant, gemv_variant, gemv_wide_shape};

/// The dispatcher's choice for the raw shape and, when the padding layer
/// would pad, what it would run instead.
#[derive(Clone, Debug)]
pub struct MatmulExplanation {
    /// The kernel for the shape as given.
    pub choice: MatmulChoice,
    /// The padding layer's decision (`None`: the raw shape runs).
    pub padding: Option<PadChoice>,
}

impl MatmulExplanation {
    /// The kernel that will run.
    pub fn kernel(&self) -> MatmulKernel {
        self.padding
            .as_ref()
            .map_or(self.choice.kernel, |p| p.kernel)
    }
}

impl std::fmt::Display for MatmulExplanation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.choice)?;
        if let Some(p) = &self.padding {
            write!(f, "; padding layer: {p}")?;
        }
        Ok(())
    }
}


fn u32_of(v: usize, what: &str) -> Result<u32> {
    u32::try_from(v).map_err(|_| Error::LimitExceeded {
        limit: "u32 indexing",
        requested: v as u64,
        max: u64::from(u32::MAX),
        what: what.to_string(),
    })
}

impl Context {
    /// `a @ b` with the kernel the dispatcher picks.
    pub fn matmul(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        let plan = self.matmul_plan(a, b, None, &MatmulOptions::default())?;
        plan.run()?;
        Ok(plan.into_output())
    }

    /// `act(alpha * (a @ b) + bias) + residual` in one kernel (see [`Epilogue`]).
    pub fn matmul_with(&self, a: &Tensor, b: &Tensor, epilogue: &Epilogue) -> Result<Tensor> {
        let plan = self.matmul_plan_with(a, b, None, &MatmulOptions::default(), epilogue)?;
        plan.run()?;
        Ok(plan.into_output())
    }

    /// `a @ b` with `options` (operands stored transposed, the output
    /// dtype, padding, a forced kernel) and `epilogue` in one call: a
    /// transposed weight with a bias and an activation, as a linear layer
    /// stores it, without the plan API.
    pub fn matmul_with_options(
        &self,
        a: &Tensor,
        b: &Tensor,
        options: &MatmulOptions,
        epilogue: &Epilogue,
    ) -> Result<Tensor> {
        let plan = self.matmul_plan_with(a, b, None, options, epilogue)?;
        plan.run()?;
        Ok(plan.into_output())
    }

    /// `a @ b` written into `out` (whose shape and dtype must match the result).
    pub fn matmul_into(&self, a: &Tensor, b: &Tensor, out: &Tensor) -> Result<()> {
        self.matmul_plan(a, b, Some(out), &MatmulOptions::default())?
            .run()
    }

    /// `a @ b` with a kernel chosen by the caller (for comparisons and tests).
    pub fn matmul_with_kernel(
        &self,
        a: &Tensor,
        b: &Tensor,
        kernel: MatmulKernel,
    ) -> Result<Tensor> {
        let plan = self.matmul_plan(a, b, None, &MatmulOptions::with_kernel(kernel))?;
        plan.run()?;
        Ok(plan.into_output())
    }

    #[cfg(not(target_arch = "wasm32"))]
    /// The f32 split plan's passes around its tensor-core kernel, alone: the
    /// largest finite |A| and |B| (`shaders/matmul_split_scale.wgsl`) over
    /// the logical elements of `a @ b` as `options` read them (transposes,
    /// padded rows, batches), then the f32 CUDA-core fallback that pass arms
    /// when an operand holds an infinity or NaN, writing `out` (untouched
    /// otherwise). Returns the two maxima and whether the fallback ran.
    /// For tests: these passes run on any adapter, the split kernel only on
    /// tensor cores.
    #[doc(hidden)]
    pub fn split_passes(
        &self,
        a: &Tensor,
        b: &Tensor,
        out: &Tensor,
        options: &MatmulOptions,
    ) -> Result<([f32; 2], bool)> {
        for t in [a, b, out] {
            if t.dtype() != DType::F32 {
                return Err(Error::DTypeMismatch {
                    op: "split passes",
                    expected: DType::F32,
                    got: t.dtype(),
                });
            }
        }
        let shape = operand_shape(a, b, options)?;
        if out.shape() != shape.out_shape.as_slice() || !out.is_contiguous() {
            return Err(Error::shape(
                "split passes output",
                out.shape(),
                &shape.out_shape,
                "the output must be a dense tensor of the result's shape",
            ));
        }
        let mut scratch = Vec::new();
        let (maxima, passes) = self.split_scale_dispatches(&shape, &a.buffer, &b.buffer, false)?;
        let mut dispatches: Vec<Dispatch> = passes.into();
        dispatches.extend(self.split_fallback_dispatches(
            (DType::F32, DType::F32),
            &shape,
            (&a.buffer, &b.buffer, &out.buffer),
            &Epilogue::default(),
            &mut scratch,
            &maxima.buffer,
        )?);
        let plan = Plan {
            gpu: self.inner.gpu.clone(),
            label: "split passes".into(),
            dispatches,
            output: maxima,
            flops: 0,
            bytes: (a.storage_len() + b.storage_len()) as u64 * 4,
            scratch,
        };
        plan.run()?;
        let words = plan.output().to_vec_blocking::<f32>()?;
        Ok(([words[0], words[1]], words[2].to_bits() != 0))
    }

    /// What the dispatcher and the padding layer would do for
    /// `[batch] x [m, k] x [k, n]` in `dtype` (with [`Padding::Auto`]), and why.
    /// [`Error::InvalidArgument`] for sizes whose products pass 2^56
    /// elements per operand (or 2^60 multiply-adds).
    pub fn explain_matmul(
        &self,
        dtype: DType,
        m: usize,
        n: usize,
        k: usize,
        batch: usize,
    ) -> Result<MatmulExplanation> {
        // Bounds under which the cost model's arithmetic cannot overflow
        // (far beyond any tensor an adapter can hold).
        let mnk = [m, n, k, batch]
            .iter()
            .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64));
        let operand = |x: usize, y: usize| {
            (x as u64)
                .checked_mul(y as u64)
                .and_then(|e| e.checked_mul(batch as u64))
        };
        let fits = |v: Option<u64>, bits: u32| v.is_some_and(|v| v < 1u64 << bits);
        if !(fits(mnk, 60) && fits(operand(m, k), 56) && fits(operand(k, n), 56) && fits(operand(m, n), 56))
        {
            return Err(Error::InvalidArgument(format!(
                "matmul of M = {m}, N = {n}, K = {k}, batch = {batch} is too large to plan"
            )));
        }
        let profile = self.profile();
        let layout = tune::Layout::dense(m, n, k, false, false);
        let split = (dtype == DType::F32)
            .then(|| {
                f32_on_tensor_cores(
                    profile,
                    &MatmulOptions::default(),
                    (m, n, k),
                    batch,
                    layout,
                    false,
                )
            })
            .flatten();
        if let Some(kernel) = split {
            return Ok(MatmulExplanation {
                choice: tune::MatmulChoice::new(
                    profile,
                    kernel,
                    (m, n),
                    batch,
                    "f32 on tensor cores, each value split into two f16 halves \
                     (f32's accuracy; MatmulOptions::split_f32)"
                        .into(),
                ),
                padding: crate::tune::pad::choose_for(
                    profile,
                    kernel,
                    dtype,
                    (m, n, k),
                    batch,
                    Padding::Auto,
                ),
            });
        }
        Ok(MatmulExplanation {
            choice: tune::choose_matmul(profile, dtype, m, n, k, batch),
            padding: crate::tune::pad::choose(profile, dtype, m, n, k, batch, Padding::Auto),
        })
    }

    /// Checks the operands, allocates (or checks) the output and encodes the
    /// dispatches, without running them. `kernel: None` lets the dispatcher choose.
    pub fn matmul_plan(
        &self,
        a: &Tensor,
        b: &Tensor,
        out: Option<&Tensor>,
        options: &MatmulOptions,
    ) -> Result<Plan> {
        self.matmul_plan_with(a, b, out, options, &Epilogue::default())
    }
}

/// The shape of `a @ b` as `options` read the operands: transposes, and the
/// row pitch of tensors stored with padded rows (read in place).
pub(crate) fn operand_shape(
    a: &Tensor,
    b: &Tensor,
    options: &MatmulOptions,
) -> Result<MatmulShape> {
    let shape = MatmulShape::with_transposes(
        a.shape(),
        b.shape(),
        options.transpose_a,
        options.transpose_b,
    )?;
    if a.is_contiguous() && b.is_contiguous() {
        return Ok(shape.folded());
    }
    let a_pitch = if a.is_contiguous() {
        shape.a_pitch
    } else {
        a.row_stride()
    };
    let b_pitch = if b.is_contiguous() {
        shape.b_pitch
    } else {
        b.row_stride()
    };
    Ok(shape.with_pitches(a_pitch, b_pitch)?.folded())
}

/// `kernel` reading `dtype` operands and writing `out_dtype` results.
pub(crate) fn out_spec(kernel: Kernel, dtype: DType, out_dtype: DType) -> Spec {
    let spec = Spec::new(kernel).dtype(dtype);
    if out_dtype == dtype {
        spec
    } else {
        spec.output(out_dtype)
    }
}

/// `shape` as a batch of matrices: a 1-D operand becomes `[1, K]` on the left
/// (`lhs`) or `[K, 1]` on the right.
pub(crate) fn matrix_dims(shape: &[usize], lhs: bool) -> Vec<usize> {
    match (shape.len(), lhs) {
        (1, true) => vec![1, shape[0]],
        (1, false) => vec![shape[0], 1],
        _ => shape.to_vec(),
    }
}
