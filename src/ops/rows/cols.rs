//! The row ops over a middle axis by column kernels: softmax and
//! log-softmax (`shaders/softmax_cols.wgsl`), LayerNorm, RMSNorm and L2
//! normalisation (`shaders/norm_cols.wgsl`). Each invocation walks one
//! column, so the axis is never moved last. Both shaders share one launch:
//! the same parameter block, grid, split rule and (two-float) partials per
//! column and segment; this module builds those plans and nothing else (a
//! padded x keeps the permute path of [`Context::row_op_axis_plan`]).

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::gpu::{Plan, Tensor};
use crate::kernels::{Dispatch, Kernel, Spec};
use crate::ops::rows::{
    FLAG_BIAS, FLAG_L2, FLAG_RMS, FLAG_WEIGHT, RowOp, RowOptions, check_dtype, check_param,
};
use crate::runtime::Context;

/// Invocations per workgroup of every entry (`WG` in the shaders).
const WG: u32 = 256;
/// Columns per workgroup of the `combine` entries (`CW` in the shaders).
const COMBINE_COLUMNS: usize = 32;

/// The three entries of one column shader: `main` (statistics, and the
/// writes without a split), `combine` (the partials merged per column) and
/// `finish` (the writes after a split).
#[derive(Clone, Copy)]
struct ColumnKernels {
    main: Kernel,
    combine: Kernel,
    finish: Kernel,
}

impl ColumnKernels {
    const SOFTMAX: Self = Self {
        main: Kernel::SoftmaxCols,
        combine: Kernel::SoftmaxColsCombine,
        finish: Kernel::SoftmaxColsFinish,
    };
    const NORM: Self = Self {
        main: Kernel::NormCols,
        combine: Kernel::NormColsCombine,
        finish: Kernel::NormColsFinish,
    };

    fn of(op: RowOp) -> Self {
        match op {
            RowOp::Softmax | RowOp::LogSoftmax => Self::SOFTMAX,
            RowOp::LayerNorm | RowOp::RmsNorm | RowOp::L2Normalize => Self::NORM,
        }
    }

    /// Every specialisation the plans build (the three entries, f32 and
    /// f16; bf16 runs the f32 ones).
    #[cfg(any(test, feature = "dev"))]
    fn specs(self) -> Vec<Spec> {
        let mut specs = Vec::new();
        for kernel in [self.main, self.combine, self.finish] {
            for dtype in [DType::F32, DType::F16] {
                specs.push(cols_spec(kernel, dtype));
            }
        }
        specs
    }
}

/// The specialisation of `kernel` (an entry of a column shader) the plan
/// builds for `dtype`.
fn cols_spec(kernel: Kernel, dtype: DType) -> Spec {
    Spec::new(kernel).dtype(dtype).override_("WG", WG)
}

/// Every specialisation the column softmax builds (its three entries, f32
/// and f16), for the shader validation tests.
#[cfg(any(test, feature = "dev"))]
pub fn softmax_cols_specs() -> Vec<Spec> {
    ColumnKernels::SOFTMAX.specs()
}

/// Every specialisation the column norms build (LayerNorm, RMSNorm and L2
/// share them: the op is a parameter flag), for the shader validation
/// tests.
#[cfg(any(test, feature = "dev"))]
pub fn norm_cols_specs() -> Vec<Spec> {
    ColumnKernels::NORM.specs()
}

impl Context {
    /// The row op `op` of `x` over axis `d` (not the last; `weight` and
    /// `bias` already checked to be `[x.shape[d]]` and taken by `op`) by
    /// its column kernel: x read twice and written once (where every later
    /// axis has length 1, the row kernel on x seen as rows). One dispatch
    /// when the columns fill the GPU; else the axis split into segments
    /// whose partial statistics ((max, sum) for softmax, (mean, M2) for the
    /// norms) a second dispatch merges per column and a third writes from.
    /// bf16 runs staged to f32 (its weight and bias too) and rounded back,
    /// as the other column paths. `bytes` counts x twice, the parameters
    /// and the output once, and the partials: each written and read once,
    /// each merged pair written once and read by every segment of its
    /// column.
    pub(crate) fn row_op_cols_plan(
        &self,
        op: RowOp,
        x: &Tensor,
        d: usize,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f32,
    ) -> Result<Plan> {
        let name = op.name();
        self.check_owned(x, name)?;
        x.require_contiguous(name)?;
        let norm = matches!(op, RowOp::LayerNorm | RowOp::RmsNorm | RowOp::L2Normalize);
        if norm && !(eps.is_finite() && eps >= 0.0) {
            return Err(Error::InvalidArgument(format!(
                "{name}: eps must be finite and >= 0, got {eps}"
            )));
        }
        let shape = x.shape();
        let (outer, n, inner) = (
            shape[..d].iter().product::<usize>(),
            shape[d],
            shape[d + 1..].iter().product::<usize>(),
        );
        if inner == 1 {
            // Every later axis has length 1: the axis is contiguous, rows of
            // the row kernel (which checks the parameters).
            let rows = x.reshape([outer, n])?;
            let mut plan = self.row_plan(op, &rows, weight, bias, eps, RowOptions::default())?;
            plan.output = plan.output.reshape(shape)?;
            return Ok(plan);
        }
        if x.dtype() == DType::BF16 {
            // Staged to f32 (exact), normalised in f32, rounded back to bf16.
            let params = self.bf16_row_params(op, weight, bias)?;
            let mut originals = vec![x];
            originals.extend(&params);
            let staged = self.stage_bf16(&originals, DType::F32)?;
            let mut wide_params = staged.tensors[1..].iter();
            let w = weight.and_then(|_| wide_params.next());
            let b = bias.and_then(|_| wide_params.next());
            let plan = self.row_op_cols_plan(op, &staged.tensors[0], d, w, b, eps)?;
            let params_bytes = |ts: &[Tensor]| ts.iter().map(Tensor::size_bytes).sum::<u64>();
            let wide = 2 * staged.tensors[0].size_bytes()
                + params_bytes(&staged.tensors[1..])
                + plan.output.size_bytes();
            let partials = plan.bytes - wide;
            let mut plan = self.round_output_bf16(staged.before(plan, &originals), None)?;
            plan.bytes = 2 * x.size_bytes()
                + params.iter().map(|p| p.size_bytes()).sum::<u64>()
                + plan.output.size_bytes()
                + partials;
            return Ok(plan);
        }
        check_dtype(self, name, x.dtype())?;
        self.check_all_owned(weight.into_iter().chain(bias), "a row-op weight or bias")?;
        for p in [weight, bias] {
            if let Some(t) = p {
                t.require_contiguous(name)?;
            }
            check_param(name, shape, x.dtype(), p, n)?;
        }
        let cols = outer * inner;
        let output = self.alloc(shape, x.dtype(), "wgtile column row op out")?;
        let params_bytes: u64 = [weight, bias].into_iter().flatten().map(Tensor::size_bytes).sum();
        let mut plan = Plan {
            gpu: self.inner.gpu.clone(),
            label: format!("{name} over axis {d} of {shape:?} (empty)"),
            dispatches: Vec::new(),
            flops: op.flops_per_element() * x.numel() as u64,
            bytes: 2 * x.size_bytes() + params_bytes + output.size_bytes(),
            output,
            scratch: Vec::new(),
        };
        // An empty tensor (an empty axis included): an empty result, as
        // the row kernel gives.
        if x.numel() == 0 {
            return Ok(plan);
        }
        let u = |what: &str, v: usize| Error::u32_index("column row-op indices (u32)", what, v);
        u(name, x.numel())?;
        // The column reduction's grid and split.
        let (split, seg, gx) = self.column_grid(cols, n, WG, || format!("{name} over axis {d} of {shape:?}"))?;
        // The op's word: norm_cols.wgsl shares the row kernels' FLAG_*
        // values; softmax_cols reads 1 as log-softmax. Its value: eps.
        let mut flags = match op {
            RowOp::Softmax | RowOp::LayerNorm => 0,
            RowOp::LogSoftmax => 1,
            RowOp::RmsNorm => FLAG_RMS,
            RowOp::L2Normalize => FLAG_RMS | FLAG_L2,
        };
        if weight.is_some() {
            flags |= FLAG_WEIGHT;
        }
        if bias.is_some() {
            flags |= FLAG_BIAS;
        }
        let params = self.column_params("column row-op indices (u32)", (outer, n, inner), (split, seg), (flags, eps))?;
        // With a split: split * cols partial pairs, then the merged pair of
        // each column (the binding is the dummy otherwise).
        let partials = if split > 1 {
            Some(self.alloc(&[split + 1, cols, 2], DType::F32, "wgtile column partials")?)
        } else {
            None
        };
        let partials_buf = partials
            .as_ref()
            .map_or(&self.inner.dummy_rw, |p| p.buffer());
        let device = &self.inner.device;
        let kernels = ColumnKernels::of(op);
        let pipeline = |kernel| self.inner.pipelines.get(device, &cols_spec(kernel, x.dtype()));
        let grid = [gx as u32, split as u32, 1];
        let mut binds = vec![
            (0, &params),
            (1, x.buffer()),
            (2, plan.output.buffer()),
            (3, partials_buf),
        ];
        if norm {
            binds.push((4, weight.map_or(&self.inner.dummy, |w| w.buffer())));
            binds.push((5, bias.map_or(&self.inner.dummy, |b| b.buffer())));
        }
        plan.dispatches.push(Dispatch::with_bindings(
            device,
            pipeline(kernels.main)?,
            &binds,
            grid,
        ));
        if let Some(partials) = &partials {
            plan.dispatches.push(Dispatch::with_bindings(
                device,
                pipeline(kernels.combine)?,
                &[(0, &params), (3, partials.buffer())],
                [cols.div_ceil(COMBINE_COLUMNS) as u32, 1, 1],
            ));
            plan.dispatches.push(Dispatch::with_bindings(
                device,
                pipeline(kernels.finish)?,
                &binds,
                grid,
            ));
            // The partials written and read once, the merged pairs written
            // once and read by each of the column's segments.
            plan.bytes += ((3 * split + 1) * cols * 8) as u64;
            plan.scratch.push(partials.clone());
        }
        plan.label = format!(
            "{name} over axis {d} of {shape:?} {} (columns, split {split})",
            x.dtype()
        );
        Ok(plan)
    }
}
