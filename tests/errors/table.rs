//! The bad-input table: every public op with each argument in turn given a
//! wrong shape, rank, dtype, size, configuration or value, and the exact
//! outcome of each row: an `Error` variant (with the feature or limit it
//! names), or the values NumPy / PyTorch give (zero-sized dimensions,
//! infinities, NaN). A row that panics is reported as a failure, the whole
//! table runs before the test fails, and after every refusal the context
//! must still compute a correct sum.

use std::panic::{AssertUnwindSafe, catch_unwind};

use wgtile::{
    AttentionKernel, AttentionOptions, Axis, BackwardTiles, Context, ContextOptions, DType,
    DecodeTiles, DiagonalAlignment, Epilogue, Error, Expr, FlashTiles, KvCache, MatmulKernel,
    MatmulOptions, Reduction, Result, Tensor, TileConfig, TimingOptions, f16, wgpu,
};

use crate::common;

/// The error classes a row can expect.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Shape,
    DType,
    Invalid,
    /// `UnsupportedFeature` whose feature name contains this text.
    Unsupported(&'static str),
    /// `LimitExceeded` naming this limit.
    Limit(&'static str),
}

enum Want {
    Err(Kind),
    /// Each returned tensor's shape and values (NaN matches NaN, infinities
    /// and zeros exactly, other values within a relative 2e-6 unless `tol`
    /// says otherwise).
    Values(Vec<(Vec<usize>, Vec<f32>)>, f32),
    /// Success with these output shapes (values checked elsewhere).
    Shapes(Vec<Vec<usize>>),
}

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
    if want.is_infinite() || want == 0.0 {
        return got == want || (want == 0.0 && got.abs() <= tol * 1e-30);
    }
    (got - want).abs() <= tol * want.abs().max(1e-30)
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
            ..Default::default()
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
        let coop = MatmulKernel::Coop {
            warps_m: 2,
            warps_n: 2,
            bk: 32,
            frags_n: 2,
            subgroup: 32,
            split: false,
        };
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
        move || {
            ctx.eval_many(&[rnd(ctx, &[3]).expr(), Expr::input(1, [3], DType::F32)])
                .map(|v| v)
        },
    );
    t.err(
        "eval_many of shapes that do not broadcast",
        Kind::Shape,
        move || {
            ctx.eval_many(&[rnd(ctx, &[3]).expr() + &rnd(ctx, &[4])])
                .map(|v| v)
        },
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
    let unary: [(&str, fn(Expr) -> Expr, fn(f32) -> f32); 16] = [
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
    let binary: [(&str, fn(Expr, Expr) -> Expr, fn(f32, f32) -> f32); 11] = [
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
