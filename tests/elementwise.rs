//! Fused elementwise expressions against a CPU f64 evaluation of the same tree.
//!
//! Tolerance: each CPU node carries its value and a first-order bound on the
//! GPU's absolute error (f32 math): inputs are exact; every op adds its own
//! rounding (a few units of u = 2^-24 relative, more for the transcendental
//! ops: `exp`-based ones u(8 + 4|x|) relative, `sin`/`cos` 1e-6 + 4u|x|
//! absolute, `log` 4u absolute, `gelu_erf` 2e-7 relative for the erfc fit)
//! and propagates its operands' bounds through its derivative. An element
//! whose value is not finite, or where a mask or a division could flip within
//! the bounds (|a - b| <= bound), is not checked; the test asserts that most
//! elements are. f16 results add one f16 rounding (2^-11 relative + 6e-8).
//! Edge values (0, ±inf, NaN, huge magnitudes) are checked exactly per op in
//! `edges_of_every_unary_op`.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use wgtile::{BinaryOp, Context, DType, Error, Expr, Tensor, UnaryOp};

const U: f64 = 1.0 / (1u64 << 24) as f64;

use common::{BINARY, UNARY};

// ---------------------------------------------------------------- f64 math

fn unary64(op: UnaryOp, x: f64) -> f64 {
    let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
    match op {
        UnaryOp::Neg => -x,
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.ln(),
        UnaryOp::Sqrt => x.sqrt(),
        // Documented: +inf at ±0 (IEEE rSqrt gives -inf at -0).
        UnaryOp::Rsqrt if x == 0.0 => f64::INFINITY,
        UnaryOp::Rsqrt => 1.0 / x.sqrt(),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => sigmoid(x),
        UnaryOp::Relu => {
            if x < 0.0 {
                0.0
            } else {
                x
            }
        }
        UnaryOp::Gelu | UnaryOp::GeluErf | UnaryOp::Silu if x == f64::NEG_INFINITY => 0.0,
        // 0.5 x (1 + tanh(u)) = x sigmoid(2u), exactly.
        UnaryOp::Gelu => {
            x * sigmoid(2.0 * (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x))
        }
        UnaryOp::GeluErf => 0.5 * x * common::erfc64(-x / std::f64::consts::SQRT_2),
        UnaryOp::Erf => common::erf64(x),
        UnaryOp::Silu => x * sigmoid(x),
        UnaryOp::Abs => x.abs(),
        UnaryOp::Square => x * x,
        _ => unreachable!(),
    }
}

/// `pow` as documented: IEEE `pow` except that a negative base with a
/// non-integer exponent is NaN even at -inf, and the sign of a zero base is
/// ignored.
fn pow64(a: f64, p: f64) -> f64 {
    if a < 0.0 && p != p.floor() {
        f64::NAN
    } else if a == 0.0 {
        0f64.powf(p)
    } else {
        a.powf(p)
    }
}

fn binary64(op: BinaryOp, a: f64, b: f64) -> f64 {
    let mask = |c: bool| if c { 1.0 } else { 0.0 };
    match op {
        BinaryOp::Add => a + b,
        BinaryOp::Sub => a - b,
        BinaryOp::Mul => a * b,
        BinaryOp::Div => a / b,
        BinaryOp::Pow => pow64(a, b),
        BinaryOp::Min if a.is_nan() || b.is_nan() => f64::NAN,
        BinaryOp::Max if a.is_nan() || b.is_nan() => f64::NAN,
        BinaryOp::Min => a.min(b),
        BinaryOp::Max => a.max(b),
        BinaryOp::Lt => mask(a < b),
        BinaryOp::Le => mask(a <= b),
        BinaryOp::Gt => mask(a > b),
        BinaryOp::Ge => mask(a >= b),
        BinaryOp::Eq => mask(a == b),
        BinaryOp::Ne => mask(a != b),
        _ => unreachable!(),
    }
}

// --------------------------------------------- trees with error propagation

/// The test's own expression tree (turned into an `Expr` and evaluated on the CPU).
#[derive(Clone, Debug)]
enum T {
    Leaf(usize),
    Scalar(f32),
    Un(UnaryOp, Box<T>),
    Bin(BinaryOp, Box<T>, Box<T>),
    Where(Box<T>, Box<T>, Box<T>),
}

impl T {
    /// Indices of the leaves the tree uses.
    fn leaves(&self, out: &mut Vec<usize>) {
        match self {
            T::Leaf(i) => out.push(*i),
            T::Scalar(_) => {}
            T::Un(_, a) => a.leaves(out),
            T::Bin(_, a, b) => {
                a.leaves(out);
                b.leaves(out);
            }
            T::Where(c, a, b) => {
                c.leaves(out);
                a.leaves(out);
                b.leaves(out);
            }
        }
    }

    fn expr(&self, leaves: &[Tensor]) -> Expr {
        match self {
            T::Leaf(i) => leaves[*i].expr(),
            T::Scalar(v) => Expr::scalar(*v),
            T::Un(op, a) => Expr::apply_unary(*op, a.expr(leaves)),
            T::Bin(op, a, b) => Expr::apply_binary(*op, a.expr(leaves), b.expr(leaves)),
            T::Where(c, a, b) => Expr::where_(c.expr(leaves), a.expr(leaves), b.expr(leaves)),
        }
    }

    /// (value, absolute error bound), or None when the element cannot be
    /// checked (not finite, or a mask / division that may flip).
    fn eval(&self, at: &dyn Fn(usize) -> f64) -> Option<(f64, f64)> {
        let r = match self {
            T::Leaf(i) => (at(*i), 0.0),
            T::Scalar(v) => (f64::from(*v), 0.0),
            T::Un(op, a) => {
                let (a, e) = a.eval(at)?;
                let v = unary64(*op, a);
                let abs_x = a.abs();
                let bound = match op {
                    UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu => e,
                    UnaryOp::Square => 2.0 * abs_x * e + e * e + 2.0 * U * v.abs(),
                    UnaryOp::Exp => v * (e.exp() - 1.0) * 1.01 + U * (8.0 + 4.0 * abs_x) * v.abs(),
                    UnaryOp::Log => {
                        if a - e <= 0.0 {
                            return None;
                        }
                        e / (a - e) + 4.0 * U + 8.0 * U * v.abs()
                    }
                    UnaryOp::Sqrt => {
                        if a - e < 0.0 {
                            return None;
                        }
                        (a + e).sqrt() - (a - e).sqrt() + 4.0 * U * v
                    }
                    UnaryOp::Rsqrt => {
                        if a - e <= 0.0 {
                            return None;
                        }
                        v * ((a / (a - e)).sqrt() - 1.0) + 8.0 * U * v
                    }
                    UnaryOp::Sin | UnaryOp::Cos => e + 1e-6 + 4.0 * U * abs_x,
                    UnaryOp::Tanh => e + 8.0 * U,
                    UnaryOp::Sigmoid => 0.25 * e + U * (8.0 + 4.0 * abs_x) * v.abs(),
                    UnaryOp::Gelu => {
                        let u2 = 1.6 * (abs_x + 0.045 * abs_x.powi(3));
                        1.2 * e + U * (8.0 + 4.0 * u2) * v.abs() + 1e-36
                    }
                    UnaryOp::GeluErf => {
                        1.2 * e + (2e-7 + U * (8.0 + 4.0 * a * a)) * v.abs() + 1e-36
                    }
                    UnaryOp::Silu => 1.1 * e + U * (8.0 + 4.0 * abs_x) * v.abs() + 1e-36,
                    // |erf'| <= 2/√π; the series keeps relative precision,
                    // 1 - erfc adds the fit's and exp's error times erfc.
                    UnaryOp::Erf if abs_x < 0.5 => 1.13 * e + 16.0 * U * v.abs() + 1e-36,
                    UnaryOp::Erf => {
                        1.13 * e
                            + (1.2e-7 + U * (8.0 + 4.0 * a * a)) * common::erfc64(abs_x)
                            + 8.0 * U
                    }
                    _ => unreachable!(),
                };
                (v, bound)
            }
            T::Bin(op, a, b) => {
                let (a, ea) = a.eval(at)?;
                let (b, eb) = b.eval(at)?;
                let v = binary64(*op, a, b);
                let bound = match op {
                    BinaryOp::Add | BinaryOp::Sub => ea + eb + 2.0 * U * v.abs(),
                    BinaryOp::Mul => ea * b.abs() + eb * a.abs() + ea * eb + 2.0 * U * v.abs(),
                    BinaryOp::Div => {
                        if b.abs() <= 2.0 * eb || b == 0.0 {
                            return None;
                        }
                        (ea + v.abs() * eb) / (b.abs() - eb) + 4.0 * U * v.abs()
                    }
                    BinaryOp::Pow => {
                        let integer = b == b.floor();
                        if (a - ea <= 0.0 && !integer) || (a.abs() <= ea && b < 0.0) {
                            return None;
                        }
                        let hi = ((a + ea).powf(b) - v).abs();
                        let lo = ((a - ea).powf(b) - v).abs();
                        let rel = U * (8.0 + 4.0 * b.abs() + 4.0 * (b * a.abs().log2()).abs());
                        1.01 * hi.max(lo) + rel * v.abs()
                    }
                    BinaryOp::Min | BinaryOp::Max => ea.max(eb),
                    _ => {
                        // Masks: exact unless the comparison may flip.
                        if ea + eb > 0.0 && (a - b).abs() <= ea + eb {
                            return None;
                        }
                        0.0
                    }
                };
                (v, bound)
            }
            T::Where(c, a, b) => {
                let (c, ec) = c.eval(at)?;
                if ec > 0.0 && c.abs() <= ec {
                    return None;
                }
                if c != 0.0 { a.eval(at)? } else { b.eval(at)? }
            }
        };
        (r.0.is_finite() && r.1.is_finite() && r.0.abs() < 1e30).then_some(r)
    }
}

/// A random tree over `leaves` leaves. Ops with a restricted domain get a
/// safe argument (`|a| + c`), divisions a denominator away from 0, so most
/// elements are checkable; masks and `where_` still flip near ties, which
/// the bounds detect.
fn random_tree(rng: &mut StdRng, depth: u32, leaves: usize) -> T {
    if depth == 0 || rng.random_bool(0.12) {
        return if rng.random_bool(0.8) {
            T::Leaf(rng.random_range(0..leaves))
        } else {
            T::Scalar(rng.random_range(-2.0f32..2.0))
        };
    }
    let sub = |rng: &mut StdRng| Box::new(random_tree(rng, depth - 1, leaves));
    let positive = |rng: &mut StdRng| {
        let c = rng.random_range(0.25f32..1.0);
        Box::new(T::Bin(
            BinaryOp::Add,
            Box::new(T::Un(UnaryOp::Abs, sub(rng))),
            Box::new(T::Scalar(c)),
        ))
    };
    const ARITHMETIC: [BinaryOp; 7] = [
        BinaryOp::Add,
        BinaryOp::Sub,
        BinaryOp::Mul,
        BinaryOp::Div,
        BinaryOp::Pow,
        BinaryOp::Min,
        BinaryOp::Max,
    ];
    // Mostly arithmetic: masks and `where_` hide their operands' errors, so
    // they are kept rarer.
    let r = rng.random_range(0..100);
    if r < 40 {
        let op = UNARY[rng.random_range(0..UNARY.len())];
        match op {
            UnaryOp::Log | UnaryOp::Sqrt | UnaryOp::Rsqrt => T::Un(op, positive(rng)),
            // Keep exp's argument moderate so values stay comparable.
            UnaryOp::Exp => T::Un(op, Box::new(T::Un(UnaryOp::Tanh, sub(rng)))),
            _ => T::Un(op, sub(rng)),
        }
    } else if r < 88 {
        let op = ARITHMETIC[rng.random_range(0..ARITHMETIC.len())];
        match op {
            BinaryOp::Div => T::Bin(op, sub(rng), positive(rng)),
            BinaryOp::Pow => {
                let p = [2.0f32, 3.0, 0.5, -1.0, 1.5, 0.0][rng.random_range(0..6)];
                T::Bin(op, positive(rng), Box::new(T::Scalar(p)))
            }
            _ => T::Bin(op, sub(rng), sub(rng)),
        }
    } else if r < 95 {
        let op = BINARY[7 + rng.random_range(0..6)];
        T::Bin(op, sub(rng), sub(rng))
    } else {
        T::Where(sub(rng), sub(rng), sub(rng))
    }
}

/// Element offset of output element `i` in an input of `shape` broadcast to `out`.
fn broadcast_offset(i: usize, shape: &[usize], out: &[usize]) -> usize {
    let mut rem = i;
    let mut off = 0;
    let mut stride = 1;
    for k in (0..out.len()).rev() {
        let c = rem % out[k];
        rem /= out[k];
        let kk = k as isize - (out.len() - shape.len()) as isize;
        if kk >= 0 {
            let d = shape[kk as usize];
            if d != 1 {
                off += c * stride;
            }
            stride *= d;
        }
    }
    off
}

/// Compares `got` with the tree's reference; returns (checked, total).
fn check_tree(
    what: &str,
    tree: &T,
    data: &[Vec<f32>],
    shapes: &[Vec<usize>],
    out: &[usize],
    out_dtype: DType,
    got: &[f32],
) -> (usize, usize) {
    let n: usize = out.iter().product();
    assert_eq!(got.len(), n, "{what}: length");
    let mut checked = 0;
    for (i, &g) in got.iter().enumerate() {
        let at = |leaf: usize| f64::from(data[leaf][broadcast_offset(i, &shapes[leaf], out)]);
        let Some((want, mut bound)) = tree.eval(&at) else {
            continue;
        };
        if out_dtype == DType::F16 {
            if want.abs() + bound > 65000.0 {
                continue;
            }
            bound += 2f64.powi(-11) * want.abs() + 6e-8;
        }
        let err = (f64::from(g) - want).abs();
        assert!(
            err <= bound + 1e-36,
            "{what}: element {i} is {g} but the f64 reference is {want} (error {err:e}, bound {bound:e})"
        );
        checked += 1;
    }
    (checked, n)
}

/// A random output shape (rank 1-4, small odd and prime sizes) and leaf
/// shapes broadcastable to it (leaf 0 has the full shape).
fn random_shapes(rng: &mut StdRng, leaves: usize) -> (Vec<usize>, Vec<Vec<usize>>) {
    const DIMS: [usize; 9] = [1, 2, 3, 4, 5, 7, 8, 13, 16];
    let rank = rng.random_range(1..=4);
    let mut out: Vec<usize>;
    loop {
        out = (0..rank)
            .map(|_| DIMS[rng.random_range(0..DIMS.len())])
            .collect();
        if out.iter().product::<usize>() <= 3000 {
            break;
        }
    }
    let mut shapes = vec![out.clone()];
    for _ in 1..leaves {
        let drop = rng.random_range(0..=rank);
        let s: Vec<usize> = out[drop..]
            .iter()
            .map(|&d| if rng.random_bool(0.3) { 1 } else { d })
            .collect();
        shapes.push(s);
    }
    (out, shapes)
}

static CHECKED: AtomicUsize = AtomicUsize::new(0);
static TOTAL: AtomicUsize = AtomicUsize::new(0);

fn run_random_case(ctx: &Context, seed: u64, allow_f16: bool) -> Result<(), TestCaseError> {
    let mut rng = StdRng::seed_from_u64(seed);
    let leaves = rng.random_range(1..=3);
    let (out, shapes) = random_shapes(&mut rng, leaves);
    let mut tensors = Vec::new();
    let mut data = Vec::new();
    let mut dtypes = Vec::new();
    for (j, s) in shapes.iter().enumerate() {
        let dtype = if allow_f16 && rng.random_bool(0.3) {
            DType::F16
        } else {
            DType::F32
        };
        let n: usize = s.iter().product();
        let values: Vec<f32> = common::random(n, seed ^ ((j as u64 + 1) * 7919))
            .iter()
            .map(|v| v * 2.0)
            .collect();
        let (t, held) = common::upload(ctx, &values, s, dtype);
        tensors.push(t);
        data.push(held);
        dtypes.push(dtype);
    }
    // Leaf 0 (full shape) is always used, so the result has the full shape.
    let tree = T::Bin(
        BinaryOp::Add,
        Box::new(random_tree(&mut rng, 5, leaves)),
        Box::new(T::Leaf(0)),
    );
    let expr = tree.expr(&tensors);
    let mut used = Vec::new();
    tree.leaves(&mut used);
    let out_dtype = if used.iter().all(|&j| dtypes[j] == DType::F16) {
        DType::F16
    } else {
        DType::F32
    };
    let what = format!("seed {seed}: {expr} -> {out:?}");

    let result = ctx.zeros(&out, out_dtype).unwrap();
    ctx.fill(&result, f32::NAN).unwrap();
    ctx.eval_into(&expr, &result)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let got = result.to_f32_vec_blocking().unwrap();
    let (c, n) = check_tree(&what, &tree, &data, &shapes, &out, out_dtype, &got);
    CHECKED.fetch_add(c, Ordering::Relaxed);
    TOTAL.fetch_add(n, Ordering::Relaxed);

    // The unfused path (one kernel per node) agrees within the same bounds
    // when every intermediate is f32.
    if used.iter().all(|&j| dtypes[j] == DType::F32) {
        let unfused = ctx.eval_unfused(&expr).unwrap();
        assert_eq!(unfused.shape(), out.as_slice());
        let got = unfused.to_f32_vec_blocking().unwrap();
        check_tree(
            &format!("unfused {what}"),
            &tree,
            &data,
            &shapes,
            &out,
            out_dtype,
            &got,
        );
    }
    Ok(())
}

#[test]
fn random_trees_match_f64() {
    let Some(ctx) = common::ctx() else { return };
    let f16 = ctx.profile().shader_f16;
    let mut runner = TestRunner::new(Config {
        cases: 32,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&any::<u64>(), |seed| run_random_case(&ctx, seed, f16))
        .unwrap();
    let (checked, total) = (
        CHECKED.load(Ordering::Relaxed),
        TOTAL.load(Ordering::Relaxed),
    );
    eprintln!("random trees: {checked} of {total} elements checked");
    assert!(
        checked * 2 >= total,
        "only {checked} of {total} elements were checkable: the generator needs fixing"
    );
}

// ------------------------------------------------------------- edge values

const EDGES: [f32; 30] = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    -0.5,
    0.1,
    -0.1,
    2.0,
    -2.0,
    3.0,
    -3.0,
    10.0,
    -10.0,
    50.0,
    -50.0,
    88.0,
    -88.0,
    89.0,
    -89.0,
    1e4,
    -1e4,
    1e30,
    -1e30,
    1e-20,
    -1e-20,
    f32::INFINITY,
    f32::NEG_INFINITY,
    f32::NAN,
    1e-3,
];

/// Exact agreement on NaN and infinities (f32 overflow counts as inf), else a
/// relative + absolute bound.
fn edge_ok(got: f32, want: f64, rel: f64, abs: f64) -> bool {
    if want.is_nan() {
        return got.is_nan();
    }
    let want = if want.abs() > f64::from(f32::MAX) {
        want.signum() * f64::INFINITY
    } else {
        want
    };
    if want.is_infinite() {
        return f64::from(got) == want;
    }
    // Bounds that grow with |x| are infinite at x = ±inf: compare exactly then.
    let tol = if want == 0.0 {
        abs
    } else {
        rel * want.abs() + abs
    };
    let tol = if tol.is_finite() { tol } else { 0.0 };
    (f64::from(got) - want).abs() <= tol
}

#[test]
fn edges_of_every_unary_op() {
    let Some(ctx) = common::ctx() else { return };
    // Two copies: a vec4 tensor (32 elements) and a scalar-path one (30).
    let mut v4 = EDGES.to_vec();
    v4.extend([0.25, -0.25]);
    for data in [EDGES.to_vec(), v4] {
        let x = ctx.tensor(&data, [data.len()]).unwrap();
        for op in UNARY {
            let y = ctx.eval(&Expr::apply_unary(op, &x)).unwrap();
            let got = y.to_vec_blocking::<f32>().unwrap();
            for (&xv, &g) in data.iter().zip(&got) {
                let x64 = f64::from(xv);
                let want = unary64(op, x64);
                let (rel, abs) = match op {
                    UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Relu | UnaryOp::Square => (U, 1e-36),
                    UnaryOp::Sqrt | UnaryOp::Rsqrt => (4.0 * U, 1e-36),
                    UnaryOp::Log => (8.0 * U, 4.0 * U),
                    UnaryOp::Tanh => (8.0 * U, 8.0 * U),
                    UnaryOp::GeluErf => (2e-7 + U * (8.0 + 4.0 * x64 * x64), 1e-36),
                    UnaryOp::Erf if x64.abs() < 0.5 => (16.0 * U, 1e-36),
                    UnaryOp::Erf => (
                        8.0 * U,
                        (1.2e-7 + U * (8.0 + 4.0 * x64 * x64)) * common::erfc64(x64.abs()) + 1e-36,
                    ),
                    UnaryOp::Gelu => (
                        U * (8.0 + 8.0 * (x64.abs() + 0.05 * x64.powi(3).abs())),
                        1e-36,
                    ),
                    UnaryOp::Exp | UnaryOp::Sigmoid | UnaryOp::Silu => {
                        (U * (8.0 + 4.0 * x64.abs()), 1e-36)
                    }
                    UnaryOp::Sin | UnaryOp::Cos => {
                        // Accurate for moderate arguments; bounded beyond.
                        if x64.abs() > 1e5 && x64.is_finite() {
                            assert!(g.abs() <= 1.0, "{op:?}({xv}) = {g}");
                            continue;
                        }
                        (0.0, 1e-6 + 4.0 * U * x64.abs())
                    }
                    _ => unreachable!(),
                };
                assert!(
                    edge_ok(g, want, rel, abs),
                    "{op:?}({xv:e}) = {g:e}, want {want:e}"
                );
            }
        }
        // Binary ops at the edges against the same rules.
        let y = ctx
            .tensor(
                &data.iter().rev().copied().collect::<Vec<_>>(),
                [data.len()],
            )
            .unwrap();
        let yd: Vec<f32> = data.iter().rev().copied().collect();
        for op in [
            BinaryOp::Sub,
            BinaryOp::Div,
            BinaryOp::Min,
            BinaryOp::Max,
            BinaryOp::Lt,
            BinaryOp::Le,
            BinaryOp::Gt,
            BinaryOp::Ge,
            BinaryOp::Eq,
            BinaryOp::Ne,
            BinaryOp::Add,
            BinaryOp::Mul,
        ] {
            let got = ctx
                .eval(&Expr::apply_binary(op, &x, &y))
                .unwrap()
                .to_vec_blocking::<f32>()
                .unwrap();
            for i in 0..data.len() {
                let want = binary64(op, f64::from(data[i]), f64::from(yd[i]));
                assert!(
                    edge_ok(got[i], want, 4.0 * U, 1e-36),
                    "{op:?}({}, {}) = {}, want {want}",
                    data[i],
                    yd[i],
                    got[i]
                );
            }
        }
        // pow with scalar exponents, including negative bases and p = 0.
        for p in [2.0f32, 3.0, 0.5, -1.0, -2.0, 1.5, 0.0] {
            let got = ctx
                .eval(&x.expr().pow(p))
                .unwrap()
                .to_vec_blocking::<f32>()
                .unwrap();
            for (&xv, &g) in data.iter().zip(&got) {
                let want = pow64(f64::from(xv), f64::from(p));
                let rel = U * (8.0 + 4.0 * (f64::from(p) * f64::from(xv).abs().log2()).abs());
                assert!(
                    edge_ok(g, want, rel, 1e-36),
                    "pow({xv:e}, {p}) = {g:e}, want {want:e}"
                );
            }
        }
        // where_: NaN counts as true, ±0 as false.
        let got = ctx
            .eval(&Expr::where_(&x, 1.0, 2.0))
            .unwrap()
            .to_vec_blocking::<f32>()
            .unwrap();
        for (&xv, &g) in data.iter().zip(&got) {
            let want = if xv == 0.0 { 2.0 } else { 1.0 };
            assert_eq!(g, want, "where({xv})");
        }
    }
}

// ------------------------------------------------------------ broadcasting

#[test]
fn broadcasting_shapes_and_errors() {
    let Some(ctx) = common::ctx() else { return };
    let cases: [(&[usize], &[usize], &[usize]); 7] = [
        (&[3, 1, 5], &[4, 1], &[3, 4, 5]),
        (&[2, 3, 4, 8], &[8], &[2, 3, 4, 8]),
        (&[2, 3, 4, 8], &[3, 1, 1], &[2, 3, 4, 8]),
        (&[7], &[1], &[7]),
        (&[], &[5, 3], &[5, 3]),
        (&[1, 1], &[1], &[1, 1]),
        (&[13, 1], &[1, 11], &[13, 11]),
    ];
    for (i, (sa, sb, so)) in cases.iter().enumerate() {
        let na: usize = sa.iter().product();
        let nb: usize = sb.iter().product();
        let a = common::random(na, 100 + i as u64);
        let b = common::random(nb, 200 + i as u64);
        let ta = ctx.tensor(&a, sa).unwrap();
        let tb = ctx.tensor(&b, sb).unwrap();
        let y = ctx.eval(&(ta.expr() * 2.0 - tb.expr().exp())).unwrap();
        assert_eq!(y.shape(), *so);
        let got = y.to_vec_blocking::<f32>().unwrap();
        for (k, &g) in got.iter().enumerate() {
            let av = f64::from(a[broadcast_offset(k, sa, so)]);
            let bv = f64::from(b[broadcast_offset(k, sb, so)]);
            let want = av * 2.0 - bv.exp();
            assert!(
                (f64::from(g) - want).abs() <= 1e-6,
                "{sa:?} op {sb:?} at {k}"
            );
        }
    }
    let a = ctx.zeros([3, 4], DType::F32).unwrap();
    let b = ctx.zeros([5, 4], DType::F32).unwrap();
    match ctx.eval(&(a.expr() + b.expr())) {
        Err(Error::ShapeMismatch { lhs, rhs, .. }) => {
            assert_eq!((lhs, rhs), (vec![3, 4], vec![5, 4]));
        }
        other => panic!("expected ShapeMismatch, got {other:?}"),
    }
    let c = ctx.zeros([2, 3], DType::F32).unwrap();
    assert!(matches!(
        ctx.eval(&Expr::where_(&c, &a, 1.0)),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        ctx.eval_unfused(&(a.expr() + b.expr())),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        ctx.eval(&(Expr::scalar(1.0) + 2.0)),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        ctx.eval(&Expr::input(0, [4], DType::F32)),
        Err(Error::InvalidArgument(_))
    ));
}

// --------------------------------------------------------------- eval_into

#[test]
fn eval_into_checks_and_in_place() {
    let Some(ctx) = common::ctx() else { return };
    let data = common::random(37, 5);
    let x = ctx.tensor(&data, [37]).unwrap();
    let e = x.expr() * 2.0 + 1.0;
    let wrong_shape = ctx.zeros([36], DType::F32).unwrap();
    assert!(matches!(
        ctx.eval_into(&e, &wrong_shape),
        Err(Error::ShapeMismatch { .. })
    ));
    if ctx.profile().shader_f16 {
        let wrong_dtype = ctx.zeros([37], DType::F16).unwrap();
        assert!(matches!(
            ctx.eval_into(&e, &wrong_dtype),
            Err(Error::DTypeMismatch { .. })
        ));
    }
    // An input sharing the output's buffer has its element count, so (being
    // broadcast-compatible) its shape: in place is always elementwise-safe.
    // x = 2x + sin(x), vec4 and scalar paths, also through a reshaped view.
    for n in [37usize, 64] {
        let data = common::random(n, 9);
        let x = ctx.tensor(&data, [n]).unwrap();
        let view = x.reshape([1, n]).unwrap();
        ctx.eval_into(&(view.expr() * 2.0 + x.expr().sin()), &view)
            .unwrap();
        let got = x.to_vec_blocking::<f32>().unwrap();
        for (g, v) in got.iter().zip(&data) {
            let want = f64::from(*v) * 2.0 + f64::from(*v).sin();
            assert!((f64::from(*g) - want).abs() <= 1e-6, "in place n={n}");
        }
    }
}

// ---------------------------------------------------------------- the rest

#[test]
fn zero_sized_results_are_empty() {
    let Some(ctx) = common::ctx() else { return };
    let a = ctx.zeros([0, 5], DType::F32).unwrap();
    let b = ctx.tensor(&common::random(5, 1), [5]).unwrap();
    let e = a.expr().sin() * b.expr() + 1.0;
    for y in [ctx.eval(&e).unwrap(), ctx.eval_unfused(&e).unwrap()] {
        assert_eq!(y.shape(), [0, 5]);
        assert!(y.to_vec_blocking::<f32>().unwrap().is_empty());
    }
    let plan = ctx.eval_plan(&e).unwrap();
    assert_eq!(plan.dispatch_count(), 0);
    let c = ctx.zeros([3, 0], DType::F32).unwrap();
    let d = ctx.zeros([3, 1], DType::F32).unwrap();
    assert_eq!(ctx.eval(&(c.expr() - d.expr())).unwrap().shape(), [3, 0]);
    // Zero only broadcasts against 1.
    let f = ctx.zeros([3, 2], DType::F32).unwrap();
    assert!(matches!(
        ctx.eval(&(c.expr() + f.expr())),
        Err(Error::ShapeMismatch { .. })
    ));
}

#[test]
fn f16_and_mixed_dtypes() {
    let Some(ctx) = common::ctx() else { return };
    let n = 4 * 37;
    let data = common::random(n, 77);
    let (h, held) = common::upload(&ctx, &data, &[4, 37], DType::F16);
    if !ctx.profile().shader_f16 {
        assert!(matches!(
            ctx.eval(&h.expr().gelu()),
            Err(Error::UnsupportedFeature { .. })
        ));
        return;
    }
    let (f, fdata) = common::upload(&ctx, &common::random(37, 78), &[37], DType::F32);
    // All f16 -> f16 result (math in f32, one rounding at the store).
    for n_cols in [37usize, 36] {
        let h = ctx
            .tensor(
                &held[..4 * n_cols]
                    .iter()
                    .map(|&v| wgtile::f16::from_f32(v))
                    .collect::<Vec<_>>(),
                [4, n_cols],
            )
            .unwrap();
        let y = ctx
            .eval(&(h.expr().gelu_erf() * 3.0 - h.expr().exp()))
            .unwrap();
        assert_eq!(y.dtype(), DType::F16);
        let got = y.to_f32_vec_blocking().unwrap();
        for (i, g) in got.iter().enumerate() {
            let x = f64::from(held[i]);
            let want = unary64(UnaryOp::GeluErf, x) * 3.0 - x.exp();
            let bound = 2f64.powi(-11) * want.abs() + 1e-5;
            assert!(
                (f64::from(*g) - want).abs() <= bound,
                "f16 at {i}: {g} vs {want}"
            );
        }
    }
    // f16 and f32 mixed -> f32 result.
    let y = ctx.eval(&(h.expr() * f.expr())).unwrap();
    assert_eq!(y.dtype(), DType::F32);
    let got = y.to_vec_blocking::<f32>().unwrap();
    for (i, g) in got.iter().enumerate() {
        let want = f64::from(held[i]) * f64::from(fdata[i % 37]);
        assert!((f64::from(*g) - want).abs() <= 2.0 * U * want.abs() + 1e-36);
    }
}

#[test]
fn lecture_example_fused_and_unfused() {
    let Some(ctx) = common::ctx() else { return };
    let n = 1000;
    let data: Vec<f32> = common::random(n, 3).iter().map(|v| v * 50.0).collect();
    let x = ctx.tensor(&data, [n]).unwrap();
    let e = x.expr().sin().square() + x.expr().cos().square();
    let fused = ctx.eval_plan(&e).unwrap();
    let unfused = ctx.eval_unfused_plan(&e).unwrap();
    assert_eq!(fused.dispatch_count(), 1);
    assert_eq!(unfused.dispatch_count(), 5);
    // Fused: x read once, the result written once. Unfused: sin, square,
    // cos, square (one read + one write each) and the add (two reads + one write).
    assert_eq!(fused.bytes(), 8 * n as u64);
    assert_eq!(unfused.bytes(), 4 * n as u64 * (2 + 2 + 2 + 2 + 3));
    assert_eq!(fused.flops(), 5 * n as u64);
    for plan in [&fused, &unfused] {
        ctx.fill(plan.output(), f32::NAN).unwrap();
        plan.run().unwrap();
        let got = plan.output().to_vec_blocking::<f32>().unwrap();
        for (g, v) in got.iter().zip(&data) {
            assert!((g - 1.0).abs() <= 4e-6, "{} at x = {v}: {g}", plan.label());
        }
    }
}

#[test]
fn more_elements_than_one_grid_row() {
    let Some(ctx) = common::ctx() else { return };
    // Odd count: the scalar path, one element per invocation, so the grid
    // needs a second row of workgroups past 65535 x 256 elements.
    let max = ctx.profile().max_workgroups_per_dim as usize;
    let n = max * wgtile::kernels::codegen::fusion::WORKGROUP_SIZE as usize + 4099;
    let x = ctx.zeros([n], DType::F32).unwrap();
    ctx.fill_random(&x, 11).unwrap();
    let y = ctx.eval(&(x.expr() * 2.0 + 1.0)).unwrap();
    let xs = x.to_vec_blocking::<f32>().unwrap();
    let ys = y.to_vec_blocking::<f32>().unwrap();
    for i in (0..n).step_by(997).chain(n - 5000..n) {
        assert_eq!(ys[i], xs[i] * 2.0 + 1.0, "element {i}");
    }
}

#[test]
fn several_outputs_in_one_pass() {
    let Some(ctx) = common::ctx() else { return };
    for n in [64usize, 67] {
        let xd = common::random(n, 21);
        let yd = common::random(n, 22);
        let x = ctx.tensor(&xd, [n]).unwrap();
        let y = ctx.tensor(&yd, [n]).unwrap();
        let s = x.expr().sin();
        let exprs = [s.clone(), &s * y.expr(), x.expr().cos() + 2.0];
        let (plan, outs) = ctx.eval_many_plan(&exprs).unwrap();
        assert_eq!(plan.dispatch_count(), 1);
        assert_eq!(outs.len(), 3);
        // x and y read once, three outputs written.
        assert_eq!(plan.bytes(), 4 * n as u64 * (2 + 3));
        for o in &outs {
            ctx.fill(o, f32::NAN).unwrap();
        }
        plan.run().unwrap();
        let refs: [&dyn Fn(f64, f64) -> f64; 3] =
            [&|x, _| x.sin(), &|x, y| x.sin() * y, &|x, _| x.cos() + 2.0];
        for (o, r) in outs.iter().zip(refs) {
            let got = o.to_vec_blocking::<f32>().unwrap();
            for i in 0..n {
                let want = r(f64::from(xd[i]), f64::from(yd[i]));
                assert!((f64::from(got[i]) - want).abs() <= 2e-6, "n={n} at {i}");
            }
        }
    }
    let a = ctx.zeros([3, 4], DType::F32).unwrap();
    let b = ctx.zeros([4], DType::F32).unwrap();
    assert!(matches!(
        ctx.eval_many(&[a.expr(), b.expr()]),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(ctx.eval_many(&[]), Err(Error::InvalidArgument(_))));
    if ctx.profile().shader_f16 {
        // Each output takes its own dtype rule.
        let h = ctx.zeros([4], DType::F16).unwrap();
        let outs = ctx
            .eval_many(&[h.expr() + 1.0, h.expr() + b.expr()])
            .unwrap();
        assert_eq!(outs[0].dtype(), DType::F16);
        assert_eq!(outs[1].dtype(), DType::F32);
        assert_eq!(outs[0].to_f32_vec_blocking().unwrap(), [1.0; 4]);
    }
}

#[test]
fn pipeline_cache_stays_bounded() {
    let Some(ctx) = common::ctx() else { return };
    let data = common::random(5, 31);
    let x = ctx.tensor(&data, [5]).unwrap();
    // More distinct structures than the cache holds: x + 1 under 0..k negations.
    let structures = wgtile::kernels::codegen::fusion::CACHE_CAPACITY + 6;
    let mut e = x.expr() + 1.0;
    for k in 0..structures {
        let got = ctx.eval(&e).unwrap().to_vec_blocking::<f32>().unwrap();
        let sign = if k % 2 == 0 { 1.0 } else { -1.0 };
        for (g, v) in got.iter().zip(&data) {
            assert_eq!(*g, sign * (v + 1.0), "{k} negations");
        }
        assert!(ctx.fused_kernel_count() <= wgtile::kernels::codegen::fusion::CACHE_CAPACITY);
        e = -e;
    }
    // The first structure was evicted (least recently used) and compiles again.
    let got = ctx
        .eval(&(x.expr() + 1.0))
        .unwrap()
        .to_vec_blocking::<f32>()
        .unwrap();
    assert_eq!(got[0], data[0] + 1.0);
}

#[test]
fn deep_and_shared_expressions() {
    let Some(ctx) = common::ctx() else { return };
    let x = ctx.tensor(&common::random(8, 41), [8]).unwrap();
    // A DAG of 40 nodes whose tree has 2^40 leaves: lowered once per node.
    let mut e = x.expr();
    for _ in 0..40 {
        e = &e * 0.5 + &e * 0.5;
    }
    let got = ctx.eval(&e).unwrap().to_vec_blocking::<f32>().unwrap();
    let want = x.to_vec_blocking::<f32>().unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-5 * w.abs(), "{g} vs {w}");
    }
    assert!(e.to_string().chars().count() <= 410);
    assert_eq!(ctx.eval_unfused_plan(&e).unwrap().dispatch_count(), 120);
    // The deepest accepted expression runs (fused and unfused); one more
    // level is an error, not a stack overflow.
    let mut deep = x.expr();
    for _ in 0..wgtile::kernels::codegen::fusion::MAX_DEPTH {
        deep = deep.abs();
    }
    let fused = ctx.eval(&deep).unwrap().to_vec_blocking::<f32>().unwrap();
    let unfused = ctx
        .eval_unfused(&deep)
        .unwrap()
        .to_vec_blocking::<f32>()
        .unwrap();
    for ((f, u), w) in fused.iter().zip(&unfused).zip(&want) {
        assert_eq!((*f, *u), (w.abs(), w.abs()));
    }
    let deeper = deep.abs();
    assert!(matches!(ctx.eval(&deeper), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        ctx.eval_unfused(&deeper),
        Err(Error::InvalidArgument(_))
    ));
}

/// Dropping a very deep expression does not overflow the stack (it used to
/// abort the process), and dropping one owner of a shared subtree leaves
/// the subtree whole for the others. No GPU needed.
#[test]
fn deep_expressions_drop_without_recursion() {
    let mut e = Expr::scalar(0.0);
    for _ in 0..300_000 {
        e = e + 1.0;
    }
    drop(e);
    let x = Expr::input(0, [4], DType::F32);
    let shared = x.clone().exp() + 1.0;
    let a = &shared * 2.0;
    let b = shared.clone().sqrt();
    drop(shared);
    drop(a);
    let text = b.to_string();
    assert_eq!(text, "Sqrt(Add(Exp(in0:f32[4]), 1.0))");
    assert_eq!(b.op_count(), 3, "{text}");
}

/// `eval_into` a padded output is refused (it used to return Ok with a
/// third of the logical values unwritten); into a contiguous one it writes
/// every element.
#[test]
fn eval_into_a_padded_output_is_refused() {
    let Some(ctx) = common::ctx() else { return };
    let x = ctx.rand_uniform([3, 5], -1.0, 1.0, DType::F32, 9).unwrap();
    let padded = ctx.tensor_padded(&[0.0f32; 15], [3, 5], 8).unwrap();
    let r = ctx.eval_into(&(x.expr() * 2.0), &padded);
    assert!(
        matches!(&r, Err(Error::InvalidArgument(m)) if m.contains("contiguous")),
        "{r:?}"
    );
    let out = ctx.zeros([3, 5], DType::F32).unwrap();
    ctx.fill(&out, f32::NAN).unwrap();
    ctx.eval_into(&(x.expr() * 2.0), &out).unwrap();
    let (xs, ys) = (
        x.to_vec_blocking::<f32>().unwrap(),
        out.to_vec_blocking::<f32>().unwrap(),
    );
    for (i, (a, y)) in xs.iter().zip(&ys).enumerate() {
        assert_eq!(*y, a * 2.0, "element {i}");
    }
}
