//! Row ops of elementwise expressions fused into the row kernels
//! (reductions, softmax, norms): documented on [`Context::row_op_of_plan`].

use crate::dtype::DType;
use crate::error::Result;
use crate::ops::rows::source::RowFusion;
use crate::expr::Expr;
use crate::ops::rows::reduce::{Axis, Reduction};
use crate::ops::rows::{RowOp, RowOptions, RowSource};
use crate::runtime::Context;
use crate::gpu::Plan;
use crate::gpu::Tensor;

impl Context {
    /// The reduction `op` over `axis` of the expression `x`, as ONE kernel
    /// (see [`Context::row_op_of_plan`]); as [`Context::reduce_plan`] otherwise.
    pub fn reduce_of_plan(&self, x: &Expr, op: Reduction, axis: Axis) -> Result<Plan> {
        let fusion = RowFusion::new(self, x, None)?;
        let plan = self.reduce_source_plan(RowSource::Fused(&fusion), op, axis)?;
        self.round_bf16_result(&fusion, plan)
    }

    /// `plan` of a fused row op whose kernel wrote f32 for a bf16 result:
    /// followed by the rounding (nearest even) into a bf16 output.
    fn round_bf16_result(&self, fusion: &RowFusion, plan: Plan) -> Result<Plan> {
        if fusion.result_dtype() != DType::BF16 {
            return Ok(plan);
        }
        let mut plan = self.round_output_bf16(plan, None)?;
        plan.label = format!("{} [bf16 leaves widened in registers, result rounded to bf16]", plan.label);
        Ok(plan)
    }

    /// [`Context::reduce_of_plan`], run.
    pub fn reduce_of(&self, x: &Expr, op: Reduction, axis: Axis) -> Result<Tensor> {
        let plan = self.reduce_of_plan(x, op, axis)?;
        plan.run()?;
        Ok(plan.into_output())
    }

    /// Sum of the expression `x` over `axis` in one kernel (`sum_of(x*x)`:
    /// a sum of squares reading `x` once). As [`Context::sum`] otherwise.
    pub fn sum_of(&self, x: &Expr, axis: Axis) -> Result<Tensor> {
        self.reduce_of(x, Reduction::Sum, axis)
    }

    /// Maximum of the expression `x` over `axis` in one kernel.
    pub fn max_of(&self, x: &Expr, axis: Axis) -> Result<Tensor> {
        self.reduce_of(x, Reduction::Max, axis)
    }

    /// Mean of the expression `x` over `axis` in one kernel
    /// (`mean_of((a - b).abs())`: a mean absolute error).
    pub fn mean_of(&self, x: &Expr, axis: Axis) -> Result<Tensor> {
        self.reduce_of(x, Reduction::Mean, axis)
    }

    /// Any row op of the expression `x` with an optional `epilogue` as ONE
    /// kernel; `weight`, `bias` and `eps` as [`Context::row_op_plan`]
    /// (`weight`/`bias` must have `x`'s result dtype).
    ///
    /// Row operations and reductions of elementwise expressions, fused: the
    /// expression is computed inside the row kernel as it loads its input, and
    /// an optional epilogue is applied to each output element before the store,
    /// so `softmax(x * scale + mask) * keep` is ONE kernel reading `x`, `mask`
    /// and `keep` once and writing the result once.
    ///
    /// - `ctx.sum_of(&e, axis)`, `max_of`, `mean_of`, [`Context::reduce_of`]:
    ///   reductions of an expression (`sum_of(x*x)`: a sum of squares reading
    ///   `x` once).
    /// - `ctx.softmax_of(&e, epilogue)`, `log_softmax_of`, `layer_norm_of`,
    ///   `rms_norm_of`: [`Context::softmax`], [`Context::log_softmax`], [`Context::layer_norm`] and
    ///   [`Context::rms_norm`] over an
    ///   expression; `epilogue` (an expression of [`Expr::acc`], the row op's
    ///   f32 result at the element, and of tensors broadcasting to the output
    ///   shape) is applied before the store: `Some(&Expr::acc().gelu())`,
    ///   `Some(&(Expr::acc() * &keep))`.
    /// - each has a `*_plan` variant; `Plan::bytes` = every distinct tensor read
    ///   once (input expression and epilogue, a tensor in both counts once) +
    ///   the output written once (+ the norms' weight and bias); rows longer
    ///   than the registers hold are read twice by the streaming kernels, which
    ///   recompute the expression.
    ///
    /// Semantics are those of evaluating the expression ([`Context::eval`]),
    /// then the row op on the result, then the epilogue, except that nothing is
    /// rounded in between: the expression's value enters the row op in f32 and
    /// the row op's f32 result enters the epilogue (an unfused f16 pipeline
    /// rounds to f16 twice more). Dtypes: the row op's output has the
    /// expression's dtype (f32 if any tensor of the *input* expression is f32
    /// or the dtypes differ, f16 or bf16 if all are); the epilogue's tensors
    /// may be any float dtype. bf16 tensors are read as words and widened in
    /// registers (exact); a bf16 result is computed in f32 and rounded to
    /// nearest even by a cast behind the kernel (one extra pass over the
    /// output), with bf16 `weight`/`bias` staged to f32. Shapes: the
    /// expression's broadcast shape; the epilogue must broadcast to it without
    /// enlarging it ([`Error::ShapeMismatch`](crate::Error::ShapeMismatch) named
    /// `row-op epilogue` otherwise). Tensors must be contiguous (padded ones are
    /// refused, as by every row op). Reductions take no epilogue (their kernel
    /// writes one value per row itself).
    ///
    /// How: the kernels' load and store hook parts are generated from the
    /// expressions; pipelines are cached by (kernel specialisation, expression
    /// structure), so `sum_of(x * 2)` and `sum_of(y * 3)` share one.
    ///
    /// ```no_run
    /// # fn main() -> wgtile::Result<()> {
    /// use wgtile::{Axis, Context, DType, Expr};
    /// let ctx = Context::new_blocking(Default::default())?;
    /// let x = ctx.rand_uniform([2, 8, 64, 64], -1.0, 1.0, DType::F32, 1)?;
    /// let mask = ctx.rand_uniform([64, 64], -1.0, 0.0, DType::F32, 2)?;
    /// let sq = ctx.sum_of(&(x.expr() * x.expr()), Axis::Last)?; // [2, 8, 64]
    /// let p = ctx.softmax_of(&(x.expr() * 0.125 + &mask), None)?; // attention scores
    /// let g = ctx.layer_norm_of(&x.expr(), None, None, 1e-5, Some(&Expr::acc().gelu()))?;
    /// # Ok(()) }
    /// ```
    pub fn row_op_of_plan(
        &self,
        op: RowOp,
        x: &Expr,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f32,
        epilogue: Option<&Expr>,
    ) -> Result<Plan> {
        let fusion = RowFusion::new(self, x, epilogue)?;
        self.row_op_check_params(op, weight, bias)?;
        if fusion.result_dtype() != DType::BF16 {
            return self.row_source_plan(
                op,
                RowSource::Fused(&fusion),
                weight,
                bias,
                eps,
                RowOptions::default(),
            );
        }
        // A bf16 result: the kernel computes and writes f32; bf16 weight and
        // bias are staged to f32 (exact) for it.
        let params = self.bf16_row_params(op, weight, bias)?;
        let staged = self.stage_bf16(&params, DType::F32)?;
        let mut wide = staged.tensors.iter();
        let w = weight.and_then(|_| wide.next());
        let b = bias.and_then(|_| wide.next());
        let plan = self.row_source_plan(
            op,
            RowSource::Fused(&fusion),
            w,
            b,
            eps,
            RowOptions::default(),
        )?;
        self.round_bf16_result(&fusion, staged.before(plan, &params))
    }

    /// Softmax over the last axis of the expression `x`, then `epilogue`
    /// (an expression of [`Expr::acc`]) if given, in one kernel;
    /// [`Context::softmax`]'s semantics (`-inf` entries of a mask get 0).
    pub fn softmax_of(&self, x: &Expr, epilogue: Option<&Expr>) -> Result<Tensor> {
        run(self.softmax_of_plan(x, epilogue)?)
    }

    /// [`Context::softmax_of`] as a [`Plan`].
    pub fn softmax_of_plan(&self, x: &Expr, epilogue: Option<&Expr>) -> Result<Plan> {
        self.row_op_of_plan(RowOp::Softmax, x, None, None, 0.0, epilogue)
    }

    /// Log-softmax of the expression `x`, then `epilogue`, in one kernel.
    pub fn log_softmax_of(&self, x: &Expr, epilogue: Option<&Expr>) -> Result<Tensor> {
        run(self.log_softmax_of_plan(x, epilogue)?)
    }

    /// [`Context::log_softmax_of`] as a [`Plan`].
    pub fn log_softmax_of_plan(&self, x: &Expr, epilogue: Option<&Expr>) -> Result<Plan> {
        self.row_op_of_plan(RowOp::LogSoftmax, x, None, None, 0.0, epilogue)
    }

    /// LayerNorm of the expression `x`, then `epilogue`, in one kernel
    /// (`layer_norm_of(&(x + &residual), .., Some(&Expr::acc().gelu()))`).
    pub fn layer_norm_of(
        &self,
        x: &Expr,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f32,
        epilogue: Option<&Expr>,
    ) -> Result<Tensor> {
        run(self.layer_norm_of_plan(x, weight, bias, eps, epilogue)?)
    }

    /// [`Context::layer_norm_of`] as a [`Plan`].
    pub fn layer_norm_of_plan(
        &self,
        x: &Expr,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f32,
        epilogue: Option<&Expr>,
    ) -> Result<Plan> {
        self.row_op_of_plan(RowOp::LayerNorm, x, weight, bias, eps, epilogue)
    }

    /// RMSNorm of the expression `x` (`rms_norm_of(&(x + &residual), ..)`),
    /// then `epilogue`, in one kernel.
    pub fn rms_norm_of(
        &self,
        x: &Expr,
        weight: Option<&Tensor>,
        eps: f32,
        epilogue: Option<&Expr>,
    ) -> Result<Tensor> {
        run(self.rms_norm_of_plan(x, weight, eps, epilogue)?)
    }

    /// [`Context::rms_norm_of`] as a [`Plan`].
    pub fn rms_norm_of_plan(
        &self,
        x: &Expr,
        weight: Option<&Tensor>,
        eps: f32,
        epilogue: Option<&Expr>,
    ) -> Result<Plan> {
        self.row_op_of_plan(RowOp::RmsNorm, x, weight, None, eps, epilogue)
    }
}

fn run(plan: Plan) -> Result<Tensor> {
    plan.run()?;
    Ok(plan.into_output())
}
