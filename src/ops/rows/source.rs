//! [`RowFusion`]: an expression (and an optional epilogue) feeding a row
//! kernel, lowered once: its generated load and store hooks, the tensors
//! they bind and the parameter words. Shared by the row ops and reductions.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::expr::Expr;
use crate::gpu::Tensor;
use crate::kernels::codegen::fusion::rows::{
    ROW_FIRST_INPUT_BINDING, RowHooks, RowLowered, emit_rows, lower_rows, row_writes_bf16,
};
use crate::kernels::codegen::fusion::{Leaf, Op, broadcast_strides, dims4};
use crate::runtime::Context;

/// An expression (and optional epilogue) checked for running in a row
/// kernel on a context: what the row-op plans need besides the hooks.
pub(crate) struct RowFusion {
    rl: RowLowered,
    /// `(binding, tensor)` of every tensor leaf.
    tensors: Vec<(u32, Tensor)>,
}

impl RowFusion {
    /// Lowers and checks `x` (and `epilogue`) for `ctx`: tensors on `ctx`,
    /// contiguous, no symbolic inputs, f16 only with `shader-f16` (bf16
    /// tensors are read as words and widened in the generated load part).
    pub(crate) fn new(ctx: &Context, x: &Expr, epilogue: Option<&Expr>) -> Result<Self> {
        let rl = lower_rows(x, epilogue)?;
        let mut tensors = Vec::new();
        for (j, leaf) in rl.lowered.leaves.iter().enumerate() {
            match leaf {
                Leaf::Tensor(t) => {
                    ctx.check_owned(t, "a tensor of the fused row op")?;
                    if t.dtype() == DType::F16 {
                        ctx.require_f16("a fused row-op expression with f16 tensors")?;
                    }
                    tensors.push((ROW_FIRST_INPUT_BINDING + j as u32, t.clone()));
                }
                Leaf::Symbol { .. } => {
                    return Err(Error::InvalidArgument(
                        "an expression with symbolic inputs (Expr::input) cannot be evaluated"
                            .into(),
                    ));
                }
                Leaf::Acc => {}
            }
        }
        Ok(Self { rl, tensors })
    }

    /// The load expression's result shape.
    pub(crate) fn shape(&self) -> &[usize] {
        &self.rl.lowered.shape
    }

    /// The row op's result dtype (the load expression's dtype rule): bf16
    /// when every tensor of the input expression is bf16.
    pub(crate) fn result_dtype(&self) -> DType {
        self.rl.lowered.dtype_of(self.rl.lowered.roots[0])
    }

    /// The dtype the row kernel computes in (its `Elem`): the result dtype,
    /// but f32 for a bf16 result, which the kernel's store part packs
    /// itself where the chunks are vectors and the plans round behind the
    /// kernel elsewhere (bf16 leaves are widened in registers either way).
    pub(crate) fn dtype(&self) -> DType {
        match self.result_dtype() {
            DType::BF16 => DType::F32,
            d => d,
        }
    }

    /// The dtype the row kernel writes for rows of `n` values (bf16 where
    /// the store part packs it: [`row_writes_bf16`]).
    pub(crate) fn output_dtype(&self, n: usize) -> DType {
        if row_writes_bf16(self.result_dtype(), n.is_multiple_of(4)) {
            DType::BF16
        } else {
            self.dtype()
        }
    }

    /// Bytes of the distinct tensors read (each once).
    pub(crate) fn read_bytes(&self) -> u64 {
        self.tensors.iter().map(|(_, t)| t.size_bytes()).sum()
    }

    /// Storage buffers the generated parts bind (tensors and constants).
    pub(crate) fn storage_bindings(&self) -> usize {
        self.tensors.len() + usize::from(!self.rl.lowered.constants.is_empty())
    }

    /// Operation nodes per element (for plans' `flops`).
    pub(crate) fn ops_per_element(&self) -> u64 {
        self.rl
            .lowered
            .ops
            .iter()
            .filter(|o| !matches!(o, Op::Load(_) | Op::Const(_)))
            .count() as u64
    }

    /// The generated parts for a kernel with `VEC == 4` when `row_vec4`.
    pub(crate) fn hooks(&self, row_vec4: bool, bf16_out: bool) -> RowHooks {
        emit_rows(&self.rl, row_vec4, bf16_out)
    }

    /// A short description for plan labels.
    pub(crate) fn describe(&self) -> String {
        self.rl.names.join(" -> ")
    }

    /// The uniform (`ew_p`) and constants (`ew_k`) buffers for `hooks`.
    pub(crate) fn buffers(
        &self,
        ctx: &Context,
        hooks: &RowHooks,
    ) -> (wgpu::Buffer, Option<wgpu::Buffer>) {
        let l = &self.rl.lowered;
        let n: usize = l.shape.iter().product();
        let units = if hooks.vec4 { n / 4 } else { n };
        let mut words: Vec<u32> = vec![
            units as u32,
            n as u32,
            f32::NAN.to_bits(),
            f32::INFINITY.to_bits(),
        ];
        words.extend(dims4(&l.shape).iter().map(|&d| d as u32));
        for leaf in &l.leaves {
            let strides = match leaf {
                Leaf::Acc => [0; crate::gpu::MAX_RANK],
                _ => broadcast_strides(leaf.shape(), &l.shape),
            };
            words.extend(strides.iter().map(|&s| s as u32));
        }
        let uniform = ctx.uniform(&words);
        let consts = (!l.constants.is_empty()).then(|| {
            let bits: Vec<u32> = l.constants.iter().map(|c| c.to_bits()).collect();
            ctx.storage_words(&bits)
        });
        (uniform, consts)
    }

    /// The tensor leaves with their bindings.
    pub(crate) fn tensors(&self) -> &[(u32, Tensor)] {
        &self.tensors
    }
}
