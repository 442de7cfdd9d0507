//! Row ops over the last axis (softmax, log-softmax, layer and RMS norm, L2
//! normalisation), reductions and fused row kernels. The `*_axis` forms run
//! over any axis by column kernels (`cols`), where each invocation walks one
//! line along the axis. The semantics are documented on [`RowOp`] and hold
//! for every axis.

mod cols;
pub mod fused;
pub mod reduce;
mod source;
#[cfg(any(test, feature = "dev"))]
mod specs;

#[cfg(any(test, feature = "dev"))]
pub use cols::{norm_cols_specs, softmax_cols_specs};
#[cfg(any(test, feature = "dev"))]
pub use specs::rowops_specs;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::gpu::AdapterProfile;
use crate::kernels::{Dispatch, Kernel, Spec};
use crate::runtime::Context;
use crate::gpu::Plan;
use crate::gpu::Tensor;
use crate::ops::rows::source::RowFusion;
pub(crate) use crate::tune::rows::{
    RowLayout, register_layout, row_spec, streaming_layout, workgroup_cap,
};

/// Parameter flags, as in `shaders/rowops_common.wgsl`.
pub(crate) const FLAG_LOG: u32 = 1;
pub(crate) const FLAG_RMS: u32 = 2;
pub(crate) const FLAG_WEIGHT: u32 = 4;
pub(crate) const FLAG_BIAS: u32 = 8;
pub(crate) const FLAG_L2: u32 = 16;

/// `(rows, n)` of a shape seen as rows over its last axis.
pub(crate) fn rows_of_shape(op: &str, shape: &[usize]) -> Result<(usize, usize)> {
    let Some(&n) = shape.last() else {
        return Err(Error::InvalidArgument(format!(
            "{op} works over the last axis and needs rank >= 1, got a rank-0 tensor"
        )));
    };
    // Every dimension but the last (not numel / n, which fails for n = 0).
    let rows = shape[..shape.len() - 1].iter().product();
    Ok((rows, n))
}

/// The bindings a [`RowSource`] adds to a row kernel's dispatch.
pub(crate) type SourceBindings = Vec<(u32, wgpu::Buffer)>;

/// What a row kernel reads: a tensor through the stock load hook, or an
/// expression fused into generated hook parts ([`crate::kernels::codegen::fusion::rows`]).
#[derive(Clone, Copy)]
pub(crate) enum RowSource<'a> {
    Tensor(&'a Tensor),
    Fused(&'a crate::ops::rows::source::RowFusion),
}

impl RowSource<'_> {
    pub(crate) fn shape(&self) -> &[usize] {
        match self {
            RowSource::Tensor(x) => x.shape(),
            RowSource::Fused(f) => f.shape(),
        }
    }

    pub(crate) fn dtype(&self) -> DType {
        match self {
            RowSource::Tensor(x) => x.dtype(),
            RowSource::Fused(f) => f.dtype(),
        }
    }

    pub(crate) fn numel(&self) -> usize {
        self.shape().iter().product()
    }

    /// The dtype the row kernel writes for rows of `n` values.
    pub(crate) fn output_dtype(&self, n: usize) -> DType {
        match self {
            RowSource::Tensor(x) => x.dtype(),
            RowSource::Fused(f) => f.output_dtype(n),
        }
    }

    /// Bytes read once (every distinct tensor of an expression).
    pub(crate) fn read_bytes(&self) -> u64 {
        match self {
            RowSource::Tensor(x) => x.size_bytes(),
            RowSource::Fused(f) => f.read_bytes(),
        }
    }

    /// The pipeline of `spec` reading this source, and the source's
    /// bindings: `x` at 1, or the generated parts' uniform, constants and
    /// tensors (see [`crate::kernels::codegen::fusion::rows`]), after checking that the
    /// kernel's `own_storage` storage buffers plus the generated ones fit
    /// the adapter; `out`: the dtype of the tensor the kernel writes (bf16:
    /// its store part packs it, [`RowSource::output_dtype`]). Spliced
    /// pipelines are cached by (spec, structure key).
    pub(crate) fn prepare(
        &self,
        ctx: &Context,
        spec: &Spec,
        own_storage: usize,
        out: DType,
    ) -> Result<(std::sync::Arc<wgpu::ComputePipeline>, SourceBindings)> {
        let fusion = match self {
            RowSource::Tensor(x) => {
                let pipeline = ctx.inner.pipelines.get(&ctx.inner.device, spec)?;
                return Ok((pipeline, vec![(1, (*x.buffer).clone())]));
            }
            RowSource::Fused(f) => f,
        };
        let bindings = own_storage + fusion.storage_bindings();
        let max = ctx.profile().max_storage_buffers_per_stage as usize;
        if bindings > max {
            return Err(Error::LimitExceeded {
                limit: "max_storage_buffers_per_shader_stage",
                requested: bindings as u64,
                max: max as u64,
                what: format!("{} fused with {}", spec.kernel.name(), fusion.describe()),
            });
        }
        let vec4 = spec.consts.iter().any(|&(k, v)| k == "VEC" && v == 4);
        let bf16_out = out == DType::BF16;
        if bf16_out && !(vec4 && spec.kernel.parts().contains(&STORE_HOOK)) {
            return Err(Error::InvalidArgument(format!(
                "internal: {} cannot write bf16 itself",
                spec.kernel.name()
            )));
        }
        let hooks = fusion.hooks(vec4, bf16_out);
        let key = format!("{spec:?}|{}", hooks.key);
        let pipeline = ctx.inner.fused.get_or_compile(&key, || {
            let text = spliced_row_module(spec, &hooks)?;
            crate::kernels::compile(
                &ctx.inner.device,
                &format!("{} fused {}", spec.kernel.name(), hooks.key),
                &text,
                spec.kernel.entry_point(),
                &spec.pipeline_constants(),
                // Trusted like the row kernels: the generated parts clamp
                // every index they compute (see crate::kernels::codegen::fusion::rows).
                true,
            )
        })?;
        let (uniform, consts) = fusion.buffers(ctx, &hooks);
        let mut binds = Vec::new();
        if hooks.uniform {
            binds.push((crate::kernels::codegen::fusion::rows::ROW_UNIFORM_BINDING, uniform));
        }
        if let Some(c) = consts {
            binds.push((crate::kernels::codegen::fusion::rows::ROW_CONSTANTS_BINDING, c));
        }
        for (b, t) in fusion.tensors() {
            binds.push((*b, (*t.buffer).clone()));
        }
        Ok((pipeline, binds))
    }
}

/// The spliced module `prepare` compiles, for shader validation without a
/// GPU: `spec` with `hooks`' parts (and `enable f16;` when they need it).
pub fn spliced_row_module(spec: &Spec, hooks: &crate::kernels::codegen::fusion::RowHooks) -> Result<String> {
    let mut text = spliced_wgsl(spec, Some(&hooks.load), hooks.store.as_deref())?;
    if hooks.f16 && !text.starts_with("enable f16;") {
        text.insert_str(0, "enable f16;\n");
    }
    Ok(text)
}

/// A count as u32, or the error saying which limit it breaks.
pub(crate) fn to_u32(what: &str, value: usize) -> Result<u32> {
    u32::try_from(value).map_err(|_| {
        Error::InvalidArgument(format!(
            "{what} is {value}, more than the 2^32 - 1 the row kernels index"
        ))
    })
}

pub(crate) use crate::gpu::grid;

/// The parameter block of `shaders/rowops_common.wgsl`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RowParams {
    pub(crate) rows: u32,
    pub(crate) n: u32,
    pub(crate) groups_x: u32,
    pub(crate) split: u32,
    pub(crate) seg: u32,
    pub(crate) flags: u32,
    pub(crate) eps: f32,
    pub(crate) scale: f32,
}

impl RowParams {
    pub(crate) fn buffer(&self, ctx: &Context) -> wgpu::Buffer {
        ctx.uniform(&[
            self.rows,
            self.n,
            self.groups_x,
            self.split.max(1),
            self.seg,
            self.flags,
            self.eps.to_bits(),
            self.scale.to_bits(),
        ])
    }
}

/// Checks the dtype is usable (f16 needs `shader-f16`).
pub(crate) fn check_dtype(ctx: &Context, op: &str, dtype: DType) -> Result<()> {
    if dtype == DType::F16 {
        ctx.require_f16(op)?;
    }
    Ok(())
}

/// A row operation over the last axis (for [`Context::row_op_plan`]).
///
/// Row operations over the last axis: softmax, log-softmax, LayerNorm and
/// RMSNorm (this module), plus the launch layout shared with the reductions
/// (`crate::ops::rows::reduce`) and a copy through the same load/store path that
/// benchmarks use as their bandwidth reference.
///
/// A tensor of shape `[.., n]` is `rows = numel / n` rows of `n` contiguous
/// elements. Every kernel computes in f32 whatever the dtype (f16 inputs are
/// widened on load, results narrowed on store) and writes the input's dtype.
///
/// Layout rule (see `shaders/rowops_common.wgsl`): rows are walked in chunks
/// of 4 elements, one 16-byte (f32) access per chunk when `n % 4 == 0`; `T`
/// invocations per row hold `R` chunks each in registers, so a row is read
/// once when `n <= 4 * R * T` (up to 8192 elements with 256 invocations, 32768
/// with 1024); longer rows stream twice (online softmax, Welford/Chan
/// statistics). Short rows share a workgroup (`WG / T` rows). The subgroup
/// kernels run when the adapter has `subgroups` and a row fills its workgroup.
///
/// Fusion hooks: every row kernel reads its input only through `load_x` /
/// `load_x4` (`shaders/rowops_load.wgsl`) and writes only through `store_y` /
/// `store_y4` (`shaders/rowops_store.wgsl`), so generated elementwise code can
/// replace those parts (see `shaders/README.md`); `crate::ops::rows::fused`
/// (`ctx.softmax_of(&expr, epilogue)`, `ctx.sum_of(&expr, axis)`, ...) does.
///
/// This module checks inputs and builds plans; it does not build WGSL.
///
/// ```no_run
/// # fn main() -> wgtile::Result<()> {
/// use wgtile::{Axis, Context, DType};
/// let ctx = Context::new_blocking(Default::default())?;
/// let x = ctx.rand_uniform([8, 4096], -1.0, 1.0, DType::F32, 1)?;
/// let gamma = ctx.full([4096], 1.0, DType::F32)?;
/// let beta = ctx.zeros([4096], DType::F32)?;
/// let p = ctx.softmax(&x)?; // [8, 4096], rows sum to 1
/// let y = ctx.layer_norm(&x, Some(&gamma), Some(&beta), 1e-5)?;
/// let r = ctx.rms_norm(&x, Some(&gamma), 1e-6)?;
/// let row_sums = ctx.sum(&x, Axis::Last)?; // [8]
/// let total = ctx.max(&x, Axis::All)?; // rank 0
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RowOp {
    /// [`Context::softmax`].
    Softmax,
    /// [`Context::log_softmax`].
    LogSoftmax,
    /// [`Context::layer_norm`].
    LayerNorm,
    /// [`Context::rms_norm`].
    RmsNorm,
    /// [`Context::l2_normalize`].
    L2Normalize,
}

/// Per-call options of the row operations.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RowOptions {
    /// Run the streaming kernels (online softmax; Welford/Chan norms), which
    /// read each row twice, even when a row fits in registers and one read
    /// would do: to measure what the single read buys. Results agree with
    /// the default path within the documented tolerances.
    pub streaming: bool,
}

impl RowOp {
    fn name(self) -> &'static str {
        match self {
            RowOp::Softmax => "softmax",
            RowOp::LogSoftmax => "log_softmax",
            RowOp::LayerNorm => "layer_norm",
            RowOp::RmsNorm => "rms_norm",
            RowOp::L2Normalize => "l2_normalize",
        }
    }

    /// Floating-point operations per element (documented on the public plans).
    fn flops_per_element(self) -> u64 {
        match self {
            RowOp::Softmax => 5,
            RowOp::LogSoftmax => 4,
            RowOp::LayerNorm => 8,
            RowOp::RmsNorm => 5,
            RowOp::L2Normalize => 4,
        }
    }

    fn kernel(self, layout: &RowLayout, profile: &AdapterProfile) -> Kernel {
        let sg = layout.subgroup_ok(profile);
        let streaming = layout.r == 0;
        match self {
            RowOp::Softmax | RowOp::LogSoftmax => match (streaming, sg) {
                (false, false) => Kernel::Softmax,
                (false, true) => Kernel::SoftmaxSubgroup,
                (true, false) => Kernel::SoftmaxOnline,
                (true, true) => Kernel::SoftmaxOnlineSubgroup,
            },
            RowOp::LayerNorm | RowOp::RmsNorm | RowOp::L2Normalize => match (streaming, sg) {
                (true, _) => Kernel::NormStreaming,
                (false, false) => Kernel::Norm,
                (false, true) => Kernel::NormSubgroup,
            },
        }
    }
}

/// Checks an optional affine parameter: shape `[n]`, the input's dtype.
fn check_param(
    op: &'static str,
    shape: &[usize],
    dtype: DType,
    p: Option<&Tensor>,
    n: usize,
) -> Result<()> {
    let Some(p) = p else { return Ok(()) };
    if p.shape() != [n] {
        return Err(Error::shape(
            op,
            shape,
            p.shape(),
            format!("the affine parameter must have shape [{n}] (the row length)"),
        ));
    }
    if p.dtype() != dtype {
        return Err(Error::DTypeMismatch {
            op,
            expected: dtype,
            got: p.dtype(),
        });
    }
    Ok(())
}

impl Context {
    /// Any row operation as a [`Plan`], with options: `weight` and `bias`
    /// are read by the norms only (`bias` by LayerNorm only; passing them to
    /// another op is an [`Error::InvalidArgument`]), `eps` likewise.
    pub fn row_op_plan(
        &self,
        op: RowOp,
        x: &Tensor,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f32,
        options: RowOptions,
    ) -> Result<Plan> {
        self.row_op_check_params(op, weight, bias)?;
        self.row_plan(op, x, weight, bias, eps, options)
    }

    /// Refuses affine parameters `op` does not take.
    pub(crate) fn row_op_check_params(
        &self,
        op: RowOp,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
    ) -> Result<()> {
        let takes = match op {
            RowOp::Softmax | RowOp::LogSoftmax => (false, false),
            RowOp::LayerNorm => (true, true),
            RowOp::RmsNorm => (true, false),
            RowOp::L2Normalize => (false, false),
        };
        if (weight.is_some() && !takes.0) || (bias.is_some() && !takes.1) {
            return Err(Error::InvalidArgument(format!(
                "{} takes {} affine parameters",
                op.name(),
                match takes {
                    (false, _) => "no",
                    (true, false) => "a weight but no bias as",
                    (true, true) => "weight and bias as",
                }
            )));
        }
        Ok(())
    }

    fn row_plan(
        &self,
        op: RowOp,
        x: &Tensor,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f32,
        options: RowOptions,
    ) -> Result<Plan> {
        self.row_source_plan(op, RowSource::Tensor(x), weight, bias, eps, options)
    }

    /// [`Context::row_source_plan`] of a bf16 tensor: `x` read as bf16 words
    /// and widened in the row kernel (a fused source of one leaf: no pass
    /// staging it to f32), its affine parameters (bf16 too) staged to f32
    /// (exact), the result computed in f32 and rounded to bf16 (by the row
    /// kernel's store where rows are a multiple of 4 values, else by a cast
    /// behind it).
    fn row_plan_bf16(
        &self,
        op: RowOp,
        x: &Tensor,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f32,
        options: RowOptions,
    ) -> Result<Plan> {
        let params = self.bf16_row_params(op, weight, bias)?;
        let fusion = RowFusion::new(self, &x.expr(), None)?;
        let staged = self.stage_bf16(&params, DType::F32)?;
        let mut wide = staged.tensors.iter();
        let w = weight.and_then(|_| wide.next());
        let b = bias.and_then(|_| wide.next());
        let plan = self.row_source_plan(op, RowSource::Fused(&fusion), w, b, eps, options)?;
        self.round_output_bf16(staged.before(plan, &params), None)
    }

    /// A bf16 row op's weight and bias, those given: this context's and
    /// bf16 ([`Error::DTypeMismatch`] otherwise), to be staged to f32.
    pub(crate) fn bf16_row_params<'a>(
        &self,
        op: RowOp,
        weight: Option<&'a Tensor>,
        bias: Option<&'a Tensor>,
    ) -> Result<Vec<&'a Tensor>> {
        let params: Vec<&Tensor> = weight.into_iter().chain(bias).collect();
        self.check_all_owned(params.iter().copied(), "a row-op weight or bias")?;
        if let Some(p) = params.iter().find(|p| p.dtype() != DType::BF16) {
            return Err(Error::DTypeMismatch {
                op: op.name(),
                expected: DType::BF16,
                got: p.dtype(),
            });
        }
        Ok(params)
    }

    /// The row op `op` over `src` (a tensor or a fused expression).
    pub(crate) fn row_source_plan(
        &self,
        op: RowOp,
        src: RowSource<'_>,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f32,
        options: RowOptions,
    ) -> Result<Plan> {
        let name = op.name();
        if let RowSource::Tensor(x) = src {
            self.check_owned(x, name)?;
            x.require_contiguous(name)?;
            if x.dtype() == DType::BF16 {
                return self.row_plan_bf16(op, x, weight, bias, eps, options);
            }
        }
        self.check_all_owned(weight.into_iter().chain(bias), "a row-op weight or bias")?;
        for t in [weight, bias].into_iter().flatten() {
            t.require_contiguous(name)?;
        }
        let (rows, n) = rows_of_shape(name, src.shape())?;
        check_dtype(self, name, src.dtype())?;
        check_param(name, src.shape(), src.dtype(), weight, n)?;
        check_param(name, src.shape(), src.dtype(), bias, n)?;
        let norm = matches!(op, RowOp::LayerNorm | RowOp::RmsNorm | RowOp::L2Normalize);
        if norm && !(eps.is_finite() && eps >= 0.0) {
            return Err(Error::InvalidArgument(format!(
                "{name}: eps must be finite and >= 0, got {eps}"
            )));
        }
        let output = self.alloc(src.shape(), src.output_dtype(n), "wgtile row op out")?;
        let elem = output.dtype().size() as u64;
        let params_bytes: u64 = [weight, bias]
            .into_iter()
            .flatten()
            .map(|p| p.numel() as u64 * elem)
            .sum();
        let numel = src.numel() as u64;
        let fused_ops = match src {
            RowSource::Fused(f) => f.ops_per_element(),
            RowSource::Tensor(_) => 0,
        };
        let mut plan = Plan {
            gpu: self.inner.gpu.clone(),
            label: format!("{name} (empty)"),
            dispatches: Vec::new(),
            output,
            flops: (op.flops_per_element() + fused_ops) * numel,
            bytes: src.read_bytes() + numel * elem + params_bytes,
            scratch: Vec::new(),
        };
        if rows == 0 || n == 0 {
            return Ok(plan);
        }
        let rows32 = to_u32(&format!("{name}: rows"), rows)?;
        let n32 = to_u32(&format!("{name}: row length"), n)?;
        to_u32(&format!("{name}: elements"), src.numel())?;
        let profile = self.profile();
        let layout = if options.streaming {
            streaming_layout(profile, n32)
        } else {
            register_layout(profile, n32)
        };
        let kernel = op.kernel(&layout, profile);
        let groups = u64::from(rows32).div_ceil(u64::from(layout.rows_per_group()));
        let workgroups = grid(profile, groups, name)?;
        let mut flags = match op {
            RowOp::LogSoftmax => FLAG_LOG,
            RowOp::RmsNorm => FLAG_RMS,
            RowOp::L2Normalize => FLAG_RMS | FLAG_L2,
            _ => 0,
        };
        if weight.is_some() {
            flags |= FLAG_WEIGHT;
        }
        if bias.is_some() {
            flags |= FLAG_BIAS;
        }
        let params = RowParams {
            rows: rows32,
            n: n32,
            groups_x: workgroups[0],
            split: 1,
            seg: 0,
            flags,
            eps,
            scale: 1.0,
        }
        .buffer(self);
        let spec = row_spec(kernel, src.dtype(), &layout);
        let (pipeline, source) = src.prepare(self, &spec, if norm { 3 } else { 1 }, plan.output.dtype())?;
        let mut buffers: Vec<(u32, &wgpu::Buffer)> = vec![(0, &params), (2, &plan.output.buffer)];
        buffers.extend(source.iter().map(|(b, buf)| (*b, buf)));
        if norm {
            buffers.push((3, weight.map_or(&self.inner.dummy, |w| &w.buffer)));
            buffers.push((4, bias.map_or(&self.inner.dummy, |b| &b.buffer)));
        }
        plan.dispatches.push(Dispatch::with_bindings(
            &self.inner.device,
            pipeline,
            &buffers,
            workgroups,
        ));
        let fused = match src {
            RowSource::Fused(f) => format!(" of {}", f.describe()),
            RowSource::Tensor(_) => String::new(),
        };
        plan.label = format!(
            "{name}{fused} {:?} {} ({} wg={} t={} r={} vec{})",
            src.shape(),
            src.dtype(),
            kernel.name(),
            layout.wg,
            layout.t,
            layout.r,
            if layout.vec4 { 4 } else { 1 }
        );
        Ok(plan)
    }

    /// Softmax over the last axis: `exp(x - max) / sum(exp(x - max))` per row,
    /// computed in f32, written in `x`'s dtype (f32 or f16).
    ///
    /// Semantics: `-inf` entries get probability 0 (masking); a row of only
    /// `-inf` gives zeros (not NaN); a NaN or `+inf` anywhere in a row makes
    /// that output row NaN (as PyTorch); large finite inputs (up to f32::MAX)
    /// do not overflow. Rank 0 is an error; empty tensors give empty results.
    pub fn softmax(&self, x: &Tensor) -> Result<Tensor> {
        let plan = self.softmax_plan(x)?;
        plan.run()?;
        Ok(plan.into_output())
    }

    /// [`Context::softmax`] as a [`Plan`]. `bytes` = input read once + output
    /// written once (rows longer than the registers hold, see the module
    /// docs, read the input twice); `flops` = 5 per element (max, subtract,
    /// exp, add, divide).
    pub fn softmax_plan(&self, x: &Tensor) -> Result<Plan> {
        self.row_plan(RowOp::Softmax, x, None, None, 0.0, RowOptions::default())
    }

    /// Log-softmax over the last axis: `x - max - log(sum(exp(x - max)))`,
    /// with [`Context::softmax`]'s semantics (`-inf` entries stay `-inf`, a
    /// row of only `-inf` gives `-inf`, NaN/`+inf` rows give NaN).
    pub fn log_softmax(&self, x: &Tensor) -> Result<Tensor> {
        let plan = self.log_softmax_plan(x)?;
        plan.run()?;
        Ok(plan.into_output())
    }

    /// [`Context::log_softmax`] as a [`Plan`]; `flops` = 4 per element.
    pub fn log_softmax_plan(&self, x: &Tensor) -> Result<Plan> {
        self.row_plan(RowOp::LogSoftmax, x, None, None, 0.0, RowOptions::default())
    }

    /// [`Context::softmax`] over any `axis`, with its semantics (masking,
    /// NaN and `+inf` lines, empty tensors) along that axis. Other than the
    /// last, a column kernel normalises the lines in place of rows
    /// (`shaders/softmax_cols.wgsl`): `x` is read twice and the result
    /// written once, one read more than the last axis and two passes fewer
    /// than moving the axis last and back (see [`Context::row_op_axis_plan`]).
    pub fn softmax_axis(&self, x: &Tensor, axis: usize) -> Result<Tensor> {
        self.row_op_axis(RowOp::Softmax, x, axis, None, None, 0.0)
    }

    /// [`Context::log_softmax`] over any `axis` (as [`Context::softmax_axis`]).
    pub fn log_softmax_axis(&self, x: &Tensor, axis: usize) -> Result<Tensor> {
        self.row_op_axis(RowOp::LogSoftmax, x, axis, None, None, 0.0)
    }

    /// Any row operation over any `axis` as a [`Plan`] (the `*_axis` calls
    /// run it): for the last axis the row kernel's plan itself. Over another
    /// axis of a contiguous `x` every op runs a column kernel, never moving
    /// the axis: `shaders/softmax_cols.wgsl` for softmax and log-softmax,
    /// `shaders/norm_cols.wgsl` for LayerNorm, RMSNorm and L2
    /// normalisation. One invocation per line along `axis`, adjacent
    /// invocations on adjacent lines, a statistics pass (an online (max,
    /// sum) pair; Welford (count, mean, M2) accumulators merged by Chan's
    /// formula, the mean held at 0 for RMS and L2) then a writing pass over
    /// `x`; when there are too few lines to fill the GPU, the axis is split
    /// into segments whose statistics a second dispatch merges per line and
    /// a third writes from. Where every later axis has length 1 the lines
    /// are contiguous and the row kernel runs on `x` seen as rows. A padded
    /// `x`: permuted with the axis moved last, the row kernel, the result
    /// permuted back, three dispatches with the two intermediate copies
    /// held as scratch. The semantics (NaN and infinities, eps, constant
    /// and length-1 lines, empty tensors) are the row kernels' (one
    /// documented difference: a constant line with `eps = 0`, see
    /// [`Context::layer_norm_axis`]).
    ///
    /// `weight` and `bias` are indexed along `axis`: shape `[x.shape[axis]]`
    /// ([`Error::ShapeMismatch`] naming `x`'s shape otherwise, checked
    /// before anything is allocated); the other arguments as
    /// [`Context::row_op_plan`]. An `axis` past the rank is
    /// [`Error::InvalidArgument`]. `bytes` counts what moves: the column
    /// kernel's two reads of `x`, its write, the parameters and its
    /// partial statistics (two f32 per line and segment); the copies' reads
    /// and writes on the permute path.
    pub fn row_op_axis_plan(
        &self,
        op: RowOp,
        x: &Tensor,
        axis: usize,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f32,
    ) -> Result<Plan> {
        self.row_op_check_params(op, weight, bias)?;
        let rank = x.rank();
        if axis >= rank {
            return Err(Error::InvalidArgument(format!(
                "{}: axis {axis} is out of range for shape {:?}",
                op.name(),
                x.shape()
            )));
        }
        for p in [weight, bias].into_iter().flatten() {
            if p.shape() != [x.shape()[axis]] {
                return Err(Error::shape(
                    op.name(),
                    x.shape(),
                    p.shape(),
                    format!(
                        "the affine parameter must have shape [{}] (the length of axis {axis})",
                        x.shape()[axis]
                    ),
                ));
            }
        }
        if axis + 1 == rank {
            return self.row_plan(op, x, weight, bias, eps, RowOptions::default());
        }
        if x.is_contiguous() {
            return self.row_op_cols_plan(op, x, axis, weight, bias, eps);
        }
        let axes: Vec<usize> = (0..rank).filter(|&a| a != axis).chain([axis]).collect();
        let mut back = vec![0; rank];
        for (j, &a) in axes.iter().enumerate() {
            back[a] = j;
        }
        let into = self.permute_plan(x, &axes)?;
        let rows = self.row_plan(op, into.output(), weight, bias, eps, RowOptions::default())?;
        let out = self.permute_plan(rows.output(), &back)?;
        let label = format!("{} over axis {axis} (moved last: {})", op.name(), rows.label);
        let mut plan = out.after(vec![into, rows]);
        plan.label = label;
        Ok(plan)
    }

    fn row_op_axis(
        &self,
        op: RowOp,
        x: &Tensor,
        axis: usize,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f32,
    ) -> Result<Tensor> {
        let plan = self.row_op_axis_plan(op, x, axis, weight, bias, eps)?;
        plan.run()?;
        Ok(plan.into_output())
    }

    /// LayerNorm over the last axis:
    /// `(x - mean) / sqrt(var + eps) * weight + bias` per row, with the biased
    /// variance (divided by n) computed two-pass (or by Welford/Chan merges for
    /// long rows), in f32, written in `x`'s dtype. `weight` (gamma) and `bias`
    /// (beta) are optional, shape `[n]`, `x`'s dtype
    /// ([`Error::ShapeMismatch`] / [`Error::DTypeMismatch`] otherwise). `eps`
    /// must be finite and >= 0.
    ///
    /// Range: the squared deviations are summed in f32, so rows whose
    /// deviations pass about 1.8e19 in magnitude overflow the variance to
    /// +inf and normalise to 0 (not +-1); scale such rows first.
    pub fn layer_norm(
        &self,
        x: &Tensor,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f32,
    ) -> Result<Tensor> {
        let plan = self.layer_norm_plan(x, weight, bias, eps)?;
        plan.run()?;
        Ok(plan.into_output())
    }

    /// [`Context::layer_norm`] as a [`Plan`]; `bytes` counts `x`, the
    /// parameters and the output once; `flops` = 8 per element.
    pub fn layer_norm_plan(
        &self,
        x: &Tensor,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f32,
    ) -> Result<Plan> {
        self.row_plan(
            RowOp::LayerNorm,
            x,
            weight,
            bias,
            eps,
            RowOptions::default(),
        )
    }

    /// RMSNorm over the last axis: `x / sqrt(mean(x^2) + eps) * weight`, with
    /// an optional `weight` of shape `[n]` in `x`'s dtype.
    ///
    /// Range: the squares are summed in f32, so values past about 1.8e19 in
    /// magnitude overflow the mean square (the result is 0), and with
    /// `eps = 0` rows of values below about 1e-19 underflow it (the result
    /// is +-inf); scale such rows first, or use an `eps > 0`.
    pub fn rms_norm(&self, x: &Tensor, weight: Option<&Tensor>, eps: f32) -> Result<Tensor> {
        let plan = self.rms_norm_plan(x, weight, eps)?;
        plan.run()?;
        Ok(plan.into_output())
    }

    /// [`Context::rms_norm`] as a [`Plan`]; `flops` = 5 per element.
    pub fn rms_norm_plan(&self, x: &Tensor, weight: Option<&Tensor>, eps: f32) -> Result<Plan> {
        self.row_plan(RowOp::RmsNorm, x, weight, None, eps, RowOptions::default())
    }

    /// [`Context::layer_norm`] over any `axis`: each line of `x` along
    /// `axis` normalised (mean and biased variance over that axis), then
    /// scaled by `weight` and shifted by `bias`, both of shape
    /// `[x.shape[axis]]` in `x`'s dtype (f32, f16 or bf16). The semantics,
    /// ranges and errors are [`Context::layer_norm`]'s; an `axis` past the
    /// rank is [`Error::InvalidArgument`]. Other than the last axis a column
    /// kernel normalises the lines in place of rows (`shaders/norm_cols.wgsl`):
    /// `x` is read twice (the statistics, then the writes) and the result
    /// written once, where moving the axis last and back took three passes
    /// (see [`Context::row_op_axis_plan`]). Its statistics are Welford's
    /// running (mean, M2) merged by Chan's formula rather than the row
    /// kernel's two passes: as stable for any mean, and a constant line has
    /// a variance of exactly 0 (so `eps = 0` gives NaN, 0 / 0, where the
    /// row kernel's rounded mean of a constant like 0.1 can leave +-1).
    /// The range is the same: M2 only grows, each update at most the final
    /// sum of squared deviations, so it overflows where the row kernel's
    /// sum does.
    pub fn layer_norm_axis(
        &self,
        x: &Tensor,
        axis: usize,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f32,
    ) -> Result<Tensor> {
        self.row_op_axis(RowOp::LayerNorm, x, axis, weight, bias, eps)
    }

    /// [`Context::rms_norm`] over any `axis` (as [`Context::layer_norm_axis`],
    /// the same column kernel with the mean held at 0):
    /// `x / sqrt(mean(x^2) + eps) * weight` along `axis`, `weight` of shape
    /// `[x.shape[axis]]`; [`Context::rms_norm`]'s range and errors.
    pub fn rms_norm_axis(
        &self,
        x: &Tensor,
        axis: usize,
        weight: Option<&Tensor>,
        eps: f32,
    ) -> Result<Tensor> {
        self.row_op_axis(RowOp::RmsNorm, x, axis, weight, None, eps)
    }

    /// [`Context::layer_norm`] with the statistics a backward pass needs:
    /// `(y, mean, rstd)`, the mean and `1 / sqrt(var + eps)` of each row in
    /// f32 (shape `x.shape[..-1]`; PyTorch's `native_layer_norm` returns
    /// them so). The statistics come from the reduction kernels, two-pass
    /// as the norm kernel computes them (the mean, then the squared
    /// deviations from it), on an f32 copy for f16 and bf16 inputs; they
    /// agree with the values the norm used within f32 rounding.
    pub fn layer_norm_with_stats(
        &self,
        x: &Tensor,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f32,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let y = self.layer_norm(x, weight, bias, eps)?;
        let xf = self.cast(x, DType::F32)?;
        let mean = self.mean(&xf, reduce::Axis::Last)?;
        let mut kept = x.shape().to_vec();
        if let Some(last) = kept.last_mut() {
            *last = 1;
        }
        let centred = (xf.expr() - mean.reshape(&kept)?.expr()).square();
        let var = self.mean_of(&centred, reduce::Axis::Last)?;
        let rstd = self.eval(&(var.expr() + eps).rsqrt())?;
        Ok((y, mean, rstd))
    }

    /// Each row of `x` (the last axis) divided by its Euclidean norm:
    /// `x / max(||x||_2, eps)`, PyTorch's `F.normalize(x, dim=-1)` (whose
    /// default `eps` is 1e-12). Sums in f32 whatever the dtype, so the
    /// squares must fit an f32 (|x| below about 1e19; a row past it comes
    /// out 0, the norms' documented range); a row of zeros stays zeros for
    /// `eps > 0` (and is NaN for `eps = 0`, 0 / 0); NaN anywhere in a row
    /// makes the row NaN (as PyTorch's clamp keeps a NaN norm).
    pub fn l2_normalize(&self, x: &Tensor, eps: f32) -> Result<Tensor> {
        let plan = self.l2_normalize_plan(x, eps)?;
        plan.run()?;
        Ok(plan.into_output())
    }

    /// [`Context::l2_normalize`] as a plan.
    pub fn l2_normalize_plan(&self, x: &Tensor, eps: f32) -> Result<Plan> {
        self.row_plan(RowOp::L2Normalize, x, None, None, eps, RowOptions::default())
    }

    /// [`Context::l2_normalize`] over any `axis`: each line of `x` along
    /// `axis` divided by `max(||line||_2, eps)`, PyTorch's
    /// `F.normalize(x, dim=axis)`; [`Context::l2_normalize`]'s range, NaN
    /// and zero-line semantics (the same `max(norm, eps)`); run by the
    /// column kernel of [`Context::layer_norm_axis`] with the mean held at 0
    /// (the sum of squares).
    pub fn l2_normalize_axis(&self, x: &Tensor, axis: usize, eps: f32) -> Result<Tensor> {
        self.row_op_axis(RowOp::L2Normalize, x, axis, None, None, eps)
    }

    /// A copy of `x` through the row kernels' load/store path (vec4 accesses
    /// when the element count is a multiple of 4), as a [`Plan`]: the
    /// bandwidth reference the row-op benchmarks report their fraction of.
    /// `bytes` = read + write.
    pub fn copy_plan(&self, x: &Tensor) -> Result<Plan> {
        self.check_owned(x, "copy")?;
        check_dtype(self, "copy", x.dtype())?;
        x.require_contiguous("copy")?;
        let output = self.alloc(x.shape(), x.dtype(), "wgtile copy out")?;
        let numel = x.numel();
        let mut plan = Plan {
            gpu: self.inner.gpu.clone(),
            label: "copy (empty)".into(),
            dispatches: Vec::new(),
            output,
            flops: 0,
            bytes: 2 * x.size_bytes(),
            scratch: Vec::new(),
        };
        if numel == 0 {
            return Ok(plan);
        }
        let n = to_u32("copy: elements", numel)?;
        let profile = self.profile();
        let wg = workgroup_cap(profile, 256);
        let layout = RowLayout {
            wg,
            t: wg,
            r: 0,
            vec4: n.is_multiple_of(4),
        };
        // 4 chunks per invocation (COPY_CHUNKS in the shader).
        let per_group = 4 * u64::from(wg);
        let workgroups = grid(
            profile,
            u64::from(n.div_ceil(4)).div_ceil(per_group),
            "copy",
        )?;
        let params = RowParams {
            rows: 1,
            n,
            groups_x: workgroups[0],
            split: 1,
            scale: 1.0,
            ..RowParams::default()
        }
        .buffer(self);
        let spec = row_spec(Kernel::RowCopy, x.dtype(), &layout);
        let pipeline = self.inner.pipelines.get(&self.inner.device, &spec)?;
        plan.dispatches.push(Dispatch::new(
            &self.inner.device,
            pipeline,
            &[&params, &x.buffer, &plan.output.buffer],
            workgroups,
        ));
        plan.label = format!("copy {:?} {}", x.shape(), x.dtype());
        Ok(plan)
    }
}

/// The load hook part as shipped (`shaders/rowops_load.wgsl`).
pub const LOAD_HOOK: &str = include_str!("../../../shaders/rowops_load.wgsl");
/// The store hook part as shipped (`shaders/rowops_store.wgsl`).
pub const STORE_HOOK: &str = include_str!("../../../shaders/rowops_store.wgsl");

/// The fusion entry point: the WGSL of a row-kernel specialisation with its
/// load hook and/or store hook part replaced by generated text defining the
/// same functions (`load_x`/`load_x4`, `store_y`/`store_y4`; see
/// `shaders/README.md`). Fails with [`Error::Shader`] if `spec` is not a
/// kernel built from the replaced part (reduce kernels have no store hook).
pub fn spliced_wgsl(spec: &Spec, load: Option<&str>, store: Option<&str>) -> Result<String> {
    let mut text = spec.wgsl()?;
    for (part, replacement, what) in [(LOAD_HOOK, load, "load"), (STORE_HOOK, store, "store")] {
        let Some(replacement) = replacement else {
            continue;
        };
        if !spec.kernel.parts().contains(&part) || !text.contains(part) {
            return Err(Error::Shader {
                kernel: spec.kernel.name().to_string(),
                message: format!("the kernel has no {what} hook part to replace"),
            });
        }
        text = text.replacen(part, replacement, 1);
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn profile(invocations: u32) -> AdapterProfile {
        specs::synthetic_profile(invocations)
    }

    #[test]
    fn rows_of_4096_take_256_invocations_with_16_floats_each() {
        let l = register_layout(&profile(1024), 4096);
        assert_eq!((l.wg, l.t, l.r, l.vec4), (256, 256, 4, true));
        assert!(l.subgroup_ok(&profile(1024)));
    }

    #[test]
    fn layouts_by_row_length() {
        let p = profile(1024);
        // Short rows share a 64-invocation workgroup.
        let l = register_layout(&p, 7);
        assert_eq!((l.wg, l.t, l.r, l.vec4), (64, 1, 2, false));
        let l = register_layout(&p, 1024);
        assert_eq!((l.wg, l.t, l.r), (64, 64, 4));
        // Up to 8192 on 256 invocations, then 1024 invocations up to 32768.
        assert_eq!(register_layout(&p, 8192).wg, 256);
        let l = register_layout(&p, 32768);
        assert_eq!((l.wg, l.t, l.r), (1024, 1024, 8));
        // Longer rows stream.
        assert_eq!(register_layout(&p, 32772).r, 0);
        // An adapter limited to 256 invocations streams rows over 8192.
        let small = profile(256);
        assert_eq!(register_layout(&small, 8196).r, 0);
        assert_eq!(register_layout(&small, 8192).r, 8);
    }

    /// The fusion hook end to end: a softmax whose load part is replaced by
    /// generated text (x / 8 + mask[col], reading an extra binding 5) runs
    /// and matches softmax(x / 8 + mask) computed on the host.
    #[test]
    fn spliced_load_hook_runs() {
        let Ok(ctx) = Context::new_blocking(Default::default()) else {
            eprintln!("no adapter: skipped");
            return;
        };
        let load = r#"
@group(0) @binding(1) var<storage, read> x: array<vec4<Elem>>;
@group(0) @binding(5) var<storage, read> mask: array<f32>;
fn load_x(row: u32, col: u32) -> f32 {
    let i = row * params.n + col;
    return 0.125 * f32(x[i / 4u][i % 4u]) + mask[col];
}
fn load_x4(row: u32, c: u32) -> vec4<f32> {
    let m = vec4<f32>(mask[4u * c], mask[4u * c + 1u], mask[4u * c + 2u], mask[4u * c + 3u]);
    return 0.125 * vec4<f32>(x[row * (params.n / 4u) + c]) + m;
}
"#;
        for n in [7usize, 1024] {
            let rows = 5;
            let host = crate::gpu::uniform_values(rows * n, -8.0, 8.0, 3);
            let mask: Vec<f32> = (0..n)
                .map(|j| if j % 3 == 1 { f32::NEG_INFINITY } else { 0.0 })
                .collect();
            let x = ctx.tensor(&host, [rows, n]).unwrap();
            let m = ctx.tensor(&mask, [n]).unwrap();
            let y = ctx.alloc(&[rows, n], DType::F32, "out").unwrap();
            ctx.fill(&y, f32::NAN).unwrap();
            let profile = ctx.profile();
            let layout = register_layout(profile, n as u32);
            let spec = row_spec(RowOp::Softmax.kernel(&layout, profile), DType::F32, &layout);
            let text = spliced_wgsl(&spec, Some(load), None).unwrap();
            let pipeline = crate::kernels::compile(
                &ctx.inner.device,
                "spliced softmax",
                &text,
                spec.kernel.entry_point(),
                &spec.pipeline_constants(),
                false,
            )
            .unwrap();
            let groups = (rows as u64).div_ceil(u64::from(layout.rows_per_group()));
            let workgroups = grid(profile, groups, "test").unwrap();
            let params = RowParams {
                rows: rows as u32,
                n: n as u32,
                groups_x: workgroups[0],
                split: 1,
                scale: 1.0,
                ..RowParams::default()
            }
            .buffer(&ctx);
            let d = Dispatch::with_bindings(
                &ctx.inner.device,
                Arc::new(pipeline),
                &[(0, &params), (1, &x.buffer), (2, &y.buffer), (5, &m.buffer)],
                workgroups,
            );
            ctx.run_dispatches("spliced softmax", &[d]).unwrap();
            let got = y.to_vec_blocking::<f32>().unwrap();
            for r in 0..rows {
                let z: Vec<f64> = (0..n)
                    .map(|j| 0.125 * f64::from(host[r * n + j]) + f64::from(mask[j]))
                    .collect();
                let mx = z.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = z.iter().map(|v| (v - mx).exp()).sum();
                for j in 0..n {
                    let want = (z[j] - mx).exp() / sum;
                    let g = f64::from(got[r * n + j]);
                    assert!(
                        // exp: 3 + 2|x| ulp in WGSL, |x - max| <= 2 here.
                        (g - want).abs() <= 4e-6 * want + 1e-30,
                        "n {n} row {r} col {j}: {g} vs {want}"
                    );
                }
            }
        }
    }
}
