//! Fused plans: the generated kernel's pipeline from the context's cache,
//! its buffers and grid; and the unfused form, a kernel per node.

use std::collections::HashMap;
use std::sync::Arc;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::expr::{Expr, Node};
use crate::gpu::{Dispatch, Plan, Tensor};
use crate::kernels::codegen::fusion::*;
use crate::runtime::Context;

/// The pipeline of a generated elementwise kernel, from the context's cache.
pub(crate) fn fused_pipeline(ctx: &Context, g: &Generated) -> Result<Arc<wgpu::ComputePipeline>> {
    ctx.inner.fused.get_or_compile(&g.key, || {
        crate::kernels::compile(
            &ctx.inner.device,
            &format!("fused {}", g.key),
            &g.wgsl,
            "main",
            &[],
            // Trusted (no wgpu runtime bounds checks), as `Kernel::trusted`
            // kernels: the store is guarded by `unit < count`, contiguous
            // loads use the same unit (inputs hold at least as many
            // elements), single-element loads index 0, and broadcast offsets
            // are coordinates below the output dims dotted with the input's
            // own strides, so below its element count. WGTILE_CHECKED_SHADERS=1
            // turns the checks back on.
            true,
        )
    })
}

impl Context {
    /// Number of fused elementwise pipelines this context holds (at most
    /// 64): how many distinct expression structures it has
    /// compiled recently.
    pub fn fused_kernel_count(&self) -> usize {
        self.inner.fused.len()
    }

    /// Number of pipelines of wgtile's own kernels this context holds (at
    /// most 512, the least recently used dropped first): every
    /// specialisation it has compiled recently.
    pub fn pipeline_count(&self) -> usize {
        self.inner.pipelines.len()
    }
}

/// Builds the fused plan of `expr`, into `out` or a new tensor.
pub(crate) fn plan_fused(ctx: &Context, expr: &Expr, out: Option<&Tensor>) -> Result<Plan> {
    plan_fused_many(ctx, std::slice::from_ref(expr), out).map(|(plan, _)| plan)
}

/// One kernel computing every expression of `exprs` (same result shape),
/// into `out` (one expression only) or new tensors: the plan (its output is
/// the first) and all outputs.
// Long on purpose: checks of every leaf (context, dtype, shape, aliasing with the output) and
// the kernel's bindings, which must agree input by input with the generated text.
pub(crate) fn plan_fused_many(
    ctx: &Context,
    exprs: &[Expr],
    out: Option<&Tensor>,
) -> Result<(Plan, Vec<Tensor>)> {
    let lowered = lower_many(exprs)?;
    if out.is_some() && exprs.len() != 1 {
        return Err(Error::InvalidArgument(
            "an output tensor can be given for one expression only".into(),
        ));
    }
    let mut tensors = Vec::with_capacity(lowered.leaves.len());
    for leaf in &lowered.leaves {
        match leaf {
            Leaf::Tensor(t) => {
                ctx.check_owned(t, "a tensor of the expression")?;
                tensors.push(t);
            }
            Leaf::Symbol { .. } => {
                return Err(Error::InvalidArgument(
                    "an expression with symbolic inputs (Expr::input) cannot be evaluated".into(),
                ));
            }
            Leaf::Acc => refuse_acc(&lowered)?,
        }
    }
    let out_dtypes: Vec<(usize, DType)> = lowered
        .roots
        .iter()
        .map(|&r| (r, lowered.dtype_of(r)))
        .collect();
    let out_dtype = out_dtypes[0].1;
    if out_dtypes.iter().any(|o| o.1 == DType::F16)
        || tensors.iter().any(|t| t.dtype() == DType::F16)
    {
        ctx.require_f16("elementwise f16 tensors")?;
    }
    let mut alias = Vec::new();
    if let Some(o) = out {
        ctx.check_owned(o, "the output")?;
        // The kernel writes the logical elements in order: a padded output's
        // rows would be half written.
        o.require_contiguous("eval_into (the output)")?;
        if o.shape() != lowered.shape.as_slice() {
            return Err(Error::shape(
                "eval_into",
                &lowered.shape,
                o.shape(),
                "the output must have the broadcast shape of the expression",
            ));
        }
        if o.dtype() != out_dtype {
            return Err(Error::DTypeMismatch {
                op: "eval_into",
                expected: out_dtype,
                got: o.dtype(),
            });
        }
        // An input sharing the output's buffer has the output's element count
        // and (being broadcast-compatible) its 4-D shape: each invocation
        // reads its own elements before writing them, so in place is safe.
        for (i, t) in tensors.iter().enumerate() {
            if Arc::ptr_eq(&t.buffer, &o.buffer) {
                if dims4(t.shape()) == dims4(o.shape()) && t.dtype() == o.dtype() {
                    alias.push(i);
                } else {
                    return Err(Error::InvalidArgument(format!(
                        "the output shares its buffer with an input of shape {:?} ({}); \
                         in place needs the output's shape and dtype",
                        t.shape(),
                        t.dtype()
                    )));
                }
            }
        }
    }
    let outputs: Vec<Tensor> = match out {
        Some(o) => vec![o.clone()],
        None => out_dtypes
            .iter()
            .map(|&(_, dtype)| ctx.alloc(&lowered.shape, dtype, "wgtile elementwise"))
            .collect::<Result<_>>()?,
    };
    let output = outputs[0].clone();
    let n = output.numel();
    let read: u64 = tensors
        .iter()
        .enumerate()
        .filter(|(i, _)| !alias.contains(i))
        .map(|(_, t)| t.size_bytes())
        .sum::<u64>()
        + alias.first().map_or(0, |&i| tensors[i].size_bytes());
    let label = exprs
        .iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let mut plan = Plan {
        gpu: ctx.inner.gpu.clone(),
        label: format!("fused {label}"),
        dispatches: Vec::new(),
        output,
        // Shared subexpressions count once across the outputs.
        flops: (lowered
            .ops
            .iter()
            .filter(|o| !matches!(o, Op::Load(_) | Op::Const(_)))
            .count()
            * n) as u64,
        bytes: read + outputs.iter().map(|o| o.size_bytes()).sum::<u64>(),
        scratch: outputs[1..].to_vec(),
    };
    if n == 0 {
        return Ok((plan, outputs));
    }
    if n > u32::MAX as usize / 4 {
        return Err(Error::LimitExceeded {
            limit: "elementwise element count (u32 indices)",
            requested: n as u64,
            max: u64::from(u32::MAX / 4),
            what: format!("an elementwise result of shape {:?}", lowered.shape),
        });
    }
    let (vec4, inputs) = plan_access(&lowered, &alias);
    let bindings =
        inputs.len() - alias.len() + outputs.len() + usize::from(!lowered.constants.is_empty());
    let max_bindings = ctx.profile().max_storage_buffers_per_stage as usize;
    if bindings > max_bindings {
        return Err(Error::LimitExceeded {
            limit: "max_storage_buffers_per_shader_stage",
            requested: bindings as u64,
            max: max_bindings as u64,
            what: format!("a fused kernel with {} distinct tensors", inputs.len()),
        });
    }
    let generated = emit(
        &lowered.ops,
        &inputs,
        lowered.constants.len(),
        &out_dtypes,
        vec4,
    );
    let pipeline = fused_pipeline(ctx, &generated)?;

    let units = if vec4 { n / 4 } else { n } as u32;
    let groups = units.div_ceil(WORKGROUP_SIZE);
    let max = ctx.profile().max_workgroups_per_dim;
    // Rows of at most `max` workgroups, balanced so the last row is not
    // nearly empty (65536 groups: 2 x 32768, not 2 x 65535 with 65534 idle).
    let gy = groups.div_ceil(max);
    let gx = groups.div_ceil(gy);
    if gy > max {
        return Err(Error::LimitExceeded {
            limit: "max_compute_workgroups_per_dimension",
            requested: u64::from(gy),
            max: u64::from(max),
            what: format!("a fused kernel over {n} elements"),
        });
    }
    let out4 = dims4(&lowered.shape);
    let mut words: Vec<u32> = vec![units, n as u32, f32::NAN.to_bits(), f32::INFINITY.to_bits()];
    words.extend(out4.iter().map(|&d| d as u32));
    for leaf in &lowered.leaves {
        words.extend(
            broadcast_strides(leaf.shape(), &lowered.shape)
                .iter()
                .map(|&s| s as u32),
        );
    }
    let params = ctx.uniform(&words);
    let consts = (!lowered.constants.is_empty()).then(|| {
        let bits: Vec<u32> = lowered.constants.iter().map(|c| c.to_bits()).collect();
        ctx.storage_words(&bits)
    });
    let mut binds: Vec<(u32, &wgpu::Buffer)> = vec![(0, &params), (2, plan.output.buffer())];
    if let Some(c) = &consts {
        binds.push((1, c));
    }
    for (j, t) in tensors.iter().enumerate() {
        if !alias.contains(&j) {
            binds.push((3 + j as u32, t.buffer()));
        }
    }
    for (r, o) in outputs.iter().enumerate().skip(1) {
        binds.push((output_binding(r, inputs.len()) as u32, o.buffer()));
    }
    plan.dispatches.push(Dispatch::with_bindings(
        &ctx.inner.device,
        pipeline,
        &binds,
        [gx, gy, 1],
    ));
    Ok((plan, outputs))
}


/// One kernel per operation node, intermediates in memory.
pub(crate) fn plan_unfused(ctx: &Context, expr: &Expr) -> Result<Plan> {
    // Validate the whole tree first (shapes, leaves) so errors match eval.
    let lowered = lower(expr)?;
    if lowered
        .leaves
        .iter()
        .any(|l| matches!(l, Leaf::Symbol { .. } | Leaf::Acc))
    {
        return Err(Error::InvalidArgument(
            "an expression with symbolic inputs (Expr::input) cannot be evaluated".into(),
        ));
    }
    struct State {
        memo: HashMap<*const Node, Expr>,
        tensor_memo: HashMap<*const Node, bool>,
        dispatches: Vec<Dispatch>,
        scratch: Vec<Tensor>,
        bytes: u64,
        flops: u64,
    }
    pub(crate) fn has_tensor(e: &Expr, seen: &mut HashMap<*const Node, bool>) -> bool {
        let ptr = Arc::as_ptr(&e.0);
        if let Some(&v) = seen.get(&ptr) {
            return v;
        }
        let v = match e.as_node() {
            Node::Tensor(_) | Node::Input { .. } | Node::Acc => true,
            Node::Scalar(_) => false,
            Node::Unary(_, a) => has_tensor(a, seen),
            Node::Binary(_, a, b) => has_tensor(a, seen) | has_tensor(b, seen),
            Node::Where(c, a, b) => has_tensor(c, seen) | has_tensor(a, seen) | has_tensor(b, seen),
        };
        seen.insert(ptr, v);
        v
    }
    pub(crate) fn go(ctx: &Context, st: &mut State, e: &Expr) -> Result<Expr> {
        if matches!(e.as_node(), Node::Tensor(_)) || !has_tensor(e, &mut st.tensor_memo) {
            // Leaves, and scalar-only subtrees (inlined where used).
            return Ok(e.clone());
        }
        let ptr = Arc::as_ptr(&e.0);
        if let Some(done) = st.memo.get(&ptr) {
            return Ok(done.clone());
        }
        let one = match e.as_node() {
            Node::Unary(op, a) => Expr::apply_unary(*op, go(ctx, st, a)?),
            Node::Binary(op, a, b) => Expr::apply_binary(*op, go(ctx, st, a)?, go(ctx, st, b)?),
            Node::Where(c, a, b) => Expr::where_(go(ctx, st, c)?, go(ctx, st, a)?, go(ctx, st, b)?),
            _ => unreachable!("leaves returned above"),
        };
        let plan = plan_fused(ctx, &one, None)?;
        st.bytes += plan.bytes;
        st.flops += plan.flops;
        st.dispatches.extend(plan.dispatches.iter().cloned());
        let t = plan.into_output();
        st.scratch.push(t.clone());
        let leaf = Expr::from(t);
        st.memo.insert(ptr, leaf.clone());
        Ok(leaf)
    }
    let mut st = State {
        memo: HashMap::new(),
        tensor_memo: HashMap::new(),
        dispatches: Vec::new(),
        scratch: Vec::new(),
        bytes: 0,
        flops: 0,
    };
    let root = go(ctx, &mut st, expr)?;
    let output = match root.as_node() {
        Node::Tensor(t) if !st.scratch.is_empty() => {
            st.scratch.pop();
            t.clone()
        }
        // A bare tensor: one copy kernel, as `eval` would run.
        _ => return plan_fused(ctx, expr, None),
    };
    Ok(Plan {
        gpu: ctx.inner.gpu.clone(),
        label: format!("unfused {expr} ({} kernels)", st.dispatches.len()),
        dispatches: st.dispatches,
        output,
        flops: st.flops,
        bytes: st.bytes,
        scratch: st.scratch,
    })
}
