//! Elementwise expressions and their fused evaluation (the lecture's third
//! trick, operator fusion).
//!
//! # The IR
//! An [`Expr`] is an immutable tree (shared nodes, `Arc` inside) built from
//! tensors (`t.expr()`, `Expr::from(&t)`), `f32` scalars, Rust operators
//! (`+ - * /`, unary `-`, with `f32` on either side) and methods
//! ([`Expr::exp`], [`Expr::gelu`], [`Expr::lt`], [`Expr::where_`], ...).
//! Building an expression does no GPU work and checks nothing; shapes are
//! broadcast NumPy-style (right-aligned, size-1 dimensions stretch, up to
//! [`MAX_RANK`](crate::MAX_RANK) dimensions) when it is evaluated.
//!
//! # Evaluation
//! [`Context::eval`](crate::Context::eval) turns the whole tree into ONE compute kernel
//! (`crate::fusion` generates its WGSL): each distinct tensor is read once per
//! output element, every intermediate lives in registers, the result is
//! written once. `sin(x)^2 + cos(x)^2` moves 8 bytes per f32 element instead
//! of the 40 that five separate kernels move ([`Context::eval_unfused`](crate::Context::eval_unfused) runs
//! that naive version for comparison). [`Context::eval_many`](crate::Context::eval_many) computes several
//! expressions of one shape in one pass, and
//! [`Epilogue::expr`](crate::Epilogue::expr) fuses an expression of the
//! accumulator ([`Expr::acc`]) into a matmul's store.
//!
//! The dtype and NaN/Inf rules are documented on [`Expr`].

use std::fmt;
use std::ops::{Add, Div, Mul, Neg, Sub};
use std::sync::Arc;

use crate::dtype::DType;
use crate::gpu::Tensor;

/// Operations of one operand. See [`Expr`] for the NaN/Inf
/// rules and `crate::fusion` for the WGSL each becomes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum UnaryOp {
    /// `-x`.
    Neg,
    /// `e^x`.
    Exp,
    /// Natural logarithm.
    Log,
    /// Square root.
    Sqrt,
    /// `1 / sqrt(x)`.
    Rsqrt,
    /// Sine (argument reduced by 2π first).
    Sin,
    /// Cosine (argument reduced by 2π first).
    Cos,
    /// Hyperbolic tangent (`(1 - e^-2|x|) / (1 + e^-2|x|)`, a Taylor
    /// polynomial below |x| = 0.125).
    Tanh,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `max(x, 0)` (NaN stays NaN).
    Relu,
    /// GELU, tanh form: `0.5 x (1 + tanh(√(2/π) (x + 0.044715 x³)))`,
    /// computed as the equal `x / (1 + e^(-2u))`, which does not cancel for
    /// negative x.
    Gelu,
    /// GELU, erf form: `0.5 x (1 + erf(x/√2))` = `0.5 x erfc(-x/√2)`, with
    /// erfc from Numerical Recipes' Chebyshev fit (`erfcc`: fractional error
    /// below 1.2e-7 everywhere; we measured at most 1.05e-7 in f64 over
    /// [0, 20]), so the result has a small *relative* error also far into
    /// the negative tail. In f32 add the rounding of `exp(-z²)`, about
    /// `u (8 + 4 x²)` relative with u = 2^-24 (what the tests allow).
    GeluErf,
    /// `x · sigmoid(x)`, computed as `x / (1 + e^-x)`.
    Silu,
    /// The error function. Below |x| = 0.5 its Taylor series to x^13
    /// (truncation below 1e-9 relative, so tiny x keep their relative
    /// precision); above, `1 - erfc(|x|)` with the sign of x, erfc from the
    /// fit [`UnaryOp::GeluErf`] uses (an absolute error below
    /// `1.2e-7 erfc(|x|)`, plus the f32 rounding of `exp(-x²)`).
    Erf,
    /// `|x|`.
    Abs,
    /// `x²`.
    Square,
}

/// Operations of two operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BinaryOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b`.
    Div,
    /// `a^b` as `exp2(b · log2|a|)` with the sign fixed for odd integer `b`,
    /// NaN for negative `a` (-inf included) and non-integer `b`, 1 for
    /// `b = 0`; the sign of a zero `a` is ignored (`(-0)^-1` is +inf).
    Pow,
    /// The smaller operand (NaN if either is NaN).
    Min,
    /// The larger operand (NaN if either is NaN).
    Max,
    /// Mask `a < b` (1.0 or 0.0).
    Lt,
    /// Mask `a <= b`.
    Le,
    /// Mask `a > b`.
    Gt,
    /// Mask `a >= b`.
    Ge,
    /// Mask `a == b`.
    Eq,
    /// Mask `a != b` (1.0 when either is NaN).
    Ne,
}

/// One node of an expression tree.
#[derive(Debug)]
pub(crate) enum Node {
    /// A tensor, read once per output element however often it appears.
    Tensor(Tensor),
    /// A symbolic input: generates kernels without data (shader validation,
    /// WGSL dumps); evaluating it is an error.
    Input {
        id: u32,
        shape: Vec<usize>,
        dtype: DType,
    },
    /// An `f32` constant, passed to the kernel in a buffer (not in its text).
    Scalar(f32),
    /// A matmul's accumulator, in an [`Epilogue::expr`](crate::Epilogue::expr).
    Acc,
    Unary(UnaryOp, Expr),
    Binary(BinaryOp, Expr, Expr),
    /// `select(b, a, cond != 0)`.
    Where(Expr, Expr, Expr),
}

/// A leaf that stands in for a child moved out of a node being dropped.
fn placeholder() -> Arc<Node> {
    static LEAF: std::sync::OnceLock<Arc<Node>> = std::sync::OnceLock::new();
    LEAF.get_or_init(|| Arc::new(Node::Acc)).clone()
}

impl Node {
    /// Moves the node's children out onto `stack` (leaving placeholders).
    fn take_children(&mut self, stack: &mut Vec<Arc<Node>>) {
        let mut take = |e: &mut Expr| stack.push(std::mem::replace(&mut e.0, placeholder()));
        match self {
            Node::Unary(_, a) => take(a),
            Node::Binary(_, a, b) => {
                take(a);
                take(b);
            }
            Node::Where(c, a, b) => {
                take(c);
                take(a);
                take(b);
            }
            Node::Tensor(_) | Node::Input { .. } | Node::Scalar(_) | Node::Acc => {}
        }
    }
}

/// Drops a tree in a loop instead of recursing: a chain of 300,000 `e + 1`
/// would overflow the stack. Only nodes this is the last owner of are taken
/// apart; shared subtrees stay whole for their other owners.
impl Drop for Expr {
    fn drop(&mut self) {
        let mut stack = Vec::new();
        if let Some(node) = Arc::get_mut(&mut self.0) {
            node.take_children(&mut stack);
        }
        while let Some(mut child) = stack.pop() {
            if let Some(node) = Arc::get_mut(&mut child) {
                node.take_children(&mut stack);
            }
        }
    }
}

/// An elementwise expression over tensors and scalars, evaluated lazily by
/// [`Context::eval`](crate::Context::eval) as one fused kernel. Cheap to clone (shared nodes).
///
/// ```no_run
/// # fn main() -> wgtile::Result<()> {
/// # let ctx = wgtile::Context::new_blocking(Default::default())?;
/// let x = ctx.rand_uniform([1024], -3.0, 3.0, wgtile::DType::F32, 1)?;
/// let e = x.expr().sin().square() + x.expr().cos().square(); // ~1.0 everywhere
/// let y = ctx.eval(&e)?; // one kernel: reads x once, writes y once
/// # Ok(()) }
/// ```
///
/// # Dtypes
/// Tensors may be f32 or f16 (mixed freely); loads widen to f32, all math is
/// f32, and the result is **f32 if any tensor leaf is f32, f16 if all are
/// f16** (scalars do not count). f16 needs the adapter's `shader-f16`. Storing
/// an f32 value beyond the f16 range gives ±inf or ±65504 depending on the
/// adapter (WGSL leaves the conversion of out-of-range values to the
/// implementation).
///
/// # NaN and Inf semantics
/// What the kernels implement (and the tests check on the test adapter); WGSL
/// allows an implementation to assume finite math, so a driver that exploits
/// that may differ at the edges. NaN tests are done on bit patterns, not
/// with `x != x`, so they survive such optimisations.
/// - NaN propagates through every op except the masks: comparisons give 0.0
///   with a NaN operand (`ne` gives 1.0, IEEE), `where_` treats a NaN
///   condition as true (any nonzero bit pattern except ±0 is true), `pow(x,
///   0.0)` is 1.0 (IEEE `pow`).
/// - `min`/`max`/`clamp` propagate NaN (like `torch.minimum`, unlike IEEE
///   `minNum`). `relu(NaN)` is NaN.
/// - `log(x<0)`, `sqrt(x<0)`, `rsqrt(x<0)` and `pow(x<0, non-integer)` are
///   NaN; `log(0)` is -inf; `rsqrt(±0)` is +inf; `rsqrt(+inf)` is 0.
/// - `x / 0` is ±inf (0/0 NaN) as the adapter's division gives it.
/// - `sin`/`cos` reduce the argument by 2π (Cody-Waite, two constants) before
///   the hardware function, so large arguments stay accurate (abs error about
///   1e-7·|x|/2π); `sin(±inf)` is NaN.
/// - `gelu`, `gelu_erf`, `silu` at -inf are 0 (their limit), at +inf +inf;
///   `sigmoid(-inf)` is 0, `tanh(±inf)` is ±1, `exp(-inf)` is 0.
/// - Subnormal f32 values may be flushed to zero by the adapter, and results
///   below about 1e-36 in magnitude may come out as ±0 (`silu(-89)`: `e^89`
///   overflows f32, the quotient is -0 instead of -2e-37).
#[derive(Clone, Debug)]
pub struct Expr(pub(crate) Arc<Node>);

impl Expr {
    fn node(node: Node) -> Self {
        Expr(Arc::new(node))
    }

    pub(crate) fn as_node(&self) -> &Node {
        &self.0
    }

    /// A scalar constant.
    pub fn scalar(value: f32) -> Self {
        Self::node(Node::Scalar(value))
    }

    /// A symbolic input of `shape` and `dtype`, identified by `id` (the same
    /// id is the same input). For generating and checking kernels without a
    /// GPU (`crate::kernels::codegen::fusion::generate`); [`Context::eval`](crate::Context::eval) refuses it.
    pub fn input(id: u32, shape: impl AsRef<[usize]>, dtype: DType) -> Self {
        Self::node(Node::Input {
            id,
            shape: shape.as_ref().to_vec(),
            dtype,
        })
    }

    /// The accumulator `A @ B` of a matmul, for an expression fused into its
    /// store with [`Epilogue::expr`](crate::Epilogue::expr) (f32, before
    /// rounding to the output dtype). [`Context::eval`](crate::Context::eval) refuses it.
    pub fn acc() -> Self {
        Self::node(Node::Acc)
    }

    fn unary(self, op: UnaryOp) -> Self {
        Self::node(Node::Unary(op, self))
    }

    fn binary(self, op: BinaryOp, rhs: impl Into<Expr>) -> Self {
        Self::node(Node::Binary(op, self, rhs.into()))
    }

    /// `e^x`.
    pub fn exp(self) -> Self {
        self.unary(UnaryOp::Exp)
    }
    /// Natural logarithm (NaN below 0, -inf at 0).
    pub fn log(self) -> Self {
        self.unary(UnaryOp::Log)
    }
    /// Square root (NaN below 0).
    pub fn sqrt(self) -> Self {
        self.unary(UnaryOp::Sqrt)
    }
    /// `1/sqrt(x)` (NaN below 0, +inf at 0).
    pub fn rsqrt(self) -> Self {
        self.unary(UnaryOp::Rsqrt)
    }
    /// Sine.
    pub fn sin(self) -> Self {
        self.unary(UnaryOp::Sin)
    }
    /// Cosine.
    pub fn cos(self) -> Self {
        self.unary(UnaryOp::Cos)
    }
    /// Hyperbolic tangent.
    pub fn tanh(self) -> Self {
        self.unary(UnaryOp::Tanh)
    }
    /// Logistic sigmoid.
    pub fn sigmoid(self) -> Self {
        self.unary(UnaryOp::Sigmoid)
    }
    /// `max(x, 0)`.
    pub fn relu(self) -> Self {
        self.unary(UnaryOp::Relu)
    }
    /// GELU, tanh approximation (as PyTorch's `approximate="tanh"`).
    pub fn gelu(self) -> Self {
        self.unary(UnaryOp::Gelu)
    }
    /// GELU with erf (PyTorch's default), see [`UnaryOp::GeluErf`].
    pub fn gelu_erf(self) -> Self {
        self.unary(UnaryOp::GeluErf)
    }
    /// The error function, see [`UnaryOp::Erf`].
    pub fn erf(self) -> Self {
        self.unary(UnaryOp::Erf)
    }
    /// SiLU / swish: `x · sigmoid(x)`.
    pub fn silu(self) -> Self {
        self.unary(UnaryOp::Silu)
    }
    /// `|x|`.
    pub fn abs(self) -> Self {
        self.unary(UnaryOp::Abs)
    }
    /// `x²` (one multiply; the operand is computed once).
    pub fn square(self) -> Self {
        self.unary(UnaryOp::Square)
    }
    /// `x^p` for a scalar exponent (see [`BinaryOp::Pow`]).
    pub fn pow(self, p: f32) -> Self {
        self.binary(BinaryOp::Pow, p)
    }
    /// Elementwise minimum (NaN-propagating).
    pub fn min(self, other: impl Into<Expr>) -> Self {
        self.binary(BinaryOp::Min, other)
    }
    /// Elementwise maximum (NaN-propagating).
    pub fn max(self, other: impl Into<Expr>) -> Self {
        self.binary(BinaryOp::Max, other)
    }
    /// `min(max(x, lo), hi)`: `hi` wins when `lo > hi` (as `torch.clamp`).
    pub fn clamp(self, lo: impl Into<Expr>, hi: impl Into<Expr>) -> Self {
        self.max(lo).min(hi)
    }
    /// Mask `self < other` (1.0 where true, 0.0 elsewhere).
    pub fn lt(self, other: impl Into<Expr>) -> Self {
        self.binary(BinaryOp::Lt, other)
    }
    /// Mask `self <= other`.
    pub fn le(self, other: impl Into<Expr>) -> Self {
        self.binary(BinaryOp::Le, other)
    }
    /// Mask `self > other`.
    pub fn gt(self, other: impl Into<Expr>) -> Self {
        self.binary(BinaryOp::Gt, other)
    }
    /// Mask `self >= other`.
    pub fn ge(self, other: impl Into<Expr>) -> Self {
        self.binary(BinaryOp::Ge, other)
    }
    /// Mask `self == other`.
    pub fn eq(self, other: impl Into<Expr>) -> Self {
        self.binary(BinaryOp::Eq, other)
    }
    /// Mask `self != other`.
    pub fn ne(self, other: impl Into<Expr>) -> Self {
        self.binary(BinaryOp::Ne, other)
    }

    /// `a` where `cond` is nonzero (NaN counts as nonzero), else `b`;
    /// compiled to `select`, so both sides are computed and no branch diverges.
    pub fn where_(cond: impl Into<Expr>, a: impl Into<Expr>, b: impl Into<Expr>) -> Self {
        Self::node(Node::Where(cond.into(), a.into(), b.into()))
    }

    /// `Expr::where_(self, a, b)`.
    pub fn select(self, a: impl Into<Expr>, b: impl Into<Expr>) -> Self {
        Self::where_(self, a, b)
    }

    /// Builds an expression from an operator and operands (for generated
    /// trees, such as tests' random ones).
    pub fn apply_unary(op: UnaryOp, x: impl Into<Expr>) -> Self {
        x.into().unary(op)
    }

    /// Builds `a op b`.
    pub fn apply_binary(op: BinaryOp, a: impl Into<Expr>, b: impl Into<Expr>) -> Self {
        a.into().binary(op, b)
    }

    /// Number of operation nodes (leaves excluded; a node shared by
    /// several parents counts once): the FLOP count per output element that
    /// plans report.
    pub fn op_count(&self) -> usize {
        let mut seen = std::collections::HashSet::new();
        fn walk(e: &Expr, seen: &mut std::collections::HashSet<*const Node>) -> usize {
            if !seen.insert(Arc::as_ptr(&e.0)) {
                return 0;
            }
            match e.as_node() {
                Node::Tensor(_) | Node::Input { .. } | Node::Scalar(_) | Node::Acc => 0,
                Node::Unary(_, a) => 1 + walk(a, seen),
                Node::Binary(_, a, b) => 1 + walk(a, seen) + walk(b, seen),
                Node::Where(c, a, b) => 1 + walk(c, seen) + walk(a, seen) + walk(b, seen),
            }
        }
        walk(self, &mut seen)
    }
}

/// `Display` writes at most this many characters (a shared subexpression is
/// written at each use, so a small DAG can spell out exponentially long).
const DISPLAY_LIMIT: usize = 400;

impl fmt::Display for Expr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn write(e: &Expr, out: &mut String) {
            if out.len() > DISPLAY_LIMIT {
                return;
            }
            match e.as_node() {
                Node::Tensor(t) => out.push_str(&format!("{}{:?}", t.dtype(), t.shape())),
                Node::Input { id, shape, dtype } => {
                    out.push_str(&format!("in{id}:{dtype}{shape:?}"))
                }
                Node::Scalar(v) => out.push_str(&format!("{v:?}")),
                Node::Acc => out.push_str("acc"),
                Node::Unary(op, a) => {
                    out.push_str(&format!("{op:?}("));
                    write(a, out);
                    out.push(')');
                }
                Node::Binary(op, a, b) => {
                    out.push_str(&format!("{op:?}("));
                    write(a, out);
                    out.push_str(", ");
                    write(b, out);
                    out.push(')');
                }
                Node::Where(c, a, b) => {
                    out.push_str("Where(");
                    write(c, out);
                    out.push_str(", ");
                    write(a, out);
                    out.push_str(", ");
                    write(b, out);
                    out.push(')');
                }
            }
        }
        let mut out = String::new();
        write(self, &mut out);
        if out.len() > DISPLAY_LIMIT {
            let cut = (0..=DISPLAY_LIMIT)
                .rev()
                .find(|&i| out.is_char_boundary(i))
                .unwrap_or(0);
            out.truncate(cut);
            out.push('…');
        }
        f.write_str(&out)
    }
}

impl From<f32> for Expr {
    fn from(v: f32) -> Self {
        Expr::scalar(v)
    }
}

impl From<&Tensor> for Expr {
    fn from(t: &Tensor) -> Self {
        Expr::node(Node::Tensor(t.clone()))
    }
}

impl From<Tensor> for Expr {
    fn from(t: Tensor) -> Self {
        Expr::node(Node::Tensor(t))
    }
}

impl From<&Expr> for Expr {
    fn from(e: &Expr) -> Self {
        e.clone()
    }
}

impl Tensor {
    /// This tensor as a leaf of an elementwise [`Expr`].
    pub fn expr(&self) -> Expr {
        Expr::from(self)
    }
}

macro_rules! binary_operator {
    ($trait:ident, $method:ident, $op:expr) => {
        impl<R: Into<Expr>> $trait<R> for Expr {
            type Output = Expr;
            fn $method(self, rhs: R) -> Expr {
                self.binary($op, rhs)
            }
        }
        impl<R: Into<Expr>> $trait<R> for &Expr {
            type Output = Expr;
            fn $method(self, rhs: R) -> Expr {
                self.clone().binary($op, rhs)
            }
        }
        impl $trait<Expr> for f32 {
            type Output = Expr;
            fn $method(self, rhs: Expr) -> Expr {
                Expr::scalar(self).binary($op, rhs)
            }
        }
        impl $trait<&Expr> for f32 {
            type Output = Expr;
            fn $method(self, rhs: &Expr) -> Expr {
                Expr::scalar(self).binary($op, rhs.clone())
            }
        }
    };
}

binary_operator!(Add, add, BinaryOp::Add);
binary_operator!(Sub, sub, BinaryOp::Sub);
binary_operator!(Mul, mul, BinaryOp::Mul);
binary_operator!(Div, div, BinaryOp::Div);

impl Neg for Expr {
    type Output = Expr;
    fn neg(self) -> Expr {
        self.unary(UnaryOp::Neg)
    }
}

impl Neg for &Expr {
    type Output = Expr;
    fn neg(self) -> Expr {
        self.clone().unary(UnaryOp::Neg)
    }
}
