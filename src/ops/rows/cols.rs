//! Softmax and log-softmax over a middle axis by the column kernel
//! (`shaders/softmax_cols.wgsl`): each invocation walks one column, so the
//! axis is never moved last. Builds plans; the other row ops over a middle
//! axis keep the permute path of [`Context::row_op_axis_plan`].

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::gpu::{Plan, Tensor};
use crate::kernels::{Dispatch, Kernel, Spec};
use crate::ops::rows::{RowOp, RowOptions, check_dtype};
use crate::runtime::Context;

/// Invocations per workgroup of every entry (`WG` in the shader).
const WG: u32 = 256;
/// Columns per workgroup of the `combine` entry (`CW` in the shader).
const COMBINE_COLUMNS: usize = 32;

/// The specialisation of `kernel` (one of the three softmax_cols entries)
/// the plan builds for `dtype`.
pub(crate) fn softmax_cols_spec(kernel: Kernel, dtype: DType) -> Spec {
    Spec::new(kernel).dtype(dtype).override_("WG", WG)
}

/// Every specialisation the column softmax builds (its three entries, f32
/// and f16), for the shader validation tests.
#[cfg(any(test, feature = "dev"))]
pub fn softmax_cols_specs() -> Vec<Spec> {
    let mut specs = Vec::new();
    for kernel in [
        Kernel::SoftmaxCols,
        Kernel::SoftmaxColsCombine,
        Kernel::SoftmaxColsFinish,
    ] {
        for dtype in [DType::F32, DType::F16] {
            specs.push(softmax_cols_spec(kernel, dtype));
        }
    }
    specs
}

impl Context {
    /// Softmax or log-softmax (`op`) of `x` over axis `d` (not the last) by
    /// the column kernel: x read twice and written once (where every later
    /// axis has length 1, the row kernel on x seen as rows). One dispatch when
    /// the columns fill the GPU; else the axis split into segments whose
    /// (max, sum) pairs a second dispatch merges per column and a third
    /// writes from. bf16 runs staged to f32 and rounded back, as the other
    /// column paths. `bytes` counts x twice, the output, and the pairs:
    /// each partial written and read once, each merged pair written once and
    /// read by every segment of its column.
    pub(crate) fn softmax_cols_plan(&self, op: RowOp, x: &Tensor, d: usize) -> Result<Plan> {
        let name = op.name();
        let log_softmax = match op {
            RowOp::Softmax => 0,
            RowOp::LogSoftmax => 1,
            _ => {
                return Err(Error::InvalidArgument(format!(
                    "{name} has no column kernel (softmax and log_softmax do)"
                )));
            }
        };
        self.check_owned(x, name)?;
        x.require_contiguous(name)?;
        let shape = x.shape();
        let (outer, n, inner) = (
            shape[..d].iter().product::<usize>(),
            shape[d],
            shape[d + 1..].iter().product::<usize>(),
        );
        if inner == 1 {
            // Every later axis has length 1: the axis is contiguous, rows of
            // the row kernel.
            let rows = x.reshape([outer, n])?;
            let mut plan = self.row_plan(op, &rows, None, None, 0.0, RowOptions::default())?;
            plan.output = plan.output.reshape(shape)?;
            return Ok(plan);
        }
        if x.dtype() == DType::BF16 {
            // Staged to f32 (exact), normalised in f32, rounded back to bf16.
            let staged = self.stage_bf16(&[x], DType::F32)?;
            let plan = self.softmax_cols_plan(op, &staged.tensors[0], d)?;
            let wide = 2 * staged.tensors[0].size_bytes() + plan.output.size_bytes();
            let pairs = plan.bytes - wide;
            let mut plan = self.round_output_bf16(staged.before(plan, &[x]), None)?;
            plan.bytes = 2 * x.size_bytes() + plan.output.size_bytes() + pairs;
            return Ok(plan);
        }
        check_dtype(self, name, x.dtype())?;
        let cols = outer * inner;
        let output = self.alloc(shape, x.dtype(), "wgtile softmax out")?;
        let mut plan = Plan {
            gpu: self.inner.gpu.clone(),
            label: format!("{name} over axis {d} of {shape:?} (empty)"),
            dispatches: Vec::new(),
            flops: op.flops_per_element() * x.numel() as u64,
            bytes: 2 * x.size_bytes() + output.size_bytes(),
            output,
            scratch: Vec::new(),
        };
        // An empty tensor (an empty axis included): an empty result, as
        // the row kernel gives.
        if x.numel() == 0 {
            return Ok(plan);
        }
        let u = |what: &str, v: usize| Error::u32_index("softmax indices (u32)", what, v);
        u(name, x.numel())?;
        // Enough invocations to fill the GPU (2^18: an H200 holds 270k
        // resident): split the axis when there are few columns, at least 16
        // rows per split (the column reduction's rule).
        let split = (1usize << 18)
            .div_ceil(cols)
            .clamp(1, n.div_ceil(16).max(1));
        let seg = n.div_ceil(split);
        let split = n.div_ceil(seg);
        let gx = cols.div_ceil(WG as usize);
        let max = self.profile().max_workgroups_per_dim as usize;
        if gx > max || split > max {
            return Err(Error::LimitExceeded {
                limit: "max_compute_workgroups_per_dimension",
                requested: gx.max(split) as u64,
                max: max as u64,
                what: format!("{name} over axis {d} of {shape:?}"),
            });
        }
        let params = self.uniform(&[
            u("rows before the axis", outer)?,
            u("the axis", n)?,
            u("columns after the axis", inner)?,
            split as u32,
            seg as u32,
            log_softmax,
            0,
            0,
        ]);
        // With a split: split * cols partial pairs, then the merged pair of
        // each column (the binding is the dummy otherwise).
        let pairs = if split > 1 {
            Some(self.alloc(&[split + 1, cols, 2], DType::F32, "wgtile softmax pairs")?)
        } else {
            None
        };
        let pairs_buf = pairs.as_ref().map_or(&self.inner.dummy_rw, |p| p.buffer());
        let device = &self.inner.device;
        let pipeline = |kernel| {
            self.inner
                .pipelines
                .get(device, &softmax_cols_spec(kernel, x.dtype()))
        };
        let grid = [gx as u32, split as u32, 1];
        let binds = [
            (0, &params),
            (1, x.buffer()),
            (2, plan.output.buffer()),
            (3, pairs_buf),
        ];
        plan.dispatches.push(Dispatch::with_bindings(
            device,
            pipeline(Kernel::SoftmaxCols)?,
            &binds,
            grid,
        ));
        if let Some(pairs) = &pairs {
            plan.dispatches.push(Dispatch::with_bindings(
                device,
                pipeline(Kernel::SoftmaxColsCombine)?,
                &[(0, &params), (3, pairs.buffer())],
                [cols.div_ceil(COMBINE_COLUMNS) as u32, 1, 1],
            ));
            plan.dispatches.push(Dispatch::with_bindings(
                device,
                pipeline(Kernel::SoftmaxColsFinish)?,
                &binds,
                grid,
            ));
            // The partials written and read once, the merged pairs written
            // once and read by each of the column's segments.
            plan.bytes += ((3 * split + 1) * cols * 8) as u64;
            plan.scratch.push(pairs.clone());
        }
        plan.label = format!(
            "{name} over axis {d} of {shape:?} {} (columns, split {split})",
            x.dtype()
        );
        Ok(plan)
    }
}
