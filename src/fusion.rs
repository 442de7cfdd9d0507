//! Code generation for fused elementwise kernels: an [`Expr`] becomes one WGSL
//! compute kernel.
//!
//! # Lowering
//! The tree is walked once (children before parents) into a list of SSA
//! values: a node shared by several parents (same `Arc`) is computed once,
//! and every distinct tensor (same buffer, shape and dtype) becomes one input
//! binding loaded once per output element, so `x * x` reads `x` once. Each
//! scalar occurrence becomes a slot of a constants buffer, so the constant's
//! value is NOT part of the kernel text.
//!
//! # The kernel
//! - bindings: 0 = uniform `array<vec4<u32>>` (element count, NaN/Inf bit
//!   patterns, output dims, one stride vector per input), 1 = `array<f32>`
//!   constants (only when there are scalars), 2 = output, 3.. = inputs, then
//!   any further outputs ([`Context::eval_many`]: several expressions of one
//!   shape in one pass, sharing loads and subexpressions).
//! - 256-invocation workgroups on a 2-D grid (as few rows as the adapter's
//!   per-dimension limit allows, rows of equal length, so more than 65535 x
//!   256 units fit), one unit per invocation, `if unit >= count: return`.
//! - **vec4 path** (a unit is 4 elements, 16-byte loads and stores of f32,
//!   8-byte of f16) when the element count is a multiple of 4 and every input
//!   is the output's shape, a single element, or a broadcast whose innermost
//!   dimension is either the output's (a multiple of 4) or 1. Otherwise the
//!   **scalar path** (a unit is one element).
//! - inputs of the output's shape load at the unit index; single elements
//!   load element 0 (splat); broadcast inputs decompose the element index
//!   into 4-D coordinates (output dims in the uniform) and dot them with
//!   their strides (0 along broadcast dimensions).
//! - math in f32 (`vec4<f32>` on the vec4 path) through small helper
//!   functions for the ops with edge cases (see the module docs of
//!   [`crate::Expr`] for the NaN/Inf rules); the result is
//!   converted to the output dtype once, at the store.
//!
//! # Matmul epilogues
//! [`generate_epilogue`] turns an expression of [`Expr::acc`] (the matmul
//! accumulator), a bias and a residual into the WGSL of the matmul
//! epilogue function, with the same per-op code and helpers (scalar `V`);
//! [`crate::kernels::Spec::epilogue`] splices it into any matmul kernel.
//!
//! # Row kernels
//! [`rows`] generates the load and store hook parts of the row kernels
//! (reductions, softmax, norms) from an input expression and an epilogue of
//! [`Expr::acc`], for [`crate::ops::rows::fused`]; those pipelines share this
//! cache, keyed by (kernel specialisation, structure key).
//!
//! # Cache key
//! [`Generated::key`] is a canonical string of everything the text depends
//! on and nothing else: path (vec4 or scalar), output dtype, each input's
//! dtype and access kind, the constant count and the SSA list with operand
//! numbers. Shapes, strides, buffers and scalar values are runtime data, so
//! `x*2+1` on any shape and `y*3-5` share one pipeline. Pipelines are kept per
//! device in a bounded least-recently-used cache ([`CACHE_CAPACITY`]
//! entries), compiled through [`crate::kernels`]' error-scoped `compile`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::expr::{BinaryOp, Expr, Node, UnaryOp};
use crate::kernels::Dispatch;
use crate::runtime::Context;
use crate::runtime::Plan;
use crate::runtime::{MAX_RANK, Tensor};

pub mod rows;
pub use rows::{RowHooks, generate_row_hooks};

/// Invocations per workgroup.
pub const WORKGROUP_SIZE: u32 = 256;

/// Deepest expression accepted (operations from the root to a leaf): the
/// lowering recurses, and kernels this long are better split anyway.
pub const MAX_DEPTH: usize = 256;

pub use crate::kernels::GENERATED_CACHE_CAPACITY as CACHE_CAPACITY;

/// How a kernel input is addressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Same shape as the output: element `i` for output element `i`.
    Contiguous,
    /// One element, splat to every output element.
    Single,
    /// Broadcast: 4-D coordinates dotted with per-dimension strides. On the
    /// vec4 path `inner_unit` says the innermost stride is 1 (a vec4 load);
    /// otherwise it is 0 (one element splat to the 4 lanes).
    Broadcast {
        /// Innermost dimension not broadcast (stride 1).
        inner_unit: bool,
    },
    /// In place: the output buffer itself, read at the unit before the
    /// store (same shape and dtype as the output).
    Output,
}

/// One input binding of a generated kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InputDesc {
    /// Element type in memory.
    pub dtype: DType,
    /// How it is addressed.
    pub access: Access,
}

/// One SSA value of a lowered expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Op {
    Load(usize),
    Const(usize),
    Unary(UnaryOp, usize),
    Binary(BinaryOp, usize, usize),
    Where(usize, usize, usize),
}

/// A generated kernel: its WGSL and the structural key it is cached by.
#[derive(Clone, Debug)]
pub struct Generated {
    /// Canonical description of the kernel's structure (see the module docs).
    pub key: String,
    /// The complete WGSL module (entry point `main`, override `WG`).
    pub wgsl: String,
    /// Whether it is the vec4 path.
    pub vec4: bool,
    /// The kernel's input bindings (in binding order, from binding 3).
    pub inputs: Vec<InputDesc>,
    /// Number of scalar constants the kernel reads (binding 1 exists when > 0).
    pub constants: usize,
}

/// A leaf of the lowered expression.
enum Leaf {
    Tensor(Tensor),
    /// The matmul accumulator (epilogues only).
    Acc,
    Symbol {
        id: u32,
        shape: Vec<usize>,
        dtype: DType,
    },
}

impl Leaf {
    fn shape(&self) -> &[usize] {
        match self {
            Leaf::Tensor(t) => t.shape(),
            Leaf::Symbol { shape, .. } => shape,
            Leaf::Acc => &[],
        }
    }
    fn dtype(&self) -> DType {
        match self {
            Leaf::Tensor(t) => t.dtype(),
            Leaf::Symbol { dtype, .. } => *dtype,
            Leaf::Acc => DType::F32,
        }
    }
}

/// An expression lowered to SSA, with its leaves and constants.
struct Lowered {
    ops: Vec<Op>,
    leaves: Vec<Leaf>,
    constants: Vec<f32>,
    /// The (common) broadcast shape of the roots.
    shape: Vec<usize>,
    /// The SSA value of each expression lowered together.
    roots: Vec<usize>,
}

/// NumPy broadcast of two shapes.
fn broadcast(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i < rank - a.len() {
            1
        } else {
            a[i - (rank - a.len())]
        };
        let db = if i < rank - b.len() {
            1
        } else {
            b[i - (rank - b.len())]
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(Error::shape(
                    "elementwise",
                    a,
                    b,
                    format!(
                        "dimension {} (from the right) is {da} vs {db}; broadcasting needs equal sizes or 1",
                        rank - i
                    ),
                ));
            }
        };
    }
    Ok(out)
}

fn lower(expr: &Expr) -> Result<Lowered> {
    lower_many(std::slice::from_ref(expr))
}

/// Lowers, then refuses tensors with padded rows (`tensor_padded`): the
/// generated kernels index every tensor as contiguous.
fn lower_many(exprs: &[Expr]) -> Result<Lowered> {
    let lowered = lower_many_raw(exprs)?;
    for leaf in &lowered.leaves {
        if let Leaf::Tensor(t) = leaf {
            t.require_contiguous("an elementwise expression")?;
        }
    }
    Ok(lowered)
}

/// Lowers several expressions into one SSA list sharing leaves, constants'
/// buffer and common subexpressions (for one kernel with several outputs).
fn lower_many_raw(exprs: &[Expr]) -> Result<Lowered> {
    lower_roots(exprs, true).map(|(lowered, _)| lowered)
}

/// [`lower_many_raw`], with the result shape of each root; `same_shape`
/// requires them equal (`Lowered::shape` is the first root's shape).
fn lower_roots(exprs: &[Expr], same_shape: bool) -> Result<(Lowered, Vec<Vec<usize>>)> {
    struct State {
        ops: Vec<Op>,
        leaves: Vec<Leaf>,
        constants: Vec<f32>,
        /// (value, shape) of nodes already lowered, by node address.
        memo: HashMap<*const Node, (usize, Vec<usize>)>,
    }
    fn leaf_index(st: &mut State, node: &Node) -> usize {
        let same = |l: &Leaf| match (l, node) {
            (Leaf::Tensor(a), Node::Tensor(b)) => {
                Arc::ptr_eq(&a.buffer, &b.buffer)
                    && a.shape() == b.shape()
                    && a.dtype() == b.dtype()
            }
            (Leaf::Symbol { id, .. }, Node::Input { id: other, .. }) => id == other,
            (Leaf::Acc, Node::Acc) => true,
            _ => false,
        };
        if let Some(i) = st.leaves.iter().position(same) {
            return i;
        }
        st.leaves.push(match node {
            Node::Tensor(t) => Leaf::Tensor(t.clone()),
            Node::Input { id, shape, dtype } => Leaf::Symbol {
                id: *id,
                shape: shape.clone(),
                dtype: *dtype,
            },
            Node::Acc => Leaf::Acc,
            _ => unreachable!("only leaves"),
        });
        st.leaves.len() - 1
    }
    fn walk(st: &mut State, e: &Expr, depth: usize) -> Result<(usize, Vec<usize>)> {
        let ptr = Arc::as_ptr(&e.0);
        if let Some(v) = st.memo.get(&ptr) {
            return Ok(v.clone());
        }
        if depth > MAX_DEPTH {
            return Err(Error::InvalidArgument(format!(
                "elementwise expression nested deeper than {MAX_DEPTH} operations"
            )));
        }
        let walk = |st: &mut State, e: &Expr| walk(st, e, depth + 1);
        let (op, shape) = match e.as_node() {
            Node::Tensor(t) => (Op::Load(leaf_index(st, e.as_node())), t.shape().to_vec()),
            Node::Input { shape, .. } => {
                // Symbols with the same id are the same input.
                (Op::Load(leaf_index(st, e.as_node())), shape.clone())
            }
            Node::Acc => (Op::Load(leaf_index(st, e.as_node())), Vec::new()),
            Node::Scalar(v) => {
                st.constants.push(*v);
                (Op::Const(st.constants.len() - 1), Vec::new())
            }
            Node::Unary(op, a) => {
                let (a, s) = walk(st, a)?;
                (Op::Unary(*op, a), s)
            }
            Node::Binary(op, a, b) => {
                let (a, sa) = walk(st, a)?;
                let (b, sb) = walk(st, b)?;
                (Op::Binary(*op, a, b), broadcast(&sa, &sb)?)
            }
            Node::Where(c, a, b) => {
                let (c, sc) = walk(st, c)?;
                let (a, sa) = walk(st, a)?;
                let (b, sb) = walk(st, b)?;
                let s = broadcast(&broadcast(&sc, &sa)?, &sb)?;
                (Op::Where(c, a, b), s)
            }
        };
        // Loads of one leaf are deduplicated too (two `Expr::from(&x)`).
        let index = match op {
            Op::Load(l) => st.ops.iter().position(|o| *o == Op::Load(l)),
            _ => None,
        }
        .unwrap_or_else(|| {
            st.ops.push(op);
            st.ops.len() - 1
        });
        st.memo.insert(ptr, (index, shape.clone()));
        Ok((index, shape))
    }
    let mut st = State {
        ops: Vec::new(),
        leaves: Vec::new(),
        constants: Vec::new(),
        memo: HashMap::new(),
    };
    let mut roots = Vec::with_capacity(exprs.len());
    let mut shapes = Vec::with_capacity(exprs.len());
    let mut shape: Option<Vec<usize>> = None;
    for expr in exprs {
        let (root, s) = walk(&mut st, expr, 0)?;
        shapes.push(s.clone());
        if !same_shape {
            shape.get_or_insert(s);
            roots.push(root);
            continue;
        }
        if let Some(first) = &shape
            && *first != s
        {
            return Err(Error::shape(
                "eval_many",
                first,
                &s,
                "every expression of one pass needs the same result shape",
            ));
        }
        shape = Some(s);
        roots.push(root);
    }
    let Some(shape) = shape else {
        return Err(Error::InvalidArgument("no expression to evaluate".into()));
    };
    let lowered = Lowered {
        ops: st.ops,
        leaves: st.leaves,
        constants: st.constants,
        shape,
        roots,
    };
    for &root in &lowered.roots {
        if lowered.leaves_of(root).is_empty() {
            return Err(Error::InvalidArgument(
                "an elementwise expression needs at least one tensor (its shape and dtype come from them)"
                    .into(),
            ));
        }
    }
    Ok((lowered, shapes))
}

impl Lowered {
    /// Indices of the leaves the value `root` depends on.
    fn leaves_of(&self, root: usize) -> Vec<usize> {
        let mut seen = vec![false; self.ops.len()];
        let mut stack = vec![root];
        let mut leaves = Vec::new();
        while let Some(v) = stack.pop() {
            if std::mem::replace(&mut seen[v], true) {
                continue;
            }
            match self.ops[v] {
                Op::Load(l) => leaves.push(l),
                Op::Const(_) => {}
                Op::Unary(_, a) => stack.push(a),
                Op::Binary(_, a, b) => stack.extend([a, b]),
                Op::Where(c, a, b) => stack.extend([c, a, b]),
            }
        }
        leaves
    }

    /// Output dtype of `root`: f32 if any tensor it reads is f32, f16 if all are f16.
    fn dtype_of(&self, root: usize) -> DType {
        if self
            .leaves_of(root)
            .iter()
            .all(|&l| self.leaves[l].dtype() == DType::F16)
        {
            DType::F16
        } else {
            DType::F32
        }
    }
}

/// `shape` right-aligned into 4 dims.
fn dims4(shape: &[usize]) -> [usize; MAX_RANK] {
    let mut d = [1; MAX_RANK];
    d[MAX_RANK - shape.len()..].copy_from_slice(shape);
    d
}

/// Per-dimension element strides of `shape` read as the 4-D `out` shape
/// (0 where `shape` has size 1).
fn broadcast_strides(shape: &[usize], out: &[usize]) -> [usize; MAX_RANK] {
    let d = dims4(shape);
    let o = dims4(out);
    let mut s = [0; MAX_RANK];
    let mut stride = 1;
    for i in (0..MAX_RANK).rev() {
        s[i] = if d[i] == 1 && o[i] != 1 { 0 } else { stride };
        stride *= d[i];
    }
    s
}

/// Decides each input's access kind and the path (vec4 or scalar).
fn plan_access(lowered: &Lowered, alias: &[usize]) -> (bool, Vec<InputDesc>) {
    let out = dims4(&lowered.shape);
    let n: usize = lowered.shape.iter().product();
    let kind = |i: usize, l: &Leaf| -> Access {
        if alias.contains(&i) {
            Access::Output
        } else if l.shape().iter().product::<usize>() == 1 && n != 1 {
            Access::Single
        } else if dims4(l.shape()) == out {
            Access::Contiguous
        } else {
            Access::Broadcast {
                inner_unit: dims4(l.shape())[MAX_RANK - 1] != 1 || out[MAX_RANK - 1] == 1,
            }
        }
    };
    let kinds: Vec<Access> = lowered
        .leaves
        .iter()
        .enumerate()
        .map(|(i, l)| kind(i, l))
        .collect();
    let vec4 = n.is_multiple_of(4)
        && kinds.iter().all(|k| match k {
            Access::Broadcast { .. } => out[MAX_RANK - 1].is_multiple_of(4),
            _ => true,
        });
    let inputs = lowered
        .leaves
        .iter()
        .zip(kinds)
        .map(|(l, access)| InputDesc {
            dtype: l.dtype(),
            access,
        })
        .collect();
    (vec4, inputs)
}

/// Generates the fused kernel for `expr` without a GPU (leaves may be
/// tensors or [`Expr::input`] symbols): the text [`Context::eval`] would
/// compile for these shapes and dtypes.
pub fn generate(expr: &Expr) -> Result<Generated> {
    generate_many(std::slice::from_ref(expr))
}

/// [`generate`] for one kernel with several outputs ([`Context::eval_many`]).
pub fn generate_many(exprs: &[Expr]) -> Result<Generated> {
    let lowered = lower_many(exprs)?;
    refuse_acc(&lowered)?;
    let (vec4, inputs) = plan_access(&lowered, &[]);
    let outputs: Vec<(usize, DType)> = lowered
        .roots
        .iter()
        .map(|&r| (r, lowered.dtype_of(r)))
        .collect();
    Ok(emit(
        &lowered.ops,
        &inputs,
        lowered.constants.len(),
        &outputs,
        vec4,
    ))
}

fn unary_code(op: UnaryOp, a: &str) -> String {
    match op {
        UnaryOp::Neg => format!("-{a}"),
        UnaryOp::Exp => format!("exp({a})"),
        UnaryOp::Log => format!("ew_log({a})"),
        UnaryOp::Sqrt => format!("ew_sqrt({a})"),
        UnaryOp::Rsqrt => format!("ew_rsqrt({a})"),
        UnaryOp::Sin => format!("sin(ew_reduce({a}))"),
        UnaryOp::Cos => format!("cos(ew_reduce({a}))"),
        UnaryOp::Tanh => format!("ew_tanh({a})"),
        UnaryOp::Sigmoid => format!("1.0 / (1.0 + exp(-{a}))"),
        UnaryOp::Relu => format!("select({a}, V(0.0), {a} < V(0.0))"),
        UnaryOp::Gelu => format!("ew_gelu({a})"),
        UnaryOp::GeluErf => format!("ew_gelu_erf({a})"),
        UnaryOp::Silu => format!("ew_silu({a})"),
        UnaryOp::Abs => format!("abs({a})"),
        UnaryOp::Square => format!("{a} * {a}"),
    }
}

fn binary_code(op: BinaryOp, a: &str, b: &str) -> String {
    // Comparisons are made NaN-exact with bit tests (a compiler assuming
    // finite math, or an ordered `!=`, would get NaN wrong otherwise).
    let mask =
        |cmp: &str| format!("select(V(0.0), V(1.0), ({a} {cmp} {b}) & ew_ordered({a}, {b}))");
    match op {
        BinaryOp::Add => format!("{a} + {b}"),
        BinaryOp::Sub => format!("{a} - {b}"),
        BinaryOp::Mul => format!("{a} * {b}"),
        BinaryOp::Div => format!("{a} / {b}"),
        BinaryOp::Pow => format!("ew_pow({a}, {b})"),
        BinaryOp::Min => format!("ew_min({a}, {b})"),
        BinaryOp::Max => format!("ew_max({a}, {b})"),
        BinaryOp::Lt => mask("<"),
        BinaryOp::Le => mask("<="),
        BinaryOp::Gt => mask(">"),
        BinaryOp::Ge => mask(">="),
        BinaryOp::Eq => mask("=="),
        BinaryOp::Ne => format!("select(V(1.0), V(0.0), ({a} == {b}) & ew_ordered({a}, {b}))"),
    }
}

/// Helper functions, each emitted only when an op needs it (with the helpers
/// it calls). Written for the alias `V` (f32 or vec4<f32>), `VU`, `VB`.
const HELPERS: &[(&str, &[&str], &str)] = &[
    (
        "ew_nan",
        &[],
        "fn ew_nan() -> V { return V(bitcast<f32>(ew_p[0].z)); }\n",
    ),
    (
        "ew_inf",
        &[],
        "fn ew_inf() -> V { return V(bitcast<f32>(ew_p[0].w)); }\n",
    ),
    (
        "ew_isnan",
        &[],
        "// NaN by its bits: survives compilers that assume finite math.\n\
         fn ew_isnan(x: V) -> VB { return (bitcast<VU>(x) & VU(0x7fffffffu)) > VU(0x7f800000u); }\n",
    ),
    (
        "ew_ordered",
        &["ew_isnan"],
        "fn ew_ordered(a: V, b: V) -> VB { return !(ew_isnan(a) | ew_isnan(b)); }\n",
    ),
    (
        "ew_log",
        &["ew_nan", "ew_inf", "ew_isnan"],
        "fn ew_log(x: V) -> V {\n\
         \x20   let r = select(select(log(x), -ew_inf(), x == V(0.0)), ew_nan(), x < V(0.0));\n\
         \x20   return select(r, x, ew_isnan(x));\n}\n",
    ),
    (
        "ew_sqrt",
        &["ew_nan", "ew_isnan"],
        "fn ew_sqrt(x: V) -> V {\n\
         \x20   return select(select(sqrt(x), ew_nan(), x < V(0.0)), x, ew_isnan(x));\n}\n",
    ),
    (
        "ew_rsqrt",
        &["ew_nan", "ew_inf", "ew_isnan"],
        "fn ew_rsqrt(x: V) -> V {\n\
         \x20   var r = select(inverseSqrt(x), ew_inf(), x == V(0.0));\n\
         \x20   r = select(r, V(0.0), x == ew_inf());\n\
         \x20   return select(select(r, ew_nan(), x < V(0.0)), x, ew_isnan(x));\n}\n",
    ),
    (
        "ew_reduce",
        &[],
        "// x - 2πk with k = round(x / 2π): Cody-Waite with 2π split in two f32\n\
         // constants (the second is 2π minus the first, with its sign).\n\
         fn ew_reduce(x: V) -> V {\n\
         \x20   let k = round(x * 0.15915494309189535);\n\
         \x20   return fma(k, V(-6.2831854820251465), x) + k * 1.7484556000744487e-7;\n}\n",
    ),
    (
        "ew_tanh",
        &[],
        "// tanh(|x|) = (1 - e) / (1 + e), e = exp(-2|x|), no overflow; below\n\
         // |x| = 0.125 a Taylor polynomial (relative error < 2e-9) avoids the\n\
         // cancellation in 1 - e.\n\
         fn ew_tanh(x: V) -> V {\n\
         \x20   let a = abs(x);\n\
         \x20   let e = exp(-2.0 * a);\n\
         \x20   let x2 = x * x;\n\
         \x20   let small = a * (1.0 + x2 * (-0.33333333333 + x2 * (0.13333333333 + x2 * -0.05396825397)));\n\
         \x20   let t = select((1.0 - e) / (1.0 + e), small, a < V(0.125));\n\
         \x20   return select(t, -t, x < V(0.0));\n}\n",
    ),
    (
        "ew_gelu",
        &["ew_inf"],
        "// 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)): no cancellation for x < 0.\n\
         fn ew_gelu(x: V) -> V {\n\
         \x20   let u = 0.7978845608028654 * (x + 0.044715 * x * x * x);\n\
         \x20   return select(x / (1.0 + exp(-2.0 * u)), V(0.0), x == -ew_inf());\n}\n",
    ),
    (
        "ew_silu",
        &["ew_inf"],
        "fn ew_silu(x: V) -> V {\n\
         \x20   return select(x / (1.0 + exp(-x)), V(0.0), x == -ew_inf());\n}\n",
    ),
    (
        "ew_erfc",
        &[],
        "// erfc(z) for z >= 0: Numerical Recipes' Chebyshev fit (erfcc),\n\
         // fractional error below 1.2e-7 for every z (1.05e-7 measured).\n\
         fn ew_erfc(z: V) -> V {\n\
         \x20   let t = 1.0 / (1.0 + 0.5 * z);\n\
         \x20   let p = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418\n\
         \x20       + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587\n\
         \x20       + t * (-0.82215223 + t * 0.17087277))))))));\n\
         \x20   return t * exp(p - z * z);\n}\n",
    ),
    (
        "ew_gelu_erf",
        &["ew_erfc", "ew_inf"],
        "// 0.5 x erfc(-x/√2): erfc directly for x < 0 (small relative error in\n\
         // the tail), 2 - erfc(x/√2) for x >= 0.\n\
         fn ew_gelu_erf(x: V) -> V {\n\
         \x20   let e = ew_erfc(abs(x) * 0.7071067811865476);\n\
         \x20   let phi2 = select(2.0 - e, e, x < V(0.0));\n\
         \x20   return select(0.5 * x * phi2, V(0.0), x == -ew_inf());\n}\n",
    ),
    (
        "ew_pow",
        &["ew_nan", "ew_inf"],
        "// |x|^p = exp2(p log2|x|), the sign of x for odd integer p, NaN for\n\
         // x < 0 and non-integer p, 1 for p = 0 (IEEE pow).\n\
         fn ew_pow(x: V, p: V) -> V {\n\
         \x20   let ax = abs(x);\n\
         \x20   var m = exp2(p * select(log2(ax), -ew_inf(), ax == V(0.0)));\n\
         \x20   let integer = floor(p) == p;\n\
         \x20   let odd = integer & (abs(p - 2.0 * floor(0.5 * p)) == V(1.0));\n\
         \x20   let negative = x < V(0.0);\n\
         \x20   m = select(m, -m, negative & odd);\n\
         \x20   m = select(m, ew_nan(), negative & !integer);\n\
         \x20   return select(m, V(1.0), p == V(0.0));\n}\n",
    ),
    (
        "ew_min",
        &["ew_nan", "ew_isnan"],
        "fn ew_min(a: V, b: V) -> V { return select(min(a, b), ew_nan(), ew_isnan(a) | ew_isnan(b)); }\n",
    ),
    (
        "ew_max",
        &["ew_nan", "ew_isnan"],
        "fn ew_max(a: V, b: V) -> V { return select(max(a, b), ew_nan(), ew_isnan(a) | ew_isnan(b)); }\n",
    ),
];

fn helper_names(op: &Op) -> &'static [&'static str] {
    match op {
        Op::Unary(u, _) => match u {
            UnaryOp::Log => &["ew_log"],
            UnaryOp::Sqrt => &["ew_sqrt"],
            UnaryOp::Rsqrt => &["ew_rsqrt"],
            UnaryOp::Sin | UnaryOp::Cos => &["ew_reduce"],
            UnaryOp::Tanh => &["ew_tanh"],
            UnaryOp::Gelu => &["ew_gelu"],
            UnaryOp::GeluErf => &["ew_gelu_erf"],
            UnaryOp::Silu => &["ew_silu"],
            _ => &[],
        },
        Op::Binary(b, ..) => match b {
            BinaryOp::Pow => &["ew_pow"],
            BinaryOp::Min => &["ew_min"],
            BinaryOp::Max => &["ew_max"],
            BinaryOp::Lt
            | BinaryOp::Le
            | BinaryOp::Gt
            | BinaryOp::Ge
            | BinaryOp::Eq
            | BinaryOp::Ne => &["ew_ordered"],
            _ => &[],
        },
        Op::Where(..) => &[],
        _ => &[],
    }
}

fn key_of(
    ops: &[Op],
    inputs: &[InputDesc],
    constants: usize,
    outputs: &[(usize, DType)],
    vec4: bool,
) -> String {
    let mut k = format!("{};k={constants};out=", if vec4 { "v4" } else { "s" });
    for (root, dtype) in outputs {
        let _ = write!(k, "{dtype}@{root},");
    }
    k.push_str(";in=");
    for i in inputs {
        let a = match i.access {
            Access::Contiguous => "c",
            Access::Single => "1",
            Access::Broadcast { inner_unit: true } => "b",
            Access::Broadcast { inner_unit: false } => "z",
            Access::Output => "o",
        };
        let _ = write!(k, "{}{a},", i.dtype);
    }
    k.push_str(";ops=");
    for op in ops {
        let _ = match op {
            Op::Load(i) => write!(k, "L{i},"),
            Op::Const(i) => write!(k, "K{i},"),
            Op::Unary(u, a) => write!(k, "{u:?}({a}),"),
            Op::Binary(b, x, y) => write!(k, "{b:?}({x} {y}),"),
            Op::Where(c, x, y) => write!(k, "W({c} {x} {y}),"),
        };
    }
    k
}

/// Emits the WGSL of one fused kernel.
fn emit(
    ops: &[Op],
    inputs: &[InputDesc],
    constants: usize,
    outputs: &[(usize, DType)],
    vec4: bool,
) -> Generated {
    let key = key_of(ops, inputs, constants, outputs, vec4);
    let mut s = String::new();
    let f16 =
        outputs.iter().any(|o| o.1 == DType::F16) || inputs.iter().any(|i| i.dtype == DType::F16);
    let _ = writeln!(
        s,
        "// wgtile fused elementwise kernel, generated by src/fusion.rs.\n\
         // key: {key}\n\
         // One invocation per {} ({}), workgroup WG x 1 x 1 (default {WORKGROUP_SIZE}),\n\
         // 2-D grid: unit = (gid.y * groups_x) * WG + gid.x. Math in f32.",
        if vec4 { "4 elements" } else { "element" },
        if vec4 {
            "vec4 loads and stores"
        } else {
            "scalar path"
        }
    );
    if f16 {
        s.push_str("enable f16;\n");
    }
    let (v, vu, vb) = if vec4 {
        ("vec4<f32>", "vec4<u32>", "vec4<bool>")
    } else {
        ("f32", "u32", "bool")
    };
    let _ = writeln!(s, "alias V = {v};\nalias VU = {vu};\nalias VB = {vb};");
    let _ = writeln!(
        s,
        "// [0] = (units, elements, NaN bits, +inf bits), [1] = output dims (4-D),\n\
         // [2 + j] = element strides of input j (0 along broadcast dims).\n\
         @group(0) @binding(0) var<uniform> ew_p: array<vec4<u32>, {}>;",
        2 + inputs.len()
    );
    if constants > 0 {
        s.push_str("@group(0) @binding(1) var<storage, read> ew_k: array<f32>;\n");
    }
    let vec_ty = |d: DType| format!("vec4<{}>", d.wgsl());
    for (r, &(_, dtype)) in outputs.iter().enumerate() {
        let elem = if vec4 {
            vec_ty(dtype)
        } else {
            dtype.wgsl().to_string()
        };
        let _ = writeln!(
            s,
            "@group(0) @binding({}) var<storage, read_write> {}: array<{elem}>;",
            output_binding(r, inputs.len()),
            output_name(r)
        );
    }
    for (j, input) in inputs.iter().enumerate() {
        let elem = match input.access {
            Access::Output => continue,
            Access::Contiguous | Access::Broadcast { inner_unit: true } if vec4 => {
                vec_ty(input.dtype)
            }
            _ => input.dtype.wgsl().to_string(),
        };
        let _ = writeln!(
            s,
            "@group(0) @binding({}) var<storage, read> ew_in{j}: array<{elem}>;",
            3 + j
        );
    }
    let _ = writeln!(s, "override WG: u32 = {WORKGROUP_SIZE}u;\n");

    s.push_str(&helpers_text(ops, false));

    s.push_str(
        "\n@compute @workgroup_size(WG, 1, 1)\n\
         fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {\n\
         \x20   let i = gid.y * groups.x * WG + gid.x;\n\
         \x20   if i >= ew_p[0].x {\n        return;\n    }\n",
    );
    if inputs
        .iter()
        .any(|i| matches!(i.access, Access::Broadcast { .. }))
    {
        let _ = writeln!(
            s,
            "    // 4-D coordinates of the (first) element of this unit.\n\
             \x20   let e = i{};\n\
             \x20   let d = ew_p[1];\n\
             \x20   let c3 = e % d.w;\n\
             \x20   let r2 = e / d.w;\n\
             \x20   let c2 = r2 % d.z;\n\
             \x20   let r1 = r2 / d.z;\n\
             \x20   let c1 = r1 % d.y;\n\
             \x20   let c0 = r1 / d.y;",
            if vec4 { " * 4u" } else { "" }
        );
    }
    let load = |j: usize| load_code(inputs[j], j, vec4);
    let constant = |k: usize| format!("V(ew_k[{k}])");
    s.push_str(&op_lines(ops, &load, &constant));
    for (r, &(root, dtype)) in outputs.iter().enumerate() {
        let store = match (vec4, dtype) {
            (_, DType::F32) => format!("v{root}"),
            (true, DType::F16) => format!("vec4<f16>(v{root})"),
            (false, DType::F16) => format!("f16(v{root})"),
        };
        let _ = writeln!(s, "    {}[i] = {store};", output_name(r));
    }
    s.push_str("}\n");
    Generated {
        key,
        wgsl: s,
        vec4,
        inputs: inputs.to_vec(),
        constants,
    }
}

/// Binding of output `r`: 2 for the first (so one-output kernels keep the
/// layout in the module docs), after the inputs for the others.
fn output_binding(r: usize, inputs: usize) -> usize {
    if r == 0 { 2 } else { 3 + inputs + r - 1 }
}

fn output_name(r: usize) -> String {
    if r == 0 {
        "ew_out".into()
    } else {
        format!("ew_out{r}")
    }
}

/// The WGSL expression loading input `j` for the current unit.
fn load_code(input: InputDesc, j: usize, vec4: bool) -> String {
    let widen = |x: String| {
        if vec4 {
            format!("vec4<f32>({x})")
        } else {
            format!("f32({x})")
        }
    };
    match input.access {
        Access::Output => widen("ew_out[i]".into()),
        Access::Contiguous => widen(format!("ew_in{j}[i]")),
        Access::Single => format!("V(f32(ew_in{j}[0]))"),
        Access::Broadcast { inner_unit } => {
            let off = format!(
                "(c0 * ew_p[{0}].x + c1 * ew_p[{0}].y + c2 * ew_p[{0}].z + c3 * ew_p[{0}].w)",
                2 + j
            );
            if vec4 && inner_unit {
                widen(format!("ew_in{j}[{off} / 4u]"))
            } else {
                format!("V(f32(ew_in{j}[{off}]))")
            }
        }
    }
}

/// One `let vN: V = ...;` line per SSA value.
fn op_lines(
    ops: &[Op],
    load: &dyn Fn(usize) -> String,
    constant: &dyn Fn(usize) -> String,
) -> String {
    let mut s = String::new();
    for (n, op) in ops.iter().enumerate() {
        let a = |x: &usize| format!("v{x}");
        let code = match op {
            Op::Load(j) => load(*j),
            Op::Const(k) => constant(*k),
            Op::Unary(u, x) => unary_code(*u, &a(x)),
            Op::Binary(b, x, y) => binary_code(*b, &a(x), &a(y)),
            Op::Where(c, x, y) => format!(
                "select({}, {}, (bitcast<VU>({}) & VU(0x7fffffffu)) != VU(0u))",
                a(y),
                a(x),
                a(c)
            ),
        };
        let _ = writeln!(s, "    let v{n}: V = {code};");
    }
    s
}

/// The helper functions `ops` need, dependencies first, each once.
/// `epilogue` builds NaN and +inf without the elementwise uniform.
fn helpers_text(ops: &[Op], epilogue: bool) -> String {
    let mut wanted: Vec<&str> = Vec::new();
    fn want(name: &'static str, wanted: &mut Vec<&'static str>) {
        if wanted.contains(&name) {
            return;
        }
        let (_, deps, _) = HELPERS.iter().find(|h| h.0 == name).expect("helper");
        for d in *deps {
            want(d, wanted);
        }
        wanted.push(name);
    }
    for op in ops {
        for name in helper_names(op) {
            want(name, &mut wanted);
        }
    }
    let mut s = String::new();
    for name in &wanted {
        let (_, _, text) = HELPERS.iter().find(|h| h.0 == *name).expect("helper");
        match (*name, epilogue) {
            // A runtime operand (`params.m & 0u`) keeps WGSL's constant
            // evaluation, which rejects NaN and infinities, out of it.
            ("ew_nan", true) => s.push_str(
                "fn ew_nan() -> V { return V(bitcast<f32>(0x7fc00000u | (params.m & 0u))); }\n",
            ),
            ("ew_inf", true) => s.push_str(
                "fn ew_inf() -> V { return V(bitcast<f32>(0x7f800000u | (params.m & 0u))); }\n",
            ),
            _ => s.push_str(text),
        }
    }
    s
}

fn refuse_acc(lowered: &Lowered) -> Result<()> {
    if lowered.leaves.iter().any(|l| matches!(l, Leaf::Acc)) {
        return Err(Error::InvalidArgument(
            "Expr::acc() stands for a matmul accumulator: use it in Epilogue::expr".into(),
        ));
    }
    Ok(())
}

/// A matmul epilogue generated from an expression of [`Expr::acc`].
pub struct EpilogueCode {
    /// WGSL defining `fn epilogue(acc: f32, z: u32, row: u32, col: u32) -> f32`
    /// (and its helpers), spliced into a matmul kernel in place of the
    /// built-in one ([`crate::kernels::Spec::epilogue`]).
    pub wgsl: String,
    /// The rank-1 tensor read per output column (binding 5), if any.
    pub bias: Option<Tensor>,
    /// The tensor of the output's shape (binding 6), if any.
    pub residual: Option<Tensor>,
}

/// Generates a matmul epilogue from `expr`, whose leaves are [`Expr::acc`],
/// scalars (baked into the text as exact bit patterns, so each value is its
/// own pipeline), at most one rank-1 tensor (the bias: one value per output
/// column) and at most one tensor of higher rank (the residual: the output's
/// shape). Shapes and dtypes are checked against the matmul when it runs.
/// Leaves may be [`Expr::input`] symbols (classified the same way) to
/// generate text without a GPU.
pub fn generate_epilogue(expr: &Expr) -> Result<EpilogueCode> {
    let lowered = lower(expr)?;
    let mut bias: Option<(usize, Option<Tensor>)> = None;
    let mut residual: Option<(usize, Option<Tensor>)> = None;
    for (j, leaf) in lowered.leaves.iter().enumerate() {
        let tensor = match leaf {
            Leaf::Acc => continue,
            Leaf::Tensor(t) => Some(t.clone()),
            Leaf::Symbol { .. } => None,
        };
        let slot = if leaf.shape().len() == 1 {
            &mut bias
        } else {
            &mut residual
        };
        if slot.is_some() {
            return Err(Error::InvalidArgument(format!(
                "a matmul epilogue reads at most one rank-1 tensor (bias, per column) and one \
                 tensor of the output's shape (residual); {expr} has more"
            )));
        }
        *slot = Some((j, tensor));
    }
    if let Some(c) = lowered.constants.iter().find(|c| !c.is_finite()) {
        return Err(Error::InvalidArgument(format!(
            "matmul epilogue constants must be finite, not {c}"
        )));
    }
    let bias_leaf = bias.as_ref().map(|b| b.0);
    let residual_leaf = residual.as_ref().map(|r| r.0);
    let load = |j: usize| {
        if Some(j) == bias_leaf {
            "f32(epi_bias[cc])".to_string()
        } else if Some(j) == residual_leaf {
            "f32(epi_residual[(z * params.m + rr) * params.n + cc])".to_string()
        } else {
            "acc".to_string()
        }
    };
    let constant = |k: usize| format!("bitcast<f32>({}u)", lowered.constants[k].to_bits());
    let mut s = format!(
        "\n// Generated epilogue (src/fusion.rs): C = {expr}\n\
         // It replaces the built-in `epilogue` (renamed `epilogue_builtin`). Reads\n\
         // clamp row and col into C, so tiles past the edge read valid memory\n\
         // (their results are not stored).\n\
         alias V = f32;\nalias VU = u32;\nalias VB = bool;\n"
    );
    s.push_str(&helpers_text(&lowered.ops, true));
    s.push_str(
        "fn epilogue(acc: f32, z: u32, row: u32, col: u32) -> f32 {\n\
         \x20   let rr = min(row, params.m - 1u);\n\
         \x20   let cc = min(col, params.n - 1u);\n\
         \x20   // Never true (the EPI_* consts stay 0 here): keeps bindings 5 and 6\n\
         \x20   // in the pipeline layout when the expression reads neither.\n\
         \x20   if EPI_BIAS == 1u && EPI_RESIDUAL == 1u {\n\
         \x20       return f32(epi_bias[0]) + f32(epi_residual[0]);\n\
         \x20   }\n",
    );
    s.push_str(&op_lines(&lowered.ops, &load, &constant));
    let _ = writeln!(s, "    return v{};\n}}", lowered.roots[0]);
    Ok(EpilogueCode {
        wgsl: s,
        bias: bias.and_then(|b| b.1),
        residual: residual.and_then(|r| r.1),
    })
}

/// The pipeline of a generated elementwise kernel, from the context's cache.
fn fused_pipeline(ctx: &Context, g: &Generated) -> Result<Arc<wgpu::ComputePipeline>> {
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
    /// [`CACHE_CAPACITY`]): how many distinct expression structures it has
    /// compiled recently.
    pub fn fused_kernel_count(&self) -> usize {
        self.inner.fused.len()
    }
}

/// Builds the fused plan of `expr`, into `out` or a new tensor.
pub(crate) fn plan_fused(ctx: &Context, expr: &Expr, out: Option<&Tensor>) -> Result<Plan> {
    plan_fused_many(ctx, std::slice::from_ref(expr), out).map(|(plan, _)| plan)
}

/// One kernel computing every expression of `exprs` (same result shape),
/// into `out` (one expression only) or new tensors: the plan (its output is
/// the first) and all outputs.
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
                if !Arc::ptr_eq(&t.ctx.inner, &ctx.inner) {
                    return Err(Error::InvalidArgument(
                        "elementwise operands must live on the context that evaluates them".into(),
                    ));
                }
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
        if !Arc::ptr_eq(&o.ctx.inner, &ctx.inner) {
            return Err(Error::InvalidArgument(
                "the output must live on the context that evaluates the expression".into(),
            ));
        }
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
        ctx: ctx.clone(),
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
        storage_words(ctx, &bits)
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

/// A small read-only storage buffer holding `words` (padded to 16 bytes).
fn storage_words(ctx: &Context, words: &[u32]) -> wgpu::Buffer {
    let mut data = words.to_vec();
    data.resize(words.len().next_multiple_of(4).max(4), 0);
    ctx.storage_u32(&data)
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
    fn has_tensor(e: &Expr, seen: &mut HashMap<*const Node, bool>) -> bool {
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
    fn go(ctx: &Context, st: &mut State, e: &Expr) -> Result<Expr> {
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
        ctx: ctx.clone(),
        label: format!("unfused {expr} ({} kernels)", st.dispatches.len()),
        dispatches: st.dispatches,
        output,
        flops: st.flops,
        bytes: st.bytes,
        scratch: st.scratch,
    })
}
