//! Reductions (sum, max, mean) over the last axis, any axis or all
//! elements, and the masked mean: documented on [`Reduction`].

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::kernels::{Dispatch, Kernel};
use crate::ops::rows::{RowParams, RowSource, check_dtype, grid, row_spec, rows_of_shape, to_u32};
use crate::runtime::Context;
use crate::gpu::Plan;
use crate::gpu::Tensor;
use crate::ops::rows::source::RowFusion;
pub(crate) use crate::tune::rows::{combine_spec, reduce_layout, reduce_row_layout};

/// Which elements a reduction covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Axis {
    /// The last axis: one result per row, the output drops the last dimension.
    Last,
    /// Every element: a rank-0 result.
    All,
    /// One axis (any): the output drops it. Other than the last, a column
    /// kernel reads each element once, adjacent invocations on adjacent
    /// columns (`shaders/reduce_cols.wgsl`); an empty axis or empty result
    /// goes through a permute and the row kernels (NumPy's answers).
    Dim(usize),
}

/// Which reduction to compute.
///
/// Reductions: sum, max and mean over the last axis or over all elements
/// (`shaders/reduce.wgsl`).
///
/// Accumulation is in f32 whatever the input dtype; **the output has the
/// input's dtype** (an f16 sum that exceeds 65504 becomes `inf`, as f16
/// arithmetic would). Over the last axis the output shape is the input's
/// without its last dimension; over all elements it is rank 0 (`[]`).
///
/// Empty reductions follow NumPy: the sum of nothing is 0, the mean of
/// nothing is NaN, and the max of nothing is an [`Error::InvalidArgument`]
/// (NumPy raises: `maximum` has no identity). NaN propagates through all three.
///
/// Launch: `T` invocations per row, each accumulating about 8 chunks of 4
/// elements (vec4 loads when `n % 4 == 0`), short rows sharing a workgroup;
/// when few long rows would leave the GPU idle (a whole-tensor reduction),
/// each row is split over several workgroups writing f32 partials, which a
/// second dispatch (`combine`) reduces.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// Sum (0 for an empty reduction).
    Sum,
    /// Maximum (NaN if any element is NaN; an error for an empty reduction,
    /// as NumPy's `max` raises: the maximum has no identity. ONNX's
    /// `ReduceMax` and some frameworks answer -inf instead; reduce a
    /// non-empty axis, or handle the empty case before calling, for that).
    Max,
    /// Arithmetic mean: the f32 sum times `1 / n` (NaN for an empty
    /// reduction). The sum is formed first, so values whose sum overflows
    /// f32 (near +-3.4e38, times n) give +-inf.
    Mean,
}

impl Reduction {
    fn name(self) -> &'static str {
        match self {
            Reduction::Sum => "sum",
            Reduction::Max => "max",
            Reduction::Mean => "mean",
        }
    }

    /// The shader's `OP` constant.
    fn op(self) -> u32 {
        match self {
            Reduction::Sum | Reduction::Mean => 0,
            Reduction::Max => 1,
        }
    }
}

impl Context {
    /// The reduction `op` of `x` over `axis` as a [`Plan`]. `bytes` = input
    /// read once + output written once; `flops` = one per input element.
    pub fn reduce_plan(&self, x: &Tensor, op: Reduction, axis: Axis) -> Result<Plan> {
        if let Axis::Dim(d) = axis {
            let rank = x.rank();
            if d >= rank {
                return Err(Error::InvalidArgument(format!(
                    "{}: axis {d} is out of range for shape {:?}",
                    op.name(),
                    x.shape()
                )));
            }
            if d + 1 == rank {
                return self.reduce_plan(x, op, Axis::Last);
            }
            if let Some(plan) = self.reduce_cols_plan(x, op, d)? {
                return Ok(plan);
            }
            // The axis moved last, the others kept in order: the rows'
            // results come out in the output's order.
            let axes: Vec<usize> = (0..rank).filter(|&a| a != d).chain([d]).collect();
            let moved = self.permute_plan(x, &axes)?;
            let mut plan = self.reduce_plan(moved.output(), op, Axis::Last)?;
            plan.dispatches.splice(0..0, moved.dispatches.iter().cloned());
            plan.bytes += moved.bytes;
            plan.label = format!("{} after {}", plan.label, moved.label());
            plan.scratch.push(moved.into_output());
            return Ok(plan);
        }
        x.require_contiguous(op.name())?;
        if x.dtype() == DType::BF16 {
            // Read as bf16 words and widened in the kernel (a fused source
            // of one leaf), reduced in f32, rounded back to bf16.
            let fusion = RowFusion::new(self, &x.expr(), None)?;
            let plan = self.reduce_source_plan(RowSource::Fused(&fusion), op, axis)?;
            return self.round_output_bf16(plan, None);
        }
        self.reduce_source_plan(RowSource::Tensor(x), op, axis)
    }

    /// The reduction `op` over `axis` of `x` (a tensor or a fused expression).
    // Long on purpose: the last-axis and whole-tensor reductions share checks, the split
    // decision (tune::rows) and the combine pass; their launches differ in a few bindings.
    pub(crate) fn reduce_source_plan(
        &self,
        x: RowSource<'_>,
        op: Reduction,
        axis: Axis,
    ) -> Result<Plan> {
        let name = op.name();
        if let RowSource::Tensor(t) = x {
            self.check_owned(t, name)?;
        }
        check_dtype(self, name, x.dtype())?;
        let (rows, n, out_shape) = match axis {
            Axis::Last => {
                let (rows, n) = rows_of_shape(name, x.shape())?;
                (rows, n, x.shape()[..x.shape().len() - 1].to_vec())
            }
            Axis::All => (1, x.numel(), Vec::new()),
            Axis::Dim(_) => {
                return Err(Error::InvalidArgument(format!(
                    "{name} of a fused expression takes Axis::Last or Axis::All"
                )));
            }
        };
        if n == 0 && rows > 0 && op == Reduction::Max {
            return Err(Error::InvalidArgument(format!(
                "max over an empty axis of shape {:?}: a maximum of no elements has no \
                 identity (NumPy raises too)",
                x.shape()
            )));
        }
        let dtype = x.dtype();
        let output = self.alloc(&out_shape, dtype, "wgtile reduce out")?;
        let fused_ops = match &x {
            RowSource::Fused(f) => f.ops_per_element(),
            RowSource::Tensor(_) => 0,
        };
        let mut plan = Plan {
            gpu: self.inner.gpu.clone(),
            label: format!("{name} (empty)"),
            dispatches: Vec::new(),
            flops: (1 + fused_ops) * x.numel() as u64,
            bytes: x.read_bytes() + output.size_bytes(),
            output,
            scratch: Vec::new(),
        };
        if rows == 0 {
            return Ok(plan);
        }
        if n == 0 {
            let value = if op == Reduction::Mean { f32::NAN } else { 0.0 };
            let pattern = dtype.fill_word(value);
            plan.label = format!("{name} of empty rows (fill)");
            plan.dispatches
                .push(self.fill_dispatch(&plan.output.buffer, pattern)?);
            return Ok(plan);
        }
        let rows32 = to_u32(&format!("{name}: rows"), rows)?;
        let n32 = to_u32(&format!("{name}: row length"), n)?;
        to_u32(&format!("{name}: elements"), x.numel())?;
        let profile = self.profile();
        let layout = reduce_layout(profile, rows32, n32);
        let kernel = if layout.row.subgroup_ok(profile) {
            Kernel::ReduceSubgroup
        } else {
            Kernel::Reduce
        };
        let scale = if op == Reduction::Mean {
            1.0 / n as f32
        } else {
            1.0
        };
        let spec = row_spec(kernel, dtype, &layout.row).constant("OP", op.op());
        // Storage buffers of the reduce kernel itself: out, partials.
        let (pipeline, source) = x.prepare(self, &spec, 2, DType::F32)?;
        let device = &self.inner.device;
        let bind = |rest: &[(u32, &wgpu::Buffer)]| -> Vec<(u32, wgpu::Buffer)> {
            rest.iter()
                .map(|(b, buf)| (*b, (*buf).clone()))
                .chain(source.iter().cloned())
                .collect()
        };
        if layout.split == 1 {
            let groups = u64::from(rows32).div_ceil(u64::from(layout.row.rows_per_group()));
            let workgroups = grid(profile, groups, name)?;
            let params = RowParams {
                rows: rows32,
                n: n32,
                groups_x: workgroups[0],
                split: 1,
                scale,
                ..RowParams::default()
            }
            .buffer(self);
            let binds = bind(&[
                (0, &params),
                (2, &plan.output.buffer),
                (3, &self.inner.dummy_rw),
            ]);
            let binds: Vec<(u32, &wgpu::Buffer)> = binds.iter().map(|(b, buf)| (*b, buf)).collect();
            plan.dispatches.push(Dispatch::with_bindings(
                device, pipeline, &binds, workgroups,
            ));
        } else {
            let partials = self.alloc(
                &[rows * layout.split as usize],
                DType::F32,
                "wgtile reduce partials",
            )?;
            let groups = u64::from(rows32) * u64::from(layout.split);
            let workgroups = grid(profile, groups, name)?;
            let params = RowParams {
                rows: rows32,
                n: n32,
                groups_x: workgroups[0],
                split: layout.split,
                seg: layout.seg,
                scale,
                ..RowParams::default()
            }
            .buffer(self);
            let binds = bind(&[
                (0, &params),
                (2, &plan.output.buffer),
                (3, &partials.buffer),
            ]);
            let binds: Vec<(u32, &wgpu::Buffer)> = binds.iter().map(|(b, buf)| (*b, buf)).collect();
            plan.dispatches.push(Dispatch::with_bindings(
                device, pipeline, &binds, workgroups,
            ));
            let wg = layout.row.wg;
            let combine = self
                .inner
                .pipelines
                .get(device, &combine_spec(dtype, op.op(), wg))?;
            let workgroups = grid(profile, u64::from(rows32), name)?;
            let params = RowParams {
                rows: rows32,
                n: n32,
                groups_x: workgroups[0],
                split: layout.split,
                seg: layout.seg,
                scale,
                ..RowParams::default()
            }
            .buffer(self);
            plan.dispatches.push(Dispatch::with_bindings(
                device,
                combine,
                &[
                    (0, &params),
                    (2, &plan.output.buffer),
                    (3, &partials.buffer),
                ],
                workgroups,
            ));
            plan.scratch.push(partials);
        }
        let fused = match &x {
            RowSource::Fused(f) => format!(" of {}", f.describe()),
            RowSource::Tensor(_) => String::new(),
        };
        plan.label = format!(
            "{name}{fused} {:?} {} over {axis:?} ({} wg={} t={} split={} vec{})",
            x.shape(),
            dtype,
            kernel.name(),
            layout.row.wg,
            layout.row.t,
            layout.split,
            if layout.row.vec4 { 4 } else { 1 }
        );
        Ok(plan)
    }

    /// The column kernels' uniform (`Params` in `shaders/cols_driver.wgsl`):
    /// x viewed as `[outer, n, inner]`, `split` segments of `seg` rows, the
    /// op's word and value; `what` names the index limit an oversized view
    /// breaks.
    pub(crate) fn column_params(
        &self,
        what: &'static str,
        (outer, n, inner): (usize, usize, usize),
        (split, seg): (usize, usize),
        (op_word, op_value): (u32, f32),
    ) -> Result<wgpu::Buffer> {
        let u = |name: &str, v: usize| Error::u32_index(what, name, v);
        Ok(self.uniform(&[
            u("rows before the axis", outer)?,
            u("the axis", n)?,
            u("columns after the axis", inner)?,
            u("segments", split)?,
            u("segment rows", seg)?,
            op_word,
            op_value.to_bits(),
            0,
        ]))
    }

    /// The column kernels' grid for `cols` columns of `n` rows and `wg`
    /// invocations per workgroup: `(split, seg, gx)`, the axis split into
    /// `split` segments of `seg` rows so that about 2^18 invocations run
    /// (an H200 holds 270k resident), at least 16 rows a segment, and `gx`
    /// workgroups along the columns; [`Error::LimitExceeded`] naming `what`
    /// where the grid passes the adapter's limit.
    pub(crate) fn column_grid(
        &self,
        cols: usize,
        n: usize,
        wg: u32,
        what: impl FnOnce() -> String,
    ) -> Result<(usize, usize, usize)> {
        let split = (1usize << 18).div_ceil(cols).clamp(1, n.div_ceil(16).max(1));
        let seg = n.div_ceil(split);
        let split = n.div_ceil(seg);
        let gx = cols.div_ceil(wg as usize);
        let max = self.profile().max_workgroups_per_dim as usize;
        if gx > max || split > max {
            return Err(Error::LimitExceeded {
                limit: "max_compute_workgroups_per_dimension",
                requested: gx.max(split) as u64,
                max: max as u64,
                what: what(),
            });
        }
        Ok((split, seg, gx))
    }

    /// The reduction over middle axis `d` by the column kernel, or `None`
    /// where it does not apply (an empty axis or result: the row path
    /// gives NumPy's answers).
    fn reduce_cols_plan(&self, x: &Tensor, op: Reduction, d: usize) -> Result<Option<Plan>> {
        let name = op.name();
        self.check_owned(x, name)?;
        x.require_contiguous(name)?;
        let shape = x.shape();
        let (outer, n, inner) = (
            shape[..d].iter().product::<usize>(),
            shape[d],
            shape[d + 1..].iter().product::<usize>(),
        );
        let cols = outer * inner;
        if n == 0 || cols == 0 {
            return Ok(None);
        }
        if x.dtype() == DType::BF16 {
            // Staged to f32 (exact), reduced in f32, rounded back to bf16.
            let staged = self.stage_bf16(&[x], DType::F32)?;
            let Some(plan) = self.reduce_cols_plan(&staged.tensors[0], op, d)? else {
                return Ok(None);
            };
            return self.round_output_bf16(staged.before(plan, &[x]), None).map(Some);
        }
        check_dtype(self, name, x.dtype())?;
        let u = |what: &str, v: usize| Error::u32_index("reduction indices (u32)", what, v);
        u(name, x.numel())?;
        const WG: u32 = 256;
        let (split, seg, gx) = self.column_grid(cols, n, WG, || format!("{name} over axis {d} of {shape:?}"))?;
        let mut out_shape = shape.to_vec();
        out_shape.remove(d);
        let output = self.alloc(&out_shape, x.dtype(), "wgtile reduce out")?;
        let scale = if op == Reduction::Mean { 1.0 / n as f32 } else { 1.0 };
        let params = self.column_params("reduction indices (u32)", (outer, n, inner), (split, seg), (0, scale))?;
        // Partials only with a split (the binding is the dummy otherwise).
        let partials = if split > 1 {
            Some(self.alloc(&[split, cols], DType::F32, "wgtile reduce partials")?)
        } else {
            None
        };
        let partials_buf = partials.as_ref().map_or(&self.inner.dummy_rw, |p| p.buffer());
        let spec = |kernel: Kernel| {
            crate::kernels::Spec::new(kernel)
                .dtype(x.dtype())
                .constant("OP", op.op())
                .override_("WG", WG)
        };
        let pipeline = self.inner.pipelines.get(&self.inner.device, &spec(Kernel::ReduceCols))?;
        let binds = [(0, &params), (1, x.buffer()), (2, output.buffer()), (3, partials_buf)];
        let mut dispatches = vec![Dispatch::with_bindings(
            &self.inner.device,
            pipeline,
            &binds,
            [gx as u32, split as u32, 1],
        )];
        if split > 1 {
            let combine = self.inner.pipelines.get(&self.inner.device, &spec(Kernel::ReduceColsCombine))?;
            dispatches.push(Dispatch::with_bindings(
                &self.inner.device,
                combine,
                &[(0, &params), (2, output.buffer()), (3, partials_buf)],
                // 32 columns per workgroup (`CW` in the shader).
                [cols.div_ceil(32) as u32, 1, 1],
            ));
        }
        Ok(Some(Plan {
            gpu: self.inner.gpu.clone(),
            label: format!("{name} over axis {d} of {shape:?} (columns, split {split})"),
            dispatches,
            flops: x.numel() as u64,
            bytes: x.size_bytes() + output.size_bytes(),
            output,
            scratch: partials.into_iter().collect(),
        }))
    }

    /// The reduction `op` of `x` over `axis` (see [`Reduction`] for
    /// dtypes, shapes and empty inputs).
    pub fn reduce(&self, x: &Tensor, op: Reduction, axis: Axis) -> Result<Tensor> {
        let plan = self.reduce_plan(x, op, axis)?;
        plan.run()?;
        Ok(plan.into_output())
    }

    /// Sum over `axis` (f32 accumulation, output in `x`'s dtype; 0 when empty).
    pub fn sum(&self, x: &Tensor, axis: Axis) -> Result<Tensor> {
        self.reduce(x, Reduction::Sum, axis)
    }

    /// Maximum over `axis` (NaN if any element is NaN; an empty axis is an error).
    pub fn max(&self, x: &Tensor, axis: Axis) -> Result<Tensor> {
        self.reduce(x, Reduction::Max, axis)
    }

    /// Mean over `axis` (f32 accumulation, output in `x`'s dtype; NaN when empty).
    pub fn mean(&self, x: &Tensor, axis: Axis) -> Result<Tensor> {
        self.reduce(x, Reduction::Mean, axis)
    }

    /// [`Context::reduce`] keeping the reduced axes as size 1 (NumPy's
    /// `keepdims=True`): `[2, 3, 4]` over `Axis::Dim(1)` gives `[2, 1, 4]`,
    /// over `Axis::All` `[1, 1, 1]`.
    pub fn reduce_keepdims(&self, x: &Tensor, op: Reduction, axis: Axis) -> Result<Tensor> {
        let mut kept = x.shape().to_vec();
        match axis {
            Axis::All => kept.iter_mut().for_each(|d| *d = 1),
            Axis::Last => {
                if let Some(d) = kept.last_mut() {
                    *d = 1;
                }
            }
            Axis::Dim(d) if d < kept.len() => kept[d] = 1,
            Axis::Dim(_) => {}
        }
        self.reduce(x, op, axis)?.reshape(kept)
    }

    /// The mean over the sequence axis of `x` `[B, S, H]` of the positions
    /// `mask` `[B, S]` keeps (1 keeps, 0 drops; any weights work: a
    /// weighted mean), as sentence-embedding models pool their tokens:
    /// `sum_s mask[b, s] x[b, s, :] / sum_s mask[b, s]`, `[B, H]`, all on
    /// the GPU (the mask's row sums, the weights, one batched product). A
    /// batch whose mask is all zeros gives NaN (a mean of nothing, as
    /// NumPy's). `mask` has `x`'s dtype.
    pub fn masked_mean(&self, x: &Tensor, mask: &Tensor) -> Result<Tensor> {
        self.check_owned(x, "masked_mean")?;
        self.check_owned(mask, "masked_mean (the mask)")?;
        let [b, s, h] = x.shape()[..] else {
            return Err(Error::InvalidArgument(format!(
                "masked_mean takes x of shape [B, S, H], not {:?}",
                x.shape()
            )));
        };
        if mask.shape() != [b, s] {
            return Err(Error::shape(
                "masked_mean",
                x.shape(),
                mask.shape(),
                format!("the mask must have shape [{b}, {s}]"),
            ));
        }
        if mask.dtype() != x.dtype() {
            return Err(Error::DTypeMismatch {
                op: "masked_mean (the mask)",
                expected: x.dtype(),
                got: mask.dtype(),
            });
        }
        let counts = self.sum(mask, Axis::Last)?.reshape([b, 1])?;
        let weights = self.eval(&(mask.expr() / counts.expr()))?;
        let pooled = self.matmul(&weights.reshape([b, 1, s])?, x)?;
        pooled.reshape([b, h])
    }
}
