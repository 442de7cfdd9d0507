//! The bad-input table: every public op with each argument in turn given a
//! wrong shape, rank, dtype, size, configuration or value, and the exact
//! outcome of each row: an `Error` variant (with the feature or limit it
//! names), or the values NumPy / PyTorch give (zero-sized dimensions,
//! infinities, NaN). A row that panics is reported as a failure, the whole
//! table runs before the test fails, and after every refusal the context
//! must still compute a correct sum.

use std::panic::{AssertUnwindSafe, catch_unwind};

use wgtile::{
    AttentionKernel, AttentionOptions, Axis, BackwardTiles, Context, DType, DecodeTiles,
    DiagonalAlignment, Epilogue, Error, Expr, FlashTiles, KvCache, MatmulKernel, MatmulOptions,
    Reduction, Result, Tensor, TileConfig, TimingOptions, f16, wgpu,
};

use crate::common;

/// The error classes a row can expect.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Shape,
    DType,
    /// `NotFloat`: a float op given an integer tensor.
    NotFloat,
    Invalid,
    /// `UnsupportedFeature` whose feature name contains this text.
    Unsupported(&'static str),
    /// `LimitExceeded` naming this limit.
    Limit(&'static str),
}

enum Want {
    Err(Kind),
    /// Each returned tensor's shape and values (NaN matches NaN, infinities
    /// exactly, other values within `tol` times max(|want|, 1): 2e-6 unless
    /// the row says otherwise).
    Values(Vec<(Vec<usize>, Vec<f32>)>, f32),
    /// Success with these output shapes (values checked elsewhere).
    Shapes(Vec<Vec<usize>>),
}

/// An op's name, its expression and its host value.
type UnaryCase = (&'static str, fn(Expr) -> Expr, fn(f32) -> f32);
type BinaryCase = (&'static str, fn(Expr, Expr) -> Expr, fn(f32, f32) -> f32);

type Run<'a> = Box<dyn Fn() -> Result<Vec<Tensor>> + 'a>;

struct Table<'a> {
    rows: Vec<(String, Run<'a>, Want)>,
}

impl<'a> Table<'a> {
    fn err(
        &mut self,
        name: impl Into<String>,
        kind: Kind,
        run: impl Fn() -> Result<Vec<Tensor>> + 'a,
    ) {
        self.rows
            .push((name.into(), Box::new(run), Want::Err(kind)));
    }

    fn values(
        &mut self,
        name: impl Into<String>,
        want: Vec<(Vec<usize>, Vec<f32>)>,
        run: impl Fn() -> Result<Vec<Tensor>> + 'a,
    ) {
        self.rows
            .push((name.into(), Box::new(run), Want::Values(want, 2e-6)));
    }

    fn close(
        &mut self,
        name: impl Into<String>,
        want: Vec<(Vec<usize>, Vec<f32>)>,
        tol: f32,
        run: impl Fn() -> Result<Vec<Tensor>> + 'a,
    ) {
        self.rows
            .push((name.into(), Box::new(run), Want::Values(want, tol)));
    }

    fn shapes(
        &mut self,
        name: impl Into<String>,
        want: Vec<Vec<usize>>,
        run: impl Fn() -> Result<Vec<Tensor>> + 'a,
    ) {
        self.rows
            .push((name.into(), Box::new(run), Want::Shapes(want)));
    }
}

fn kind_matches(err: &Error, kind: Kind) -> bool {
    match (err, kind) {
        (Error::ShapeMismatch { .. }, Kind::Shape) => true,
        (Error::DTypeMismatch { .. }, Kind::DType) => true,
        (Error::NotFloat { .. }, Kind::NotFloat) => true,
        (Error::InvalidArgument(_), Kind::Invalid) => true,
        (Error::UnsupportedFeature { feature, .. }, Kind::Unsupported(f)) => feature.contains(f),
        (Error::LimitExceeded { limit, .. }, Kind::Limit(l)) => *limit == l,
        _ => false,
    }
}

fn same(got: f32, want: f32, tol: f32) -> bool {
    if want.is_nan() {
        return got.is_nan();
    }
    if want.is_infinite() {
        return got == want;
    }
    // Relative for large values, absolute below 1.
    (got - want).abs() <= tol * want.abs().max(1.0)
}

/// Runs one row; `None` when it gave what it should.
fn check(run: &Run, want: &Want) -> Option<String> {
    let got = match catch_unwind(AssertUnwindSafe(run)) {
        Err(p) => {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            return Some(format!("panicked: {msg}"));
        }
        Ok(r) => r,
    };
    match (got, want) {
        (Err(e), Want::Err(kind)) if kind_matches(&e, *kind) => None,
        (Err(e), want) => Some(format!("wanted {}, got Err({e:?})", describe(want))),
        (Ok(_), Want::Err(kind)) => Some(format!("wanted Err({kind:?}), got Ok")),
        (Ok(ts), Want::Shapes(shapes)) => {
            let got: Vec<Vec<usize>> = ts.iter().map(|t| t.shape().to_vec()).collect();
            (&got != shapes).then(|| format!("wanted shapes {shapes:?}, got {got:?}"))
        }
        (Ok(ts), Want::Values(want, tol)) => {
            if ts.len() != want.len() {
                return Some(format!("wanted {} outputs, got {}", want.len(), ts.len()));
            }
            for (i, (t, (shape, values))) in ts.iter().zip(want).enumerate() {
                if t.shape() != shape.as_slice() {
                    return Some(format!(
                        "output {i}: wanted shape {shape:?}, got {:?}",
                        t.shape()
                    ));
                }
                let got = match t.to_f32_vec_blocking() {
                    Ok(v) => v,
                    Err(e) => return Some(format!("output {i}: read back failed: {e}")),
                };
                if got.len() != values.len() {
                    return Some(format!(
                        "output {i}: {} values, wanted {}",
                        got.len(),
                        values.len()
                    ));
                }
                if let Some(j) = (0..got.len()).find(|&j| !same(got[j], values[j], *tol)) {
                    return Some(format!(
                        "output {i}[{j}]: got {}, wanted {} (all: {:?})",
                        got[j],
                        values[j],
                        &got[..got.len().min(12)]
                    ));
                }
            }
            None
        }
    }
}

fn describe(want: &Want) -> String {
    match want {
        Want::Err(k) => format!("Err({k:?})"),
        Want::Values(v, _) => format!(
            "values of shapes {:?}",
            v.iter().map(|x| &x.0).collect::<Vec<_>>()
        ),
        Want::Shapes(s) => format!("shapes {s:?}"),
    }
}

/// Runs every row, then asserts none failed (listing all that did).
fn run_table(ctx: &Context, table: Table) -> usize {
    let probe = ctx.tensor(&[1.0f32, 2.0, 3.0, 4.5], [4]).unwrap();
    let mut failures = Vec::new();
    for (name, run, want) in &table.rows {
        if let Some(why) = check(run, want) {
            failures.push(format!("{name}: {why}"));
        }
        if matches!(want, Want::Err(_)) {
            let s = ctx
                .sum(&probe, Axis::All)
                .and_then(|s| s.to_vec_blocking::<f32>());
            assert_eq!(s.ok(), Some(vec![10.5]), "context unusable after `{name}`");
        }
    }
    eprintln!("{} rows, {} failed", table.rows.len(), failures.len());
    assert!(
        failures.is_empty(),
        "{} of {} rows failed:\n{}",
        failures.len(),
        table.rows.len(),
        failures.join("\n")
    );
    table.rows.len()
}

fn one(t: Tensor) -> Vec<Tensor> {
    vec![t]
}

fn val(shape: &[usize], values: &[f32]) -> Vec<(Vec<usize>, Vec<f32>)> {
    vec![(shape.to_vec(), values.to_vec())]
}

const INF: f32 = f32::INFINITY;
const NAN: f32 = f32::NAN;

/// Random f32 data of `shape` (seeded by its dimensions).
fn rnd(ctx: &Context, shape: &[usize]) -> Tensor {
    let seed = shape.iter().fold(7u64, |s, &d| s * 31 + d as u64);
    ctx.rand_uniform(shape, -1.0, 1.0, DType::F32, seed)
        .unwrap()
}

fn rnd16(ctx: &Context, shape: &[usize]) -> Tensor {
    let n = shape.iter().product();
    let h: Vec<f16> = common::random(n, 5)
        .iter()
        .map(|&v| f16::from_f32(v))
        .collect();
    ctx.tensor(&h, shape).unwrap()
}

fn vals(ctx: &Context, values: &[f32], shape: &[usize]) -> Tensor {
    ctx.tensor(values, shape).unwrap()
}

#[test]
fn tensors_and_reads() {
    let Some(ctx) = common::ctx() else { return };
    let ctx = &ctx;
    let mut t = Table { rows: Vec::new() };
    let data = common::random(16, 1);
    for (shape, n) in [
        (vec![3usize, 4], 11usize),
        (vec![3, 4], 13),
        (vec![], 0),
        (vec![], 2),
        (vec![0], 1),
        (vec![2, 0, 3], 1),
    ] {
        let d = data[..n].to_vec();
        t.err(
            format!("tensor {shape:?} from {n} values"),
            Kind::Invalid,
            move || ctx.tensor(&d, &shape).map(one),
        );
    }
    // write_f32: converts to the tensor's float dtype, refuses the rest.
    for dtype in [DType::I32, DType::U32] {
        t.err(
            format!("write_f32 into {dtype}"),
            Kind::NotFloat,
            move || {
                let x = ctx.zeros([2, 3], dtype)?;
                ctx.write_f32(&x, &[1.0; 6]).map(|()| one(x))
            },
        );
    }
    t.err(
        "write_f32 of 5 values into [2, 3]",
        Kind::Invalid,
        move || {
            let x = ctx.zeros([2, 3], DType::BF16)?;
            ctx.write_f32(&x, &[1.0; 5]).map(|()| one(x))
        },
    );
    t.err("write_f32 into a padded tensor", Kind::Invalid, move || {
        let x = ctx.tensor_padded(&[0.0f32; 6], [2, 3], 4)?;
        ctx.write_f32(&x, &[1.0; 6]).map(|()| one(x))
    });
    // 1 + 2^-8 + 2^-9 is bf16's tie: it rounds to the even 1 + 2^-7.
    t.values(
        "write_f32 into bf16 [3]",
        val(&[3], &[1.0 + 2f32.powi(-7), INF, NAN]),
        move || {
            let x = ctx.zeros([3], DType::BF16)?;
            ctx.write_f32(&x, &[1.0 + 2f32.powi(-8) + 2f32.powi(-9), INF, NAN])
                .map(|()| one(x))
        },
    );
    t.values("write_f32 into f16 [0, 2]", val(&[0, 2], &[]), move || {
        let x = ctx.zeros([0, 2], DType::F16)?;
        ctx.write_f32(&x, &[]).map(|()| one(x))
    });
    t.values("tensor [] from 1 value", val(&[], &[0.5]), || {
        ctx.tensor(&[0.5f32], []).map(one)
    });
    t.values("tensor [0]", val(&[0], &[]), || {
        ctx.tensor::<f32>(&[], [0]).map(one)
    });
    t.values("tensor [3, 0, 2]", val(&[3, 0, 2], &[]), || {
        ctx.tensor::<f32>(&[], [3, 0, 2]).map(one)
    });
    for shape in [
        vec![1usize, 1, 1, 1, 1],
        vec![2, 1, 1, 1, 1, 1],
        vec![0, 1, 1, 1, 1],
    ] {
        let s = shape.clone();
        t.err(
            format!("zeros rank {}", shape.len()),
            Kind::Invalid,
            move || ctx.zeros(&s, DType::F32).map(one),
        );
    }
    for shape in [
        vec![usize::MAX, 2],
        vec![1usize << 33, 1 << 33],
        vec![1 << 20, 1 << 20, 1 << 20, 1 << 20],
        vec![usize::MAX, 0],
    ] {
        let s = shape.clone();
        let want = if shape.contains(&0) {
            // NumPy: a zero dimension makes any shape empty.
            None
        } else {
            Some(Kind::Invalid)
        };
        match want {
            Some(kind) => t.err(format!("zeros {shape:?} overflows"), kind, move || {
                ctx.zeros(&s, DType::F32).map(one)
            }),
            None => t.shapes(format!("zeros {shape:?}"), vec![shape.clone()], move || {
                ctx.zeros(&s, DType::F32).map(one)
            }),
        }
    }
    let (max, limit) = ctx.profile().max_tensor_bytes();
    for dtype in [DType::F32, DType::F16] {
        let n = (max / dtype.size() as u64 + 1) as usize;
        t.err(
            format!("zeros {dtype:?} over the binding limit"),
            Kind::Limit(limit),
            move || ctx.zeros([n], dtype).map(one),
        );
        t.err(
            format!("full {dtype:?} over the binding limit"),
            Kind::Limit(limit),
            move || ctx.full([n], 1.0, dtype).map(one),
        );
        t.err(
            format!("rand_uniform {dtype:?} over the binding limit"),
            Kind::Limit(limit),
            move || ctx.rand_uniform([n], 0.0, 1.0, dtype, 1).map(one),
        );
    }
    for (v, want) in [
        (NAN, NAN),
        (INF, INF),
        (-INF, -INF),
        (-0.0, -0.0),
        (3.4e38, 3.4e38),
    ] {
        t.values(
            format!("full f32 {v}"),
            val(&[2, 3], &[want; 6]),
            move || ctx.full([2, 3], v, DType::F32).map(one),
        );
    }
    if ctx.profile().shader_f16 {
        for (v, want) in [
            (NAN, NAN),
            (INF, INF),
            (65504.0, 65504.0),
            (1e5, INF),
            (-1e5, -INF),
            (1e-8, 0.0),
        ] {
            t.values(format!("full f16 {v}"), val(&[3], &[want; 3]), move || {
                ctx.full([3], v, DType::F16).map(one)
            });
        }
    }
    t.values("full of shape []", val(&[], &[2.0]), || {
        ctx.full([], 2.0, DType::F32).map(one)
    });
    t.values("full of shape [0, 5]", val(&[0, 5], &[]), || {
        ctx.full([0, 5], 2.0, DType::F32).map(one)
    });
    t.values("fill with NaN", val(&[5], &[NAN; 5]), || {
        let x = rnd(ctx, &[5]);
        ctx.fill(&x, NAN)?;
        Ok(one(x))
    });
    t.values("fill an empty tensor", val(&[0, 3], &[]), || {
        let x = ctx.zeros([0, 3], DType::F32)?;
        ctx.fill(&x, 1.0)?;
        Ok(one(x))
    });
    t.values("fill a padded tensor", val(&[2, 3], &[4.0; 6]), || {
        let x = ctx.tensor_padded(&[0.0f32; 6], [2, 3], 4)?;
        ctx.fill(&x, 4.0)?;
        Ok(one(ctx.contiguous(&x)?))
    });
    for (lo, hi, kind) in [
        (1.0, 0.0, Kind::Invalid),
        (NAN, 1.0, Kind::Invalid),
        (0.0, NAN, Kind::Invalid),
        (-INF, 0.0, Kind::Invalid),
        (0.0, INF, Kind::Invalid),
        (-3e38, 3e38, Kind::Invalid),
    ] {
        t.err(format!("rand_uniform [{lo}, {hi})"), kind, move || {
            ctx.rand_uniform([4], lo, hi, DType::F32, 1).map(one)
        });
    }
    t.values("rand_uniform [2, 2)", val(&[3], &[2.0; 3]), || {
        ctx.rand_uniform([3], 2.0, 2.0, DType::F32, 1).map(one)
    });
    t.values("rand_uniform of shape [0]", val(&[0], &[]), || {
        ctx.rand_uniform([0], 0.0, 1.0, DType::F32, 1).map(one)
    });
    for (multiple, kind) in [
        (0usize, Some(Kind::Invalid)),
        (1, None),
        (3, None),
        (7, None),
    ] {
        let d = data[..6].to_vec();
        match kind {
            Some(k) => t.err(format!("tensor_padded multiple {multiple}"), k, move || {
                ctx.tensor_padded(&d, [2, 3], multiple).map(one)
            }),
            None => {
                let want = d.clone();
                t.values(
                    format!("tensor_padded multiple {multiple}, contiguous"),
                    val(&[2, 3], &want),
                    move || {
                        Ok(one(ctx.contiguous(&ctx.tensor_padded(
                            &d,
                            [2, 3],
                            multiple,
                        )?)?))
                    },
                )
            }
        }
    }
    t.err(
        "tensor_padded of 5 values for [2, 3]",
        Kind::Invalid,
        || ctx.tensor_padded(&[0.0f32; 5], [2, 3], 4).map(one),
    );
    t.err("tensor_padded of rank 0", Kind::Invalid, || {
        ctx.tensor_padded(&[1.0f32], [], 4).map(one)
    });
    for (from, to, kind) in [
        (vec![3usize, 4], vec![5usize, 2], Some(Kind::Shape)),
        (vec![3, 4], vec![13], Some(Kind::Shape)),
        (vec![3, 4], vec![1, 1, 1, 3, 4], Some(Kind::Invalid)),
        (vec![3, 4], vec![], Some(Kind::Shape)),
        (vec![1], vec![], None),
        (vec![0, 3], vec![3, 0], None),
        (vec![0, 3], vec![0], None),
        (vec![3, 4], vec![2, 2, 3], None),
    ] {
        let x = rnd(ctx, &from);
        let name = format!("reshape {from:?} to {to:?}");
        match kind {
            Some(k) => t.err(name, k, move || x.reshape(&to).map(one)),
            None => {
                let to2 = to.clone();
                t.shapes(name, vec![to], move || x.reshape(&to2).map(one))
            }
        }
    }
    let padded = ctx.tensor_padded(&data[..6], [2, 3], 4).unwrap();
    t.err("reshape a padded tensor", Kind::Invalid, move || {
        padded.reshape([3, 2]).map(one)
    });
    t.err("to_vec f16 of an f32 tensor", Kind::DType, || {
        rnd(ctx, &[3]).to_vec_blocking::<f16>().map(|_| vec![])
    });
    t.err("to_vec f32 of an f16 tensor", Kind::DType, || {
        rnd16(ctx, &[3]).to_vec_blocking::<f32>().map(|_| vec![])
    });
    t.values("contiguous of an empty tensor", val(&[0, 4], &[]), || {
        ctx.contiguous(&ctx.zeros([0, 4], DType::F32)?).map(one)
    });
    t.err("time with zero repeats", Kind::Invalid, || {
        let plan = ctx.copy_plan(&rnd(ctx, &[4]))?;
        let opts = TimingOptions {
            repeats: 0,
            warmup: 0,
            warmup_seconds: 0.0,
        };
        ctx.time(&plan, &opts).map(|_| vec![])
    });
    t.err("time with NaN warm-up seconds", Kind::Invalid, || {
        let plan = ctx.copy_plan(&rnd(ctx, &[4]))?;
        let opts = TimingOptions {
            warmup_seconds: f64::NAN,
            ..Default::default()
        };
        ctx.time(&plan, &opts).map(|_| vec![])
    });
    run_table(ctx, t);
}

/// Host matmul of row-major `[m, k] x [k, n]`, f64 accumulation.
fn host_matmul(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
    let mut c = vec![0.0f32; m * n];
    for i in 0..m {
        for j in 0..n {
            let s: f64 = (0..k)
                .map(|p| f64::from(a[i * k + p]) * f64::from(b[p * n + j]))
                .sum();
            c[i * n + j] = s as f32;
        }
    }
    c
}

#[test]
fn matmul_arguments() {
    let Some(ctx) = common::ctx() else { return };
    let ctx = &ctx;
    let mut t = Table { rows: Vec::new() };
    // Shapes that must be refused, by position (M = 3, K = 5, N = 7).
    for (what, a, b, kind) in [
        ("A rank 0", vec![], vec![5usize, 7], Kind::Shape),
        ("B rank 0", vec![3, 5], vec![], Kind::Shape),
        ("both rank 0", vec![], vec![], Kind::Shape),
        ("K differs", vec![3, 5], vec![6, 7], Kind::Shape),
        ("K differs, A rank 1", vec![4], vec![5, 7], Kind::Shape),
        ("K differs, B rank 1", vec![3, 5], vec![4], Kind::Shape),
        ("K differs, both rank 1", vec![5], vec![4], Kind::Shape),
        (
            "K differs, batched",
            vec![2, 3, 5],
            vec![2, 4, 7],
            Kind::Shape,
        ),
        ("batch 2 vs 3", vec![2, 3, 5], vec![3, 5, 7], Kind::Shape),
        (
            "batch [2, 3] vs [3, 2]",
            vec![2, 3, 3, 5],
            vec![3, 2, 5, 7],
            Kind::Shape,
        ),
        (
            "batch [4, 1] vs [2, 1]",
            vec![4, 1, 3, 5],
            vec![2, 1, 5, 7],
            Kind::Shape,
        ),
    ] {
        let (x, y) = (rnd(ctx, &a), rnd(ctx, &b));
        t.err(format!("matmul {what}"), kind, move || {
            ctx.matmul(&x, &y).map(one)
        });
    }
    // NumPy's matmul shapes, checked against the host product.
    for (a, b, out) in [
        (vec![5usize], vec![5usize, 7], vec![7usize]),
        (vec![3, 5], vec![5], vec![3]),
        (vec![5], vec![5], vec![]),
        (vec![1, 3, 5], vec![2, 5, 7], vec![2, 3, 7]),
        (vec![2, 1, 3, 5], vec![3, 5, 7], vec![2, 3, 3, 7]),
        (vec![1, 1], vec![1, 1], vec![1, 1]),
        (vec![13, 1], vec![1, 11], vec![13, 11]),
    ] {
        let (x, y) = (rnd(ctx, &a), rnd(ctx, &b));
        let (ax, by) = (
            x.to_vec_blocking::<f32>().unwrap(),
            y.to_vec_blocking::<f32>().unwrap(),
        );
        let (m, k) = if a.len() == 1 {
            (1, a[0])
        } else {
            (a[a.len() - 2], a[a.len() - 1])
        };
        let n = if b.len() == 1 { 1 } else { b[b.len() - 1] };
        let batches: usize = out.iter().product::<usize>() / (m * n).max(1);
        let (amat, bmat) = (m * k, k * n);
        let (abatch, bbatch) = (ax.len() / amat, by.len() / bmat);
        let mut want = Vec::new();
        for z in 0..batches.max(1) {
            let az = if abatch == 1 { 0 } else { z % abatch };
            let bz = if bbatch == 1 { 0 } else { z % bbatch };
            // Broadcasting over the leading batch dim only (the cases above).
            let (az, bz) = if a.len() == 4 {
                (z / 3, z % 3)
            } else {
                (az, bz)
            };
            want.extend(host_matmul(
                &ax[az * amat..(az + 1) * amat],
                &by[bz * bmat..(bz + 1) * bmat],
                m,
                k,
                n,
            ));
        }
        t.close(
            format!("matmul {a:?} x {b:?}"),
            val(&out, &want),
            1e-5,
            move || ctx.matmul(&x, &y).map(one),
        );
    }
    // Zero-sized dimensions: empty results, and K = 0 gives zeros (plus the
    // epilogue of zero).
    for (a, b, out, fill) in [
        (vec![0usize, 5], vec![5usize, 7], vec![0usize, 7], None),
        (vec![3, 5], vec![5, 0], vec![3, 0], None),
        (vec![3, 0], vec![0, 7], vec![3, 7], Some(0.0)),
        (vec![0, 3, 5], vec![0, 5, 7], vec![0, 3, 7], None),
        (vec![2, 0, 5], vec![5, 7], vec![2, 0, 7], None),
        (vec![0], vec![0], vec![], Some(0.0)),
        (vec![0], vec![0, 4], vec![4], Some(0.0)),
    ] {
        let (x, y) = (
            ctx.zeros(&a, DType::F32).unwrap(),
            ctx.zeros(&b, DType::F32).unwrap(),
        );
        let n: usize = out.iter().product();
        let want = vec![fill.unwrap_or(0.0); n];
        t.values(
            format!("matmul {a:?} x {b:?} (empty)"),
            val(&out, &want),
            move || ctx.matmul(&x, &y).map(one),
        );
    }
    {
        let (x, y) = (
            ctx.zeros([3, 0], DType::F32).unwrap(),
            ctx.zeros([0, 4], DType::F32).unwrap(),
        );
        let bias = vals(ctx, &[1.0, -2.0, 3.0, -4.0], &[4]);
        let want: Vec<f32> = [1.0, 0.0, 3.0, 0.0].repeat(3);
        t.values(
            "matmul K = 0 with bias and relu",
            val(&[3, 4], &want),
            move || {
                ctx.matmul_with(&x, &y, &Epilogue::new().bias(&bias).relu())
                    .map(one)
            },
        );
    }
    // The output of matmul_into, each dimension and the dtype.
    let (a, b) = (rnd(ctx, &[3, 5]), rnd(ctx, &[5, 7]));
    for (shape, dtype, kind) in [
        (vec![3usize, 6], DType::F32, Kind::Shape),
        (vec![4, 7], DType::F32, Kind::Shape),
        (vec![7, 3], DType::F32, Kind::Shape),
        (vec![21], DType::F32, Kind::Shape),
        (vec![1, 3, 7], DType::F32, Kind::Shape),
        (vec![], DType::F32, Kind::Shape),
        (vec![3, 7], DType::F16, Kind::DType),
    ] {
        let (a, b) = (a.clone(), b.clone());
        let out = ctx.zeros(&shape, dtype).unwrap();
        t.err(
            format!("matmul_into out {shape:?} {dtype:?}"),
            kind,
            move || ctx.matmul_into(&a, &b, &out).map(|_| vec![]),
        );
    }
    for (what, alias_a) in [("A", true), ("B", false)] {
        t.err(
            format!("matmul_into out aliasing {what}"),
            Kind::Invalid,
            move || {
                let (sq, other) = (rnd(ctx, &[5, 5]), rnd(ctx, &[5, 5]));
                let (x, y) = if alias_a {
                    (&sq, &other)
                } else {
                    (&other, &sq)
                };
                ctx.matmul_into(x, y, &sq).map(|_| vec![])
            },
        );
    }
    // Dtypes of each operand.
    for (da, db) in [(DType::F32, DType::F16), (DType::F16, DType::F32)] {
        let x = if da == DType::F32 {
            rnd(ctx, &[3, 5])
        } else {
            rnd16(ctx, &[3, 5])
        };
        let y = if db == DType::F32 {
            rnd(ctx, &[5, 7])
        } else {
            rnd16(ctx, &[5, 7])
        };
        t.err(format!("matmul {da:?} x {db:?}"), Kind::DType, move || {
            ctx.matmul(&x, &y).map(one)
        });
    }
    // Epilogue tensors: bias [N] and residual [M, N] of the operands' dtype.
    for (what, bias, residual, kind) in [
        ("bias of M values", Some(vec![3usize]), None, Kind::Shape),
        ("bias of N + 1 values", Some(vec![8]), None, Kind::Shape),
        ("bias [1, N]", Some(vec![1, 7]), None, Kind::Shape),
        ("bias [M, N]", Some(vec![3, 7]), None, Kind::Shape),
        ("bias rank 0", Some(vec![]), None, Kind::Shape),
        ("residual [N]", None, Some(vec![7usize]), Kind::Shape),
        ("residual [N, M]", None, Some(vec![7, 3]), Kind::Shape),
        ("residual [M, N + 1]", None, Some(vec![3, 8]), Kind::Shape),
        ("residual [2, M, N]", None, Some(vec![2, 3, 7]), Kind::Shape),
        ("residual rank 0", None, Some(vec![]), Kind::Shape),
    ] {
        let (a, b) = (a.clone(), b.clone());
        let mut e = Epilogue::new();
        if let Some(s) = &bias {
            e = e.bias(&rnd(ctx, s));
        }
        if let Some(s) = &residual {
            e = e.residual(&rnd(ctx, s));
        }
        t.err(format!("matmul_with {what}"), kind, move || {
            ctx.matmul_with(&a, &b, &e).map(one)
        });
    }
    for (what, e) in [
        ("bias f16", Epilogue::new().bias(&rnd16(ctx, &[7]))),
        (
            "residual f16",
            Epilogue::new().residual(&rnd16(ctx, &[3, 7])),
        ),
    ] {
        let (a, b) = (a.clone(), b.clone());
        t.err(format!("matmul_with {what}"), Kind::DType, move || {
            ctx.matmul_with(&a, &b, &e).map(one)
        });
    }
    for (what, e, kind) in [
        (
            "expr with a [3] tensor",
            Epilogue::new().expr(&(Expr::acc() + rnd(ctx, &[3]).expr())),
            Kind::Shape,
        ),
        (
            "expr with a [7, 3] tensor",
            Epilogue::new().expr(&(Expr::acc() * rnd(ctx, &[7, 3]).expr())),
            Kind::Shape,
        ),
        (
            "expr with a symbolic input",
            Epilogue::new().expr(&(Expr::acc() + Expr::input(0, [7], DType::F32))),
            Kind::Invalid,
        ),
    ] {
        let (a, b) = (a.clone(), b.clone());
        t.err(format!("matmul_with {what}"), kind, move || {
            ctx.matmul_with(&a, &b, &e).map(one)
        });
    }
    // Non-finite operands: IEEE's product, whichever kernel runs.
    let shapes: [(usize, usize, usize); 3] = [(1, 3, 2), (4, 3, 5), (67, 3, 33)];
    for (m, k, n) in shapes {
        for (what, row0, want0) in [
            ("inf", [INF, 1.0, 1.0], INF),
            ("inf - inf", [INF, -INF, 1.0], NAN),
            ("NaN", [NAN, 0.0, 0.0], NAN),
            ("inf * 0", [INF, 0.0, 0.0], NAN),
        ] {
            let mut av = vec![0.5f32; m * k];
            av[..3].copy_from_slice(&row0);
            // B: first row 1 in column 0, 0 elsewhere, so inf * 0 appears in
            // every other column of row 0.
            let mut bv = vec![1.0f32; k * n];
            if what == "inf * 0" {
                bv = vec![0.0; k * n];
            }
            let want = host_matmul(&av, &bv, m, k, n);
            assert!(same(want[0], want0, 0.0), "{what}: host {}", want[0]);
            let (x, y) = (vals(ctx, &av, &[m, k]), vals(ctx, &bv, &[k, n]));
            t.values(
                format!("matmul {m}x{k}x{n} with {what} in A"),
                val(&[m, n], &want),
                move || ctx.matmul(&x, &y).map(one),
            );
        }
    }
    {
        let (a, b) = (a.clone(), b.clone());
        t.values(
            "matmul_with scale NaN",
            val(&[3, 7], &[NAN; 21]),
            move || {
                ctx.matmul_with(&a, &b, &Epilogue::new().scale(NAN))
                    .map(one)
            },
        );
    }
    // Forced kernels with malformed or unfit configurations.
    let (x, y) = (rnd(ctx, &[8, 8]), rnd(ctx, &[8, 8]));
    let tile = TileConfig::new(64, 64, 8);
    let mut zero_reg = tile;
    zero_reg.reg = 0;
    let mut odd_reg = tile;
    odd_reg.reg = 3;
    let mut forced: Vec<(String, MatmulKernel, Kind)> = vec![
        (
            "naive wg_x 0".into(),
            MatmulKernel::Naive { wg_x: 0, wg_y: 8 },
            Kind::Invalid,
        ),
        (
            "naive wg_y 0".into(),
            MatmulKernel::Naive { wg_x: 8, wg_y: 0 },
            Kind::Invalid,
        ),
        (
            "tiled bm 0".into(),
            MatmulKernel::Tiled {
                tile: TileConfig::new(0, 64, 8),
                vec4: false,
            },
            Kind::Invalid,
        ),
        (
            "tiled bn 0".into(),
            MatmulKernel::Tiled {
                tile: TileConfig::new(64, 0, 8),
                vec4: false,
            },
            Kind::Invalid,
        ),
        (
            "tiled bk 0".into(),
            MatmulKernel::Tiled {
                tile: TileConfig::new(64, 64, 0),
                vec4: false,
            },
            Kind::Invalid,
        ),
        (
            "tiled reg 0".into(),
            MatmulKernel::Tiled {
                tile: zero_reg,
                vec4: false,
            },
            Kind::Invalid,
        ),
        (
            "tiled reg 3".into(),
            MatmulKernel::Tiled {
                tile: odd_reg,
                vec4: false,
            },
            Kind::Invalid,
        ),
        (
            "tiled bm 60".into(),
            MatmulKernel::Tiled {
                tile: TileConfig::new(60, 64, 8),
                vec4: false,
            },
            Kind::Invalid,
        ),
        (
            "split-K splits 0".into(),
            MatmulKernel::SplitK {
                tile,
                vec4: false,
                splits: 0,
            },
            Kind::Invalid,
        ),
        (
            "split-K bk 0".into(),
            MatmulKernel::SplitK {
                tile: TileConfig::new(64, 64, 0),
                vec4: false,
                splits: 2,
            },
            Kind::Invalid,
        ),
    ];
    if !ctx.profile().cooperative_matrix {
        let coop = common::coop_kernel();
        forced.push((
            "tensor cores without them".into(),
            coop,
            Kind::Unsupported("COOPERATIVE_MATRIX"),
        ));
    }
    for (zero, field) in [
        (0u32, "warps_m"),
        (1, "warps_n"),
        (2, "bk"),
        (3, "frags_n"),
        (4, "subgroup"),
    ] {
        let mut f = [2u32, 2, 32, 2, 32];
        f[zero as usize] = 0;
        let kernel = MatmulKernel::Coop {
            warps_m: f[0],
            warps_n: f[1],
            bk: f[2],
            frags_n: f[3],
            subgroup: f[4],
            split: false,
        };
        // Malformed is named before the missing feature.
        forced.push((format!("tensor cores {field} 0"), kernel, Kind::Invalid));
    }
    forced.push((
        "naive over the invocation limit".into(),
        MatmulKernel::Naive {
            wg_x: 1024,
            wg_y: 1024,
        },
        Kind::Limit("max_compute_invocations_per_workgroup"),
    ));
    for (what, kernel, kind) in forced {
        let (x, y) = (x.clone(), y.clone());
        t.err(format!("forced {what}"), kind, move || {
            ctx.matmul_plan(&x, &y, None, &MatmulOptions::with_kernel(kernel))
                .map(|_| vec![])
        });
    }
    {
        let (x, y) = (rnd(ctx, &[8, 6]), rnd(ctx, &[6, 8]));
        let vec4 = MatmulKernel::Tiled { tile, vec4: true };
        t.err("forced vec4 on K = 6", Kind::Invalid, move || {
            ctx.matmul_with_kernel(&x, &y, vec4).map(one)
        });
    }
    // Transposes: the shape check sees the transposed operands.
    for (ta, tb, a, b, kind) in [
        (
            true,
            false,
            vec![3usize, 5],
            vec![5usize, 7],
            Some(Kind::Shape),
        ),
        (false, true, vec![3, 5], vec![5, 7], Some(Kind::Shape)),
        (true, true, vec![5, 3], vec![7, 5], None),
        (true, false, vec![5, 3], vec![5, 7], None),
        (false, true, vec![3, 5], vec![7, 5], None),
    ] {
        let (x, y) = (rnd(ctx, &a), rnd(ctx, &b));
        let opts = MatmulOptions::default().transposed(ta, tb);
        let name = format!("matmul transposed ({ta}, {tb}) {a:?} x {b:?}");
        match kind {
            Some(k) => t.err(name, k, move || {
                ctx.matmul_plan(&x, &y, None, &opts).map(|_| vec![])
            }),
            None => t.shapes(name, vec![vec![3, 7]], move || {
                let out = ctx.zeros([3, 7], DType::F32)?;
                ctx.matmul_plan(&x, &y, Some(&out), &opts)?.run()?;
                Ok(one(out))
            }),
        }
    }
    run_table(ctx, t);
    // The dispatcher's explanation: any size gives an answer or a named error.
    for (m, n, k, batch, ok) in [
        (0, 0, 0, 0, true),
        (1, 1, 1, 1, true),
        (7, 0, 13, 3, true),
        (1 << 20, 1 << 20, 1 << 12, 1, true),
        (usize::MAX, 2, 2, 1, false),
        (1 << 40, 1 << 40, 1 << 40, 1 << 20, false),
        (1 << 30, 1 << 30, 1, 1, false),
    ] {
        for dtype in DType::ALL {
            let r = ctx.explain_matmul(dtype, m, n, k, batch);
            assert_eq!(
                r.is_ok(),
                ok,
                "explain {m}x{n}x{k} batch {batch} {dtype:?}: {r:?}"
            );
            match r {
                Ok(e) => assert!(!e.to_string().is_empty()),
                Err(e) => assert!(matches!(e, Error::InvalidArgument(_)), "{e}"),
            }
        }
    }
}

#[test]
fn elementwise_arguments() {
    let Some(ctx) = common::ctx() else { return };
    let ctx = &ctx;
    let mut t = Table { rows: Vec::new() };
    // Broadcasting: NumPy's rule, refused where it does not apply.
    for (a, b, out) in [
        (vec![3usize, 4], vec![5usize], None),
        (vec![3, 4], vec![3], None),
        (vec![2, 3, 4], vec![2, 4], None),
        (vec![3, 4], vec![4, 3], None),
        (vec![2, 1, 4], vec![3, 1], Some(vec![2usize, 3, 4])),
        (vec![3, 4], vec![4], Some(vec![3, 4])),
        (vec![3, 1], vec![1, 4], Some(vec![3, 4])),
        (vec![], vec![2, 3], Some(vec![2, 3])),
        (vec![0, 4], vec![4], Some(vec![0, 4])),
        (vec![0, 4], vec![1, 4], Some(vec![0, 4])),
        (vec![3, 0], vec![3, 1], Some(vec![3, 0])),
        (vec![0], vec![2], None),
    ] {
        let (x, y) = (rnd(ctx, &a), rnd(ctx, &b));
        let name = format!("eval {a:?} + {b:?}");
        match out {
            None => t.err(name, Kind::Shape, move || {
                ctx.eval(&(x.expr() + &y)).map(one)
            }),
            Some(shape) => {
                let (xv, yv) = (
                    x.to_vec_blocking::<f32>().unwrap(),
                    y.to_vec_blocking::<f32>().unwrap(),
                );
                let want = broadcast_add(&xv, &a, &yv, &b, &shape);
                t.values(name, val(&shape, &want), move || {
                    ctx.eval(&(x.expr() + &y)).map(one)
                })
            }
        }
    }
    // The output of eval_into: shape, dtype and layout.
    let x = rnd(ctx, &[3, 5]);
    for (shape, kind) in [
        (vec![3usize, 4], Kind::Shape),
        (vec![15], Kind::Shape),
        (vec![5, 3], Kind::Shape),
        (vec![1, 3, 5], Kind::Shape),
        (vec![], Kind::Shape),
    ] {
        let (x, out) = (x.clone(), ctx.zeros(&shape, DType::F32).unwrap());
        t.err(format!("eval_into out {shape:?}"), kind, move || {
            ctx.eval_into(&(x.expr() * 2.0), &out).map(|_| vec![])
        });
    }
    {
        let (x2, out) = (
            x.clone(),
            ctx.tensor_padded(&[0.0f32; 15], [3, 5], 8).unwrap(),
        );
        t.err("eval_into a padded out", Kind::Invalid, move || {
            ctx.eval_into(&(x2.expr() * 2.0), &out).map(|_| vec![])
        });
        let x3 = x.clone();
        // Elementwise in place is safe: each element is read before it is written.
        let x3v: Vec<f32> = x3
            .to_vec_blocking::<f32>()
            .unwrap()
            .iter()
            .map(|v| v + 1.0)
            .collect();
        t.values("eval_into in place", val(&[3, 5], &x3v), move || {
            let y = ctx.contiguous(&x3)?;
            ctx.eval_into(&(y.expr() + 1.0), &y)?;
            Ok(one(y))
        });
    }
    // Expressions that cannot be evaluated.
    t.err("eval of scalars only", Kind::Invalid, || {
        ctx.eval(&(Expr::scalar(1.0) + 2.0)).map(one)
    });
    t.err("eval of a symbolic input", Kind::Invalid, || {
        ctx.eval(&(Expr::input(0, [3], DType::F32) + 1.0)).map(one)
    });
    t.err("eval of the accumulator", Kind::Invalid, || {
        ctx.eval(&(Expr::acc() + 1.0)).map(one)
    });
    t.err("eval_unfused of a symbolic input", Kind::Invalid, || {
        ctx.eval_unfused(&Expr::input(0, [3], DType::F32).exp())
            .map(one)
    });
    t.err(
        "eval_many with a symbolic input",
        Kind::Invalid,
        move || ctx.eval_many(&[rnd(ctx, &[3]).expr(), Expr::input(1, [3], DType::F32)]),
    );
    t.err(
        "eval_many of shapes that do not broadcast",
        Kind::Shape,
        move || ctx.eval_many(&[rnd(ctx, &[3]).expr() + &rnd(ctx, &[4])]),
    );
    t.err("eval_many of no expressions", Kind::Invalid, || {
        ctx.eval_many(&[])
    });
    t.err("eval of an expression too deep", Kind::Invalid, move || {
        let mut e = rnd(ctx, &[4]).expr();
        for _ in 0..20_000 {
            e = e + 1.0;
        }
        ctx.eval(&e).map(one)
    });
    // Many distinct tensors in one expression: more than a shader stage
    // binds is split or named, never a validation error.
    let max_bindings = ctx.device().limits().max_storage_buffers_per_shader_stage as usize;
    t.err(
        format!("eval of a sum of {max_bindings} tensors"),
        Kind::Limit("max_storage_buffers_per_shader_stage"),
        move || {
            let mut e = ctx.full([5], 1.0, DType::F32)?.expr();
            for _ in 1..max_bindings {
                e = e + &ctx.full([5], 1.0, DType::F32)?;
            }
            ctx.eval(&e).map(one)
        },
    );
    for count in [8usize, max_bindings - 1] {
        t.close(
            format!("eval of a sum of {count} tensors"),
            val(&[5], &[count as f32; 5]),
            1e-6,
            move || {
                let mut e = ctx.full([5], 1.0, DType::F32)?.expr();
                for _ in 1..count {
                    e = e + &ctx.full([5], 1.0, DType::F32)?;
                }
                ctx.eval(&e).map(one)
            },
        );
    }
    // Zero-sized and rank-0 results.
    t.values("eval over [0, 4]", val(&[0, 4], &[]), || {
        ctx.eval(&(ctx.zeros([0, 4], DType::F32)?.expr().exp()))
            .map(one)
    });
    t.values("eval over [4, 0, 2]", val(&[4, 0, 2], &[]), || {
        ctx.eval(&(ctx.zeros([4, 0, 2], DType::F32)?.expr() * 3.0))
            .map(one)
    });
    t.values("eval over a scalar tensor", val(&[], &[3.0]), || {
        ctx.eval(&(ctx.full([], 1.0, DType::F32)?.expr() + 2.0))
            .map(one)
    });
    t.values("eval_unfused over [0]", val(&[0], &[]), || {
        ctx.eval_unfused(&(ctx.zeros([0], DType::F32)?.expr() + 2.0))
            .map(one)
    });
    // IEEE values at the edges, as the Expr docs promise.
    let edges = [0.0f32, -0.0, 1.0, -1.0, INF, -INF, NAN];
    let unary: [UnaryCase; 16] = [
        ("neg", |e| -e, |x| -x),
        ("exp", Expr::exp, f32::exp),
        ("log", Expr::log, f32::ln),
        ("sqrt", Expr::sqrt, f32::sqrt),
        ("rsqrt", Expr::rsqrt, |x| {
            if x == 0.0 { INF } else { 1.0 / x.sqrt() }
        }),
        ("tanh", Expr::tanh, f32::tanh),
        ("sigmoid", Expr::sigmoid, |x| 1.0 / (1.0 + (-x).exp())),
        (
            "relu",
            Expr::relu,
            |x| if x.is_nan() { x } else { x.max(0.0) },
        ),
        ("gelu", Expr::gelu, |x| {
            limit_at_inf(x, |x| {
                0.5 * x * (1.0 + (0.797_884_6 * (x + 0.044715 * x * x * x)).tanh())
            })
        }),
        ("gelu_erf", Expr::gelu_erf, |x| {
            limit_at_inf(x, |x| {
                0.5 * x * (1.0 + erf(f64::from(x) / 2f64.sqrt()) as f32)
            })
        }),
        ("silu", Expr::silu, |x| {
            limit_at_inf(x, |x| x / (1.0 + (-x).exp()))
        }),
        ("abs", Expr::abs, f32::abs),
        ("square", Expr::square, |x| x * x),
        ("sin", Expr::sin, f32::sin),
        ("cos", Expr::cos, f32::cos),
        ("pow 3", |e| e.pow(3.0), |x| x.powi(3)),
    ];
    for (name, op, host) in unary {
        let want: Vec<f32> = edges.iter().map(|&v| host(v)).collect();
        let x = vals(ctx, &edges, &[edges.len()]);
        t.close(
            format!("{name} of 0, -0, 1, -1, inf, -inf, NaN"),
            val(&[edges.len()], &want),
            2e-6,
            move || ctx.eval(&op(x.expr())).map(one),
        );
    }
    let pairs: Vec<(f32, f32)> = edges
        .iter()
        .flat_map(|&a| edges.iter().map(move |&b| (a, b)))
        .collect();
    let binary: [BinaryCase; 11] = [
        ("add", |a, b| a + b, |a, b| a + b),
        ("sub", |a, b| a - b, |a, b| a - b),
        ("mul", |a, b| a * b, |a, b| a * b),
        ("div", |a, b| a / b, |a, b| a / b),
        ("min", Expr::min, |a, b| {
            if a.is_nan() || b.is_nan() {
                NAN
            } else {
                a.min(b)
            }
        }),
        ("max", Expr::max, |a, b| {
            if a.is_nan() || b.is_nan() {
                NAN
            } else {
                a.max(b)
            }
        }),
        ("lt", Expr::lt, |a, b| f32::from(u8::from(a < b))),
        ("ge", Expr::ge, |a, b| f32::from(u8::from(a >= b))),
        ("eq", Expr::eq, |a, b| f32::from(u8::from(a == b))),
        ("ne", Expr::ne, |a, b| f32::from(u8::from(a != b))),
        (
            "where",
            |a, b| Expr::where_(a, b, 7.0),
            |a, b| if a != 0.0 || a.is_nan() { b } else { 7.0 },
        ),
    ];
    for (name, op, host) in binary {
        let (av, bv): (Vec<f32>, Vec<f32>) = pairs.iter().copied().unzip();
        let want: Vec<f32> = pairs.iter().map(|&(a, b)| host(a, b)).collect();
        // min/max of +-0 may return either zero; compare magnitudes there.
        let want: Vec<f32> = if matches!(name, "min" | "max") {
            want.iter()
                .map(|&w| if w == 0.0 { 0.0 } else { w })
                .collect()
        } else {
            want
        };
        let n = pairs.len();
        let (x, y) = (vals(ctx, &av, &[n]), vals(ctx, &bv, &[n]));
        let fold_zero = matches!(name, "min" | "max");
        t.values(
            format!("{name} over all pairs of 0, -0, 1, -1, inf, -inf, NaN"),
            val(&[n], &want),
            move || {
                let r = ctx.eval(&op(x.expr(), y.expr()))?;
                if fold_zero {
                    ctx.eval(&(r.expr() + 0.0)).map(one)
                } else {
                    Ok(one(r))
                }
            },
        );
    }
    // f16: storing beyond the range gives inf (or the largest finite value,
    // which WGSL allows); within it, the rounded value.
    if ctx.profile().shader_f16 {
        let h = |v: &[f32]| {
            let hv: Vec<f16> = v.iter().map(|&x| f16::from_f32(x)).collect();
            ctx.tensor(&hv, [v.len()]).unwrap()
        };
        let x = h(&[1.0, -2.0, 0.5, 60000.0]);
        t.values(
            "f16 * 0.5 stays f16",
            val(&[4], &[0.5, -1.0, 0.25, 30000.0]),
            move || ctx.eval(&(x.expr() * 0.5)).map(one),
        );
        let x = h(&[1.0, 2.0]);
        let y = rnd(ctx, &[2]);
        let yv = y.to_vec_blocking::<f32>().unwrap();
        t.values(
            "f16 + f32 is f32",
            val(&[2], &[1.0 + yv[0], 2.0 + yv[1]]),
            move || {
                let r = ctx.eval(&(x.expr() + &y))?;
                assert_eq!(r.dtype(), DType::F32);
                Ok(one(r))
            },
        );
        let x = h(&[f32::from(f16::MAX), -1.0]);
        t.shapes(
            "f16 overflow on store is not an error",
            vec![vec![2]],
            move || ctx.eval(&(x.expr() * 4.0)).map(one),
        );
    }
    run_table(ctx, t);
}

/// `f(x)` with the limits at the infinities (`-inf` -> 0, `inf` -> inf).
fn limit_at_inf(x: f32, f: impl Fn(f32) -> f32) -> f32 {
    if x == -INF {
        0.0
    } else if x == INF {
        INF
    } else {
        f(x)
    }
}

/// erf in f64 (Abramowitz-Stegun 7.1.26 is too coarse; this is the series /
/// continued fraction pair, accurate to 1e-15).
fn erf(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x.abs() < 2.5 {
        let mut sum = x;
        let mut term = x;
        for n in 1..60 {
            term *= -x * x / n as f64;
            sum += term / (2 * n + 1) as f64;
        }
        sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // erfc continued fraction.
        let z = x.abs();
        let mut f = 0.0;
        for k in (1..80).rev() {
            f = (k as f64 / 2.0) / (z + f);
        }
        let erfc = (-z * z).exp() / std::f64::consts::PI.sqrt() / (z + f);
        (1.0 - erfc).copysign(x)
    }
}

fn broadcast_add(
    a: &[f32],
    ashape: &[usize],
    b: &[f32],
    bshape: &[usize],
    out: &[usize],
) -> Vec<f32> {
    let n: usize = out.iter().product();
    let index = |flat: usize, shape: &[usize]| {
        let mut rem = flat;
        let mut idx = 0;
        let mut stride = 1;
        let off = out.len() - shape.len();
        let mut coords = vec![0; out.len()];
        for d in (0..out.len()).rev() {
            coords[d] = rem % out[d];
            rem /= out[d];
        }
        for d in (0..shape.len()).rev() {
            let c = if shape[d] == 1 { 0 } else { coords[d + off] };
            idx += c * stride;
            stride *= shape[d];
        }
        idx
    };
    (0..n)
        .map(|i| a[index(i, ashape)] + b[index(i, bshape)])
        .collect()
}

/// Host row ops in f64 with IEEE arithmetic (NaN and inf as they fall).
fn host_rows(
    op: wgtile::RowOp,
    x: &[f32],
    n: usize,
    w: Option<&[f32]>,
    b: Option<&[f32]>,
    eps: f64,
) -> Vec<f32> {
    use wgtile::RowOp;
    let mut out = Vec::with_capacity(x.len());
    for row in x.chunks(n.max(1)) {
        let r: Vec<f64> = row.iter().map(|&v| f64::from(v)).collect();
        let nf = r.len() as f64;
        let y: Vec<f64> = match op {
            RowOp::Softmax | RowOp::LogSoftmax => {
                let m = r.iter().copied().fold(f64::NEG_INFINITY, |a, v| {
                    if v.is_nan() || a.is_nan() {
                        f64::NAN
                    } else {
                        a.max(v)
                    }
                });
                let s: f64 = r.iter().map(|v| (v - m).exp()).sum();
                if m == f64::NEG_INFINITY {
                    // Documented: a row of only -inf is fully masked.
                    let fill = if op == RowOp::Softmax {
                        0.0
                    } else {
                        f64::NEG_INFINITY
                    };
                    vec![fill; r.len()]
                } else if op == RowOp::Softmax {
                    r.iter().map(|v| (v - m).exp() / s).collect()
                } else {
                    r.iter().map(|v| (v - m) - s.ln()).collect()
                }
            }
            RowOp::LayerNorm => {
                let mean = r.iter().sum::<f64>() / nf;
                let var = r.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / nf;
                r.iter().map(|v| (v - mean) / (var + eps).sqrt()).collect()
            }
            RowOp::RmsNorm => {
                let ms = r.iter().map(|v| v * v).sum::<f64>() / nf;
                r.iter().map(|v| v / (ms + eps).sqrt()).collect()
            }
            RowOp::L2Normalize => {
                // A NaN norm stays NaN (f64::max would drop it).
                let norm = r.iter().map(|v| v * v).sum::<f64>().sqrt();
                let norm = if norm.is_nan() { norm } else { norm.max(eps) };
                r.iter().map(|v| v / norm).collect()
            }
        };
        for (j, v) in y.into_iter().enumerate() {
            let v = v * w.map_or(1.0, |w| f64::from(w[j])) + b.map_or(0.0, |b| f64::from(b[j]));
            out.push(v as f32);
        }
    }
    out
}

#[test]
fn row_op_arguments() {
    use wgtile::{RowOp, RowOptions};
    let Some(ctx) = common::ctx() else { return };
    let ctx = &ctx;
    let mut t = Table { rows: Vec::new() };
    let ops = [
        RowOp::Softmax,
        RowOp::LogSoftmax,
        RowOp::LayerNorm,
        RowOp::RmsNorm,
        RowOp::L2Normalize,
    ];
    let run = move |op: RowOp,
                    x: &Tensor,
                    w: Option<&Tensor>,
                    b: Option<&Tensor>,
                    eps: f32,
                    streaming: bool|
          -> Result<Vec<Tensor>> {
        let plan = ctx.row_op_plan(op, x, w, b, eps, RowOptions { streaming })?;
        plan.run()?;
        Ok(one(plan.into_output()))
    };
    // Shapes and values, both row layouts, against the host.
    for op in ops {
        for streaming in [false, true] {
            let tag = format!("{op:?}{}", if streaming { " streaming" } else { "" });
            for shape in [
                vec![0usize, 5],
                vec![5, 0],
                vec![0],
                vec![1],
                vec![1, 1],
                vec![3, 7],
                vec![2, 3, 13],
                vec![2, 1031],
            ] {
                let x = rnd(ctx, &shape);
                let xv = x.to_vec_blocking::<f32>().unwrap();
                let n = *shape.last().unwrap();
                let want = host_rows(op, &xv, n, None, None, 1e-5);
                t.close(
                    format!("{tag} {shape:?}"),
                    val(&shape, &want),
                    2e-5,
                    move || run(op, &x, None, None, 1e-5, streaming),
                );
            }
            t.err(format!("{tag} of rank 0"), Kind::Invalid, move || {
                run(op, &rnd(ctx, &[]), None, None, 1e-5, streaming)
            });
            t.err(
                format!("{tag} of a padded tensor"),
                Kind::Invalid,
                move || {
                    run(
                        op,
                        &ctx.tensor_padded(&[1.0f32; 6], [2, 3], 4)?,
                        None,
                        None,
                        1e-5,
                        streaming,
                    )
                },
            );
            // IEEE rows: inf, -inf, NaN, and all-equal rows.
            for row in [
                [INF, 0.0, 1.0],
                [-INF, 0.0, 1.0],
                [NAN, 0.0, 1.0],
                [-INF, -INF, -INF],
                [2.0, 2.0, 2.0],
                [1e30, -1e30, 0.0],
            ] {
                if matches!(op, RowOp::LayerNorm | RowOp::RmsNorm | RowOp::L2Normalize)
                    && row[0] == 1e30
                {
                    continue; // past the documented range of the norms
                }
                let want = host_rows(op, &row, 3, None, None, 1e-5);
                let x = vals(ctx, &row, &[1, 3]);
                t.close(
                    format!("{tag} of {row:?}"),
                    val(&[1, 3], &want),
                    2e-5,
                    move || run(op, &x, None, None, 1e-5, streaming),
                );
            }
        }
        let takes = match op {
            RowOp::Softmax | RowOp::LogSoftmax => (false, false),
            RowOp::LayerNorm => (true, true),
            RowOp::RmsNorm => (true, false),
            RowOp::L2Normalize => (false, false),
        };
        let x = rnd(ctx, &[3, 7]);
        // Affine parameters: refused where the op takes none, checked where it does.
        for (what, w, b) in [
            ("weight [7]", Some(vec![7usize]), None),
            ("bias [7]", None, Some(vec![7usize])),
            ("weight [6]", Some(vec![6]), None),
            ("weight [1, 7]", Some(vec![1, 7]), None),
            ("weight [3, 7]", Some(vec![3, 7]), None),
            ("weight rank 0", Some(vec![]), None),
            ("bias [8]", None, Some(vec![8])),
        ] {
            let given = (w.is_some(), b.is_some());
            let wrong_shape =
                w.as_ref().is_some_and(|s| s != &[7]) || b.as_ref().is_some_and(|s| s != &[7]);
            let kind = if (given.0 && !takes.0) || (given.1 && !takes.1) {
                Kind::Invalid
            } else if wrong_shape {
                Kind::Shape
            } else {
                // Accepted: checked against the host.
                let (wt, bt) = (
                    w.as_ref().map(|s| rnd(ctx, s)),
                    b.as_ref().map(|s| rnd(ctx, s)),
                );
                let (wv, bv) = (
                    wt.as_ref().map(|t| t.to_vec_blocking::<f32>().unwrap()),
                    bt.as_ref().map(|t| t.to_vec_blocking::<f32>().unwrap()),
                );
                let xv = x.to_vec_blocking::<f32>().unwrap();
                let want = host_rows(op, &xv, 7, wv.as_deref(), bv.as_deref(), 1e-5);
                let x = x.clone();
                t.close(
                    format!("{op:?} with {what}"),
                    val(&[3, 7], &want),
                    2e-5,
                    move || run(op, &x, wt.as_ref(), bt.as_ref(), 1e-5, false),
                );
                continue;
            };
            let (wt, bt, x) = (
                w.as_ref().map(|s| rnd(ctx, s)),
                b.as_ref().map(|s| rnd(ctx, s)),
                x.clone(),
            );
            t.err(format!("{op:?} with {what}"), kind, move || {
                run(op, &x, wt.as_ref(), bt.as_ref(), 1e-5, false)
            });
        }
        if takes.0 {
            let (x2, w16) = (x.clone(), rnd16(ctx, &[7]));
            t.err(
                format!("{op:?} with an f16 weight"),
                Kind::DType,
                move || run(op, &x2, Some(&w16), None, 1e-5, false),
            );
            for eps in [-1e-5f32, NAN, INF] {
                let x2 = x.clone();
                t.err(format!("{op:?} with eps {eps}"), Kind::Invalid, move || {
                    run(op, &x2, None, None, eps, false)
                });
            }
            // Zero variance with eps 0: 0 / 0 (PyTorch's NaN).
            let zeros = ctx.zeros([2, 4], DType::F32).unwrap();
            t.values(
                format!("{op:?} of zeros with eps 0"),
                val(&[2, 4], &[NAN; 8]),
                move || run(op, &zeros, None, None, 0.0, false),
            );
        }
    }
    // Over another axis: the axis, and parameters of that axis's length.
    {
        let x = rnd(ctx, &[3, 7]);
        let (x1, x2, x3, x4, x5, x6) = (
            x.clone(),
            x.clone(),
            x.clone(),
            x.clone(),
            x.clone(),
            x.clone(),
        );
        t.err(
            "layer_norm_axis axis 2 of [3, 7]",
            Kind::Invalid,
            move || ctx.layer_norm_axis(&x1, 2, None, None, 1e-5).map(one),
        );
        t.err("l2_normalize_axis of rank 0", Kind::Invalid, move || {
            ctx.l2_normalize_axis(&rnd(ctx, &[]), 0, 1e-12).map(one)
        });
        t.err("rms_norm_axis 0 with weight [7]", Kind::Shape, move || {
            ctx.rms_norm_axis(&x2, 0, Some(&rnd(ctx, &[7])), 1e-5)
                .map(one)
        });
        t.err(
            "layer_norm_axis 0 with bias [3, 1]",
            Kind::Shape,
            move || {
                ctx.layer_norm_axis(&x3, 0, None, Some(&rnd(ctx, &[3, 1])), 1e-5)
                    .map(one)
            },
        );
        t.err(
            "layer_norm_axis 0 with an f16 weight",
            Kind::DType,
            move || {
                ctx.layer_norm_axis(&x4, 0, Some(&rnd16(ctx, &[3])), None, 1e-5)
                    .map(one)
            },
        );
        t.err(
            "rms_norm_axis 0 of bf16 with an f32 weight",
            Kind::DType,
            move || {
                let xb = ctx.cast(&x5, DType::BF16)?;
                ctx.rms_norm_axis(&xb, 0, Some(&rnd(ctx, &[3])), 1e-5)
                    .map(one)
            },
        );
        t.err(
            "l2_normalize_axis 0 with eps -1",
            Kind::Invalid,
            move || ctx.l2_normalize_axis(&x6, 0, -1.0).map(one),
        );
        let x7 = x.clone();
        t.err(
            "row_op_axis_plan of softmax with a weight",
            Kind::Invalid,
            move || {
                let plan =
                    ctx.row_op_axis_plan(RowOp::Softmax, &x7, 0, Some(&rnd(ctx, &[3])), None, 0.0)?;
                Ok(one(plan.into_output()))
            },
        );
        // Values over axis 0: the host rows of the transpose, transposed back.
        let xv = x.to_vec_blocking::<f32>().unwrap();
        let xt: Vec<f32> = (0..21).map(|i| xv[(i % 3) * 7 + i / 3]).collect();
        let wv = rnd(ctx, &[3]).to_vec_blocking::<f32>().unwrap();
        for (op, w) in [
            (RowOp::LayerNorm, Some(&wv[..])),
            (RowOp::RmsNorm, Some(&wv[..])),
            (RowOp::L2Normalize, None),
            (RowOp::Softmax, None),
            (RowOp::LogSoftmax, None),
        ] {
            let b = if op == RowOp::LayerNorm { w } else { None };
            let yt = host_rows(op, &xt, 3, w, b, 1e-5);
            let want: Vec<f32> = (0..21).map(|i| yt[(i % 7) * 3 + i / 7]).collect();
            let (x, wt) = (x.clone(), w.map(|_| rnd(ctx, &[3])));
            t.close(
                format!("{op:?} over axis 0"),
                val(&[3, 7], &want),
                2e-5,
                move || {
                    let bias = if op == RowOp::LayerNorm {
                        wt.as_ref()
                    } else {
                        None
                    };
                    let plan = ctx.row_op_axis_plan(op, &x, 0, wt.as_ref(), bias, 1e-5)?;
                    plan.run()?;
                    Ok(one(plan.into_output()))
                },
            );
        }
        // Zero-sized dimensions: empty results (NumPy), parameters of length 0 too.
        for (shape, axis) in [
            (vec![0usize, 5], 0usize),
            (vec![0, 5], 1),
            (vec![5, 0, 2], 0),
        ] {
            let z = ctx.zeros(&shape, DType::F32).unwrap();
            let w = ctx.zeros([shape[axis]], DType::F32).unwrap();
            let z2 = z.clone();
            t.values(
                format!("layer_norm_axis {axis} of {shape:?}"),
                val(&shape, &[]),
                move || {
                    ctx.layer_norm_axis(&z, axis, Some(&w), Some(&w), 1e-5)
                        .map(one)
                },
            );
            t.values(
                format!("softmax_axis {axis} of {shape:?}"),
                val(&shape, &[]),
                move || ctx.softmax_axis(&z2, axis).map(one),
            );
        }
        // Over axis 0 (the column kernel), the row kernel's line semantics:
        // an all -inf column gives zeros (log: -inf), a NaN or +inf makes
        // its column NaN, -inf entries are masked.
        let special = ctx
            .tensor(
                &[
                    -INF, 1.0, INF, 0.0, -INF, NAN, 0.0, 0.0, -INF, 2.0, 0.0, -INF,
                ],
                [3, 4],
            )
            .unwrap();
        let half = 0.5f32.ln();
        for (log, want) in [
            (
                false,
                [0.0, NAN, NAN, 0.5, 0.0, NAN, NAN, 0.5, 0.0, NAN, NAN, 0.0],
            ),
            (
                true,
                [
                    -INF, NAN, NAN, half, -INF, NAN, NAN, half, -INF, NAN, NAN, -INF,
                ],
            ),
        ] {
            let x = special.clone();
            t.values(
                format!("softmax_axis 0 of special columns (log {log})"),
                val(&[3, 4], &want),
                move || {
                    if log {
                        ctx.log_softmax_axis(&x, 0).map(one)
                    } else {
                        ctx.softmax_axis(&x, 0).map(one)
                    }
                },
            );
        }
        // The norms over axis 0 (their column kernel), the row kernels'
        // line semantics: a NaN column is NaN; an infinity makes a
        // LayerNorm column NaN and an RMS or L2 column 0 at its finite
        // values (x * 0), NaN at the infinity; a constant or zero column
        // normalises to 0 (LayerNorm; NaN with eps = 0: 0 / 0), to
        // x / sqrt(x^2 + eps) (RMS) and x / max(|x| sqrt(n), eps) (L2).
        // Columns: [1, NaN, 2], [inf, 0, 1], [2, 2, 2], [0, 0, 0].
        let norm_special = ctx
            .tensor(
                &[1.0, INF, 2.0, 0.0, NAN, 0.0, 2.0, 0.0, 2.0, 1.0, 2.0, 0.0],
                [3, 4],
            )
            .unwrap();
        let rms2 = 2.0 / (4.0f32 + 1e-5).sqrt();
        let l2c = 1.0 / 3.0f32.sqrt();
        for (op, eps, want) in [
            (
                RowOp::LayerNorm,
                1e-5,
                [NAN, NAN, 0.0, 0.0, NAN, NAN, 0.0, 0.0, NAN, NAN, 0.0, 0.0],
            ),
            (RowOp::LayerNorm, 0.0, [NAN; 12]),
            (
                RowOp::RmsNorm,
                1e-5,
                [
                    NAN, NAN, rms2, 0.0, NAN, 0.0, rms2, 0.0, NAN, 0.0, rms2, 0.0,
                ],
            ),
            (
                RowOp::L2Normalize,
                1e-12,
                [NAN, NAN, l2c, 0.0, NAN, 0.0, l2c, 0.0, NAN, 0.0, l2c, 0.0],
            ),
        ] {
            let x = norm_special.clone();
            t.values(
                format!("{op:?} over axis 0 of special columns (eps {eps})"),
                val(&[3, 4], &want),
                move || {
                    let plan = ctx.row_op_axis_plan(op, &x, 0, None, None, eps)?;
                    plan.run()?;
                    Ok(one(plan.into_output()))
                },
            );
        }
    }
    // The convenience calls and the fused forms check the same things.
    let x = rnd(ctx, &[3, 7]);
    {
        let (x1, x2, x3) = (x.clone(), x.clone(), x.clone());
        t.err("layer_norm weight [6]", Kind::Shape, move || {
            ctx.layer_norm(&x1, Some(&rnd(ctx, &[6])), None, 1e-5)
                .map(one)
        });
        t.err("rms_norm eps -1", Kind::Invalid, move || {
            ctx.rms_norm(&x2, None, -1.0).map(one)
        });
        t.err(
            "softmax_of with an epilogue of [6]",
            Kind::Shape,
            move || {
                ctx.softmax_of(&x3.expr(), Some(&(Expr::acc() * &rnd(ctx, &[6]))))
                    .map(one)
            },
        );
        let x4 = x.clone();
        t.err(
            "softmax_of of shapes that do not broadcast",
            Kind::Shape,
            move || {
                ctx.softmax_of(&(x4.expr() + &rnd(ctx, &[3])), None)
                    .map(one)
            },
        );
        let x5 = x.clone();
        t.err("layer_norm_of bias [8]", Kind::Shape, move || {
            ctx.layer_norm_of(&x5.expr(), None, Some(&rnd(ctx, &[8])), 1e-5, None)
                .map(one)
        });
        t.err("rms_norm_of a symbolic input", Kind::Invalid, move || {
            ctx.rms_norm_of(&Expr::input(0, [3, 7], DType::F32), None, 1e-5, None)
                .map(one)
        });
        t.err(
            "log_softmax_of a scalar expression",
            Kind::Invalid,
            move || {
                ctx.log_softmax_of(&(Expr::scalar(1.0) + 1.0), None)
                    .map(one)
            },
        );
        let x6 = x.clone();
        let xv: Vec<f32> = x
            .to_vec_blocking::<f32>()
            .unwrap()
            .iter()
            .map(|v| v * 2.0)
            .collect();
        let want = host_rows(RowOp::LogSoftmax, &xv, 7, None, None, 0.0);
        t.close("log_softmax_of 2x", val(&[3, 7], &want), 2e-5, move || {
            ctx.log_softmax_of(&(x6.expr() * 2.0), None).map(one)
        });
        t.values("softmax_of over [0, 4]", val(&[0, 4], &[]), move || {
            ctx.softmax_of(&ctx.zeros([0, 4], DType::F32)?.expr().exp(), None)
                .map(one)
        });
    }
    run_table(ctx, t);
}

#[test]
fn reduction_arguments() {
    let Some(ctx) = common::ctx() else { return };
    let ctx = &ctx;
    let mut t = Table { rows: Vec::new() };
    let host = |op: Reduction, v: &[f32]| -> Option<f32> {
        let d: Vec<f64> = v.iter().map(|&x| f64::from(x)).collect();
        match op {
            Reduction::Sum => Some(d.iter().sum::<f64>() as f32),
            Reduction::Mean => Some((d.iter().sum::<f64>() / d.len() as f64) as f32),
            Reduction::Max => (!d.is_empty()).then(|| {
                d.iter().copied().fold(f64::NEG_INFINITY, |a, x| {
                    if a.is_nan() || x.is_nan() {
                        f64::NAN
                    } else {
                        a.max(x)
                    }
                }) as f32
            }),
        }
    };
    for op in [Reduction::Sum, Reduction::Mean, Reduction::Max] {
        for shape in [
            vec![],
            vec![0usize],
            vec![1],
            vec![3, 0],
            vec![0, 3],
            vec![2, 0, 3],
            vec![5],
            vec![3, 7],
            vec![2, 3, 10007],
            vec![1, 65537],
        ] {
            let x = rnd(ctx, &shape);
            let xv = x.to_vec_blocking::<f32>().unwrap();
            // Axis 0 as columns (the host side of Axis::Dim(0)).
            let inner: usize = shape.iter().skip(1).product();
            let cols: Vec<Vec<f32>> = (0..inner)
                .map(|c| {
                    (0..shape.first().copied().unwrap_or(0))
                        .map(|i| xv[i * inner + c])
                        .collect()
                })
                .collect();
            for axis in [Axis::Last, Axis::All, Axis::Dim(0)] {
                let name = format!("{op:?} {axis:?} of {shape:?}");
                let (out_shape, groups): (Vec<usize>, Vec<&[f32]>) = match axis {
                    Axis::All => (vec![], vec![&xv[..]]),
                    Axis::Dim(_) if shape.is_empty() => {
                        let x = x.clone();
                        t.err(name, Kind::Invalid, move || {
                            ctx.reduce(&x, op, axis).map(one)
                        });
                        continue;
                    }
                    Axis::Dim(_) => (shape[1..].to_vec(), cols.iter().map(|c| &c[..]).collect()),
                    Axis::Last if shape.is_empty() => {
                        // NumPy: axis -1 of a scalar is out of bounds.
                        let x = x.clone();
                        t.err(name, Kind::Invalid, move || {
                            ctx.reduce(&x, op, axis).map(one)
                        });
                        continue;
                    }
                    Axis::Last => {
                        let n = *shape.last().unwrap();
                        let rows = shape[..shape.len() - 1].iter().product::<usize>();
                        (
                            shape[..shape.len() - 1].to_vec(),
                            (0..rows).map(|r| &xv[r * n..(r + 1) * n]).collect(),
                        )
                    }
                };
                let want: Option<Vec<f32>> = groups.iter().map(|g| host(op, g)).collect();
                let x = x.clone();
                match want {
                    // The max of an empty set (NumPy's rule, documented).
                    None => t.err(name, Kind::Invalid, move || {
                        ctx.reduce(&x, op, axis).map(one)
                    }),
                    Some(w) => t.close(name, val(&out_shape, &w), 1e-5, move || {
                        ctx.reduce(&x, op, axis).map(one)
                    }),
                }
            }
        }
        for row in [
            [INF, -INF, 1.0],
            [NAN, 1.0, 2.0],
            [-INF, -INF, -INF],
            [INF, 1.0, 2.0],
            [3e38, 3e38, 3e38],
        ] {
            // f32 sums overflow as NumPy's do (the documented range).
            let want = if row[0] == 3e38 && op != Reduction::Max {
                INF
            } else {
                host(op, &row).unwrap()
            };
            let x = vals(ctx, &row, &[1, 3]);
            t.values(
                format!("{op:?} of {row:?}"),
                val(&[1], &[want]),
                move || ctx.reduce(&x, op, Axis::Last).map(one),
            );
        }
    }
    let x = rnd(ctx, &[3, 7]);
    {
        let x1 = x.clone();
        t.err(
            "sum_of of shapes that do not broadcast",
            Kind::Shape,
            move || {
                ctx.sum_of(&(x1.expr() + &rnd(ctx, &[3])), Axis::Last)
                    .map(one)
            },
        );
        t.err("max_of a symbolic input", Kind::Invalid, || {
            ctx.max_of(&Expr::input(0, [4], DType::F32), Axis::All)
                .map(one)
        });
        t.err("mean_of scalars only", Kind::Invalid, || {
            ctx.mean_of(&Expr::scalar(2.0), Axis::All).map(one)
        });
        t.err("sum of a padded tensor", Kind::Invalid, || {
            ctx.sum(&ctx.tensor_padded(&[1.0f32; 6], [2, 3], 4)?, Axis::All)
                .map(one)
        });
        let xv: Vec<f32> = x.to_vec_blocking::<f32>().unwrap();
        let want: Vec<f32> = xv
            .chunks(7)
            .map(|r| r.iter().map(|&v| f64::from(v).exp()).sum::<f64>() as f32)
            .collect();
        let x2 = x.clone();
        t.close("sum_of exp", val(&[3], &want), 1e-5, move || {
            ctx.sum_of(&x2.expr().exp(), Axis::Last).map(one)
        });
    }
    if ctx.profile().shader_f16 {
        let ones: Vec<f16> = vec![f16::from_f32(100.0); 2000];
        let x = ctx.tensor(&ones, [2000]).unwrap();
        t.values(
            "f16 sum past the f16 range is inf",
            val(&[], &[INF]),
            move || ctx.sum(&x, Axis::All).map(one),
        );
        let x = ctx.tensor(&ones, [2000]).unwrap();
        t.values(
            "f16 mean past the f16 range of the sum",
            val(&[], &[100.0]),
            move || ctx.mean(&x, Axis::All).map(one),
        );
    }
    run_table(ctx, t);
}

/// Host attention in f64 over `[B, H, S, D]` data (GQA by `hq / hkv`), with
/// optional top-left causal masking; rows that see no key give zeros and
/// lse -inf (wgtile's documented rule).
#[allow(clippy::too_many_arguments)]
fn host_attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    (b, hq, hkv): (usize, usize, usize),
    (sq, sk): (usize, usize),
    (d, dv): (usize, usize),
    scale: f64,
    causal: bool,
) -> (Vec<f32>, Vec<f32>) {
    let mut o = vec![0.0f32; b * hq * sq * dv];
    let mut lse = vec![0.0f32; b * hq * sq];
    for z in 0..b {
        for h in 0..hq {
            let kh = h / (hq / hkv);
            for i in 0..sq {
                let qi = &q[((z * hq + h) * sq + i) * d..][..d];
                let s: Vec<f64> = (0..sk)
                    .map(|j| {
                        if causal && j > i {
                            return f64::NEG_INFINITY;
                        }
                        let kj = &k[((z * hkv + kh) * sk + j) * d..][..d];
                        scale
                            * (0..d)
                                .map(|t| f64::from(qi[t]) * f64::from(kj[t]))
                                .sum::<f64>()
                    })
                    .collect();
                let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let row = (z * hq + h) * sq + i;
                if m == f64::NEG_INFINITY {
                    lse[row] = f32::NEG_INFINITY;
                    continue;
                }
                let p: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
                let l: f64 = p.iter().sum();
                lse[row] = (m + l.ln()) as f32;
                for t in 0..dv {
                    let acc: f64 = (0..sk)
                        .map(|j| p[j] * f64::from(v[((z * hkv + kh) * sk + j) * dv + t]))
                        .sum();
                    o[row * dv + t] = (acc / l) as f32;
                }
            }
        }
    }
    (o, lse)
}

#[test]
fn attention_arguments() {
    let Some(ctx) = common::ctx() else { return };
    let ctx = &ctx;
    let mut t = Table { rows: Vec::new() };
    let opts = AttentionOptions::new;
    let fwd = move |q: &Tensor, k: &Tensor, v: &Tensor, o: &AttentionOptions| {
        ctx.attention(q, k, v, o).map(|r| one(r.o))
    };
    // Shapes of q, k and v (heads-first: [B, H, S, D]), by position.
    for (what, qs, ks, vs, kind) in [
        (
            "q rank 3",
            vec![2usize, 5, 8],
            vec![1usize, 2, 7, 8],
            vec![1usize, 2, 7, 8],
            Kind::Invalid,
        ),
        (
            "q rank 0",
            vec![],
            vec![1, 2, 7, 8],
            vec![1, 2, 7, 8],
            Kind::Invalid,
        ),
        (
            "k rank 2",
            vec![1, 2, 5, 8],
            vec![7, 8],
            vec![1, 2, 7, 8],
            Kind::Invalid,
        ),
        (
            "v rank 3",
            vec![1, 2, 5, 8],
            vec![1, 2, 7, 8],
            vec![2, 7, 8],
            Kind::Invalid,
        ),
        (
            "batch 2 vs 1",
            vec![2, 2, 5, 8],
            vec![1, 2, 7, 8],
            vec![1, 2, 7, 8],
            Kind::Shape,
        ),
        (
            "v batch 2",
            vec![1, 2, 5, 8],
            vec![1, 2, 7, 8],
            vec![2, 2, 7, 8],
            Kind::Shape,
        ),
        (
            "Hq 3 over Hkv 2",
            vec![1, 3, 5, 8],
            vec![1, 2, 7, 8],
            vec![1, 2, 7, 8],
            Kind::Shape,
        ),
        (
            "Hq 2 over Hkv 4",
            vec![1, 2, 5, 8],
            vec![1, 4, 7, 8],
            vec![1, 4, 7, 8],
            Kind::Shape,
        ),
        (
            "v heads 1 vs k heads 2",
            vec![1, 2, 5, 8],
            vec![1, 2, 7, 8],
            vec![1, 1, 7, 8],
            Kind::Shape,
        ),
        (
            "D 8 vs 6",
            vec![1, 2, 5, 8],
            vec![1, 2, 7, 6],
            vec![1, 2, 7, 8],
            Kind::Shape,
        ),
        (
            "v Sk 6 vs 7",
            vec![1, 2, 5, 8],
            vec![1, 2, 7, 8],
            vec![1, 2, 6, 8],
            Kind::Shape,
        ),
    ] {
        let (q, k, v) = (rnd(ctx, &qs), rnd(ctx, &ks), rnd(ctx, &vs));
        t.err(format!("attention {what}"), kind, move || {
            fwd(&q, &k, &v, &opts())
        });
        let (q, k, v) = (rnd(ctx, &qs), rnd(ctx, &ks), rnd(ctx, &vs));
        t.err(format!("attention_naive {what}"), kind, move || {
            ctx.attention_naive(&q, &k, &v, &opts()).map(|r| one(r.o))
        });
    }
    for (dq, dk, dv) in [
        (DType::F16, DType::F32, DType::F32),
        (DType::F32, DType::F16, DType::F32),
        (DType::F32, DType::F32, DType::F16),
    ] {
        let mk = |dt: DType, s: &[usize]| {
            if dt == DType::F32 {
                rnd(ctx, s)
            } else {
                rnd16(ctx, s)
            }
        };
        let (q, k, v) = (
            mk(dq, &[1, 2, 5, 8]),
            mk(dk, &[1, 2, 7, 8]),
            mk(dv, &[1, 2, 7, 8]),
        );
        t.err(
            format!("attention dtypes {dq:?} {dk:?} {dv:?}"),
            Kind::DType,
            move || fwd(&q, &k, &v, &opts()),
        );
    }
    // Values against the host: MHA, GQA, MQA, Dv != D, causal, odd sizes,
    // and the zero-sized and no-key cases.
    for (b, hq, hkv, sq, sk, d, dv, causal) in [
        (
            1usize, 2usize, 2usize, 5usize, 7usize, 8usize, 8usize, false,
        ),
        (2, 4, 2, 3, 11, 8, 4, false),
        (1, 3, 1, 13, 13, 4, 12, true),
        (1, 2, 2, 7, 1, 8, 8, false),
        (1, 1, 1, 1, 31, 16, 16, true),
        (1, 2, 2, 0, 7, 8, 8, false),
        (0, 2, 2, 5, 7, 8, 8, false),
        (1, 2, 2, 5, 0, 8, 8, false),
        (1, 2, 2, 5, 7, 8, 0, false),
    ] {
        let (q, k, v) = (
            rnd(ctx, &[b, hq, sq, d]),
            rnd(ctx, &[b, hkv, sk, d]),
            rnd(ctx, &[b, hkv, sk, dv]),
        );
        let (qv, kv, vv) = (
            q.to_vec_blocking::<f32>().unwrap(),
            k.to_vec_blocking::<f32>().unwrap(),
            v.to_vec_blocking::<f32>().unwrap(),
        );
        let scale = 1.0 / (d as f64).sqrt();
        let (o, lse) = host_attention(
            &qv,
            &kv,
            &vv,
            (b, hq, hkv),
            (sq, sk),
            (d, dv),
            scale,
            causal,
        );
        let want = vec![(vec![b, hq, sq, dv], o), (vec![b, hq, sq], lse)];
        let mut o2 = opts().with_lse();
        if causal {
            o2 = o2.causal(DiagonalAlignment::TopLeft);
        }
        for kernel in [
            AttentionKernel::Auto,
            AttentionKernel::Flash,
            AttentionKernel::Naive,
        ] {
            let (q, k, v, o2) = (q.clone(), k.clone(), v.clone(), o2.clone().kernel(kernel));
            t.close(
                format!(
                    "attention {kernel:?} B{b} Hq{hq} Hkv{hkv} Sq{sq} Sk{sk} D{d} Dv{dv}{}",
                    if causal { " causal" } else { "" }
                ),
                want.clone(),
                2e-5,
                move || {
                    let r = ctx.attention(&q, &k, &v, &o2)?;
                    Ok(vec![r.o, r.lse.unwrap()])
                },
            );
        }
    }
    // Masks: shape, dtype, and a mask that hides every key.
    let (q, k, v) = (
        rnd(ctx, &[1, 2, 5, 8]),
        rnd(ctx, &[1, 2, 7, 8]),
        rnd(ctx, &[1, 2, 7, 8]),
    );
    for (what, shape, kind) in [
        ("[5, 6]", vec![5usize, 6], Some(Kind::Shape)),
        ("[7, 5]", vec![7, 5], Some(Kind::Shape)),
        ("[2, 5, 7]", vec![2, 5, 7], Some(Kind::Shape)),
        ("[1, 3, 5, 7]", vec![1, 3, 5, 7], Some(Kind::Shape)),
        ("rank 0", vec![], Some(Kind::Shape)),
        ("[7]", vec![7], Some(Kind::Shape)),
        ("[5, 7]", vec![5, 7], None),
        ("[1, 5, 7]", vec![1, 5, 7], None),
        ("[1, 2, 5, 7]", vec![1, 2, 5, 7], None),
        ("[1, 1, 1, 7]", vec![1, 1, 1, 7], None),
        ("[1, 2, 5, 1]", vec![1, 2, 5, 1], None),
    ] {
        for boolean in [false, true] {
            let m = rnd(ctx, &shape);
            let o = if boolean {
                opts().bool_mask(&m)
            } else {
                opts().additive_mask(&m)
            };
            let (q, k, v) = (q.clone(), k.clone(), v.clone());
            let name = format!(
                "attention {} mask {what}",
                if boolean { "bool" } else { "additive" }
            );
            match kind {
                Some(kind) => t.err(name, kind, move || fwd(&q, &k, &v, &o)),
                None => t.shapes(name, vec![vec![1, 2, 5, 8]], move || fwd(&q, &k, &v, &o)),
            }
        }
    }
    {
        let (q1, k1, v1) = (q.clone(), k.clone(), v.clone());
        let m16 = rnd16(ctx, &[5, 7]);
        t.err("attention mask f16 on f32", Kind::DType, move || {
            fwd(&q1, &k1, &v1, &opts().additive_mask(&m16))
        });
        let (q1, k1, v1) = (q.clone(), k.clone(), v.clone());
        let hidden = ctx.zeros([5, 7], DType::F32).unwrap();
        t.values(
            "attention bool mask hiding every key",
            vec![
                (vec![1, 2, 5, 8], vec![0.0; 80]),
                (vec![1, 2, 5], vec![-INF; 10]),
            ],
            move || {
                let r = ctx.attention(&q1, &k1, &v1, &opts().bool_mask(&hidden).with_lse())?;
                Ok(vec![r.o, r.lse.unwrap()])
            },
        );
        let (q1, k1, v1) = (q.clone(), k.clone(), v.clone());
        let minus_inf = ctx.full([5, 7], -INF, DType::F32).unwrap();
        t.values(
            "attention additive mask of -inf",
            val(&[1, 2, 5, 8], &[0.0; 80]),
            move || fwd(&q1, &k1, &v1, &opts().additive_mask(&minus_inf)),
        );
    }
    // Scalar options.
    for (what, o, kind) in [
        ("scale NaN", opts().scale(NAN), Kind::Invalid),
        ("scale inf", opts().scale(INF), Kind::Invalid),
        ("softcap 0", opts().softcap(0.0), Kind::Invalid),
        ("softcap -1", opts().softcap(-1.0), Kind::Invalid),
        ("softcap NaN", opts().softcap(NAN), Kind::Invalid),
        (
            "key_lengths of 2 for batch 1",
            opts().key_lengths(&[3, 4]),
            Kind::Shape,
        ),
        (
            "key_lengths past Sk",
            opts().key_lengths(&[8]),
            Kind::Invalid,
        ),
        ("kv_splits 0", opts().kv_splits(0), Kind::Invalid),
    ] {
        let (q, k, v) = (q.clone(), k.clone(), v.clone());
        t.err(format!("attention {what}"), kind, move || {
            fwd(&q, &k, &v, &o)
        });
    }
    {
        // Scale 0: every key weighs the same, O is the mean of V's rows.
        let vv = v.to_vec_blocking::<f32>().unwrap();
        let mut want = Vec::new();
        for h in 0..2 {
            let mean: Vec<f32> = (0..8)
                .map(|t| {
                    (0..7)
                        .map(|j| f64::from(vv[(h * 7 + j) * 8 + t]))
                        .sum::<f64>() as f32
                        / 7.0
                })
                .collect();
            for _ in 0..5 {
                want.extend(&mean);
            }
        }
        let (q1, k1, v1) = (q.clone(), k.clone(), v.clone());
        t.close(
            "attention scale 0 averages V",
            val(&[1, 2, 5, 8], &want),
            2e-6,
            move || fwd(&q1, &k1, &v1, &opts().scale(0.0)),
        );
        let (q1, k1, v1) = (q.clone(), k.clone(), v.clone());
        t.values(
            "attention key_lengths 0 sees no key",
            val(&[1, 2, 5, 8], &[0.0; 80]),
            move || fwd(&q1, &k1, &v1, &opts().key_lengths(&[0])),
        );
        // A NaN in one query row makes exactly that row NaN.
        let mut qv = q.to_vec_blocking::<f32>().unwrap();
        qv[3] = NAN;
        let qn = vals(ctx, &qv, &[1, 2, 5, 8]);
        let (kv, vv2) = (k.to_vec_blocking::<f32>().unwrap(), vv.clone());
        let (mut o, _) = host_attention(
            &qv,
            &kv,
            &vv2,
            (1, 2, 2),
            (5, 7),
            (8, 8),
            1.0 / 8f64.sqrt(),
            false,
        );
        o[..8].fill(NAN);
        let (k1, v1) = (k.clone(), v.clone());
        t.close(
            "attention NaN in one query row",
            val(&[1, 2, 5, 8], &o),
            2e-5,
            move || fwd(&qn, &k1, &v1, &opts()),
        );
    }
    // The packed layout [B, S, H * D].
    for (what, qs, ks, heads, kind) in [
        (
            "q width 15 over 2 heads",
            vec![1usize, 5, 15],
            vec![1usize, 7, 16],
            (2usize, 2usize),
            Some(Kind::Shape),
        ),
        (
            "k head dim 6 vs 8",
            vec![1, 5, 16],
            vec![1, 7, 12],
            (2, 2),
            Some(Kind::Shape),
        ),
        (
            "q rank 4",
            vec![1, 2, 5, 8],
            vec![1, 7, 16],
            (2, 2),
            Some(Kind::Invalid),
        ),
        (
            "q heads 0",
            vec![1, 5, 16],
            vec![1, 7, 16],
            (0, 2),
            Some(Kind::Invalid),
        ),
        (
            "kv heads 0",
            vec![1, 5, 16],
            vec![1, 7, 16],
            (2, 0),
            Some(Kind::Invalid),
        ),
        (
            "3 q heads over 2",
            vec![1, 5, 24],
            vec![1, 7, 16],
            (3, 2),
            Some(Kind::Shape),
        ),
        ("GQA 4 over 2", vec![1, 5, 32], vec![1, 7, 16], (4, 2), None),
    ] {
        let (q, k, v) = (rnd(ctx, &qs), rnd(ctx, &ks), rnd(ctx, &ks));
        let o = opts().packed(heads.0, heads.1);
        let name = format!("attention packed {what}");
        match kind {
            Some(kind) => t.err(name, kind, move || fwd(&q, &k, &v, &o)),
            None => t.shapes(name, vec![vec![1, 5, 32]], move || fwd(&q, &k, &v, &o)),
        }
    }
    // Forced kernels and tiles.
    let (q6, k6, v6) = (
        rnd(ctx, &[1, 2, 1, 6]),
        rnd(ctx, &[1, 2, 7, 6]),
        rnd(ctx, &[1, 2, 7, 6]),
    );
    {
        let (a, b, c) = (q6.clone(), k6.clone(), v6.clone());
        t.err(
            "attention forced decode with D 6",
            Kind::Invalid,
            move || fwd(&a, &b, &c, &opts().kernel(AttentionKernel::Decode)),
        );
    }
    if !ctx.profile().cooperative_matrix {
        for kernel in [AttentionKernel::FlashCoop, AttentionKernel::DecodeCoop] {
            let (q1, k1, v1) = (
                rnd16(ctx, &[1, 2, 16, 16]),
                rnd16(ctx, &[1, 2, 16, 16]),
                rnd16(ctx, &[1, 2, 16, 16]),
            );
            t.err(
                format!("attention forced {kernel:?} without tensor cores"),
                Kind::Unsupported("COOPERATIVE_MATRIX"),
                move || fwd(&q1, &k1, &v1, &opts().kernel(kernel)),
            );
        }
    }
    let flash = FlashTiles {
        br: 16,
        tr: 2,
        nc: 16,
        td: 4,
        dk: 8,
        vk: 8,
    };
    for field in 0..6 {
        let mut f = [flash.br, flash.tr, flash.nc, flash.td, flash.dk, flash.vk];
        f[field] = 0;
        let tiles = FlashTiles {
            br: f[0],
            tr: f[1],
            nc: f[2],
            td: f[3],
            dk: f[4],
            vk: f[5],
        };
        let (q1, k1, v1) = (q.clone(), k.clone(), v.clone());
        t.err(
            format!("attention flash tiles {tiles:?}"),
            Kind::Invalid,
            move || fwd(&q1, &k1, &v1, &opts().tiles(tiles)),
        );
    }
    let decode = DecodeTiles {
        threads: 64,
        lk: 4,
        prefetch_v: false,
        per_unit: 2,
    };
    for (what, tiles) in [
        (
            "threads 0",
            DecodeTiles {
                threads: 0,
                ..decode
            },
        ),
        (
            "threads 48",
            DecodeTiles {
                threads: 48,
                ..decode
            },
        ),
        ("lk 0", DecodeTiles { lk: 0, ..decode }),
        ("lk 3", DecodeTiles { lk: 3, ..decode }),
        ("lk 128", DecodeTiles { lk: 128, ..decode }),
        (
            "per_unit 0",
            DecodeTiles {
                per_unit: 0,
                ..decode
            },
        ),
    ] {
        let (q1, k1, v1) = (rnd(ctx, &[1, 2, 1, 8]), k.clone(), v.clone());
        t.err(
            format!("attention decode tiles {what}"),
            Kind::Invalid,
            move || fwd(&q1, &k1, &v1, &opts().decode_tiles(tiles)),
        );
    }
    // Malformed tensor-core settings are named before any feature check.
    {
        use wgtile::{BackwardCoopTiles, FlashCoopTiles};
        let coop = FlashCoopTiles {
            subgroups: 4,
            rf: 1,
            bc: 64,
        };
        let mut o_rf = opts();
        o_rf.decode_coop_rf = Some(3);
        let mut o_bwd = opts();
        o_bwd.backward_coop_tiles = Some(BackwardCoopTiles {
            subgroups: 4,
            block: 0,
        });
        for (what, o) in [
            (
                "coop tiles subgroups 0",
                opts().coop_tiles(FlashCoopTiles {
                    subgroups: 0,
                    ..coop
                }),
            ),
            (
                "coop tiles rf 3",
                opts().coop_tiles(FlashCoopTiles { rf: 3, ..coop }),
            ),
            (
                "coop tiles bc 8",
                opts().coop_tiles(FlashCoopTiles { bc: 8, ..coop }),
            ),
            ("decode_coop_rf 3", o_rf),
            ("backward coop block 0", o_bwd),
        ] {
            let (q1, k1, v1) = (
                rnd16(ctx, &[1, 2, 16, 16]),
                rnd16(ctx, &[1, 2, 16, 16]),
                rnd16(ctx, &[1, 2, 16, 16]),
            );
            t.err(format!("attention {what}"), Kind::Invalid, move || {
                fwd(&q1, &k1, &v1, &o)
            });
        }
    }
    // The backward pass: each tensor's shape and dtype.
    let r = ctx.attention(&q, &k, &v, &opts().with_lse()).unwrap();
    let (o, lse) = (r.o, r.lse.unwrap());
    let bwd = move |q: &Tensor,
                    k: &Tensor,
                    v: &Tensor,
                    o: &Tensor,
                    d_o: &Tensor,
                    lse: &Tensor,
                    opt: &AttentionOptions| {
        ctx.attention_backward(q, k, v, o, d_o, lse, opt)
            .map(|g| vec![g.dq, g.dk, g.dv])
    };
    for (what, which, shape) in [
        ("o [1, 2, 4, 8]", 0usize, vec![1usize, 2, 4, 8]),
        ("o [1, 2, 5, 7]", 0, vec![1, 2, 5, 7]),
        ("d_o [1, 2, 5, 7]", 1, vec![1, 2, 5, 7]),
        ("d_o [2, 2, 5, 8]", 1, vec![2, 2, 5, 8]),
        ("lse [1, 2, 4]", 2, vec![1, 2, 4]),
        ("lse [1, 2, 5, 1]", 2, vec![1, 2, 5, 1]),
        ("lse [2, 5]", 2, vec![2, 5]),
    ] {
        let (q1, k1, v1, o1, lse1) = (q.clone(), k.clone(), v.clone(), o.clone(), lse.clone());
        let bad = rnd(ctx, &shape);
        t.err(
            format!("attention_backward {what}"),
            Kind::Shape,
            move || match which {
                0 => bwd(&q1, &k1, &v1, &bad, &o1, &lse1, &opts()),
                1 => bwd(&q1, &k1, &v1, &o1, &bad, &lse1, &opts()),
                _ => bwd(&q1, &k1, &v1, &o1, &o1, &bad, &opts()),
            },
        );
    }
    {
        let (q1, k1, v1, o1, lse1) = (q.clone(), k.clone(), v.clone(), o.clone(), lse.clone());
        let d16 = rnd16(ctx, &[1, 2, 5, 8]);
        t.err("attention_backward d_o f16", Kind::DType, move || {
            bwd(&q1, &k1, &v1, &o1, &d16, &lse1, &opts())
        });
        let (q1, k1, v1, o1) = (q.clone(), k.clone(), v.clone(), o.clone());
        let l16 = rnd16(ctx, &[1, 2, 5]);
        t.err("attention_backward lse f16", Kind::DType, move || {
            bwd(&q1, &k1, &v1, &o1, &o1, &l16, &opts())
        });
        let (q1, v1, o1, lse1) = (q.clone(), v.clone(), o.clone(), lse.clone());
        let k5 = rnd(ctx, &[1, 2, 7, 6]);
        t.err("attention_backward k D 6", Kind::Shape, move || {
            bwd(&q1, &k5, &v1, &o1, &o1, &lse1, &opts())
        });
        let (q1, k1, v1, o1, lse1) = (q.clone(), k.clone(), v.clone(), o.clone(), lse.clone());
        let zero = BackwardTiles {
            br: 0,
            nc: 0,
            td: 0,
            dk: 0,
            vk: 0,
        };
        t.err("attention_backward zero tiles", Kind::Invalid, move || {
            let mut o = opts();
            o.backward_tiles = Some(zero);
            bwd(&q1, &k1, &v1, &o1, &o1, &lse1, &o)
        });
    }
    // Backward of zero-sized problems: empty gradients, or zeros for the
    // side that has elements.
    for (sq, sk) in [(0usize, 7usize), (5, 0)] {
        let (q0, k0, v0) = (
            rnd(ctx, &[1, 2, sq, 8]),
            rnd(ctx, &[1, 2, sk, 8]),
            rnd(ctx, &[1, 2, sk, 8]),
        );
        let want = vec![
            (vec![1, 2, sq, 8], vec![0.0; 2 * sq * 8]),
            (vec![1, 2, sk, 8], vec![0.0; 2 * sk * 8]),
            (vec![1, 2, sk, 8], vec![0.0; 2 * sk * 8]),
        ];
        t.values(
            format!("attention_backward Sq {sq} Sk {sk}"),
            want,
            move || {
                let r = ctx.attention(&q0, &k0, &v0, &opts().with_lse())?;
                let d_o = ctx.full(r.o.shape(), 1.0, DType::F32)?;
                bwd(&q0, &k0, &v0, &r.o, &d_o, r.lse.as_ref().unwrap(), &opts())
            },
        );
    }
    // Raw scores (ONNX mode 0): the naive path only; zero-sized problems give
    // empty [B, Hq, Sq, Sk] matrices, and o zeros where Sk is 0 (NumPy).
    {
        let (q, k) = (rnd(ctx, &[1, 2, 5, 8]), rnd(ctx, &[1, 2, 7, 8]));
        for kernel in [AttentionKernel::Flash, AttentionKernel::FlashSplit] {
            let (q, k) = (q.clone(), k.clone());
            t.err(
                format!("attention raw scores with {kernel:?}"),
                Kind::Invalid,
                move || fwd(&q, &k, &k, &opts().with_raw_scores().kernel(kernel)),
            );
        }
        for (sq, sk) in [(0usize, 7usize), (5, 0)] {
            let (q0, k0) = (rnd(ctx, &[1, 2, sq, 8]), rnd(ctx, &[1, 2, sk, 8]));
            t.values(
                format!("attention raw scores Sq {sq} Sk {sk}"),
                vec![
                    (vec![1, 2, sq, 8], vec![0.0; 2 * sq * 8]),
                    (vec![1, 2, sq, sk], vec![]),
                ],
                move || {
                    let r = ctx.attention(&q0, &k0, &k0, &opts().with_raw_scores())?;
                    Ok(vec![r.o, r.raw_scores.expect("asked for")])
                },
            );
        }
    }
    run_table(ctx, t);
}

#[test]
fn kv_cache_arguments() {
    let Some(ctx) = common::ctx() else { return };
    let ctx = &ctx;
    let mut t = Table { rows: Vec::new() };
    let cache = move || KvCache::new(ctx, 1, 2, 8, 8, 4, DType::F32);
    for (what, k, v, kind) in [
        (
            "k D 6",
            vec![1usize, 2, 1, 6],
            vec![1usize, 2, 1, 8],
            Kind::Shape,
        ),
        ("v Dv 6", vec![1, 2, 1, 8], vec![1, 2, 1, 6], Kind::Shape),
        ("k heads 3", vec![1, 3, 1, 8], vec![1, 3, 1, 8], Kind::Shape),
        ("batch 2", vec![2, 2, 1, 8], vec![2, 2, 1, 8], Kind::Shape),
        (
            "k 2 rows, v 1",
            vec![1, 2, 2, 8],
            vec![1, 2, 1, 8],
            Kind::Shape,
        ),
        ("k rank 3", vec![2, 1, 8], vec![1, 2, 1, 8], Kind::Shape),
    ] {
        t.err(format!("KvCache::append {what}"), kind, move || {
            let mut c = cache()?;
            let r = c.append(&rnd(ctx, &k), &rnd(ctx, &v));
            assert_eq!(c.len(), 0, "a refused append leaves the cache as it was");
            r.map(|_| vec![])
        });
    }
    t.err(
        "KvCache::append f16 to an f32 cache",
        Kind::DType,
        move || {
            let mut c = cache()?;
            c.append(&rnd16(ctx, &[1, 2, 1, 8]), &rnd16(ctx, &[1, 2, 1, 8]))
                .map(|_| vec![])
        },
    );
    t.err("KvCache f16 with odd head dim", Kind::Invalid, move || {
        KvCache::new(ctx, 1, 2, 7, 8, 4, DType::F16).map(|_| vec![])
    });
    t.err(
        "KvCache over the binding limit",
        Kind::Limit(ctx.profile().max_tensor_bytes().1),
        move || KvCache::new(ctx, 1, 64, 128, 128, 1 << 22, DType::F32).map(|_| vec![]),
    );
    t.values(
        "attention_cached on an empty cache sees no key",
        val(&[1, 2, 3, 8], &[0.0; 48]),
        move || {
            let c = cache()?;
            ctx.attention_cached(&rnd(ctx, &[1, 2, 3, 8]), &c, &AttentionOptions::new())
                .map(|r| one(r.o))
        },
    );
    for (what, qs, kind) in [
        ("q heads 3", vec![1usize, 3, 1, 8], Kind::Shape),
        ("q D 6", vec![1, 2, 1, 6], Kind::Shape),
        ("q batch 2", vec![2, 2, 1, 8], Kind::Shape),
    ] {
        t.err(format!("attention_cached {what}"), kind, move || {
            let mut c = cache()?;
            c.append(&rnd(ctx, &[1, 2, 3, 8]), &rnd(ctx, &[1, 2, 3, 8]))?;
            ctx.attention_cached(&rnd(ctx, &qs), &c, &AttentionOptions::new())
                .map(|r| one(r.o))
        });
    }
    // Appends past the initial capacity grow the cache; the keys stay in order.
    t.close(
        "KvCache grows past its capacity",
        val(&[1, 1, 1, 8], &[1.0; 8]),
        1e-6,
        move || {
            let mut c = KvCache::new(ctx, 1, 1, 8, 8, 1, DType::F32)?;
            for _ in 0..5 {
                c.append(
                    &rnd(ctx, &[1, 1, 3, 8]),
                    &ctx.full([1, 1, 3, 8], 1.0, DType::F32)?,
                )?;
            }
            assert_eq!(c.len(), 15);
            ctx.attention_cached(&rnd(ctx, &[1, 1, 1, 8]), &c, &AttentionOptions::new())
                .map(|r| one(r.o))
        },
    );
    run_table(ctx, t);
}

/// Every op on f16 tensors, on a context without `shader-f16`: the missing
/// feature by name, whatever the op.
#[test]
fn f16_without_the_feature() {
    let Some(ctx) = common::ctx() else { return };
    let weak = common::context_without(&ctx, wgpu::Features::SHADER_F16);
    let weak = &weak;
    let h = move |s: &[usize]| rnd16(weak, s);
    let mut t = Table { rows: Vec::new() };
    let f16 = Kind::Unsupported("shader-f16");
    t.err("matmul", f16, move || {
        weak.matmul(&h(&[3, 5]), &h(&[5, 7])).map(one)
    });
    t.err("GEMV", f16, move || {
        weak.matmul(&h(&[1, 64]), &h(&[64, 7])).map(one)
    });
    t.err("matmul with bias", f16, move || {
        weak.matmul_with(&h(&[3, 5]), &h(&[5, 7]), &Epilogue::new().bias(&h(&[7])))
            .map(one)
    });
    t.err("eval", f16, move || {
        weak.eval(&(h(&[4]).expr() + 1.0)).map(one)
    });
    t.err("eval mixed with f32", f16, move || {
        weak.eval(&(h(&[4]).expr() + &rnd(weak, &[4]))).map(one)
    });
    t.err("eval_unfused", f16, move || {
        weak.eval_unfused(&h(&[4]).expr().exp()).map(one)
    });
    t.err("contiguous of padded", f16, move || {
        weak.contiguous(&weak.tensor_padded(&[f16::ONE; 6], [2, 3], 8)?)
            .map(one)
    });
    t.err("sum", f16, move || {
        weak.sum(&h(&[4, 3]), Axis::Last).map(one)
    });
    t.err("max all", f16, move || {
        weak.max(&h(&[4, 3]), Axis::All).map(one)
    });
    t.err("softmax", f16, move || weak.softmax(&h(&[4, 3])).map(one));
    t.err("layer_norm", f16, move || {
        weak.layer_norm(&h(&[4, 3]), None, None, 1e-5).map(one)
    });
    t.err("rms_norm_of", f16, move || {
        weak.rms_norm_of(&h(&[4, 3]).expr(), None, 1e-5, None)
            .map(one)
    });
    t.err("attention", f16, move || {
        weak.attention(
            &h(&[1, 1, 4, 8]),
            &h(&[1, 1, 4, 8]),
            &h(&[1, 1, 4, 8]),
            &AttentionOptions::new(),
        )
        .map(|r| one(r.o))
    });
    t.err("decode attention", f16, move || {
        weak.attention(
            &h(&[1, 1, 1, 8]),
            &h(&[1, 1, 64, 8]),
            &h(&[1, 1, 64, 8]),
            &AttentionOptions::new(),
        )
        .map(|r| one(r.o))
    });
    t.err("KvCache", f16, move || {
        KvCache::new(weak, 1, 1, 8, 8, 4, DType::F16).map(|_| vec![])
    });
    // Fills write bit patterns, which need no f16 arithmetic.
    t.values("fill", val(&[4], &[1.5; 4]), move || {
        let x = h(&[4]);
        weak.fill(&x, 1.5)?;
        Ok(one(x))
    });
    t.values("full", val(&[5], &[-2.0; 5]), move || {
        weak.full([5], -2.0, DType::F16).map(one)
    });
    // Uploads and reads need no shader: they work.
    t.values("upload and read back", val(&[2], &[1.0, -2.0]), move || {
        weak.tensor(&[f16::from_f32(1.0), f16::from_f32(-2.0)], [2])
            .map(one)
    });
    run_table(weak, t);
}

#[test]
fn quantisation_arguments() {
    use wgtile::quant::{self, HostQuant};
    use wgtile::{QuantAxis, QuantFormat};
    let Some(ctx) = common::ctx() else { return };
    let ctx = &ctx;
    let mut t = Table { rows: Vec::new() };
    for format in QuantFormat::ALL {
        let name = format.name();
        t.err(
            format!("quantize {name} rank 0"),
            Kind::Invalid,
            move || {
                ctx.quantize(&rnd(ctx, &[]), format, QuantAxis::Rows)
                    .map(|_| vec![])
            },
        );
        t.err(
            format!("quantize {name} columns of rank 3"),
            Kind::Invalid,
            move || {
                ctx.quantize(&rnd(ctx, &[2, 3, 4]), format, QuantAxis::Columns)
                    .map(|_| vec![])
            },
        );
        t.err(
            format!("quantize {name} a padded tensor"),
            Kind::Invalid,
            move || {
                let p = ctx.tensor_padded(&[1.0f32; 64], [2, 32], 40)?;
                ctx.quantize(&p, format, QuantAxis::Rows).map(|_| vec![])
            },
        );
        for block in [0usize, 3, 2048] {
            t.err(
                format!("quantize {name} block {block}"),
                Kind::Invalid,
                move || {
                    ctx.quantize_with_block(&rnd(ctx, &[4, 64]), format, QuantAxis::Rows, block)
                        .map(|_| vec![])
                },
            );
        }
        // Zero-sized: empty parts, an empty dequantisation, an empty product.
        for (shape, axis) in [
            (vec![0usize, 64], QuantAxis::Rows),
            (vec![64, 0], QuantAxis::Columns),
        ] {
            let s2 = shape.clone();
            t.values(
                format!("dequantize {name} {shape:?}"),
                val(&shape, &[]),
                move || {
                    let q = ctx.quantize(&ctx.zeros(&s2, DType::F32)?, format, axis)?;
                    ctx.dequantize(&q).map(one)
                },
            );
        }
        t.values(
            format!("matmul_quantized {name} of 0 rows"),
            val(&[0, 16], &[]),
            move || {
                let q = ctx.quantize(&rnd(ctx, &[16, 64]), format, QuantAxis::Rows)?;
                ctx.matmul_quantized(&ctx.zeros([0, 64], DType::F32)?, &q)
                    .map(one)
            },
        );
        for (what, xs, kind) in [
            ("x K 63", vec![3usize, 63], Kind::Shape),
            ("x rank 0", vec![], Kind::Shape),
            ("x K 16 (the weight's N)", vec![2, 16], Kind::Shape),
        ] {
            t.err(format!("matmul_quantized {name} {what}"), kind, move || {
                let q = ctx.quantize(&rnd(ctx, &[16, 64]), format, QuantAxis::Rows)?;
                ctx.matmul_quantized(&rnd(ctx, &xs), &q).map(one)
            });
        }
        if ctx.profile().shader_f16 {
            t.shapes(
                format!("matmul_quantized {name} f16 x"),
                vec![vec![2, 16]],
                move || {
                    let q = ctx.quantize(&rnd(ctx, &[16, 64]), format, QuantAxis::Rows)?;
                    ctx.matmul_quantized(&rnd16(ctx, &[2, 64]), &q).map(one)
                },
            );
        }
        // A checkpoint's packed parts with a part of the wrong size, or a
        // block the format does not have.
        let host = quant::quantize(
            &common::random(8 * 64, 3),
            &[8, 64],
            format,
            QuantAxis::Rows,
            format.default_block(),
        )
        .unwrap();
        type Spoil = fn(&mut HostQuant);
        let spoils: [(&str, Spoil); 5] = [
            ("data short", |h| {
                h.data.pop();
            }),
            ("scales long", |h| h.scales.push(0)),
            ("zeros of a format without them", |h| {
                if h.zeros.is_empty() {
                    h.zeros.push(0)
                } else {
                    h.zeros.clear()
                }
            }),
            ("shape grown", |h| h.shape[0] += 1),
            ("block halved", |h| h.block /= 2),
        ];
        for (what, spoil) in spoils {
            let mut h = host.clone();
            spoil(&mut h);
            t.err(
                format!("upload_quantized {name} {what}"),
                Kind::Invalid,
                move || ctx.upload_quantized(&h).map(|_| vec![]),
            );
        }
        if format == QuantFormat::Nvfp4 {
            for g in [f32::NAN, -1.0, f32::INFINITY] {
                let mut h = host.clone();
                h.global_scale = g;
                t.err(
                    format!("upload_quantized NVFP4 global scale {g}"),
                    Kind::Invalid,
                    move || ctx.upload_quantized(&h).map(|_| vec![]),
                );
            }
        }
        // Values: a NaN block dequantises to NaN, an all-zero block to 0.
        let mut x = vec![0.0f32; 64];
        x[5] = f32::NAN;
        let xs = x.clone();
        let want: Vec<f32> = (0..64)
            .map(|i| if i < format.default_block() { NAN } else { 0.0 })
            .collect();
        t.values(
            format!("dequantize {name} a NaN block"),
            val(&[1, 64], &want),
            move || {
                let q = ctx.quantize(&vals(ctx, &xs, &[1, 64]), format, QuantAxis::Rows)?;
                ctx.dequantize(&q).map(one)
            },
        );
    }
    run_table(ctx, t);
}
