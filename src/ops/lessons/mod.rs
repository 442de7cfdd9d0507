//! The lecture's lessons as kernels anyone can run and time
//! (`shaders/lessons_*.wgsl`): control divergence, recomputation, memory
//! coalescing and ReLU over FP8 codes. They are small on purpose: each
//! isolates one effect, with the same work or the same bytes on both
//! sides of the comparison, and each result is exact or checked against
//! an f64 reference in the tests. The tour (`cargo xtask tour`) times them
//! against the adapter's own ceilings.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::gpu::{Plan, Tensor, grid};
use crate::kernels::{Dispatch, Kernel, Spec};
use crate::runtime::Context;

/// Invocations per workgroup of every lesson kernel.
const WG: u32 = 256;

/// How [`Context::divergence_plan`] chooses between its two loops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BranchForm {
    /// `if x >= 0 { loop A } else { loop B }`: where the lanes of a
    /// subgroup see both signs, the subgroup runs both loops.
    Branch,
    /// The choice made on the loops' constants with `select`, then one
    /// loop for every lane.
    Select,
}

/// Where [`Context::sigmoid_chain_plans`] gets the backward pass's
/// activations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activations {
    /// The forward pass writes them and the backward reads them: 8 global
    /// accesses per element in all.
    Store,
    /// The backward recomputes them from `x`: 5 accesses per element.
    Recompute,
}

/// The forward and backward plans of the three-sigmoid chain.
pub struct SigmoidChain {
    /// Reads x; writes y (and, with [`Activations::Store`], the two
    /// activations).
    pub forward: Plan,
    /// Reads dy (and the activations, or x); writes dx.
    pub backward: Plan,
}

/// The order in which [`Context::ordered_copy_plan`]'s invocations visit a
/// row-major matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadOrder {
    /// Consecutive invocations on consecutive elements of a row
    /// (coalesced).
    Rows,
    /// Consecutive invocations on consecutive rows of a column (strided).
    Columns,
}

fn u32_of(what: &str, v: usize) -> Result<u32> {
    Error::u32_index("a lesson kernel's indices (u32)", what, v)
}

impl Context {
    /// `f32` elements through one of two loops of `steps` iterations
    /// (`z <- a z^2 + c` from `z = x / 2`, `(a, c)` = `(0.5, 0.25)` for
    /// `x >= 0`, `(-0.5, 0.5)` otherwise; `|x| <= 1` keeps it bounded),
    /// choosing by [`BranchForm`]. With the same input both forms give
    /// the same result; the branch's time depends on how the signs fall
    /// across each subgroup, the select's does not. `flops` counts 3 per
    /// iteration and element.
    pub fn divergence_plan(&self, x: &Tensor, form: BranchForm, steps: u32) -> Result<Plan> {
        let op = "divergence";
        self.check_f32(x, op)?;
        let n = u32_of("elements", x.numel())?;
        let out = self.alloc(x.shape(), DType::F32, "wgtile lesson divergence")?;
        let spec = Spec::new(Kernel::LessonDivergence)
            .constant("FORM", u32::from(form == BranchForm::Select))
            .override_("WG", WG);
        let mut dispatches = Vec::new();
        let g = grid(self.profile(), u64::from(n.div_ceil(WG)), op)?;
        if n > 0 {
            let params = self.uniform(&[n, steps, g[0], 0]);
            dispatches.push(self.lesson_dispatch(&spec, &[(0, &params), (1, x.buffer()), (2, out.buffer())], g)?);
        }
        Ok(self.plan(
            format!("divergence ({form:?}, {steps} steps)"),
            dispatches,
            out,
            3 * u64::from(steps) * u64::from(n),
            8 * u64::from(n),
        ))
    }

    /// The chain `y = s(s(s(x)))` (s the logistic sigmoid) forward, and its
    /// backward `dx = dy * dy/dx`, over `f32` tensors of one shape, with
    /// the activations stored or recomputed ([`Activations`]). The plans'
    /// `bytes` count the global accesses each makes (4 + 4 stored,
    /// 2 + 3 recomputed, 4 bytes each); their outputs are y and dx.
    pub fn sigmoid_chain_plans(&self, x: &Tensor, dy: &Tensor, activations: Activations) -> Result<SigmoidChain> {
        let op = "sigmoid chain";
        self.check_f32(x, op)?;
        self.check_f32(dy, op)?;
        if x.shape() != dy.shape() {
            return Err(Error::shape(op, x.shape(), dy.shape(), "x and dy must have one shape"));
        }
        let n = u32_of("elements", x.numel())?;
        let bytes = |accesses: u64| 4 * accesses * u64::from(n);
        let g = grid(self.profile(), u64::from(n.div_ceil(WG)), op)?;
        let params = self.uniform(&[n, g[0], 0, 0]);
        let y = self.alloc(x.shape(), DType::F32, "wgtile lesson y")?;
        let dx = self.alloc(x.shape(), DType::F32, "wgtile lesson dx")?;
        let spec = |k: Kernel| Spec::new(k).override_("WG", WG);
        let (mut fwd, mut bwd) = (Vec::new(), Vec::new());
        let (forward, backward) = match activations {
            Activations::Store => {
                let a1 = self.alloc(x.shape(), DType::F32, "wgtile lesson a1")?;
                let a2 = self.alloc(x.shape(), DType::F32, "wgtile lesson a2")?;
                if n > 0 {
                    fwd.push(self.lesson_dispatch(
                        &spec(Kernel::LessonForwardStore),
                        &[(0, &params), (1, x.buffer()), (5, y.buffer()), (6, a1.buffer()), (7, a2.buffer())],
                        g,
                    )?);
                    bwd.push(self.lesson_dispatch(
                        &spec(Kernel::LessonBackwardStored),
                        &[(0, &params), (2, dy.buffer()), (3, a1.buffer()), (4, a2.buffer()), (5, dx.buffer())],
                        g,
                    )?);
                }
                let mut forward = self.plan("sigmoid chain forward, storing a1 and a2".into(), fwd, y, 0, bytes(4));
                forward.scratch = vec![a1.clone(), a2.clone()];
                let mut backward =
                    self.plan("sigmoid chain backward from a1 and a2".into(), bwd, dx, 0, bytes(4));
                backward.scratch = vec![a1, a2];
                (forward, backward)
            }
            Activations::Recompute => {
                if n > 0 {
                    fwd.push(self.lesson_dispatch(
                        &spec(Kernel::LessonForward),
                        &[(0, &params), (1, x.buffer()), (5, y.buffer())],
                        g,
                    )?);
                    bwd.push(self.lesson_dispatch(
                        &spec(Kernel::LessonBackwardRecompute),
                        &[(0, &params), (1, x.buffer()), (2, dy.buffer()), (5, dx.buffer())],
                        g,
                    )?);
                }
                (
                    self.plan("sigmoid chain forward".into(), fwd, y, 0, bytes(2)),
                    self.plan("sigmoid chain backward, recomputing a1 and a2".into(), bwd, dx, 0, bytes(3)),
                )
            }
        };
        Ok(SigmoidChain { forward, backward })
    }

    /// A copy of the rank-2 `f32` matrix `x` whose invocations visit it in
    /// `order`: the same elements and bytes, a different access pattern
    /// (the result equals `x` either way).
    pub fn ordered_copy_plan(&self, x: &Tensor, order: ReadOrder) -> Result<Plan> {
        let kernel = match order {
            ReadOrder::Rows => Kernel::LessonCopyRows,
            ReadOrder::Columns => Kernel::LessonCopyColumns,
        };
        self.matrix_lesson(x, kernel, "ordered copy", &format!("copy along {order:?}"), false)
    }

    /// The transpose of the rank-2 `f32` matrix `x`, one invocation per
    /// element of `x`: coalesced reads and strided writes, the version
    /// [`Context::transpose`]'s tiles through workgroup memory improve on.
    pub fn naive_transpose_plan(&self, x: &Tensor) -> Result<Plan> {
        self.matrix_lesson(x, Kernel::LessonTransposeNaive, "naive transpose", "naive transpose", true)
    }

    /// ReLU over FP8 E4M3 codes packed four to a `u32` word (a `U32`
    /// tensor, byte `j` of a word its element `j`): negative codes become
    /// `+0`, NaN codes stay NaN, the rest are copied. One byte read and
    /// one written per element: 2 bytes per FLOP, a quarter of f32's.
    pub fn relu_fp8_plan(&self, codes: &Tensor) -> Result<Plan> {
        let op = "relu_fp8";
        self.check_owned_any(codes, op)?;
        codes.require_contiguous(op)?;
        if codes.dtype() != DType::U32 {
            return Err(Error::DTypeMismatch {
                op: "relu_fp8 (E4M3 codes packed in u32 words)",
                expected: DType::U32,
                got: codes.dtype(),
            });
        }
        let words = u32_of("words", codes.numel())?;
        let out = self.alloc(codes.shape(), DType::U32, "wgtile lesson relu fp8")?;
        // One 16-byte word (four u32 words) per invocation.
        let g = grid(self.profile(), u64::from(words.div_ceil(4).div_ceil(WG)), op)?;
        let mut dispatches = Vec::new();
        if words > 0 {
            let params = self.uniform(&[words, g[0], 0, 0]);
            let spec = Spec::new(Kernel::LessonReluFp8).override_("WG", WG);
            dispatches.push(self.lesson_dispatch(&spec, &[(0, &params), (1, codes.buffer()), (2, out.buffer())], g)?);
        }
        let elements = 4 * u64::from(words);
        Ok(self.plan("relu over E4M3 codes".into(), dispatches, out, elements, 2 * elements))
    }

    fn matrix_lesson(&self, x: &Tensor, kernel: Kernel, op: &'static str, label: &str, transposed: bool) -> Result<Plan> {
        self.check_f32(x, op)?;
        let [rows, cols] = x.shape() else {
            return Err(Error::InvalidArgument(format!("{op} takes a matrix, got shape {:?}", x.shape())));
        };
        let (rows, cols) = (*rows, *cols);
        let n = u32_of("elements", rows * cols)?;
        let shape = if transposed { [cols, rows] } else { [rows, cols] };
        let out = self.alloc(&shape, DType::F32, "wgtile lesson copy")?;
        let g = grid(self.profile(), u64::from(n.div_ceil(WG)), op)?;
        let mut dispatches = Vec::new();
        if n > 0 {
            let params = self.uniform(&[u32_of("rows", rows)?, u32_of("cols", cols)?, g[0], 0]);
            let spec = Spec::new(kernel).override_("WG", WG);
            dispatches.push(self.lesson_dispatch(&spec, &[(0, &params), (1, x.buffer()), (2, out.buffer())], g)?);
        }
        Ok(self.plan(format!("{label} {rows}x{cols}"), dispatches, out, 0, 8 * u64::from(n)))
    }

    fn check_f32(&self, t: &Tensor, op: &'static str) -> Result<()> {
        self.check_owned(t, op)?;
        t.require_contiguous(op)?;
        if t.dtype() != DType::F32 {
            return Err(Error::DTypeMismatch {
                op,
                expected: DType::F32,
                got: t.dtype(),
            });
        }
        Ok(())
    }

    fn lesson_dispatch(&self, spec: &Spec, bindings: &[(u32, &wgpu::Buffer)], g: [u32; 3]) -> Result<Dispatch> {
        let pipeline = self.inner.pipelines.get(&self.inner.device, spec)?;
        Ok(Dispatch::with_bindings(&self.inner.device, pipeline, bindings, g))
    }
}

/// Every specialisation the lesson kernels compile (for the shader tests).
pub fn lesson_specs() -> Vec<Spec> {
    let mut out: Vec<Spec> = [0, 1]
        .map(|form| Spec::new(Kernel::LessonDivergence).constant("FORM", form).override_("WG", WG))
        .to_vec();
    out.extend(
        [
            Kernel::LessonForwardStore,
            Kernel::LessonBackwardStored,
            Kernel::LessonForward,
            Kernel::LessonBackwardRecompute,
            Kernel::LessonCopyRows,
            Kernel::LessonCopyColumns,
            Kernel::LessonTransposeNaive,
            Kernel::LessonReluFp8,
        ]
        .map(|k| Spec::new(k).override_("WG", WG)),
    );
    out
}
