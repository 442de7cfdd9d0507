//! Evaluation of elementwise expressions ([`Expr`], built in `crate::expr`):
//! one fused kernel per expression tree (the lecture's third trick), or the
//! naive kernel-per-node form to compare with.

use crate::error::Result;
pub use crate::expr::{BinaryOp, Expr, UnaryOp};
use crate::runtime::Context;
use crate::gpu::Plan;
use crate::gpu::Tensor;

mod plan;

pub(crate) use plan::{plan_fused, plan_fused_many, plan_unfused};

impl Context {
    /// Evaluates `expr` as one fused kernel into a new tensor (shape: the
    /// broadcast of its leaves; dtype: see [`Expr`]).
    pub fn eval(&self, expr: &Expr) -> Result<Tensor> {
        let plan = self.eval_plan(expr)?;
        plan.run()?;
        Ok(plan.into_output())
    }

    /// Evaluates `expr` into `out`, whose shape must be the broadcast shape
    /// and whose dtype must be the result dtype. `out` may be one of the
    /// expression's tensors only when that tensor has exactly `out`'s shape
    /// and dtype (in place: each element is read before it is written, by
    /// the same invocation); any other overlap is an error.
    pub fn eval_into(&self, expr: &Expr, out: &Tensor) -> Result<()> {
        plan_fused(self, expr, Some(out))?.run()
    }

    /// The fused kernel for `expr`, checked and encoded, with a new output
    /// tensor, ready to run or time. `Plan::bytes` is every distinct input
    /// read once plus the output written once; `Plan::flops` is
    /// [`Expr::op_count`] per output element (each op counts one, a
    /// transcendental too).
    pub fn eval_plan(&self, expr: &Expr) -> Result<Plan> {
        plan_fused(self, expr, None)
    }

    /// [`Context::eval_plan`] writing into `out` (checked as [`Context::eval_into`]).
    pub fn eval_into_plan(&self, expr: &Expr, out: &Tensor) -> Result<Plan> {
        plan_fused(self, expr, Some(out))
    }

    /// Evaluates several expressions of the same result shape in ONE kernel
    /// (one pass over the inputs; tensors and subexpressions they share are
    /// loaded and computed once), returning one tensor per expression, each
    /// with its own dtype rule. For example `sin(x)` and `cos(x)` together
    /// read `x` once.
    pub fn eval_many(&self, exprs: &[Expr]) -> Result<Vec<Tensor>> {
        let (plan, outputs) = plan_fused_many(self, exprs, None)?;
        plan.run()?;
        Ok(outputs)
    }

    /// [`Context::eval_many`] as a plan (whose `output` is the first result)
    /// and all the outputs. `Plan::bytes` counts every output.
    pub fn eval_many_plan(&self, exprs: &[Expr]) -> Result<(Plan, Vec<Tensor>)> {
        plan_fused_many(self, exprs, None)
    }

    /// Evaluates `expr` the naive way, one kernel per operation node with an
    /// intermediate tensor between kernels (what an eager framework does), for
    /// comparison with [`Context::eval`]. Intermediates take the dtype rule of
    /// their own subtree (f16 stays f16, as in eager PyTorch).
    pub fn eval_unfused(&self, expr: &Expr) -> Result<Tensor> {
        let plan = self.eval_unfused_plan(expr)?;
        plan.run()?;
        Ok(plan.into_output())
    }

    /// The unfused kernels as one plan. `Plan::bytes` counts what they really
    /// move: every kernel's inputs and output, intermediates included.
    pub fn eval_unfused_plan(&self, expr: &Expr) -> Result<Plan> {
        plan_unfused(self, expr)
    }
}
