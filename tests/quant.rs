//! Block-scaled quantisation on the GPU against the host reference
//! (`wgtile::quant`): quantise and dequantise bit for bit on random blocks,
//! outliers, all-zero, NaN and Inf blocks, subnormal inputs, exact ties,
//! odd shapes and both block axes; the quantised matmul against an f64
//! product of the dequantised weight.

mod common;

use wgtile::quant::{self, E2M1, E4M3, E5M2, HostQuant};
use wgtile::{Context, DType, Epilogue, Error, QuantAxis, QuantFormat, Tensor, bf16, f16};

/// Seeded values with the edge cases each block kind needs: random
/// magnitudes over many binades, outliers, all-zero blocks, exact ties of
/// the element grids, subnormal f32, and (when `bad`) NaN and Inf.
fn edge_values(n: usize, seed: u64, bad: bool) -> Vec<f32> {
    let r = common::random(n * 3 + 8, seed);
    let ties: Vec<f32> = [E4M3, E5M2, E2M1]
        .iter()
        .flat_map(|f| (0..f.max_code).map(move |c| (f.decode(c) + f.decode(c + 1)) / 2.0))
        .collect();
    (0..n)
        .map(|i| {
            let kind = (r[3 * i].abs() * 16.0) as usize;
            let u = r[3 * i + 1];
            let block = i / 16;
            match (kind, block % 7) {
                (_, 3) => 0.0,
                (0, _) => u * 1e4,
                (1, _) => {
                    ties[(r[3 * i + 2].abs() * ties.len() as f32) as usize % ties.len()]
                        * if u < 0.0 { -1.0 } else { 1.0 }
                }
                (2, _) => f32::from_bits(((u.abs() * 1e6) as u32) % 0x7f_ffff + 1),
                (3, _) if bad => [f32::NAN, f32::INFINITY, f32::NEG_INFINITY][i % 3],
                (4, _) => u * 1e-30,
                (5, _) => -0.0,
                _ => u * 2f32.powi((r[3 * i + 2] * 20.0) as i32),
            }
        })
        .collect()
}

fn cases() -> Vec<(Vec<usize>, QuantAxis)> {
    vec![
        (vec![7, 45], QuantAxis::Rows),
        (vec![45, 7], QuantAxis::Columns),
        (vec![3, 2, 64], QuantAxis::Rows),
        (vec![1], QuantAxis::Rows),
        (vec![33, 100], QuantAxis::Rows),
        (vec![100, 33], QuantAxis::Columns),
        // Rows of whole 16-byte units (cols % 8 == 0) and of quads
        // (cols % 4 == 0) take the vector kernels, columns in multiples of
        // 4 the per-word column kernel; partial last blocks in each.
        (vec![13, 136], QuantAxis::Rows),
        (vec![37, 96], QuantAxis::Columns),
        (vec![70, 20], QuantAxis::Columns),
        (vec![0, 5], QuantAxis::Rows),
        (vec![5, 0], QuantAxis::Columns),
    ]
}

fn same_bits(what: &str, got: &[u32], want: &[u32]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
        panic!(
            "{what}: word {i} of {}: GPU {:#010x}, host {:#010x}",
            got.len(),
            got[i],
            want[i]
        );
    }
}

/// `host` dequantised on the CPU and, uploaded, on the GPU: both `want`
/// bit for bit. The uploaded tensor.
fn loads_exactly(ctx: &Context, host: &HostQuant, want: &[f32], what: &str) -> wgtile::QuantTensor {
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<u32>>();
    same_bits(
        &format!("{what}: host"),
        &bits(&host.dequantize().unwrap()),
        &bits(want),
    );
    let q = ctx.upload_quantized(host).unwrap();
    let got = ctx
        .dequantize(&q)
        .unwrap()
        .to_vec_blocking::<f32>()
        .unwrap();
    same_bits(&format!("{what}: GPU"), &bits(&got), &bits(want));
    q
}

/// Every format and case of [`cases`] quantised on `ctx` against the host,
/// bit for bit.
fn quantize_matches_the_host_on(ctx: &Context) {
    let mut checked = 0;
    for format in QuantFormat::ALL {
        for (shape, axis) in cases() {
            let n: usize = shape.iter().product();
            let values = edge_values(n, 17 + n as u64, true);
            let t = ctx.tensor(&values, &shape).unwrap();
            let q = ctx.quantize(&t, format, axis).unwrap();
            let got = q.to_host_blocking().unwrap();
            let want =
                quant::quantize(&values, &shape, format, axis, format.default_block()).unwrap();
            let what = format!("{format} {shape:?} {axis:?}");
            same_bits(&format!("{what} data"), &got.data, &want.data);
            same_bits(&format!("{what} scales"), &got.scales, &want.scales);
            same_bits(&format!("{what} zeros"), &got.zeros, &want.zeros);
            assert_eq!(
                got.global_scale.to_bits(),
                want.global_scale.to_bits(),
                "{what}"
            );
            checked += want.data.len();
        }
    }
    assert!(checked > 1000);
}

#[test]
fn quantize_matches_the_host_bit_for_bit() {
    let Some(ctx) = common::ctx() else { return };
    quantize_matches_the_host_on(&ctx);
}

/// Where the adapter has subgroups the row quantisers meet each block's
/// statistics by shuffles (blocks of up to a subgroup's words); without
/// them, through workgroup memory. Both against the host.
#[test]
fn quantize_without_subgroups_matches_the_host() {
    let Some(ctx) = common::ctx() else { return };
    if !ctx.profile().subgroups {
        return;
    }
    let plain = common::context_without(&ctx, wgtile::wgpu::Features::SUBGROUP);
    assert!(!plain.profile().subgroups);
    quantize_matches_the_host_on(&plain);
}

/// NVFP4's per-tensor scale comes from the largest finite |x| over the
/// whole tensor, reduced over many workgroups of the amax pass: with the
/// largest value in the first, a middle and the last (partial) workgroup
/// the codes and scales match the host's bit for bit.
#[test]
fn nvfp4_amax_spans_every_workgroup() {
    let Some(ctx) = common::ctx() else { return };
    let n = 97 * 263;
    for at in [0, n / 2 + 11, n - 1] {
        let mut values = common::random(n, 5);
        values[at] = -37.5;
        let t = ctx.tensor(&values, [97, 263]).unwrap();
        let got = ctx
            .quantize(&t, QuantFormat::Nvfp4, QuantAxis::Rows)
            .unwrap()
            .to_host_blocking()
            .unwrap();
        let want =
            quant::quantize(&values, &[97, 263], QuantFormat::Nvfp4, QuantAxis::Rows, 16).unwrap();
        assert_eq!(
            got.global_scale.to_bits(),
            want.global_scale.to_bits(),
            "largest at {at}"
        );
        same_bits(
            &format!("largest at {at} scales"),
            &got.scales,
            &want.scales,
        );
        same_bits(&format!("largest at {at} data"), &got.data, &want.data);
    }
}

#[test]
fn f16_inputs_and_other_block_sizes() {
    let Some(ctx) = common::ctx() else { return };
    if !ctx.profile().shader_f16 {
        return;
    }
    for format in QuantFormat::ALL {
        let blocks: &[usize] = if format.block_is_free() {
            &[8, 16, 64, 200, 512]
        } else {
            &[format.default_block()]
        };
        let cases = [
            ([9usize, 130], QuantAxis::Rows, false),
            ([9, 136], QuantAxis::Rows, false),
            ([9, 136], QuantAxis::Rows, true),
            ([75, 12], QuantAxis::Columns, false),
            ([75, 12], QuantAxis::Columns, true),
        ];
        for &block in blocks {
            if format.check_block(block).is_err() {
                continue;
            }
            for (shape, axis, bf16) in cases {
                let n = shape[0] * shape[1];
                let raw = edge_values(n, 3 + n as u64, false);
                let (t, values, kind) = if bf16 {
                    let h: Vec<bf16> = raw.iter().map(|&v| bf16::from_f32(v)).collect();
                    let values = h.iter().map(|v| v.to_f32()).collect::<Vec<f32>>();
                    (ctx.tensor(&h, shape).unwrap(), values, "bf16")
                } else {
                    let h: Vec<f16> = raw.iter().map(|&v| f16::from_f32(v)).collect();
                    let values = h.iter().map(|v| v.to_f32()).collect::<Vec<f32>>();
                    (ctx.tensor(&h, shape).unwrap(), values, "f16")
                };
                let q = ctx.quantize_with_block(&t, format, axis, block).unwrap();
                let got = q.to_host_blocking().unwrap();
                let want = quant::quantize(&values, &shape, format, axis, block).unwrap();
                let what = format!("{format} {kind} {shape:?} {axis:?} block {block}");
                same_bits(&format!("{what} data"), &got.data, &want.data);
                same_bits(&format!("{what} scales"), &got.scales, &want.scales);
                same_bits(&format!("{what} zeros"), &got.zeros, &want.zeros);
            }
        }
    }
}

#[test]
fn dequantize_matches_the_host() {
    let Some(ctx) = common::ctx() else { return };
    for format in QuantFormat::ALL {
        for (shape, axis) in cases() {
            let n: usize = shape.iter().product();
            let values = edge_values(n, 5 + n as u64, true);
            let host =
                quant::quantize(&values, &shape, format, axis, format.default_block()).unwrap();
            let q = ctx.upload_quantized(&host).unwrap();
            assert_eq!(q.to_host_blocking().unwrap(), host, "upload round trip");
            let poison = ctx.dequantize(&q).unwrap();
            let got = poison.to_vec_blocking::<f32>().unwrap();
            let want = host.dequantize().unwrap();
            assert_eq!(poison.shape(), &shape[..]);
            for i in 0..n {
                // Results below f32's normal range may be flushed to zero
                // by the adapter (WGSL allows it).
                let flushed = want[i].abs() < f32::MIN_POSITIVE && got[i] == 0.0;
                assert!(
                    got[i].to_bits() == want[i].to_bits()
                        || (got[i].is_nan() && want[i].is_nan())
                        || flushed,
                    "{format} {shape:?} {axis:?} [{i}]: GPU {}, host {}",
                    got[i],
                    want[i]
                );
            }
        }
    }
}

/// f64 product `x @ Wᵀ` (Rows) or `x @ W` (Columns) of the dequantised
/// weight, and the sum of |terms| for the error bound.
fn reference(
    x: &[f32],
    w: &[f32],
    m: usize,
    k: usize,
    n: usize,
    rows: bool,
) -> (Vec<f64>, Vec<f64>) {
    let mut y = vec![0.0; m * n];
    let mut mag = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            for p in 0..k {
                let wv = if rows { w[j * k + p] } else { w[p * n + j] };
                let t = f64::from(x[i * k + p]) * f64::from(wv);
                y[i * n + j] += t;
                mag[i * n + j] += t.abs();
            }
        }
    }
    (y, mag)
}

fn check_matmul(ctx: &Context, format: QuantFormat, m: usize, k: usize, n: usize, axis: QuantAxis) {
    let wshape = if axis == QuantAxis::Rows {
        [n, k]
    } else {
        [k, n]
    };
    let wv = common::random(n * k, (m * 7 + k + n) as u64);
    let wt = ctx.tensor(&wv, wshape).unwrap();
    let q = ctx.quantize(&wt, format, axis).unwrap();
    let wd = q.to_host_blocking().unwrap().dequantize().unwrap();
    let xv = common::random(m * k, 99 + m as u64);
    let x = ctx.tensor(&xv, [m, k]).unwrap();
    let plan = ctx.matmul_quantized_plan(&x, &q).unwrap();
    ctx.fill(plan.output(), f32::NAN).unwrap();
    plan.run().unwrap();
    let got = plan.output().to_vec_blocking::<f32>().unwrap();
    let (want, mag) = reference(&xv, &wd, m, k, n, axis == QuantAxis::Rows);
    // f32 accumulation: a few roundings per term, relative to sum |terms|.
    let bound = |i: usize| 4.0 * (k as f64).sqrt() * f64::from(f32::EPSILON) * mag[i] + 1e-30;
    common::assert_close(
        &format!("{format} {axis:?} M{m} K{k} N{n} ({})", plan.label()),
        &got,
        &want,
        bound,
    );
    // And against the unquantised product: within the weight's own
    // quantisation error, sum |x| |w - dequantised w|, plus the rounding.
    let (exact, _) = reference(&xv, &wv, m, k, n, axis == QuantAxis::Rows);
    let diff: Vec<f32> = wv.iter().zip(&wd).map(|(a, b)| (a - b).abs()).collect();
    let xabs: Vec<f32> = xv.iter().map(|v| v.abs()).collect();
    let (qerr, _) = reference(&xabs, &diff, m, k, n, axis == QuantAxis::Rows);
    for i in 0..got.len() {
        assert!(
            (f64::from(got[i]) - exact[i]).abs() <= qerr[i] * (1.0 + 1e-5) + bound(i),
            "{format}: {} vs unquantised {} (quantisation error bound {})",
            got[i],
            exact[i],
            qerr[i]
        );
    }
}

#[test]
fn quantized_gemv_against_f64() {
    let Some(ctx) = common::ctx() else { return };
    for format in QuantFormat::ALL {
        for (m, k, n) in [
            (1, 256, 37),
            (3, 96, 64),
            (8, 512, 13),
            (1, 32, 1),
            (5, 4096, 8),
            // K past a whole block (the last block padded).
            (2, 40, 9),
            (4, 1000, 7),
        ] {
            check_matmul(&ctx, format, m, k, n, QuantAxis::Rows);
            if k % format.default_block() == 0 {
                check_matmul(&ctx, format, m, k, n, QuantAxis::Columns);
            }
        }
    }
}

#[test]
fn quantized_matmul_fallbacks_against_f64() {
    let Some(ctx) = common::ctx() else { return };
    for format in [
        QuantFormat::Mxfp4,
        QuantFormat::Nvfp4,
        QuantFormat::Int4Zp,
        QuantFormat::Mxfp8E4m3,
        QuantFormat::Fp8E5m2,
    ] {
        // K off the chunk, more than 8 rows, blocks down columns.
        check_matmul(&ctx, format, 2, 45, 17, QuantAxis::Rows);
        check_matmul(&ctx, format, 9, 64, 11, QuantAxis::Rows);
        check_matmul(&ctx, format, 3, 70, 19, QuantAxis::Columns);
    }
}

#[test]
fn quantized_matmul_shapes_and_errors() {
    let Some(ctx) = common::ctx() else { return };
    let w = ctx
        .rand_uniform([16, 64], -1.0, 1.0, DType::F32, 1)
        .unwrap();
    let q = ctx
        .quantize(&w, QuantFormat::Mxfp4, QuantAxis::Rows)
        .unwrap();
    // Rank-1 and batched x.
    let x1 = ctx.rand_uniform([64], -1.0, 1.0, DType::F32, 2).unwrap();
    assert_eq!(ctx.matmul_quantized(&x1, &q).unwrap().shape(), [16]);
    let x3 = ctx
        .rand_uniform([2, 3, 64], -1.0, 1.0, DType::F32, 2)
        .unwrap();
    assert_eq!(ctx.matmul_quantized(&x3, &q).unwrap().shape(), [2, 3, 16]);
    let x0 = ctx.zeros([0, 64], DType::F32).unwrap();
    assert_eq!(ctx.matmul_quantized(&x0, &q).unwrap().shape(), [0, 16]);
    // Errors, each named.
    let bad = ctx.zeros([3, 63], DType::F32).unwrap();
    assert!(matches!(
        ctx.matmul_quantized(&bad, &q),
        Err(Error::ShapeMismatch { .. })
    ));
    // f16 activations give exactly the product of their f32 widening, on
    // the GEMV and on the fallback, in both layouts.
    if ctx.profile().shader_f16 {
        let qc = ctx.quantize_transposed(&w, QuantFormat::Mxfp4).unwrap();
        for rows in [3usize, 11] {
            let hv: Vec<f16> = common::random(rows * 64, 8)
                .iter()
                .map(|&v| f16::from_f32(v))
                .collect();
            let h = ctx.tensor(&hv, [rows, 64]).unwrap();
            let wide: Vec<f32> = hv.iter().map(|v| v.to_f32()).collect();
            let f = ctx.tensor(&wide, [rows, 64]).unwrap();
            for qq in [&q, &qc] {
                let a = ctx
                    .matmul_quantized(&h, qq)
                    .unwrap()
                    .to_vec_blocking::<f32>()
                    .unwrap();
                let b = ctx
                    .matmul_quantized(&f, qq)
                    .unwrap()
                    .to_vec_blocking::<f32>()
                    .unwrap();
                assert_eq!(
                    a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    b.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "f16 x, {rows} rows, {:?}",
                    qq.axis()
                );
            }
        }
    }
    let w3 = ctx.zeros([2, 4, 64], DType::F32).unwrap();
    let q3 = ctx
        .quantize(&w3, QuantFormat::Int8, QuantAxis::Rows)
        .unwrap();
    assert!(matches!(
        ctx.matmul_quantized(&x1, &q3),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        ctx.quantize(&w3, QuantFormat::Int8, QuantAxis::Columns),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        ctx.quantize_with_block(&w, QuantFormat::Mxfp4, QuantAxis::Rows, 16),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        ctx.quantize_with_block(&w, QuantFormat::Int4, QuantAxis::Rows, 12),
        Err(Error::InvalidArgument(_))
    ));
    let scalar = ctx.zeros([], DType::F32).unwrap();
    assert!(matches!(
        ctx.quantize(&scalar, QuantFormat::Int8, QuantAxis::Rows),
        Err(Error::InvalidArgument(_))
    ));
    // A checkpoint's parts of the wrong size.
    let mut host = q.to_host_blocking().unwrap();
    host.data.pop();
    assert!(matches!(
        ctx.upload_quantized(&host),
        Err(Error::InvalidArgument(_))
    ));
    let mut host = q.to_host_blocking().unwrap();
    host.scales.push(0);
    assert!(matches!(
        ctx.upload_quantized(&host),
        Err(Error::InvalidArgument(_))
    ));
    // Another context's tensors.
    let other = common::context_without(&ctx, wgtile::wgpu::Features::empty());
    let foreign = other
        .rand_uniform([16, 64], -1.0, 1.0, DType::F32, 1)
        .unwrap();
    assert!(matches!(
        ctx.quantize(&foreign, QuantFormat::Int8, QuantAxis::Rows),
        Err(Error::InvalidArgument(_))
    ));
    let fq = other
        .quantize(&foreign, QuantFormat::Int8, QuantAxis::Rows)
        .unwrap();
    assert!(matches!(
        ctx.dequantize(&fq),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        ctx.matmul_quantized(&x1, &fq),
        Err(Error::InvalidArgument(_))
    ));
    // Packed sizes: the documented bytes per element.
    let big = ctx.zeros([64, 1024], DType::F32).unwrap();
    for (format, most) in [
        (QuantFormat::Mxfp8E4m3, 1.04),
        (QuantFormat::Mxfp4, 0.54),
        (QuantFormat::Nvfp4, 0.57),
        (QuantFormat::Int4, 0.57),
        (QuantFormat::Fp8E4m3, 1.04),
    ] {
        let q = ctx.quantize(&big, format, QuantAxis::Rows).unwrap();
        let per = q.packed_bytes() as f64 / (64.0 * 1024.0);
        assert!(per <= most, "{format}: {per} bytes per element");
    }
    let _ = Tensor::shape;
    let _: Option<HostQuant> = None;
}

/// A `[N, K]` checkpoint weight quantised into the fast `[K, N]` layout:
/// the codes of its transpose, and the GEMV gives `x @ Wᵀ`.
#[test]
fn quantize_transposed_is_the_transpose_quantised() {
    let Some(ctx) = common::ctx() else { return };
    // Rows of the input in 16-byte units (K % 8 == 0) and not, partial
    // last blocks; shuffles and workgroup memory where the adapter has
    // subgroups.
    let plain = ctx
        .profile()
        .subgroups
        .then(|| common::context_without(&ctx, wgtile::wgpu::Features::SUBGROUP));
    let contexts = std::iter::once(&*ctx).chain(plain.as_ref());
    let cases = contexts.flat_map(|c| {
        QuantFormat::ALL
            .into_iter()
            .flat_map(move |f| [(c, f, 37usize, 96usize), (c, f, 13, 100), (c, f, 5, 45)])
    });
    for (ctx, format, n, k) in cases {
        let values = edge_values(n * k, 23 + k as u64, true);
        let w = ctx.tensor(&values, [n, k]).unwrap();
        let q = ctx.quantize_transposed(&w, format).unwrap();
        assert_eq!(q.shape(), [k, n]);
        assert_eq!(q.axis(), QuantAxis::Columns);
        let mut t = vec![0.0f32; n * k];
        for r in 0..n {
            for c in 0..k {
                t[c * n + r] = values[r * k + c];
            }
        }
        let want = quant::quantize(
            &t,
            &[k, n],
            format,
            QuantAxis::Columns,
            format.default_block(),
        )
        .unwrap();
        let got = q.to_host_blocking().unwrap();
        let what = format!("{format} transposed [{n}, {k}]");
        same_bits(&format!("{what} data"), &got.data, &want.data);
        same_bits(&format!("{what} scales"), &got.scales, &want.scales);
        same_bits(&format!("{what} zeros"), &got.zeros, &want.zeros);
    }
    let w = ctx.zeros([2, 3, 4], DType::F32).unwrap();
    assert!(matches!(
        ctx.quantize_transposed(&w, QuantFormat::Mxfp4),
        Err(Error::InvalidArgument(_))
    ));
}

/// Exact ties of every format's element grid: the GPU must round them to
/// even exactly as the host does, along rows and down columns. Where the
/// scale is not a power of two (the integers, NVFP4, FP8 with f32 scales)
/// only the exact comparisons can decide them; the MX formats' ties sit
/// in blocks whose largest value is the element's largest times 2^j.
#[test]
fn ties_round_to_even_on_the_gpu() {
    let Some(ctx) = common::ctx() else { return };
    let mut cases: Vec<(QuantFormat, Vec<f32>)> = Vec::new();
    for (format, elem) in [
        (QuantFormat::Mxfp4, E2M1),
        (QuantFormat::Mxfp8E4m3, E4M3),
        (QuantFormat::Mxfp8E5m2, E5M2),
    ] {
        let mids: Vec<f32> = (0..elem.max_code)
            .map(|c| (elem.decode(c) + elem.decode(c + 1)) / 2.0)
            .collect();
        let mut x = Vec::new();
        for (b, j) in [-20i32, 0, 13, 100].into_iter().enumerate() {
            let p = 2f32.powi(j);
            x.push(elem.decode(elem.max_code) * p);
            for i in 1..32 {
                let sign = if (i + b) % 3 == 0 { -1.0 } else { 1.0 };
                x.push(mids[(i * 5 + b) % mids.len()] * p * sign);
            }
        }
        cases.push((format, x));
    }
    // Integers: a block whose scale comes out exactly 0.5, the rest on
    // half-integer multiples of it.
    for (format, top, lo) in [
        (QuantFormat::Int8, 127i32, -127i32),
        (QuantFormat::Int4, 7, -7),
        (QuantFormat::Int4Zp, 15, 0),
    ] {
        let mut x = vec![top as f32 * 0.5];
        let mut k = lo;
        while x.len() < 64 {
            x.push((k as f32 + 0.5) * 0.5);
            k = if k + 1 >= top { lo } else { k + 1 };
        }
        if format == QuantFormat::Int4Zp {
            x[32] = top as f32 * 0.5;
        }
        cases.push((format, x));
    }
    // NVFP4: a tensor amax whose element divisor has trailing zero bits, so
    // that midpoints of the E2M1 grid times it are exact f32 values.
    let mids = [0.25f32, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0];
    let amax = (0..4096)
        .map(|i| 1.0 + i as f32 / 1024.0)
        .find(|&a| {
            let mut x = vec![0.0f32; 16];
            x[0] = a;
            let h = quant::quantize(&x, &[16], QuantFormat::Nvfp4, QuantAxis::Rows, 16).unwrap();
            let y = E4M3.decode(h.scales[0] & 0xff) * h.global_scale;
            y.to_bits().trailing_zeros() >= 4
        })
        .expect("an amax with a short divisor");
    let mut x = vec![0.0f32; 64];
    for b in 0..4 {
        x[b * 16] = amax;
    }
    let h = quant::quantize(&x, &[64], QuantFormat::Nvfp4, QuantAxis::Rows, 16).unwrap();
    let y = E4M3.decode(h.scales[0] & 0xff) * h.global_scale;
    for (i, v) in x.iter_mut().enumerate() {
        if i % 16 != 0 {
            *v = mids[i % mids.len()] * y * if i % 3 == 0 { -1.0 } else { 1.0 };
        }
    }
    cases.push((QuantFormat::Nvfp4, x));
    // FP8 with f32 scales: an amax whose block scale (amax times 1 / 448 or
    // 1 / 57344 in f32) has 10 trailing zero bits, the other values exact
    // midpoints of the element grid times it.
    for (format, mids) in [
        (
            QuantFormat::Fp8E4m3,
            &[1.0625f32, 1.1875, 2.125, 2.375, 4.25, 12.5, 0.53125][..],
        ),
        (
            QuantFormat::Fp8E5m2,
            &[1.125f32, 1.375, 2.25, 6.5, 0.5625, 0.28125][..],
        ),
    ] {
        let amax = (0..1 << 16)
            .map(|i| 1.0 + i as f32 / 65536.0)
            .find(|&a| quant::fp8_block_scale(format, a).to_bits().trailing_zeros() >= 10)
            .expect("an amax with a short scale");
        let y = quant::fp8_block_scale(format, amax);
        let x: Vec<f32> = (0..128)
            .map(|i| match i {
                0 => amax,
                _ => mids[i % mids.len()] * y * if i % 3 == 0 { -1.0 } else { 1.0 },
            })
            .collect();
        cases.push((format, x));
    }
    for (format, values) in cases {
        let n = values.len();
        for (shape, axis) in [(vec![n], QuantAxis::Rows), (vec![n, 1], QuantAxis::Columns)] {
            let want =
                quant::quantize(&values, &shape, format, axis, format.default_block()).unwrap();
            let t = ctx.tensor(&values, shape.as_slice()).unwrap();
            let got = ctx
                .quantize(&t, format, axis)
                .unwrap()
                .to_host_blocking()
                .unwrap();
            same_bits(
                &format!("{format} {axis:?} ties data"),
                &got.data,
                &want.data,
            );
            same_bits(
                &format!("{format} {axis:?} ties scales"),
                &got.scales,
                &want.scales,
            );
        }
    }
}

#[test]
fn quantize_both_gives_the_two_copies_of_separate_calls() {
    let Some(ctx) = common::ctx() else { return };
    let (r, c) = (96usize, 160usize);
    let values = edge_values(r * c, 41, false);
    let t = ctx.tensor(&values, [r, c]).unwrap();
    for format in QuantFormat::ALL {
        let (rows, cols) = ctx.quantize_both(&t, format).unwrap();
        assert_eq!(
            (rows.axis(), cols.axis()),
            (QuantAxis::Rows, QuantAxis::Columns)
        );
        for (q, axis) in [(&rows, QuantAxis::Rows), (&cols, QuantAxis::Columns)] {
            let want =
                quant::quantize(&values, &[r, c], format, axis, format.default_block()).unwrap();
            assert_eq!(q.to_host_blocking().unwrap(), want, "{format} {axis:?}");
        }
    }
    let v = ctx.tensor(&values[..64], [64]).unwrap();
    assert!(matches!(
        ctx.quantize_both(&v, QuantFormat::Mxfp4),
        Err(Error::InvalidArgument(_))
    ));
}

/// Many rows of f16 x: the tensor-core GEMM (weights decoded into f16
/// tiles) where the adapter has cooperative matrices, dequantise + the f32
/// engine elsewhere; every format, both axes, K off the block and odd.
#[test]
fn quantized_gemm_f16_against_f64() {
    let Some(ctx) = common::ctx() else { return };
    if !ctx.profile().shader_f16 {
        eprintln!("adapter has no shader-f16: f16 activations are refused");
        return;
    }
    let coop = wgtile::tune::COOP_CONFIGS
        .into_iter()
        .any(|c| wgtile::MatmulKernel::coop_for(ctx.profile(), c).is_some());
    let mut on_tensor_cores = 0;
    for format in QuantFormat::ALL {
        for (m, k, n) in [(9, 64, 33), (130, 200, 77), (257, 67, 129), (64, 512, 256)] {
            for axis in [QuantAxis::Rows, QuantAxis::Columns] {
                on_tensor_cores += usize::from(check_gemm(&ctx, format, (m, k, n), axis));
            }
        }
    }
    // Where the f16 dispatcher takes the tensor cores for these shapes.
    assert_eq!(
        on_tensor_cores > 0,
        coop,
        "{on_tensor_cores} products on the tensor cores"
    );
}

/// Every tensor-core layout the autotuner may time for the quantised GEMM
/// (adapters with cooperative matrices only), against the f64 product of
/// the dequantised weight; M, N and K off every tile.
#[test]
fn quantized_gemm_every_tensor_core_layout() {
    let Some(ctx) = common::ctx() else { return };
    let kernels: Vec<_> = wgtile::tune::COOP_CONFIGS
        .into_iter()
        .filter_map(|c| wgtile::MatmulKernel::coop_for(ctx.profile(), c))
        .collect();
    // A kernel that is not a tensor-core layout is refused by name.
    let q = ctx.quantize(
        &ctx.tensor(&common::random(64, 1), [8, 8]).unwrap(),
        QuantFormat::Int8,
        QuantAxis::Rows,
    );
    let (x, _) = common::upload(&ctx, &common::random(16, 2), &[2, 8], DType::F16);
    let r = ctx.quant_gemm_coop(
        &x,
        &q.unwrap(),
        wgtile::MatmulKernel::Gemv,
        &Epilogue::new(),
    );
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    if kernels.is_empty() {
        eprintln!("adapter has no cooperative matrices");
        return;
    }
    let (m, k, n) = (131, 200, 77);
    for (f, format) in [
        QuantFormat::Mxfp4,
        QuantFormat::Mxfp8E4m3,
        QuantFormat::Int4Zp,
        QuantFormat::Fp8E4m3,
    ]
    .into_iter()
    .enumerate()
    {
        let axis = if f % 2 == 0 {
            QuantAxis::Columns
        } else {
            QuantAxis::Rows
        };
        let wshape = if axis == QuantAxis::Rows {
            [n, k]
        } else {
            [k, n]
        };
        let wv = common::random(n * k, 40 + f as u64);
        let q = ctx
            .quantize(&ctx.tensor(&wv, wshape).unwrap(), format, axis)
            .unwrap();
        let wd = q.to_host_blocking().unwrap().dequantize().unwrap();
        let (x, xv) = common::upload(&ctx, &common::random(m * k, 41), &[m, k], DType::F16);
        let (want, mag) = reference(&xv, &wd, m, k, n, axis == QuantAxis::Rows);
        let xabs: Vec<f32> = xv.iter().map(|v| v.abs()).collect();
        let (xsum, _) = reference(
            &xabs,
            &vec![1.0f32; n * k],
            m,
            k,
            n,
            axis == QuantAxis::Rows,
        );
        // f32 accumulation, each weight rounded to f16 in the tiles.
        let bound = |i: usize| {
            let staged = mag[i] * 2f64.powi(-11) + xsum[i] * 2f64.powi(-25);
            4.0 * (k as f64).sqrt() * f64::from(f32::EPSILON) * mag[i] + staged + 1e-30
        };
        for &kernel in &kernels {
            let plan = ctx
                .quant_gemm_coop(&x, &q, kernel, &Epilogue::new())
                .unwrap();
            ctx.fill(plan.output(), f32::NAN).unwrap();
            plan.run().unwrap();
            let got = plan.output().to_vec_blocking::<f32>().unwrap();
            common::assert_close(&format!("{format} {axis:?} {kernel}"), &got, &want, bound);
        }
    }
}

/// Checks one product; true when it ran on the tensor cores.
fn check_gemm(
    ctx: &Context,
    format: QuantFormat,
    (m, k, n): (usize, usize, usize),
    axis: QuantAxis,
) -> bool {
    let rows = axis == QuantAxis::Rows;
    let wshape = if rows { [n, k] } else { [k, n] };
    let wv = common::random(n * k, (m * 5 + k * 3 + n) as u64);
    let q = ctx
        .quantize(&ctx.tensor(&wv, wshape).unwrap(), format, axis)
        .unwrap();
    let wd = q.to_host_blocking().unwrap().dequantize().unwrap();
    let (x, xv) = common::upload(
        ctx,
        &common::random(m * k, 7 + k as u64),
        &[m, k],
        DType::F16,
    );
    let plan = ctx.matmul_quantized_plan(&x, &q).unwrap();
    let tensor_cores = plan.label().contains("decoded to f16");
    ctx.fill(plan.output(), f32::NAN).unwrap();
    plan.run().unwrap();
    let got = plan.output().to_vec_blocking::<f32>().unwrap();
    let (want, mag) = reference(&xv, &wd, m, k, n, rows);
    let xabs: Vec<f32> = xv.iter().map(|v| v.abs()).collect();
    let ones = vec![1.0f32; n * k];
    let (xsum, _) = reference(&xabs, &ones, m, k, n, rows);
    // f32 accumulation, plus on the tensor cores each weight rounded to
    // f16: 2^-11 of it, or 2^-25 absolute (subnormals).
    let eps = f64::from(f32::EPSILON);
    let bound = |i: usize| {
        let staged = if tensor_cores {
            mag[i] * 2f64.powi(-11) + xsum[i] * 2f64.powi(-25)
        } else {
            0.0
        };
        4.0 * (k as f64).sqrt() * eps * mag[i] + staged + 1e-30
    };
    common::assert_close(
        &format!("{format} {axis:?} M{m} K{k} N{n} ({})", plan.label()),
        &got,
        &want,
        bound,
    );
    tensor_cores
}

/// A block scale that decodes beyond f16 (int8 with a scale of 1024: codes
/// up to 127 * 1024) or a NaN scale arms the f32 fallback on the
/// tensor-core route: the result is the f32 one, NaN in the NaN block's
/// columns only.
#[test]
fn quantized_gemm_scales_beyond_f16_take_the_f32_route() {
    let Some(ctx) = common::ctx() else { return };
    if !ctx.profile().shader_f16 {
        return;
    }
    let (m, k, n) = (40, 64, 24);
    let mut wv = common::random(n * k, 5);
    // Row 3 of the [N, K] weight: values up to 1e5 (f16 holds 65504).
    for v in &mut wv[3 * k..4 * k] {
        *v *= 1.0e5;
    }
    let mut host = quant::quantize(&wv, &[n, k], QuantFormat::Int8, QuantAxis::Rows, 32).unwrap();
    let q = ctx.upload_quantized(&host).unwrap();
    let wd = host.dequantize().unwrap();
    let (x, xv) = common::upload(&ctx, &common::random(m * k, 8), &[m, k], DType::F16);
    let got = ctx
        .matmul_quantized(&x, &q)
        .unwrap()
        .to_vec_blocking::<f32>()
        .unwrap();
    let (want, mag) = reference(&xv, &wd, m, k, n, true);
    let bound = |i: usize| 4.0 * (k as f64).sqrt() * f64::from(f32::EPSILON) * mag[i] + 1e-30;
    common::assert_close("int8 with values beyond f16", &got, &want, bound);

    // A NaN scale (f16 0x7e00) on block 0 of row 5: NaN in column 5 only.
    host = quant::quantize(
        &common::random(n * k, 6),
        &[n, k],
        QuantFormat::Int8,
        QuantAxis::Rows,
        32,
    )
    .unwrap();
    let blocks_per_row = k / 32;
    let id = 5 * blocks_per_row;
    let shift = 16 * (id % 2);
    host.scales[id / 2] = (host.scales[id / 2] & !(0xffff << shift)) | (0x7e00 << shift);
    let q = ctx.upload_quantized(&host).unwrap();
    let got = ctx
        .matmul_quantized(&x, &q)
        .unwrap()
        .to_vec_blocking::<f32>()
        .unwrap();
    for (i, v) in got.iter().enumerate() {
        assert_eq!(v.is_nan(), i % n == 5, "element {i}: {v}");
    }
}

/// The quantised GEMM's f32 fallback and its scale check on any adapter:
/// every format, both axes, K off the block, against f64 (sequential f32
/// sums: K roundings at most); the check flags a block scale exactly when
/// the format's largest code times it passes 65504.
#[test]
fn quantized_gemm_fallback_and_scale_check() {
    let Some(ctx) = common::ctx() else { return };
    if !ctx.profile().shader_f16 {
        return;
    }
    let eps = f64::from(f32::EPSILON);
    for format in QuantFormat::ALL {
        for (m, k, n) in [(3, 40, 7), (17, 64, 33), (5, 67, 4)] {
            for axis in [QuantAxis::Rows, QuantAxis::Columns] {
                let rows = axis == QuantAxis::Rows;
                let wshape = if rows { [n, k] } else { [k, n] };
                let wv = common::random(n * k, (m + k + n) as u64);
                let q = ctx
                    .quantize(&ctx.tensor(&wv, wshape).unwrap(), format, axis)
                    .unwrap();
                let wd = q.to_host_blocking().unwrap().dequantize().unwrap();
                let (x, xv) = common::upload(&ctx, &common::random(m * k, 3), &[m, k], DType::F16);
                let (out, flagged) = ctx.quant_gemm_fallback(&x, &q, &Epilogue::new()).unwrap();
                assert!(!flagged, "{format}: weights in [-1, 1) flagged");
                let (want, mag) = reference(&xv, &wd, m, k, n, rows);
                common::assert_close(
                    &format!("fallback {format} {axis:?} M{m} K{k} N{n}"),
                    &out.to_vec_blocking::<f32>().unwrap(),
                    &want,
                    |i| k as f64 * eps * mag[i] + 1e-30,
                );
            }
        }
    }
    // int8: 128 codes of magnitude times the f16 scale 511.75 is 65504
    // (kept), times 512 it is 65536 (flagged); a NaN scale is flagged.
    let (x, _) = common::upload(&ctx, &common::random(2 * 64, 4), &[2, 64], DType::F16);
    let host = quant::quantize(
        &common::random(3 * 64, 9),
        &[3, 64],
        QuantFormat::Int8,
        QuantAxis::Rows,
        32,
    )
    .unwrap();
    for (bits, want) in [(0x5fffu32, false), (0x6000, true), (0x7e00, true)] {
        let mut h = host.clone();
        h.scales[1] = (h.scales[1] & 0xffff) | (bits << 16);
        let q = ctx.upload_quantized(&h).unwrap();
        assert_eq!(
            ctx.quant_gemm_fallback(&x, &q, &Epilogue::new()).unwrap().1,
            want,
            "scale bits {bits:#x}"
        );
    }
    // MXFP4: 6 times 2^13 (E8M0 140) is 49152, times 2^14 98304.
    let host = quant::quantize(
        &common::random(64, 10),
        &[2, 32],
        QuantFormat::Mxfp4,
        QuantAxis::Rows,
        32,
    )
    .unwrap();
    let (x, _) = common::upload(&ctx, &common::random(32, 4), &[1, 32], DType::F16);
    for (code, want) in [(140u32, false), (141, true), (0xff, true)] {
        let mut h = host.clone();
        h.scales[0] = (h.scales[0] & !0xff00) | (code << 8);
        let q = ctx.upload_quantized(&h).unwrap();
        assert_eq!(
            ctx.quant_gemm_fallback(&x, &q, &Epilogue::new()).unwrap().1,
            want,
            "E8M0 {code}"
        );
    }
}

/// Uploaded FP8 codes that are not numbers reach every product route as
/// the host's dequantisation gives them: E4M3's NaN (S.1111.111) and
/// E5M2's infinities and NaNs. The GEMVs (up to 8 rows), the f32 route
/// (more rows), the tiled GEMM and, with f16 rows of x, the f16 ones
/// (the tensor-core GEMM where there is one); every other column
/// within the f32 products' bound of the f64 reference.
#[test]
fn fp8_special_codes_reach_every_product() {
    let Some(ctx) = common::ctx() else { return };
    // K = 96 takes the GEMVs; K = 85 (off the block, the word and the
    // GEMMs' runs of 8) has the last block's padding (k = 85..95) poisoned
    // with NaN codes too, which no route may read as values.
    let n = 24;
    let formats = [
        QuantFormat::Mxfp8E4m3,
        QuantFormat::Mxfp8E5m2,
        QuantFormat::Fp8E4m3,
        QuantFormat::Fp8E5m2,
    ];
    for (format, k) in formats.into_iter().flat_map(|f| [(f, 96usize), (f, 85)]) {
        let e4m3 = matches!(format, QuantFormat::Mxfp8E4m3 | QuantFormat::Fp8E4m3);
        // (column of W, k, code): NaNs, +inf and -inf.
        let specials: &[(usize, usize, u32)] = if e4m3 {
            &[(3, 5, 0x7f), (7, 40, 0xff), (19, 84, 0x7f)]
        } else {
            &[(3, 5, 0x7c), (7, 40, 0xfc), (11, 70, 0x7e), (19, 84, 0xff)]
        };
        let poison =
            (0..n).flat_map(move |col| (k..k.next_multiple_of(32)).map(move |kk| (col, kk, 0x7f)));
        for axis in [QuantAxis::Rows, QuantAxis::Columns] {
            let shape = if axis == QuantAxis::Rows {
                [n, k]
            } else {
                [k, n]
            };
            let mut host =
                quant::quantize(&common::random(n * k, 21), &shape, format, axis, 32).unwrap();
            if matches!(format, QuantFormat::Fp8E4m3 | QuantFormat::Fp8E5m2) {
                // Power-of-two f32 scales, so that tensor cores' f16 staging
                // stays exact, as for the MX scales.
                host.scales
                    .iter_mut()
                    .for_each(|s| *s = 0.015625f32.to_bits());
            }
            let lay = host.layout().unwrap();
            for (col, kk, code) in specials.iter().copied().chain(poison.clone()) {
                // A line is a row of [N, K] or a column of [K, N]: column n of W.
                let field = lay.block_id(col, kk / 32) * 32 + kk % 32;
                let shift = 8 * (field % 4);
                host.data[field / 4] = (host.data[field / 4] & !(0xff << shift)) | (code << shift);
            }
            let q = ctx.upload_quantized(&host).unwrap();
            let wd = host.dequantize().unwrap();
            let mut dtypes = vec![DType::F32];
            if ctx.profile().shader_f16 {
                dtypes.push(DType::F16);
            }
            for m in [1, 5, 12] {
                for &dtype in &dtypes {
                    let (x, xv) =
                        common::upload(&ctx, &common::random(m * k, 22 + m as u64), &[m, k], dtype);
                    let routed = ctx.matmul_quantized_plan(&x, &q).unwrap();
                    let tiled = ctx
                        .quant_gemm_tiled(&x, &q, None, &Epilogue::new())
                        .unwrap();
                    for plan in [routed, tiled] {
                        ctx.fill(plan.output(), 1.0e30).unwrap();
                        plan.run().unwrap();
                        let got = plan.output().to_vec_blocking::<f32>().unwrap();
                        let (want, mag) = reference(&xv, &wd, m, k, n, axis == QuantAxis::Rows);
                        let what = format!("{format} {axis:?} M{m} {dtype} ({})", plan.label());
                        let mut finite_got = got.clone();
                        let mut finite_want = want.clone();
                        for i in 0..got.len() {
                            if want[i].is_finite() {
                                continue;
                            }
                            let same = if want[i].is_nan() {
                                got[i].is_nan()
                            } else {
                                f64::from(got[i]) == want[i]
                            };
                            assert!(
                                same,
                                "{what}: element {i} is {} where f64 gives {}",
                                got[i], want[i]
                            );
                            (finite_got[i], finite_want[i]) = (0.0, 0.0);
                        }
                        assert_eq!(
                            want.iter().filter(|v| !v.is_finite()).count(),
                            m * specials.len(),
                            "{what}: each special code makes its column non-finite"
                        );
                        // f32 accumulation (f16 staging of the weight on tensor
                        // cores is exact for these codes times their scales).
                        let bound = |i: usize| {
                            4.0 * (k as f64).sqrt() * f64::from(f32::EPSILON) * mag[i] + 1e-30
                        };
                        common::assert_close(&what, &finite_got, &finite_want, bound);
                    }
                }
            }
        }
    }
}

/// The tiled GEMM (weights decoded into f32 workgroup tiles, for GPUs
/// without tensor cores; CPU adapters route around it, so it is called
/// directly): every format, both block axes, blocks of 8 to 64, K off the
/// block and off the tile's K step, M and N off the tile, f32 and f16 x,
/// against the f64 product of the dequantised weight (f32 accumulation:
/// a few roundings per term, relative to the sum of |terms|).
#[test]
fn quantized_gemm_tiled_against_f64() {
    let Some(ctx) = common::ctx() else { return };
    let mut dtypes = vec![DType::F32];
    if ctx.profile().shader_f16 {
        dtypes.push(DType::F16);
    }
    let shapes = [
        (9, 40, 13),
        (37, 96, 64),
        (70, 200, 131),
        (129, 64, 1),
        (11, 8, 130),
    ];
    for (f, format) in QuantFormat::ALL.into_iter().enumerate() {
        let blocks: &[usize] = if format.block_is_free() {
            &[16, 32, 64]
        } else {
            &[format.default_block()]
        };
        for &block in blocks {
            for (a, axis) in [QuantAxis::Rows, QuantAxis::Columns]
                .into_iter()
                .enumerate()
            {
                // Two of the shapes per combination, all of them over the run.
                for s in [f + block / 8 + a, f + block / 8 + a + 2].map(|s| s % shapes.len()) {
                    let (m, k, n) = shapes[s];
                    // Every (format, shape) pair meets both dtypes over the run.
                    let dtype = dtypes[(f + s + block) % dtypes.len()];
                    let wshape = if axis == QuantAxis::Rows {
                        [n, k]
                    } else {
                        [k, n]
                    };
                    let wv = edge_values(n * k, (m * 31 + k + n + block) as u64, false);
                    let host = quant::quantize(&wv, &wshape, format, axis, block).unwrap();
                    let q = ctx.upload_quantized(&host).unwrap();
                    let wd = host.dequantize().unwrap();
                    let (x, xv) =
                        common::upload(&ctx, &common::random(m * k, 7 + m as u64), &[m, k], dtype);
                    let plan = ctx
                        .quant_gemm_tiled(&x, &q, None, &Epilogue::new())
                        .unwrap();
                    ctx.fill(plan.output(), f32::NAN).unwrap();
                    plan.run().unwrap();
                    let got = plan.output().to_vec_blocking::<f32>().unwrap();
                    let (want, mag) = reference(&xv, &wd, m, k, n, axis == QuantAxis::Rows);
                    let bound = |i: usize| {
                        4.0 * (k as f64).sqrt() * f64::from(f32::EPSILON) * mag[i] + 1e-30
                    };
                    common::assert_close(
                        &format!(
                            "{format} block {block} {axis:?} {dtype} M{m} K{k} N{n} ({})",
                            plan.label()
                        ),
                        &got,
                        &want,
                        bound,
                    );
                }
            }
        }
    }
    // Empty products: NumPy's zeros (K = 0 is refused by the quantiser's
    // shapes; M = 0 gives an empty result).
    let host = quant::quantize(
        &common::random(64, 3),
        &[8, 8],
        QuantFormat::Int8,
        QuantAxis::Rows,
        8,
    )
    .unwrap();
    let q = ctx.upload_quantized(&host).unwrap();
    let x = ctx.tensor(&[0.0f32; 0], [0, 8]).unwrap();
    let plan = ctx
        .quant_gemm_tiled(&x, &q, None, &Epilogue::new())
        .unwrap();
    plan.run().unwrap();
    assert_eq!(plan.output().shape(), [0, 8]);
    // Mismatched K is refused by name.
    let x = ctx.tensor(&[0.0f32; 18], [2, 9]).unwrap();
    assert!(matches!(
        ctx.quant_gemm_tiled(&x, &q, None, &Epilogue::new()),
        Err(Error::ShapeMismatch { .. })
    ));
}

/// A [64, 8] MXFP4 weight blocked down its columns and x [1, 64], for the
/// refusals.
fn small_mxfp4(ctx: &Context) -> (wgtile::QuantTensor, Tensor) {
    let host = quant::quantize(
        &common::random(64 * 8, 1),
        &[64, 8],
        QuantFormat::Mxfp4,
        QuantAxis::Columns,
        32,
    );
    let q = ctx.upload_quantized(&host.unwrap()).unwrap();
    (q, ctx.tensor(&common::random(64, 2), [1, 64]).unwrap())
}

/// Every launch the autotuner may pick for the column-blocked GEMV
/// (workgroups of 256, 512 and 1024 invocations, K unsplit or split over 2
/// and 4 workgroups whose partials a second pass adds) gives the f64
/// product of the dequantised weight, including splits whose last share
/// of K is empty (5 blocks over 4 workgroups) or a single block; launches
/// the kernel cannot run are refused by name.
#[test]
fn every_quantized_gemv_launch_against_f64() {
    use wgtile::tune::quant::{
        QUANT_GEMV_KSPLITS, QUANT_GEMV_WORKGROUPS, QuantGemvLaunch, quant_gemv_candidates,
    };
    let Some(ctx) = common::ctx() else { return };
    let max = ctx.profile().max_invocations;
    let formats = [
        QuantFormat::Mxfp4,
        QuantFormat::Int4Zp,
        QuantFormat::Mxfp8E4m3,
        QuantFormat::Nvfp4,
        QuantFormat::Fp8E4m3,
    ];
    for (f, format) in formats.into_iter().enumerate() {
        let block = format.default_block();
        for (i, (m, blocks, n)) in [(1, 5, 67), (3, 8, 33), (8, 1, 5), (2, 13, 97)]
            .into_iter()
            .enumerate()
        {
            let k = blocks * block;
            let wv = edge_values(k * n, (f * 17 + i) as u64, false);
            let host = quant::quantize(&wv, &[k, n], format, QuantAxis::Columns, block).unwrap();
            let q = ctx.upload_quantized(&host).unwrap();
            let wd = host.dequantize().unwrap();
            let xv = common::random(m * k, 5 + i as u64);
            let x = ctx.tensor(&xv, [m, k]).unwrap();
            let (want, mag) = reference(&xv, &wd, m, k, n, false);
            let bound =
                |j: usize| 4.0 * (k as f64).sqrt() * f64::from(f32::EPSILON) * mag[j] + 1e-30;
            let mut launches: Vec<QuantGemvLaunch> = quant_gemv_candidates(max, blocks, m);
            for wg in QUANT_GEMV_WORKGROUPS.into_iter().filter(|&wg| wg <= max) {
                for ksplit in QUANT_GEMV_KSPLITS {
                    let launch = QuantGemvLaunch { wg, ksplit };
                    if !launches.contains(&launch) {
                        launches.push(launch);
                    }
                }
            }
            for launch in launches {
                let plan = ctx
                    .quant_gemv_cols_plan(&x, &q, launch, &Epilogue::new())
                    .unwrap();
                ctx.fill(plan.output(), f32::NAN).unwrap();
                plan.run().unwrap();
                let got = plan.output().to_vec_blocking::<f32>().unwrap();
                common::assert_close(
                    &format!("{format} M{m} K{k} N{n} {launch}"),
                    &got,
                    &want,
                    bound,
                );
            }
        }
    }
    // Launches and operands the kernel cannot take.
    let (q, x) = small_mxfp4(&ctx);
    for launch in [
        QuantGemvLaunch { wg: 48, ksplit: 1 },
        QuantGemvLaunch { wg: 16, ksplit: 1 },
        QuantGemvLaunch { wg: 256, ksplit: 0 },
        QuantGemvLaunch {
            wg: 256,
            ksplit: 17,
        },
    ] {
        let r = ctx.quant_gemv_cols_plan(&x, &q, launch, &Epilogue::new());
        assert!(
            matches!(r, Err(Error::InvalidArgument(_))),
            "{launch}: {r:?}"
        );
    }
    let launch = QuantGemvLaunch { wg: 256, ksplit: 2 };
    let rows = ctx
        .quantize(
            &ctx.tensor(&common::random(64 * 8, 3), [8, 64]).unwrap(),
            QuantFormat::Mxfp4,
            QuantAxis::Rows,
        )
        .unwrap();
    let nine = ctx.tensor(&common::random(9 * 64, 4), [9, 64]).unwrap();
    for (what, r) in [
        (
            "rows-blocked weight",
            ctx.quant_gemv_cols_plan(&x, &rows, launch, &Epilogue::new()),
        ),
        (
            "nine rows of x",
            ctx.quant_gemv_cols_plan(&nine, &q, launch, &Epilogue::new()),
        ),
    ] {
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{what}: {r:?}");
    }
}

/// The fused epilogue (scale, bias, activation, residual; the exact GELU
/// as a generated expression) on every quantised route: both GEMVs (the
/// column one with K split too, the epilogue in its reduction), the
/// dequantise route (rows of x past the GEMVs on a CPU adapter; x of rank
/// 3 with a residual of the output's shape), the tiled GEMM and the f32
/// fallback of the tensor-core GEMM, against the f64 product of the
/// dequantised weight with the epilogue in f64; outputs poisoned first.
#[test]
fn quantized_products_apply_the_epilogue() {
    use wgtile::Activation;
    use wgtile::tune::quant::QuantGemvLaunch;
    let Some(ctx) = common::ctx() else { return };
    let act = |a: Activation, v: f64| match a {
        Activation::Relu => v.max(0.0),
        Activation::Gelu => 0.5 * v * common::erfc64(-v / std::f64::consts::SQRT_2),
        Activation::Silu => v / (1.0 + (-v).exp()),
        _ => v,
    };
    let cases = [
        (
            QuantFormat::Mxfp4,
            QuantAxis::Columns,
            Activation::Relu,
            0.5f32,
        ),
        (QuantFormat::Int4Zp, QuantAxis::Rows, Activation::Gelu, 1.0),
        (
            QuantFormat::Mxfp8E4m3,
            QuantAxis::Columns,
            Activation::Silu,
            -2.0,
        ),
        (QuantFormat::Int8, QuantAxis::Rows, Activation::None, 3.0),
        (QuantFormat::Fp8E5m2, QuantAxis::Rows, Activation::Relu, 1.5),
    ];
    for (c, (format, axis, activation, alpha)) in cases.into_iter().enumerate() {
        let (k, n) = (96, 37);
        let wshape = if axis == QuantAxis::Rows {
            [n, k]
        } else {
            [k, n]
        };
        let host = quant::quantize(
            &common::random(k * n, 60 + c as u64),
            &wshape,
            format,
            axis,
            32,
        )
        .unwrap();
        let q = ctx.upload_quantized(&host).unwrap();
        let wd = host.dequantize().unwrap();
        for lead in [vec![1], vec![3], vec![2, 10]] {
            let m: usize = lead.iter().product();
            let mut xshape = lead.clone();
            xshape.push(k);
            let mut oshape = lead.clone();
            oshape.push(n);
            let seed = (c * 10 + m) as u64;
            let xv = common::random(m * k, seed);
            let bv = common::random(n, seed + 1);
            let rv = common::random(m * n, seed + 2);
            let bias = ctx.tensor(&bv, [n]).unwrap();
            let residual = ctx.tensor(&rv, oshape.as_slice()).unwrap();
            let epi = Epilogue::new()
                .scale(alpha)
                .activation(activation)
                .bias(&bias)
                .residual(&residual);
            let (prod, mag) = reference(&xv, &wd, m, k, n, axis == QuantAxis::Rows);
            let want: Vec<f64> = (0..m * n)
                .map(|i| {
                    act(
                        activation,
                        f64::from(alpha) * prod[i] + f64::from(bv[i % n]),
                    ) + f64::from(rv[i])
                })
                .collect();
            let bound = |i: usize| {
                let product = 4.0 * (k as f64).sqrt() * f64::from(f32::EPSILON) * mag[i];
                1.2 * f64::from(alpha.abs()) * product
                    + 8.0 * 2f64.powi(-24) * (want[i].abs() + 1.0)
            };
            let check = |what: &str, plan: wgtile::Plan| {
                ctx.fill(plan.output(), f32::NAN).unwrap();
                plan.run().unwrap();
                let got = plan.output().to_vec_blocking::<f32>().unwrap();
                let label = format!(
                    "{format} {axis:?} {activation:?} x {xshape:?}: {what} ({})",
                    plan.label()
                );
                common::assert_close(&label, &got, &want, bound);
            };
            let x = ctx.tensor(&xv, xshape.as_slice()).unwrap();
            check(
                "route",
                ctx.matmul_quantized_plan_with(&x, &q, &epi).unwrap(),
            );
            if lead.len() > 1 {
                continue;
            }
            // The kernels the route does not take on this adapter, 2-D x.
            let epi2 = Epilogue::new()
                .scale(alpha)
                .activation(activation)
                .bias(&bias)
                .residual(&residual.reshape([m, n]).unwrap());
            check(
                "tiled GEMM",
                ctx.quant_gemm_tiled(&x, &q, None, &epi2).unwrap(),
            );
            if axis == QuantAxis::Columns {
                let launch = QuantGemvLaunch { wg: 256, ksplit: 2 };
                check(
                    "GEMV, K over 2",
                    ctx.quant_gemv_cols_plan(&x, &q, launch, &epi2).unwrap(),
                );
            }
            if ctx.profile().shader_f16 {
                // The fallback reads f16 x: the reference takes x rounded.
                let (x16, _) = common::upload(&ctx, &xv, &[m, k], DType::F16);
                let xr: Vec<f32> = xv.iter().map(|&v| f16::from_f32(v).to_f32()).collect();
                let (p16, _) = reference(&xr, &wd, m, k, n, axis == QuantAxis::Rows);
                let (got, _) = ctx.quant_gemm_fallback(&x16, &q, &epi2).unwrap();
                let got = got.to_vec_blocking::<f32>().unwrap();
                let want16: Vec<f64> = (0..m * n)
                    .map(|i| {
                        act(activation, f64::from(alpha) * p16[i] + f64::from(bv[i % n]))
                            + f64::from(rv[i])
                    })
                    .collect();
                common::assert_close(&format!("{format} fallback M{m}"), &got, &want16, bound);
            }
        }
    }
    // Epilogue tensors of the wrong dtype or shape are refused by name.
    let (q, x) = small_mxfp4(&ctx);
    let (b16, _) = common::upload(&ctx, &[0.0; 8], &[8], DType::F16);
    let b7 = ctx.tensor(&[0.0f32; 7], [7]).unwrap();
    let r = ctx.matmul_quantized_plan_with(&x, &q, &Epilogue::new().bias(&b16));
    assert!(matches!(r, Err(Error::DTypeMismatch { .. })), "{r:?}");
    let r = ctx.matmul_quantized_plan_with(&x, &q, &Epilogue::new().bias(&b7));
    assert!(matches!(r, Err(Error::ShapeMismatch { .. })), "{r:?}");
    let r = ctx.matmul_quantized_plan_with(&x, &q, &Epilogue::new().residual(&b7));
    assert!(matches!(r, Err(Error::ShapeMismatch { .. })), "{r:?}");
}

/// Elements whose exact quotient by the block scale lies within a few
/// ulps of a midpoint between two E2M1 codes (NVFP4; the scale is not a
/// power of two, so the GPU's f32 quotient may land on either side): the
/// exact comparison must decide them, and the codes match the host's bit
/// for bit. Each row is one block: its largest value sets the block scale.
#[test]
fn nvfp4_quotients_near_midpoints_round_exactly() {
    let Some(ctx) = common::ctx() else { return };
    let rows = 64;
    let mids = [0.25f64, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0];
    // The block maxima: 100 for the tensor, then values that give other scales.
    let amax: Vec<f32> = (0..rows)
        .map(|r| {
            if r == 0 {
                100.0
            } else {
                100.0 / (1.0 + r as f32 * 0.137)
            }
        })
        .collect();
    let mut values = vec![0.0f32; rows * 16];
    for r in 0..rows {
        values[r * 16] = amax[r];
    }
    let shape = [rows, 16];
    let first = quant::quantize(&values, &shape, QuantFormat::Nvfp4, QuantAxis::Rows, 16).unwrap();
    let mut near = 0;
    let mut misrounded = 0;
    for r in 0..rows {
        let s = (first.scales[r / 4] >> (8 * (r % 4))) & 0xff;
        let y = E4M3.decode(s) * first.global_scale;
        let inv = 1.0 / y;
        for t in 1..16 {
            let m = mids[(r + t) % mids.len()];
            let x0 = (m * f64::from(y)) as f32;
            // x0 and its neighbours, off the exact tie.
            let x = match t % 3 {
                0 => x0,
                1 => f32::from_bits(x0.to_bits() + 1),
                _ => f32::from_bits(x0.to_bits() - 1),
            };
            let sign = if t % 2 == 0 { -1.0 } else { 1.0 };
            values[r * 16 + t] = sign * x;
            if (f64::from(x) / f64::from(y) - m).abs() < 1e-6 * m {
                near += 1;
            }
            // What rounding the f32 quotient alone would give, against the
            // exact side of the midpoint.
            let q = x * inv;
            if (f64::from(q) >= m) != (f64::from(x) / f64::from(y) >= m) || f64::from(q) == m {
                misrounded += 1;
            }
        }
    }
    assert!(
        near > 500 && misrounded > 20,
        "{near} near midpoints, {misrounded} misrounded by the f32 quotient"
    );
    let want = quant::quantize(&values, &shape, QuantFormat::Nvfp4, QuantAxis::Rows, 16).unwrap();
    assert_eq!(
        want.scales, first.scales,
        "the candidates leave every block scale as it was"
    );
    let t = ctx.tensor(&values, shape).unwrap();
    let got = ctx
        .quantize(&t, QuantFormat::Nvfp4, QuantAxis::Rows)
        .unwrap()
        .to_host_blocking()
        .unwrap();
    same_bits("NVFP4 near midpoints", &got.data, &want.data);
}

/// FP8 checkpoint weights with f32 scales per tile (per tensor, per output
/// channel, DeepSeek-V3's 128 x 128 blocks, and tiles narrower than K with
/// smaller blocks): every element dequantises to its code times its tile's
/// scale, bit for bit on the host and on the GPU, and the routed product
/// gives the f64 one; sizes that do not fit are named errors.
#[test]
fn fp8_checkpoint_weights_with_tile_scales() {
    let Some(ctx) = common::ctx() else { return };
    // 300 rows: tiles of 128 leave a partial tile row.
    let (n, k, m) = (300usize, 384usize, 3usize);
    let (x, xv) = common::upload(&ctx, &common::random(m * k, 31), &[m, k], DType::F32);
    for (f, (format, grid)) in [(QuantFormat::Fp8E4m3, E4M3), (QuantFormat::Fp8E5m2, E5M2)]
        .into_iter()
        .enumerate()
    {
        // Every finite code (E4M3's NaN and E5M2's top exponent avoided).
        let codes: Vec<u8> = (0..n * k)
            .map(|i| {
                let c = ((i * 7919 + 13 * f) % 256) as u8;
                match format {
                    QuantFormat::Fp8E4m3 if c & 0x7f == 0x7f => c ^ 1,
                    QuantFormat::Fp8E5m2 if c & 0x7c == 0x7c => c & !0x40,
                    _ => c,
                }
            })
            .collect();
        let layouts = [
            ((n, k), 128),
            ((1, k), 128),
            ((128, 128), 128),
            ((64, 256), 64),
        ];
        for ((tile, block), axis) in layouts
            .into_iter()
            .flat_map(|l| [(l, QuantAxis::Rows), (l, QuantAxis::Columns)])
        {
            let tiles = n.div_ceil(tile.0) * k.div_ceil(tile.1);
            let scales: Vec<f32> = common::random(tiles, 40 + tiles as u64)
                .iter()
                .map(|r| 1e-3 * (1.5 + r))
                .collect();
            let host =
                HostQuant::fp8_from_scales(format, [n, k], &codes, &scales, tile, (axis, block))
                    .unwrap();
            // W [N, K], and the layout's values: W, or Wᵀ [K, N].
            let w: Vec<f32> = (0..n * k)
                .map(|i| {
                    let (r, c) = (i / k, i % k);
                    let s = scales[(r / tile.0) * k.div_ceil(tile.1) + c / tile.1];
                    grid.decode(u32::from(codes[i])) * s
                })
                .collect();
            let want: Vec<f32> = match axis {
                QuantAxis::Rows => w.clone(),
                _ => (0..n * k).map(|i| w[(i % n) * k + i / n]).collect(),
            };
            let what = format!("{format} tiles {tile:?} blocks of {block} {axis:?}");
            let q = loads_exactly(&ctx, &host, &want, &what);
            // x @ Wᵀ either way.
            let plan = ctx.matmul_quantized_plan(&x, &q).unwrap();
            ctx.fill(plan.output(), f32::NAN).unwrap();
            plan.run().unwrap();
            let (y, mag) = reference(&xv, &w, m, k, n, true);
            common::assert_close(
                &format!("{what}: {}", plan.label()),
                &plan.output().to_vec_blocking::<f32>().unwrap(),
                &y,
                |i| 4.0 * (k as f64).sqrt() * f64::from(f32::EPSILON) * mag[i],
            );
        }
    }
    // What does not fit: blocks straddling tiles, part sizes, empty tiles,
    // another format, a block the format cannot take.
    let codes = vec![0u8; 16 * 256];
    let bad = |format, codes: &[u8], scales: &[f32], tile, block| {
        let r = HostQuant::fp8_from_scales(
            format,
            [16, 256],
            codes,
            scales,
            tile,
            (QuantAxis::Rows, block),
        );
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    };
    bad(QuantFormat::Fp8E4m3, &codes, &[1.0; 4], (8, 96), 64);
    bad(QuantFormat::Fp8E4m3, &codes[1..], &[1.0; 2], (8, 256), 128);
    bad(QuantFormat::Fp8E4m3, &codes, &[1.0; 3], (8, 256), 128);
    bad(QuantFormat::Fp8E4m3, &codes, &[1.0; 2], (0, 256), 128);
    bad(QuantFormat::Mxfp8E4m3, &codes, &[1.0; 2], (8, 256), 32);
    bad(QuantFormat::Fp8E5m2, &codes, &[1.0; 2], (8, 256), 6);
    // Zero-sized weights hold nothing, as NumPy's would.
    for (shape, tile) in [([0usize, 256usize], (8, 256)), ([16, 0], (8, 128))] {
        let h = HostQuant::fp8_from_scales(
            QuantFormat::Fp8E4m3,
            shape,
            &[],
            &[],
            tile,
            (QuantAxis::Rows, 128),
        )
        .unwrap();
        assert!(h.dequantize().unwrap().is_empty() && h.data.is_empty() && h.scales.is_empty());
    }
    assert!(
        HostQuant::fp8_from_scales(
            QuantFormat::Fp8E5m2,
            [16, 256],
            &codes,
            &[1.0; 2],
            (8, 256),
            (QuantAxis::Columns, 128)
        )
        .is_ok()
    );
}

/// bf16 activations of more than 8 rows: staged to f16 for the f16 GEMM
/// (the tensor cores in the route; the tiled kernel here, forced, on any
/// `shader-f16` adapter) after the range test, the f32 product where it
/// fails. Normal values with a few below 2^-17 keep the f16 kernel (each
/// moved by at most 2^-24, in the bound); values below 2^-10 everywhere
/// (1e-6) and one beyond f16's range (1e6) take the f32 fallback, which f16
/// would visibly break (2^-24 steps, infinity). With a bias and ReLU; then
/// the route itself, against the same f64 product.
#[test]
fn bf16_activations_reach_the_f16_gemm_after_the_range_test() {
    let Some(ctx) = common::ctx() else { return };
    let (m, k, n) = (37usize, 96usize, 45usize);
    let wv = common::random(k * n, 61);
    let w32 = ctx.tensor(&wv, [k, n]).unwrap();
    let bias_v = common::random(n, 62);
    let bias = ctx.tensor(&bias_v, [n]).unwrap();
    for format in [QuantFormat::Mxfp4, QuantFormat::Fp8E4m3] {
        let q = ctx.quantize(&w32, format, QuantAxis::Columns).unwrap();
        let wd = q.to_host_blocking().unwrap().dequantize().unwrap();
        for (what, scale, planted) in [
            ("normal", 1.0f32, None),
            ("tiny", 1e-6, None),
            ("huge", 1.0, Some(1e6f32)),
        ] {
            let mut xv: Vec<f32> = wgtile::normal_values(m * k, 0.0, scale, 63)
                .into_iter()
                .map(|v| bf16::from_f32(v).to_f32())
                .collect();
            xv[5] = 1.01e-7 * scale;
            xv[m * k / 2] = -2.9e-7 * scale;
            if let Some(p) = planted {
                xv[m * k - 3] = p;
            }
            let x = ctx
                .tensor(
                    &xv.iter().map(|&v| bf16::from_f32(v)).collect::<Vec<_>>(),
                    [m, k],
                )
                .unwrap();
            let xh: Vec<f32> = xv.iter().map(|&v| bf16::from_f32(v).to_f32()).collect();
            let (want, mag) = reference(&xh, &wd, m, k, n, false);
            // f32 accumulation, plus, where the range test keeps the f16
            // kernel (a value of 2^-10 or more, none beyond f16's range),
            // 2^-24 for each x value f16 cannot hold, times the weight it
            // meets.
            let f16_kept = xh.iter().any(|v| f64::from(v.abs()) >= 2f64.powi(-10))
                && xh.iter().all(|v| v.abs() <= 65504.0);
            let moved = |v: f32| {
                let b = bf16::from_f32(v).to_f32();
                if !f16_kept || f16::from_f32(b).to_f32() == b {
                    0.0
                } else {
                    2f64.powi(-24)
                }
            };
            let bound = |i: usize| {
                let (r, c) = (i / n, i % n);
                let range: f64 = (0..k)
                    .map(|p| moved(xh[r * k + p]) * f64::from(wd[p * n + c].abs()))
                    .sum();
                4.0 * (k as f64).sqrt() * f64::from(f32::EPSILON) * mag[i] + range + 1e-30
            };
            let xabs: Vec<f32> = xh.iter().map(|v| v.abs()).collect();
            let (xsum, _) = reference(&xabs, &vec![1.0f32; n * k], m, k, n, false);
            let staged_weights = |i: usize| mag[i] * 2f64.powi(-11) + xsum[i] * 2f64.powi(-25);
            let relu = |v: f64| v.max(0.0);
            let with_epilogue: Vec<f64> = want
                .iter()
                .enumerate()
                .map(|(i, v)| relu(v + f64::from(bias_v[i % n])))
                .collect();
            let epilogue = Epilogue::new()
                .bias(&bias)
                .activation(wgtile::Activation::Relu);
            if ctx.profile().shader_f16 {
                let plan = ctx.quant_gemm_bf16_via_f16(&x, &q, &epilogue).unwrap();
                ctx.fill(plan.output(), f32::NAN).unwrap();
                plan.run().unwrap();
                common::assert_close(
                    &format!("{format} {what}, staged ({})", plan.label()),
                    &plan.output().to_vec_blocking::<f32>().unwrap(),
                    &with_epilogue,
                    |i| bound(i) + f64::from(f32::EPSILON) * f64::from(bias_v[i % n].abs()),
                );
            }
            let plan = ctx.matmul_quantized_plan(&x, &q).unwrap();
            ctx.fill(plan.output(), f32::NAN).unwrap();
            plan.run().unwrap();
            // On the tensor cores each weight is also rounded to f16 in the
            // tiles (exact for MX scales, 2^-11 of it for f32 scales).
            let tiles = plan.label().contains("decoded to f16");
            common::assert_close(
                &format!("{format} {what}, routed ({})", plan.label()),
                &plan.output().to_vec_blocking::<f32>().unwrap(),
                &want,
                |i| bound(i) + if tiles { staged_weights(i) } else { 0.0 },
            );
        }
    }
    // The forced entry refuses what is not bf16.
    let x16 = ctx.zeros([9, 96], DType::F16).unwrap();
    let q = ctx
        .quantize(&w32, QuantFormat::Mxfp4, QuantAxis::Columns)
        .unwrap();
    assert!(matches!(
        ctx.quant_gemm_bf16_via_f16(&x16, &q, &Epilogue::new()),
        Err(Error::InvalidArgument(_))
    ));
}

/// Rows of a quantised table by id: each gathered row is the dequantised
/// table's row bit for bit (i32 and u32 ids, any shape, both block axes,
/// rows of a multiple of 4 and not), ids outside the table (its length,
/// -1, far past it) give NaN rows, zero ids give an empty result; a table
/// that is not rank 2 and float ids are named errors.
#[test]
fn gather_quantized_rows_match_the_dequantised_table() {
    let Some(ctx) = common::ctx() else { return };
    let v = 37usize;
    let formats = [
        QuantFormat::Mxfp4,
        QuantFormat::Fp8E4m3,
        QuantFormat::Int4Zp,
        QuantFormat::Nvfp4,
    ];
    for (f, format) in formats.into_iter().enumerate() {
        for (h, axis) in [
            (64usize, QuantAxis::Rows),
            (70, QuantAxis::Rows),
            (64, QuantAxis::Columns),
        ] {
            let shape = [v, h];
            let t = ctx
                .tensor(&edge_values(v * h, 70 + f as u64, false), shape)
                .unwrap();
            let q = ctx.quantize(&t, format, axis).unwrap();
            let table = ctx
                .dequantize(&q)
                .unwrap()
                .to_vec_blocking::<f32>()
                .unwrap();
            let ids: Vec<i32> = vec![3, 0, 36, 37, -1, 5, 1000, 3, 12, 36, 0, 2_000_000_000];
            let what = format!("{format} [{v}, {h}] {axis:?}");
            let want_row = |id: i64| -> Vec<u32> {
                if (0..v as i64).contains(&id) {
                    table[id as usize * h..(id as usize + 1) * h]
                        .iter()
                        .map(|x| x.to_bits())
                        .collect()
                } else {
                    vec![f32::NAN.to_bits(); h]
                }
            };
            let want: Vec<u32> = ids.iter().flat_map(|&id| want_row(i64::from(id))).collect();
            let signed = ctx.tensor(&ids, [3, 4]).unwrap();
            let unsigned: Vec<u32> = ids.iter().map(|&i| i as u32).collect();
            let unsigned = ctx.tensor(&unsigned, [12]).unwrap();
            for (ids_t, out_shape) in [(&signed, vec![3, 4, h]), (&unsigned, vec![12, h])] {
                let got = ctx.gather_quantized(&q, ids_t).unwrap();
                assert_eq!(got.shape(), out_shape.as_slice(), "{what}");
                let bits: Vec<u32> = got
                    .to_vec_blocking::<f32>()
                    .unwrap()
                    .iter()
                    .map(|x| x.to_bits())
                    .collect();
                same_bits(&format!("{what} {}", ids_t.dtype()), &bits, &want);
            }
        }
    }
    let t = ctx.tensor(&common::random(8 * 32, 80), [8, 32]).unwrap();
    let q = ctx
        .quantize(&t, QuantFormat::Mxfp4, QuantAxis::Rows)
        .unwrap();
    let none = ctx.tensor::<i32>(&[], [0]).unwrap();
    assert_eq!(ctx.gather_quantized(&q, &none).unwrap().shape(), &[0, 32]);
    let float_ids = ctx.tensor(&[1.0f32], [1]).unwrap();
    assert!(matches!(
        ctx.gather_quantized(&q, &float_ids),
        Err(Error::DTypeMismatch { .. })
    ));
    let t3 = ctx
        .tensor(&common::random(2 * 4 * 32, 81), [2, 4, 32])
        .unwrap();
    let q3 = ctx
        .quantize(&t3, QuantFormat::Mxfp4, QuantAxis::Rows)
        .unwrap();
    let one = ctx.tensor(&[1i32], [1]).unwrap();
    assert!(matches!(
        ctx.gather_quantized(&q3, &one),
        Err(Error::InvalidArgument(_))
    ));
}

/// Random 4-bit codes `q` `[K, N]`, stored zero points `z` `[groups, N]`
/// below `z_top` and f16 scales of `scale` steps, with AutoGPTQ's packing
/// of `q` and `z` (eight values per int32, low bits first, along K for
/// qweight and along N for qzeros) and the scales' bytes.
struct Gptq {
    q: Vec<u32>,
    z: Vec<u32>,
    s: Vec<f16>,
    qweight: Vec<u8>,
    qzeros: Vec<u8>,
    scales: Vec<u8>,
}

fn gptq_parts(
    (k, n, groups): (usize, usize, usize),
    (z_top, scale): (u32, f32),
    seed: u64,
) -> Gptq {
    let mut rng = common::Lcg(seed);
    let q: Vec<u32> = (0..k * n).map(|_| rng.below_u32(16)).collect();
    let z: Vec<u32> = (0..groups * n).map(|_| rng.below_u32(z_top)).collect();
    let s: Vec<f16> = (0..groups * n)
        .map(|_| f16::from_f32((rng.below(1000) as f32 + 1.0) * scale))
        .collect();
    let mut qweight = vec![0u32; k / 8 * n];
    for kk in 0..k {
        for c in 0..n {
            qweight[kk / 8 * n + c] |= q[kk * n + c] << (4 * (kk % 8));
        }
    }
    let mut qzeros = vec![0u32; groups * n / 8];
    for g in 0..groups {
        for c in 0..n {
            qzeros[g * n / 8 + c / 8] |= z[g * n + c] << (4 * (c % 8));
        }
    }
    let bytes = |w: &[u32]| -> Vec<u8> { w.iter().flat_map(|v| v.to_le_bytes()).collect() };
    let scales = s.iter().flat_map(|v| v.to_bits().to_le_bytes()).collect();
    Gptq {
        qweight: bytes(&qweight),
        qzeros: bytes(&qzeros),
        scales,
        q,
        z,
        s,
    }
}

/// A 4-bit GPTQ checkpoint (qweight, qzeros and scales packed as AutoGPTQ
/// stores them, zero points less one or as they are, groups of 32 and 128
/// and one group over K = 1536) and the same values packed as AutoAWQ
/// stores them (along N in AWQ's column order) load as int4-with-zero-point
/// tensors whose values are `(q - z) * scale` bit for bit, on the host and
/// the GPU, and whose product is `x @ W`; sizes that do not fit are named
/// errors.
#[test]
fn gptq_and_awq_checkpoints_load_as_int4_with_zero_points() {
    let Some(ctx) = common::ctx() else { return };
    for (k, n, group, minus_one) in [
        (256usize, 48usize, 32usize, true),
        (384, 40, 128, false),
        (1536, 16, 1536, true),
    ] {
        let groups = k.div_ceil(group);
        let parts = gptq_parts((k, n, groups), (16, 1e-4), 0x9e37_79b9_7f4a_7c15);
        let (q, z, s) = (&parts.q, &parts.z, &parts.s);
        let (scale_bytes, bytes) = (&parts.scales, |w: &[u32]| -> Vec<u8> {
            w.iter().flat_map(|v| v.to_le_bytes()).collect()
        });
        let host = HostQuant::from_gptq(
            [k, n],
            (&parts.qweight, &parts.qzeros, scale_bytes),
            group,
            minus_one,
        )
        .unwrap();
        let want: Vec<f32> = (0..k * n)
            .map(|i| {
                let (kk, c) = (i / n, i % n);
                let zero = z[kk / group * n + c] + u32::from(minus_one);
                (q[i] as f32 - zero as f32) * s[kk / group * n + c].to_f32()
            })
            .collect();
        let what = format!("GPTQ [{k}, {n}] groups of {group}");
        let w = loads_exactly(&ctx, &host, &want, &what);
        // AWQ: along N, column 8c + ORDER[i] in bits 4i, zero points as
        // they are.
        const ORDER: [usize; 8] = [0, 2, 4, 6, 1, 3, 5, 7];
        let awq_pack = |v: &[u32], rows: usize| -> Vec<u32> {
            let mut out = vec![0u32; rows * n / 8];
            for r in 0..rows {
                for c8 in 0..n / 8 {
                    for (i, &j) in ORDER.iter().enumerate() {
                        out[r * n / 8 + c8] |= v[r * n + 8 * c8 + j] << (4 * i);
                    }
                }
            }
            out
        };
        let awq = HostQuant::from_awq(
            [k, n],
            (
                &bytes(&awq_pack(q, k)),
                &bytes(&awq_pack(z, groups)),
                scale_bytes,
            ),
            group,
        )
        .unwrap();
        let want_awq: Vec<f32> = (0..k * n)
            .map(|i| {
                let (kk, c) = (i / n, i % n);
                (q[i] as f32 - z[kk / group * n + c] as f32) * s[kk / group * n + c].to_f32()
            })
            .collect();
        loads_exactly(&ctx, &awq, &want_awq, &format!("AWQ [{k}, {n}]"));
        for m in [1usize, 11] {
            let (x, xv) = common::upload(
                &ctx,
                &common::random(m * k, 90 + m as u64),
                &[m, k],
                DType::F32,
            );
            let plan = ctx.matmul_quantized_plan(&x, &w).unwrap();
            ctx.fill(plan.output(), f32::NAN).unwrap();
            plan.run().unwrap();
            let (y, mag) = reference(&xv, &want, m, k, n, false);
            common::assert_close(
                &format!("{what} M = {m}: {}", plan.label()),
                &plan.output().to_vec_blocking::<f32>().unwrap(),
                &y,
                |i| 4.0 * (k as f64).sqrt() * f64::from(f32::EPSILON) * mag[i],
            );
        }
    }
    let w = vec![0u8; 256 / 8 * 16 * 4];
    let zeros = vec![0u8; 2 * 16 / 8 * 4];
    let scales = vec![0u8; 2 * 16 * 2];
    let bad = |kn: [usize; 2], parts: (&[u8], &[u8], &[u8]), group| {
        let r = HostQuant::from_gptq(kn, parts, group, true);
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    };
    bad([256, 16], (&w[4..], &zeros, &scales), 128);
    bad([256, 16], (&w, &zeros[4..], &scales), 128);
    bad([256, 16], (&w, &zeros, &scales[2..]), 128);
    bad([256, 12], (&w, &zeros, &scales), 128);
    bad([256, 16], (&w, &zeros, &scales), 0);
    bad([256, 16], (&w, &zeros, &scales), 12);
    bad([2048, 16], (&w, &zeros, &scales), 1100);
    assert!(HostQuant::from_gptq([256, 16], (&w, &zeros, &scales), 128, true).is_ok());
    assert!(HostQuant::from_awq([256, 16], (&w, &zeros, &scales), 128).is_ok());
    assert!(matches!(
        HostQuant::from_awq([256, 16], (&w, &zeros[4..], &scales), 128),
        Err(Error::InvalidArgument(_))
    ));
}

/// A GPTQ checkpoint quantised with act-order (`g_idx` naming each input
/// channel's group, in a random order): the loaded weight's row `p` is the
/// original row `order[p]` bit for bit, and `x[.., order] @ W'` is `x @ W`
/// (x reordered by `index_select` on the GPU); a `g_idx` of the wrong
/// length, with a group out of range or with unbalanced groups is a named
/// error.
#[test]
fn gptq_act_order_checkpoints_reorder_k() {
    let Some(ctx) = common::ctx() else { return };
    let (k, n, group) = (256usize, 24usize, 32usize);
    let groups = k / group;
    let mut rng = common::Lcg(0x2545_f491_4f6c_dd1d);
    // A random order of the channels; g_idx gives its p-th channel group p / 32.
    let mut perm: Vec<usize> = (0..k).collect();
    for i in (1..k).rev() {
        perm.swap(i, rng.below(i + 1));
    }
    let mut g_idx = vec![0i32; k];
    for (p, &c) in perm.iter().enumerate() {
        g_idx[c] = (p / group) as i32;
    }
    let packed = gptq_parts((k, n, groups), (15, 1e-3), 0x2545_f491);
    let (q, z, s) = (&packed.q, &packed.z, &packed.s);
    let parts = (&packed.qweight[..], &packed.qzeros[..], &packed.scales[..]);
    // W in the checkpoint's channel order: (q - (z + 1)) * s of its group.
    let w: Vec<f32> = (0..k * n)
        .map(|i| {
            let (kk, c) = (i / n, i % n);
            let g = g_idx[kk] as usize;
            (q[i] as f32 - (z[g * n + c] + 1) as f32) * s[g * n + c].to_f32()
        })
        .collect();
    let (host, order) = HostQuant::from_gptq_act_order([k, n], parts, &g_idx, group, true).unwrap();
    let mut sorted = order.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (0..k as u32).collect::<Vec<_>>(),
        "a permutation of K"
    );
    let want: Vec<u32> = (0..k * n)
        .map(|i| w[order[i / n] as usize * n + i % n].to_bits())
        .collect();
    let got: Vec<u32> = host
        .dequantize()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect();
    same_bits("act-order rows", &got, &want);
    let q_gpu = ctx.upload_quantized(&host).unwrap();
    let ids = ctx.tensor(&order, [k]).unwrap();
    for m in [1usize, 10] {
        let (x, xv) = common::upload(
            &ctx,
            &common::random(m * k, 95 + m as u64),
            &[m, k],
            DType::F32,
        );
        let xo = ctx.index_select(&x, 1, &ids).unwrap();
        let y = ctx
            .matmul_quantized(&xo, &q_gpu)
            .unwrap()
            .to_vec_blocking::<f32>()
            .unwrap();
        let (want_y, mag) = reference(&xv, &w, m, k, n, false);
        common::assert_close(&format!("act-order x @ W, M = {m}"), &y, &want_y, |i| {
            4.0 * (k as f64).sqrt() * f64::from(f32::EPSILON) * mag[i]
        });
    }
    // What does not fit.
    let bad = |g: &[i32]| {
        let r = HostQuant::from_gptq_act_order([k, n], parts, g, group, true);
        assert!(matches!(r, Err(Error::InvalidArgument(_))), "{r:?}");
    };
    bad(&g_idx[1..]);
    let mut out_of_range = g_idx.clone();
    out_of_range[7] = groups as i32;
    bad(&out_of_range);
    let mut negative = g_idx.clone();
    negative[3] = -1;
    bad(&negative);
    let mut unbalanced = g_idx.clone();
    let (a, b) = (perm[0], perm[group]);
    unbalanced[b] = unbalanced[a];
    bad(&unbalanced);
}
