//! The tensor-core kernels (forward, f32 split forward, backward, decode) on
//! adapters with the 16x16 f16/f32 cooperative matrix, and the same
//! algorithms with emulated matrix operations on any adapter with f16 and
//! subgroups (lavapipe included); their errors and the dispatcher's choice.

use crate::common;
use crate::helpers::{
    Case, HostMask, check_backward, check_backward_kernel, check_decode, mask_values, max_err,
    reference, run_poisoned,
};

use wgtile::tune::attention::BackwardCoopTiles;
use wgtile::{
    AdapterProfile, AttentionKernel, AttentionOptions, Context, DType, DiagonalAlignment, Error,
};

// Tensor-core flash kernel (AttentionKernel::FlashCoop). Runs only where the
// adapter has the 16x16 f16/f32 cooperative matrix (the H200 with
// WGTILE_COOPERATIVE_MATRIX=1); elsewhere the GPU cases skip with a note.
// Same error rule as `check`: within 2x the naive f16 path's error (plus
// the f16 slack) against f64, outputs poisoned with NaN.

/// How `check_coop_with` runs the kernel: on tensor cores, or emulated
/// (`AttentionKernel::FlashCoopEmulated`) on the tiles lavapipe runs
/// correctly at the shape, or emulated on every tile.
#[derive(Clone, Copy, PartialEq, Eq)]
enum CoopRun {
    TensorCores,
    Emulated,
    EmulatedAllTiles,
}

/// Whether this adapter runs the tensor-core kernel (a note when it does not).
fn coop_ctx(test: &str) -> Option<common::TestCtx> {
    let ctx = common::ctx()?;
    if !wgtile::tune::has_coop_f16(ctx.profile()) {
        eprintln!(
            "{test}: skipped, the adapter has no 16x16 f16/f32 cooperative matrix \
             (run on a GPU with WGTILE_COOPERATIVE_MATRIX=1)"
        );
        return None;
    }
    Some(ctx)
}

/// A context for the emulated tensor-core kernels (any adapter with f16 and
/// subgroups), or `None` (after saying why) for `test` to skip.
fn emulation_ctx(test: &str) -> Option<common::TestCtx> {
    let ctx = common::ctx()?;
    let p = ctx.profile();
    if !(p.shader_f16 && p.subgroups) {
        eprintln!("{test}: skipped, needs f16 and subgroups");
        return None;
    }
    Some(ctx)
}

/// Checks the tensor-core kernel (default tiles, every other candidate,
/// sweep and test tile that fits, and `Auto`, which must pick it) against
/// f64 on the given inputs (`data`: q, k, v values; random when `None`).
/// `emulated`: the same algorithm with emulated matrix operations
/// (`AttentionKernel::FlashCoopEmulated`, any adapter with f16 and
/// subgroups) instead. Returns the first tile's O error.
#[allow(clippy::too_many_arguments)]
fn check_coop_with(
    ctx: &Context,
    c: &Case,
    opts: &AttentionOptions,
    mask: Option<HostMask>,
    seed: u64,
    data: Option<[Vec<f32>; 3]>,
    mode: CoopRun,
) -> f64 {
    let emulated = mode != CoopRun::TensorCores;
    // f32: the split kernel (each value as two halves, three products).
    assert!(matches!(c.dtype, DType::F16 | DType::F32));
    let [qd, kd, vd] = data.unwrap_or_else(|| {
        [
            common::random(c.b * c.hq * c.sq * c.d, seed),
            common::random(c.b * c.hkv * c.sk * c.d, seed + 1),
            common::random(c.b * c.hkv * c.sk * c.dv, seed + 2),
        ]
    });
    let (qt, q) = common::upload(ctx, &qd, &[c.b, c.hq, c.sq, c.d], c.dtype);
    let (kt, k) = common::upload(ctx, &kd, &[c.b, c.hkv, c.sk, c.d], c.dtype);
    let (vt, v) = common::upload(ctx, &vd, &[c.b, c.hkv, c.sk, c.dv], c.dtype);
    let mut opts = opts.clone().with_lse();
    let mut host_mask = None;
    if let Some(m) = mask {
        let (t, vals) = common::upload(ctx, &m.data, &m.shape, c.dtype);
        opts.mask = Some(if m.additive {
            wgtile::AttentionMask::Additive(t)
        } else {
            wgtile::AttentionMask::Boolean(t)
        });
        host_mask = Some(HostMask { data: vals, ..m });
    }
    let (want_o, want_lse) = reference(c, &q, &k, &v, &opts, host_mask.as_ref());
    let naive = opts.clone().kernel(AttentionKernel::Naive);
    let (naive_o, naive_lse) = run_poisoned(ctx, &qt, &kt, &vt, &naive);
    // f32 is held to f32's accuracy: the split products must not cost more
    // than a few ulps over the naive kernel's error.
    let (slack, bound) = if c.dtype == DType::F32 {
        (2e-6, 1e-4)
    } else {
        (1e-3, 1e-2)
    };
    let largest = |xs: &[f64]| {
        xs.iter()
            .filter(|x| x.is_finite())
            .fold(1.0f64, |m, x| m.max(x.abs()))
    };
    // Errors count relative to the scale of what they are in (1 for the
    // unit-sized random data; v's scale for `scaled_qkv`).
    let (mag_o, mag_lse) = (largest(&want_o), largest(&want_lse));
    let en = max_err(&naive_o, &want_o);
    let enl = max_err(&naive_lse, &want_lse);
    let what = format!("{c:?} {opts:?}");
    let bound_o = bound * mag_o.max(mag_lse);
    assert!(
        en <= bound_o,
        "{what}: naive O error {en:e} over {bound_o:e}"
    );
    assert!(enl <= bound * mag_lse, "{what}: naive lse error {enl:e}");
    let (slack_o, slack_lse) = (slack * mag_o, slack * mag_lse);

    let auto_label = ctx
        .attention_plan(&qt, &kt, &vt, &opts)
        .unwrap()
        .0
        .label()
        .to_string();
    // Auto takes the tensor cores wherever they run this problem (beyond
    // decode shapes, which have their own kernel).
    if !emulated && c.sq > wgtile::tune::attention::DECODE_MAX_ROWS {
        assert!(
            auto_label.contains("tensor cores"),
            "{what}: Auto picked {auto_label}"
        );
    }
    let mut first = None;
    for tiles in wgtile::tune::attention::FLASH_COOP_CANDIDATES
        .into_iter()
        .chain(wgtile::tune::attention::FLASH_COOP_SWEEP)
        .chain(wgtile::tune::attention::FLASH_COOP_TEST_TILES)
    {
        // The emulated kernel is slow on lavapipe: the default tile (one
        // 16-key block per fragment column) and the two-fragment 32-key
        // test tile cover its code paths (all tiles with `EmulatedAllTiles`).
        if mode == CoopRun::Emulated
            && tiles != wgtile::tune::attention::FLASH_COOP_CANDIDATES[0]
            && !wgtile::tune::attention::FLASH_COOP_TEST_TILES.contains(&tiles)
        {
            continue;
        }
        let fits = if emulated {
            tiles.fits_emulated(ctx.profile(), c.d, c.dv, c.dtype)
        } else {
            tiles.fits(ctx.profile(), c.d, c.dv, c.dtype)
        };
        if !fits {
            continue;
        }
        let mut forced = opts.clone().coop_tiles(tiles);
        if emulated {
            forced.kernel = AttentionKernel::FlashCoopEmulated;
        }
        let (o, lse) = run_poisoned(ctx, &qt, &kt, &vt, &forced);
        let e = max_err(&o, &want_o);
        let el = max_err(&lse, &want_lse);
        assert!(
            e <= 2.0 * en + slack_o,
            "{what}: coop {tiles} O error {e:e} vs naive {en:e}"
        );
        assert!(
            el <= 2.0 * enl + slack_lse,
            "{what}: coop {tiles} lse error {el:e} vs naive {enl:e}"
        );
        first.get_or_insert(e);
    }
    first.expect("at least one coop tile fits")
}

fn check_coop(
    ctx: &Context,
    c: &Case,
    opts: &AttentionOptions,
    mask: Option<HostMask>,
    seed: u64,
) -> f64 {
    check_coop_with(ctx, c, opts, mask, seed, None, CoopRun::TensorCores)
}

fn f16_case(b: usize, hq: usize, hkv: usize, sq: usize, sk: usize, d: usize, dv: usize) -> Case {
    let mut c = Case::new(b, hq, hkv, sq, sk, d, dv);
    c.dtype = DType::F16;
    c
}

#[test]
fn coop_sizes_and_head_dims() {
    let Some(ctx) = coop_ctx("coop_sizes_and_head_dims") else {
        return;
    };
    let sizes = [17usize, 100, 129, 300];
    let mut seed = 1000;
    for &sq in &sizes {
        for &sk in &sizes {
            for (d, dv) in [(64, 64), (128, 128), (64, 128), (128, 64)] {
                seed += 3;
                check_coop(
                    &ctx,
                    &f16_case(2, 2, 1, sq, sk, d, dv),
                    &AttentionOptions::new(),
                    None,
                    seed,
                );
            }
        }
    }
    // The smallest and largest head dims, and one not a power of two.
    for (d, dv) in [(16, 16), (256, 256), (80, 48), (256, 64)] {
        seed += 3;
        check_coop(
            &ctx,
            &f16_case(1, 2, 2, 129, 100, d, dv),
            &AttentionOptions::new(),
            None,
            seed,
        );
    }
}

#[test]
fn coop_causal_window_softcap() {
    let Some(ctx) = coop_ctx("coop_causal_window_softcap") else {
        return;
    };
    let mut seed = 2000;
    for (sq, sk) in [(100, 300), (300, 100), (129, 129), (17, 129)] {
        for align in [DiagonalAlignment::TopLeft, DiagonalAlignment::BottomRight] {
            for (d, dv) in [(64, 64), (128, 64)] {
                seed += 3;
                let c = f16_case(1, 2, 1, sq, sk, d, dv);
                check_coop(&ctx, &c, &AttentionOptions::new().causal(align), None, seed);
                check_coop(
                    &ctx,
                    &c,
                    &AttentionOptions::new()
                        .alignment(align)
                        .window(Some(37), Some(5)),
                    None,
                    seed + 1,
                );
                check_coop(
                    &ctx,
                    &c,
                    &AttentionOptions::new()
                        .causal(align)
                        .window(Some(70), Some(0))
                        .softcap(5.0)
                        .scale(3.0),
                    None,
                    seed + 2,
                );
            }
        }
    }
}

#[test]
fn coop_masks_key_lengths_gqa() {
    let Some(ctx) = coop_ctx("coop_masks_key_lengths_gqa") else {
        return;
    };
    // Boolean mask [B, 1, Sq, Sk] and additive [Sq, Sk] (with -inf entries).
    let c = f16_case(2, 4, 2, 100, 129, 64, 128);
    let data = mask_values(2 * 100 * 129, 3001, false);
    check_coop(
        &ctx,
        &c,
        &AttentionOptions::new(),
        Some(HostMask {
            additive: false,
            dims: [2, 1, 100, 129],
            shape: vec![2, 1, 100, 129],
            data,
        }),
        3002,
    );
    let data = mask_values(100 * 129, 3003, true);
    check_coop(
        &ctx,
        &c,
        &AttentionOptions::new().causal(DiagonalAlignment::BottomRight),
        Some(HostMask {
            additive: true,
            dims: [1, 1, 100, 129],
            shape: vec![100, 129],
            data,
        }),
        3004,
    );
    // Key lengths, including 0 (rows with no key: zeros, lse = -inf), with
    // both alignments.
    let c = f16_case(3, 2, 1, 129, 300, 128, 128);
    check_coop(
        &ctx,
        &c,
        &AttentionOptions::new().key_lengths(&[300, 0, 77]),
        None,
        3005,
    );
    check_coop(
        &ctx,
        &c,
        &AttentionOptions::new()
            .key_lengths(&[150, 17, 0])
            .causal(DiagonalAlignment::BottomRight),
        None,
        3006,
    );
    check_coop(
        &ctx,
        &c,
        &AttentionOptions::new()
            .key_lengths(&[64, 300, 1])
            .causal(DiagonalAlignment::TopLeft),
        None,
        3007,
    );
    // GQA and MQA.
    check_coop(
        &ctx,
        &f16_case(1, 6, 2, 300, 129, 64, 64),
        &AttentionOptions::new().causal(DiagonalAlignment::TopLeft),
        None,
        3008,
    );
    check_coop(
        &ctx,
        &f16_case(2, 3, 1, 17, 300, 128, 128),
        &AttentionOptions::new(),
        None,
        3009,
    );
}

/// Q, K, V whose logits grow along the key axis: q ~ 0.5, k rows ramp from
/// -1 to 1 along the keys, so at scale 1 logit(j) grows by ~ d / sk per key
/// (tens of log2 units per block): every block moves the softmax's
/// reference maximum.
fn ramp_qkv(c: &Case) -> [Vec<f32>; 3] {
    let (sk, d) = (c.sk, c.d);
    let noise_q = common::random(c.b * c.hq * c.sq * d, 4000);
    let noise_k = common::random(c.b * c.hkv * sk * d, 4001);
    let q: Vec<f32> = noise_q.iter().map(|x| 0.5 + 0.05 * x).collect();
    let k: Vec<f32> = noise_k
        .iter()
        .enumerate()
        .map(|(i, x)| {
            let j = (i / d) % sk;
            -1.0 + 2.0 * j as f32 / sk as f32 + 0.05 * x
        })
        .collect();
    let v = common::random(c.b * c.hkv * sk * c.dv, 4002);
    [q, k, v]
}

/// The conditional rescaling of the output: logits that grow along the key
/// axis (each block's maximum beats the reference by far more than 2^8), and
/// random logits at scale 100.
#[test]
fn coop_rescale_triggers() {
    let Some(ctx) = coop_ctx("coop_rescale_triggers") else {
        return;
    };
    for (sq, sk, d) in [(100, 300, 64), (129, 129, 128), (17, 300, 128)] {
        let c = f16_case(1, 2, 1, sq, sk, d, d);
        let [q, k, v] = ramp_qkv(&c);
        for opts in [
            AttentionOptions::new().scale(1.0),
            AttentionOptions::new()
                .scale(1.0)
                .causal(DiagonalAlignment::BottomRight),
        ] {
            check_coop_with(
                &ctx,
                &c,
                &opts,
                None,
                0,
                Some([q.clone(), k.clone(), v.clone()]),
                CoopRun::TensorCores,
            );
        }
        // Decreasing logits (no rescale after the first block) for contrast.
        let k_rev: Vec<f32> = k.iter().map(|x| -x).collect();
        check_coop_with(
            &ctx,
            &c,
            &AttentionOptions::new().scale(1.0),
            None,
            0,
            Some([q.clone(), k_rev, v.clone()]),
            CoopRun::TensorCores,
        );
        check_coop(&ctx, &c, &AttentionOptions::new().scale(100.0), None, 4003);
    }
}

/// Packed [B, S, H * D] layout through the tensor-core kernel equals the
/// heads-first result bit for bit (same kernel, same arithmetic).
#[test]
fn coop_packed_layout_matches_heads_first() {
    let Some(ctx) = coop_ctx("coop_packed_layout_matches_heads_first") else {
        return;
    };
    let (b, hq, hkv, sq, sk, d) = (2, 4, 2, 100, 129, 64);
    let qd = common::random(b * hq * sq * d, 5000);
    let kd = common::random(b * hkv * sk * d, 5001);
    let vd = common::random(b * hkv * sk * d, 5002);
    // Heads-first copies of the packed data.
    let to_heads = |x: &[f32], h: usize, s: usize| {
        let mut out = vec![0.0; x.len()];
        for bi in 0..b {
            for si in 0..s {
                for hi in 0..h {
                    for di in 0..d {
                        out[((bi * h + hi) * s + si) * d + di] =
                            x[((bi * s + si) * h + hi) * d + di];
                    }
                }
            }
        }
        out
    };
    let (qp, _) = common::upload(&ctx, &qd, &[b, sq, hq * d], DType::F16);
    let (kp, _) = common::upload(&ctx, &kd, &[b, sk, hkv * d], DType::F16);
    let (vp, _) = common::upload(&ctx, &vd, &[b, sk, hkv * d], DType::F16);
    let (qh, _) = common::upload(&ctx, &to_heads(&qd, hq, sq), &[b, hq, sq, d], DType::F16);
    let (kh, _) = common::upload(&ctx, &to_heads(&kd, hkv, sk), &[b, hkv, sk, d], DType::F16);
    let (vh, _) = common::upload(&ctx, &to_heads(&vd, hkv, sk), &[b, hkv, sk, d], DType::F16);
    let opts = AttentionOptions::new()
        .causal(DiagonalAlignment::BottomRight)
        .kernel(AttentionKernel::FlashCoop);
    let (packed, _) = run_poisoned(&ctx, &qp, &kp, &vp, &opts.clone().packed(hq, hkv));
    let (heads, _) = run_poisoned(&ctx, &qh, &kh, &vh, &opts);
    let packed_as_heads = to_heads(&packed, hq, sq);
    assert_eq!(packed_as_heads.len(), heads.len());
    for (i, (a, e)) in packed_as_heads.iter().zip(&heads).enumerate() {
        assert!(a == e, "element {i}: packed {a} vs heads-first {e}");
    }
}

/// Forcing the tensor-core kernel where it cannot run is an error (these run
/// on every adapter); the dispatcher's coop choice on synthetic profiles.
#[test]
fn coop_errors_and_dispatch() {
    use wgtile::tune::attention::{FLASH_COOP_CANDIDATES, flash_coop_tiles};
    let h200 = AdapterProfile::fake_h200().named("synthetic");
    let t = flash_coop_tiles(&h200, 128, 128, DType::F16).unwrap();
    assert_eq!(t, FLASH_COOP_CANDIDATES[0]);
    assert!(t.workgroup_bytes(128, 128, DType::F16) <= 48 * 1024);
    // Head dims up to 64: two subgroups first (measured faster there).
    for (d, dv) in [(64, 64), (32, 64), (16, 16)] {
        let t = flash_coop_tiles(&h200, d, dv, DType::F16).unwrap();
        assert_eq!(t, wgtile::tune::attention::FLASH_COOP_SMALL_DIMS);
    }
    assert_eq!(
        flash_coop_tiles(&h200, 80, 64, DType::F16).unwrap(),
        FLASH_COOP_CANDIDATES[0]
    );
    // D = 256: the default 16-key block fits; a 64-key one would not.
    let t = flash_coop_tiles(&h200, 256, 256, DType::F16).unwrap();
    assert_eq!(t, FLASH_COOP_CANDIDATES[0]);
    assert!(t.workgroup_bytes(256, 256, DType::F16) <= 48 * 1024);
    let wide = wgtile::tune::attention::FlashCoopTiles {
        bc: 64,
        ..FLASH_COOP_CANDIDATES[0]
    };
    assert!(wide.workgroup_bytes(256, 256, DType::F16) > 48 * 1024);
    // A 32 KiB adapter (lavapipe-like, with tensor cores) still gets a tile.
    let small = AdapterProfile::fake_gpu()
        .named("synthetic")
        .with_units(8)
        .with_invocations(256)
        .with_workgroup_storage(32 * 1024)
        .with_tensor_cores();
    let t = flash_coop_tiles(&small, 128, 128, DType::F16).unwrap();
    assert!(t.workgroup_bytes(128, 128, DType::F16) <= 32 * 1024);
    assert!(flash_coop_tiles(&h200, 80, 72, DType::F16).is_none());
    assert!(flash_coop_tiles(&h200, 272, 64, DType::F16).is_none());
    // f32 (the split kernel): its own first tile (4 subgroups), at every head dim.
    for (d, dv) in [(128, 128), (64, 64)] {
        let t = flash_coop_tiles(&h200, d, dv, DType::F32).unwrap();
        assert_eq!(t, wgtile::tune::attention::FLASH_COOP_F32);
        assert!(t.workgroup_bytes(d as u32, dv as u32, DType::F32) <= 48 * 1024);
    }
    let no_tc = AdapterProfile::fake_gpu().named("synthetic");
    assert!(flash_coop_tiles(&no_tc, 128, 128, DType::F16).is_none());

    let Some(ctx) = common::ctx() else { return };
    if !ctx.profile().shader_f16 {
        return;
    }
    let q = ctx
        .rand_uniform([1, 2, 33, 64], -1.0, 1.0, DType::F16, 1)
        .unwrap();
    let k = ctx
        .rand_uniform([1, 2, 40, 64], -1.0, 1.0, DType::F16, 2)
        .unwrap();
    let forced = AttentionOptions::new().kernel(AttentionKernel::FlashCoop);
    let has = wgtile::tune::has_coop_f16(ctx.profile());
    let r = ctx.attention_plan(&q, &k, &k, &forced);
    if has {
        assert!(r.is_ok());
        // Head dims not multiples of 16.
        let q2 = ctx
            .rand_uniform([1, 2, 33, 72], -1.0, 1.0, DType::F16, 3)
            .unwrap();
        let k2 = ctx
            .rand_uniform([1, 2, 40, 72], -1.0, 1.0, DType::F16, 4)
            .unwrap();
        assert!(matches!(
            ctx.attention_plan(&q2, &k2, &k2, &forced),
            Err(Error::InvalidArgument(_))
        ));
    } else {
        assert!(
            matches!(r, Err(Error::UnsupportedFeature { .. })),
            "{:?}",
            r.map(|p| p.0.label().to_string())
        );
        // Auto falls back to the scalar flash kernel.
        let (plan, _) = ctx
            .attention_plan(&q, &k, &k, &AttentionOptions::new())
            .unwrap();
        assert!(!plan.label().contains("tensor cores"), "{}", plan.label());
    }
    // f32 inputs: the split kernel where tensor cores run (Auto too).
    let q32 = ctx
        .rand_uniform([1, 2, 33, 64], -1.0, 1.0, DType::F32, 5)
        .unwrap();
    let r = ctx.attention_plan(&q32, &q32, &q32, &forced);
    if has {
        let label = r.unwrap().0.label().to_string();
        assert!(label.contains("f32 as f16 pairs"), "{label}");
    } else {
        assert!(
            matches!(r, Err(Error::UnsupportedFeature { .. })),
            "{:?}",
            r.map(|p| p.0.label().to_string())
        );
    }
}

/// The tensor-core kernel's algorithm on any adapter (lavapipe included):
/// the same shader with the matrix operations emulated per invocation
/// (`AttentionKernel::FlashCoopEmulated`), on every tile that fits, against
/// f64 with the same rule. Covers odd sizes, Dv != D, causal both
/// alignments, window + softcap, an additive mask, key lengths with 0, GQA,
/// the rescale trigger (growing logits, scale 100), D = 16, 80 and 256 (Q
/// staged in passes, a partial last one at 80), and two fragments per
/// subgroup (the test tile, small shapes only: see `check_coop_with`).
///
/// Ignored for time only: it compiles every tile's emulated kernel and
/// takes about 4 minutes on lavapipe (2 cores); `coop_algorithm_emulated_small`
/// is the CI-sized part. History: while the emulation loaded each B
/// fragment into 256 private floats per invocation, lavapipe (Mesa 22.3)
/// returned wrong sums here once a problem had more than a few key blocks
/// (passing under LP_NUM_THREADS=1 with one workgroup): suspected its
/// per-invocation state across barriers. Since B fragments are references
/// read from workgroup memory by `mma`, the whole test passes on lavapipe
/// (248 s).
#[test]
#[ignore = "slow: every tile's emulated kernel, about 4 minutes on lavapipe"]
fn coop_algorithm_emulated() {
    let Some(ctx) = emulation_ctx("coop_algorithm_emulated") else {
        return;
    };
    let emu = |c: &Case, opts: &AttentionOptions, mask: Option<HostMask>, seed: u64| {
        check_coop_with(&ctx, c, opts, mask, seed, None, CoopRun::EmulatedAllTiles)
    };
    emu(
        &f16_case(2, 2, 1, 100, 129, 64, 64),
        &AttentionOptions::new(),
        None,
        6000,
    );
    emu(
        &f16_case(1, 2, 1, 129, 100, 128, 64),
        &AttentionOptions::new().causal(DiagonalAlignment::TopLeft),
        None,
        6001,
    );
    emu(
        &f16_case(1, 2, 1, 17, 129, 64, 128),
        &AttentionOptions::new().causal(DiagonalAlignment::BottomRight),
        None,
        6002,
    );
    emu(
        &f16_case(1, 2, 1, 100, 129, 64, 64),
        &AttentionOptions::new()
            .causal(DiagonalAlignment::BottomRight)
            .window(Some(37), Some(5))
            .softcap(5.0)
            .scale(3.0),
        None,
        6003,
    );
    let data = mask_values(100 * 129, 6004, true);
    emu(
        &f16_case(2, 4, 2, 100, 129, 64, 64),
        &AttentionOptions::new().key_lengths(&[0, 77]),
        Some(HostMask {
            additive: true,
            dims: [1, 1, 100, 129],
            shape: vec![100, 129],
            data,
        }),
        6005,
    );
    emu(
        &f16_case(1, 2, 1, 100, 129, 64, 64),
        &AttentionOptions::new().scale(100.0),
        None,
        6006,
    );
    emu(
        &f16_case(1, 1, 1, 17, 40, 16, 16),
        &AttentionOptions::new(),
        None,
        6007,
    );
    // Two fragments per subgroup (the test tile), and Q staged in passes
    // with a partial last one (D = 80 on the default tile: 32 + 32 + 16).
    emu(
        &f16_case(1, 2, 1, 40, 64, 32, 32),
        &AttentionOptions::new().causal(DiagonalAlignment::BottomRight),
        None,
        6012,
    );
    emu(
        &f16_case(1, 2, 1, 100, 129, 80, 48),
        &AttentionOptions::new(),
        None,
        6013,
    );
    emu(
        &f16_case(1, 1, 1, 17, 40, 256, 256),
        &AttentionOptions::new(),
        None,
        6008,
    );
    // Logits growing along the keys: the output is rescaled every block.
    let (sq, sk, d) = (64, 129, 64);
    let c = f16_case(1, 1, 1, sq, sk, d, d);
    let q: Vec<f32> = common::random(sq * d, 6009)
        .iter()
        .map(|x| 0.5 + 0.05 * x)
        .collect();
    let k: Vec<f32> = common::random(sk * d, 6010)
        .iter()
        .enumerate()
        .map(|(i, x)| -1.0 + 2.0 * (i / d) as f32 / sk as f32 + 0.05 * x)
        .collect();
    let v = common::random(sk * d, 6011);
    check_coop_with(
        &ctx,
        &c,
        &AttentionOptions::new().scale(1.0),
        None,
        0,
        Some([q, k, v]),
        CoopRun::EmulatedAllTiles,
    );
}

/// The emulated tensor-core algorithm, CI-sized (`coop_algorithm_emulated`
/// is the whole set): several query and key blocks, partial blocks, GQA,
/// causal in both alignments, a window with soft-cap, an additive mask with
/// key lengths (one 0), D = 80 (Q staged in passes), two fragments per
/// subgroup. Runs on every adapter with f16 and subgroups (about 30 s on
/// lavapipe with a cold shader cache; the real kernel's suite runs on the
/// H200).
#[test]
fn coop_algorithm_emulated_small() {
    let Some(ctx) = emulation_ctx("coop_algorithm_emulated_small") else {
        return;
    };
    let emu = |c: &Case, opts: &AttentionOptions, seed: u64| {
        check_coop_with(&ctx, c, opts, None, seed, None, CoopRun::Emulated)
    };
    // The conditional rescale of O (every block moves the reference max).
    let c = f16_case(1, 2, 1, 17, 100, 32, 32);
    check_coop_with(
        &ctx,
        &c,
        &AttentionOptions::new().scale(1.0),
        None,
        0,
        Some(ramp_qkv(&c)),
        CoopRun::Emulated,
    );
    emu(
        &f16_case(1, 2, 2, 65, 100, 64, 64),
        &AttentionOptions::new().causal(DiagonalAlignment::TopLeft),
        7001,
    );
    emu(
        &f16_case(1, 2, 1, 40, 64, 32, 32),
        &AttentionOptions::new().causal(DiagonalAlignment::BottomRight),
        7003,
    );
    emu(
        &f16_case(1, 1, 1, 70, 90, 80, 48),
        &AttentionOptions::new()
            .window(Some(20), Some(5))
            .softcap(2.5),
        7005,
    );
    let data = mask_values(3 * 33 * 50, 7006, true);
    let m = HostMask {
        additive: true,
        dims: [3, 1, 33, 50],
        shape: vec![3, 1, 33, 50],
        data,
    };
    check_coop_with(
        &ctx,
        &f16_case(3, 2, 2, 33, 50, 32, 32),
        &AttentionOptions::new().key_lengths(&[50, 0, 21]),
        Some(m),
        7006,
        None,
        CoopRun::Emulated,
    );
}

/// Random q, k, v for `c` at magnitudes f16 cannot hold on its own: q up
/// to 1e5 (past 65504), k down to 1e-5, v at 3e4; the split kernel's
/// per-head exponents must bring each into range (without them q's hi
/// halves overflow and k's lo halves fall into f16's subnormals).
fn scaled_qkv(c: &Case, seed: u64) -> [Vec<f32>; 3] {
    let scale = |n: usize, seed: u64, m: f32| -> Vec<f32> {
        common::random(n, seed).into_iter().map(|x| x * m).collect()
    };
    [
        scale(c.b * c.hq * c.sq * c.d, seed, 1e5),
        scale(c.b * c.hkv * c.sk * c.d, seed + 1, 1e-5),
        scale(c.b * c.hkv * c.sk * c.dv, seed + 2, 3e4),
    ]
}

/// The f32 form of the tensor-core kernel (each value split into two
/// halves, three products) with emulated matrix operations, on any adapter
/// with f16 and subgroups: held to f32's accuracy (at most twice the naive
/// f32 kernel's error plus 2e-6, relative to the output's scale) on odd
/// sizes, Dv != D, GQA, causal, a mask with key lengths, the rescale and
/// magnitudes outside f16's range.
#[test]
fn coop_f32_split_emulated() {
    let Some(ctx) = emulation_ctx("coop_f32_split_emulated") else {
        return;
    };
    let f32_case = |b, hq, hkv, sq, sk, d, dv| Case::new(b, hq, hkv, sq, sk, d, dv);
    let emu = |c: &Case, opts: &AttentionOptions, mask: Option<HostMask>, seed: u64, data| {
        check_coop_with(&ctx, c, opts, mask, seed, data, CoopRun::Emulated)
    };
    emu(
        &f32_case(2, 2, 1, 33, 70, 32, 48),
        &AttentionOptions::new(),
        None,
        8000,
        None,
    );
    emu(
        &f32_case(1, 2, 2, 65, 40, 32, 32),
        &AttentionOptions::new().causal(DiagonalAlignment::BottomRight),
        None,
        8001,
        None,
    );
    let data = mask_values(2 * 17 * 50, 8002, true);
    emu(
        &f32_case(2, 2, 1, 17, 50, 16, 16),
        &AttentionOptions::new().key_lengths(&[50, 23]),
        Some(HostMask {
            additive: true,
            dims: [2, 1, 17, 50],
            shape: vec![2, 1, 17, 50],
            data,
        }),
        8002,
        None,
    );
    let c = f32_case(1, 2, 1, 17, 100, 32, 32);
    emu(
        &c,
        &AttentionOptions::new().scale(1.0),
        None,
        0,
        Some(ramp_qkv(&c)),
    );
    let c = f32_case(1, 4, 2, 29, 37, 32, 16);
    emu(
        &c,
        &AttentionOptions::new(),
        None,
        0,
        Some(scaled_qkv(&c, 8004)),
    );
}

/// Infinities and NaN in f32 inputs of the tensor-core kernel (each value
/// split into halves, which cannot carry them: inf's low half is inf -
/// inf). The split-scale pass flags them and the guarded f32 flash kernel
/// recomputes O and lse, so every non-finite output (+inf, -inf, NaN) sits
/// where the f32 flash kernel puts it and the finite ones agree. Finite
/// inputs must keep the split kernel's result: the guarded kernel leaves
/// it alone, so it differs from the flash kernel's in its last bits
/// somewhere (a fallback that always ran would fail here). A value past a
/// batch's key length is never read and raises no flag. Emulated matrix
/// operations on any adapter with f16 and subgroups, tensor cores where
/// present.
#[test]
fn coop_f32_split_non_finite_inputs() {
    let Some(ctx) = emulation_ctx("coop_f32_split_non_finite_inputs") else {
        return;
    };
    let mut kernels = vec![AttentionKernel::FlashCoopEmulated];
    if wgtile::tune::has_coop_f16(ctx.profile()) {
        kernels.push(AttentionKernel::FlashCoop);
    }
    let (b, hq, hkv, sq, sk, d, dv) = (2, 2, 1, 33, 70, 32, 48);
    let q_at = |z: usize, h: usize, i: usize, e: usize| ((z * hq + h) * sq + i) * d + e;
    let k_at = |z: usize, j: usize, e: usize| (z * hkv * sk + j) * d + e;
    let v_at = |z: usize, j: usize, e: usize| (z * hkv * sk + j) * dv + e;
    let base = [
        common::random(b * hq * sq * d, 9300),
        common::random(b * hkv * sk * d, 9301),
        common::random(b * hkv * sk * dv, 9302),
    ];
    // (operand, index, value) edits; per case: name, edits, key lengths,
    // whether the flag is set.
    type Edit = (usize, usize, f32);
    type NonFiniteCase = (&'static str, Vec<Edit>, Option<[u32; 2]>, bool);
    let cases: Vec<NonFiniteCase> = vec![
        ("finite", vec![], None, false),
        (
            "+inf in V",
            vec![(2, v_at(0, 5, 3), f32::INFINITY)],
            None,
            true,
        ),
        (
            "+inf and -inf in V, one key",
            vec![
                (2, v_at(1, 9, 0), f32::INFINITY),
                (2, v_at(1, 9, 1), f32::NEG_INFINITY),
            ],
            None,
            true,
        ),
        (
            "-inf in K",
            vec![(1, k_at(0, 11, 4), f32::NEG_INFINITY)],
            None,
            true,
        ),
        (
            "+inf in Q",
            vec![(0, q_at(1, 1, 20, 7), f32::INFINITY)],
            None,
            true,
        ),
        ("NaN in V", vec![(2, v_at(1, 60, 2), f32::NAN)], None, true),
        (
            "inf in V past batch 1's key length",
            vec![(2, v_at(1, 50, 3), f32::INFINITY)],
            Some([70, 40]),
            false,
        ),
    ];
    for (name, edits, lengths, flagged) in cases {
        let mut data = base.clone();
        for &(operand, at, value) in &edits {
            data[operand][at] = value;
        }
        let q = ctx.tensor(&data[0], [b, hq, sq, d]).unwrap();
        let k = ctx.tensor(&data[1], [b, hkv, sk, d]).unwrap();
        let v = ctx.tensor(&data[2], [b, hkv, sk, dv]).unwrap();
        let mut opts = AttentionOptions::new().with_lse();
        if let Some(l) = lengths {
            opts = opts.key_lengths(&l);
        }
        let (want_o, want_lse) = run_poisoned(
            &ctx,
            &q,
            &k,
            &v,
            &opts.clone().kernel(AttentionKernel::Flash),
        );
        assert!(
            want_o.iter().any(|x| !x.is_finite()) == flagged,
            "{name}: the case should {}give non-finite outputs",
            if flagged { "" } else { "not " }
        );
        for &kernel in &kernels {
            let (o, lse) = run_poisoned(&ctx, &q, &k, &v, &opts.clone().kernel(kernel));
            for (what, got, want) in [("O", &o, &want_o), ("lse", &lse, &want_lse)] {
                for (i, (&g, &w)) in got.iter().zip(want.iter()).enumerate() {
                    let same = if w.is_finite() {
                        (g - w).abs() <= 1e-5 * (1.0 + w.abs())
                    } else {
                        g == w || (g.is_nan() && w.is_nan())
                    };
                    assert!(
                        same,
                        "{kernel:?}, {name}: {what}[{i}] = {g}, the f32 flash kernel gives {w}"
                    );
                }
            }
            let identical = o
                .iter()
                .zip(&want_o)
                .all(|(g, w)| g.to_bits() == w.to_bits() || (g.is_nan() && w.is_nan()));
            assert_eq!(
                identical,
                flagged,
                "{kernel:?}, {name}: the output should {}be the f32 flash kernel's, bit for bit",
                if flagged { "" } else { "not " }
            );
        }
    }
}

/// The f32 split kernel on tensor cores: sizes, head dims, options and
/// magnitudes outside f16's range, at f32's accuracy (as
/// `coop_f32_split_emulated`).
#[test]
fn coop_f32_split() {
    let Some(ctx) = coop_ctx("coop_f32_split") else {
        return;
    };
    let mut seed = 9000;
    for (sq, sk) in [(17, 129), (129, 100), (300, 300)] {
        for (d, dv) in [(64, 64), (128, 128), (128, 64)] {
            seed += 3;
            check_coop(
                &ctx,
                &Case::new(2, 2, 1, sq, sk, d, dv),
                &AttentionOptions::new(),
                None,
                seed,
            );
        }
    }
    for align in [DiagonalAlignment::TopLeft, DiagonalAlignment::BottomRight] {
        seed += 3;
        check_coop(
            &ctx,
            &Case::new(1, 4, 1, 129, 300, 128, 128),
            &AttentionOptions::new()
                .causal(align)
                .window(Some(50), None)
                .softcap(20.0),
            None,
            seed,
        );
    }
    let c = Case::new(1, 2, 1, 100, 300, 128, 128);
    check_coop_with(
        &ctx,
        &c,
        &AttentionOptions::new().scale(1.0),
        None,
        0,
        Some(ramp_qkv(&c)),
        CoopRun::TensorCores,
    );
    for (d, dv) in [(128, 128), (16, 256)] {
        let c = Case::new(2, 4, 2, 100, 129, d, dv);
        check_coop_with(
            &ctx,
            &c,
            &AttentionOptions::new(),
            None,
            0,
            Some(scaled_qkv(&c, 9100)),
            CoopRun::TensorCores,
        );
    }
}

/// The tensor-core backward's algorithm with emulated matrix operations
/// (`AttentionKernel::FlashCoopEmulated` for the backward only; the forward
/// is `Auto`), on every adapter with f16 and subgroups: partial key and
/// query blocks, GQA 2:1 (dK and dV summed over the group), D != Dv, causal
/// bottom-right with key lengths (one 0), a window with soft-cap, and an
/// additive mask. Two head-dim pairs only: each pair compiles two emulated
/// kernels, slow on a cold lavapipe cache. The real kernels' tests run on
/// the H200 (`coop_backward_on_tensor_cores`).
#[test]
fn coop_backward_emulated() {
    let Some(ctx) = emulation_ctx("coop_backward_emulated") else {
        return;
    };
    let emu = Some((AttentionKernel::FlashCoopEmulated, None));
    // Whole interior blocks in both kernels (no mask: 64-row dQ blocks,
    // 64-key dK/dV blocks), where the row statistics come from registers
    // and workgroup memory instead of `p_ds`. Scale 1 makes the gradients
    // large against the f16 tolerance (a dropped Delta fails here).
    check_backward_kernel(
        &ctx,
        &f16_case(1, 1, 1, 131, 70, 32, 32),
        &AttentionOptions::new().scale(1.0),
        emu,
        None,
        8000,
    );
    check_backward_kernel(
        &ctx,
        &f16_case(1, 2, 1, 33, 71, 32, 48),
        &AttentionOptions::new(),
        emu,
        None,
        8001,
    );
    check_backward_kernel(
        &ctx,
        &f16_case(3, 2, 2, 20, 30, 32, 48),
        &AttentionOptions::new()
            .key_lengths(&[30, 0, 17])
            .causal(DiagonalAlignment::BottomRight),
        emu,
        None,
        8002,
    );
    check_backward_kernel(
        &ctx,
        &f16_case(1, 1, 1, 80, 70, 16, 16),
        &AttentionOptions::new()
            .window(Some(9), Some(2))
            .softcap(2.0),
        emu,
        None,
        8003,
    );
    let data = mask_values(2 * 17 * 29, 8004, true);
    let m = HostMask {
        additive: true,
        dims: [2, 1, 17, 29],
        shape: vec![2, 1, 17, 29],
        data,
    };
    check_backward_kernel(
        &ctx,
        &f16_case(2, 2, 1, 17, 29, 16, 16),
        &AttentionOptions::new().causal(DiagonalAlignment::TopLeft),
        emu,
        Some(m),
        8005,
    );
}

/// The tensor-core backward (both kernels on cooperative matrices) against
/// f64 on adapters that have them: every candidate and sweep tile, head
/// dims 64 and 128 and D != Dv, causal in both alignments, windows,
/// soft-cap, masks, GQA, key lengths, and `Auto`, which must pick it for
/// f16.
#[test]
fn coop_backward_on_tensor_cores() {
    let Some(ctx) = coop_ctx("coop_backward_on_tensor_cores") else {
        return;
    };
    use wgtile::tune::attention::{BACKWARD_COOP_CANDIDATES, BACKWARD_COOP_SWEEP};
    let tc = |t: Option<BackwardCoopTiles>| Some((AttentionKernel::FlashCoop, t));
    for (n, t) in BACKWARD_COOP_CANDIDATES
        .iter()
        .chain(&BACKWARD_COOP_SWEEP)
        .enumerate()
    {
        check_backward_kernel(
            &ctx,
            &f16_case(1, 4, 2, 100, 129, 64, 64),
            &AttentionOptions::new().causal(DiagonalAlignment::TopLeft),
            tc(Some(*t)),
            None,
            8100 + n as u64,
        );
    }
    check_backward_kernel(
        &ctx,
        &f16_case(2, 2, 2, 129, 64, 128, 128),
        &AttentionOptions::new(),
        tc(None),
        None,
        8110,
    );
    check_backward_kernel(
        &ctx,
        &f16_case(3, 4, 1, 37, 70, 128, 64),
        &AttentionOptions::new()
            .key_lengths(&[70, 0, 33])
            .causal(DiagonalAlignment::BottomRight)
            .window(Some(20), None),
        tc(None),
        None,
        8111,
    );
    check_backward_kernel(
        &ctx,
        &f16_case(1, 2, 1, 64, 100, 64, 32),
        &AttentionOptions::new().softcap(3.0).scale(0.3),
        tc(None),
        None,
        8112,
    );
    let data = mask_values(17 * 100, 8113, false);
    let m = HostMask {
        additive: false,
        dims: [1, 1, 17, 100],
        shape: vec![17, 100],
        data,
    };
    check_backward_kernel(
        &ctx,
        &f16_case(2, 2, 2, 17, 100, 80, 80),
        &AttentionOptions::new(),
        tc(None),
        Some(m),
        8113,
    );
    check_backward_kernel(
        &ctx,
        &f16_case(1, 2, 2, 33, 33, 256, 256),
        &AttentionOptions::new().causal(DiagonalAlignment::BottomRight),
        tc(None),
        None,
        8114,
    );
    // Auto takes the tensor cores for f16 up to D = 128.
    let (q, _) = common::upload(
        &ctx,
        &common::random(64 * 64, 8115),
        &[1, 1, 64, 64],
        DType::F16,
    );
    let opts = AttentionOptions::new().with_lse();
    let fwd = ctx.attention(&q, &q, &q, &opts).unwrap();
    let (plan, _) = ctx
        .attention_backward_plan(&q, &q, &q, &fwd.o, &fwd.o, &fwd.lse.unwrap(), &opts)
        .unwrap();
    assert!(plan.label().contains("tensor cores"), "{}", plan.label());
    check_backward(
        &ctx,
        &f16_case(1, 4, 4, 65, 65, 64, 64),
        &AttentionOptions::new().causal(DiagonalAlignment::TopLeft),
        None,
        8116,
    );
}

/// The tensor-core decode kernel's cases: GQA packing (one row, 12 rows,
/// a full 16-row chunk, two chunks), one and two row fragments per
/// workgroup, Dv != D, key lengths and causal
/// bottom-right over caches that end inside a block (the staged tail) and
/// cross splits, a window with soft-cap, an additive mask; against f64
/// with check_decode's rule, for `kernel` (the real or emulated one).
fn decode_coop_cases(ctx: &Context, kernel: AttentionKernel) {
    let br = DiagonalAlignment::BottomRight;
    let opts = || AttentionOptions::new().kernel(kernel);
    check_decode(
        ctx,
        &f16_case(1, 8, 2, 1, 263, 64, 64),
        &opts().causal(br),
        None,
        900,
    );
    check_decode(
        ctx,
        &f16_case(2, 8, 2, 3, 263, 64, 64),
        &opts().causal(br).key_lengths(&[263, 70]),
        None,
        901,
    );
    check_decode(ctx, &f16_case(1, 32, 2, 1, 100, 32, 48), &opts(), None, 902);
    // Large logits: blocks move the reference max (the conditional rescale).
    check_decode(
        ctx,
        &f16_case(1, 8, 2, 1, 263, 64, 64),
        &opts().scale(100.0),
        None,
        910,
    );
    check_decode(
        ctx,
        &f16_case(1, 8, 1, 3, 50, 16, 16),
        &opts().window(Some(20), Some(0)).softcap(3.0),
        None,
        903,
    );
    // Prefill shapes: chunks within one head and across two, causal in both
    // alignments (blocks skipped, interior blocks, the diagonal).
    check_decode(
        ctx,
        &f16_case(1, 2, 1, 40, 70, 32, 32),
        &opts().causal(DiagonalAlignment::TopLeft),
        None,
        906,
    );
    check_decode(
        ctx,
        &f16_case(2, 2, 2, 65, 50, 16, 32),
        &opts().causal(br),
        None,
        907,
    );
    // The row fragments forced the other way: one on a prefill shape, two
    // on a decode shape (12 rows in a 32-row workgroup).
    let mut one = opts().causal(DiagonalAlignment::TopLeft);
    one.decode_coop_rf = Some(1);
    check_decode(ctx, &f16_case(1, 2, 1, 40, 70, 32, 32), &one, None, 908);
    let mut two = opts().causal(br).key_lengths(&[263, 70]);
    two.decode_coop_rf = Some(2);
    check_decode(ctx, &f16_case(2, 8, 2, 3, 263, 64, 64), &two, None, 909);
    check_decode(
        ctx,
        &f16_case(1, 4, 1, 2, 97, 32, 32),
        &opts(),
        Some(HostMask {
            additive: true,
            dims: [1, 1, 2, 97],
            shape: vec![2, 97],
            data: mask_values(2 * 97, 904, true),
        }),
        905,
    );
}

/// The tensor-core decode algorithm with emulated matrix operations, on
/// every adapter with f16 and subgroups.
#[test]
fn decode_coop_emulated() {
    let Some(ctx) = emulation_ctx("decode_coop_emulated") else {
        return;
    };
    decode_coop_cases(&ctx, AttentionKernel::DecodeCoopEmulated);
}

/// The tensor-core decode kernel on adapters with cooperative matrices, and
/// its errors: f32 inputs, head dims not multiples of 16.
#[test]
fn decode_coop_on_tensor_cores() {
    let Some(ctx) = coop_ctx("decode_coop_on_tensor_cores") else {
        return;
    };
    decode_coop_cases(&ctx, AttentionKernel::DecodeCoop);
    let opts = AttentionOptions::new().kernel(AttentionKernel::DecodeCoop);
    let q = ctx.zeros([1, 4, 1, 64], DType::F32).unwrap();
    let k = ctx.zeros([1, 1, 30, 64], DType::F32).unwrap();
    assert!(matches!(
        ctx.attention(&q, &k, &k, &opts),
        Err(Error::InvalidArgument(_))
    ));
    let q = ctx.zeros([1, 4, 1, 40], DType::F16).unwrap();
    let k = ctx.zeros([1, 1, 30, 40], DType::F16).unwrap();
    assert!(matches!(
        ctx.attention(&q, &k, &k, &opts),
        Err(Error::InvalidArgument(_))
    ));
}

/// The tensor-core backward and decode kernels refuse what they cannot run
/// with named errors: f32 inputs, head dims that are not multiples of 16,
/// tiles that do not fit, and (where the adapter lacks them) cooperative
/// matrices.
#[test]
fn coop_backward_and_decode_errors() {
    let Some(ctx) = common::ctx() else { return };
    let has_tc = wgtile::tune::has_coop_f16(ctx.profile());
    let emu_ok = ctx.profile().shader_f16 && ctx.profile().subgroups;
    let zeros = |shape: [usize; 4], dtype| ctx.zeros(shape, dtype).unwrap();
    let lse = ctx.zeros([1, 2, 20], DType::F32).unwrap();
    let backward = |dtype: DType, d: usize, opts: &AttentionOptions| {
        let q = zeros([1, 2, 20, d], dtype);
        let k = zeros([1, 1, 30, d], dtype);
        ctx.attention_backward(&q, &k, &k, &q, &q, &lse, opts)
            .map(|_| ())
    };
    let decode = |dtype: DType, d: usize, kernel: AttentionKernel| {
        let q = zeros([1, 4, 1, d], dtype);
        let k = zeros([1, 1, 30, d], dtype);
        ctx.attention(&q, &k, &k, &AttentionOptions::new().kernel(kernel))
            .map(|_| ())
    };
    for kernel in [
        AttentionKernel::FlashCoop,
        AttentionKernel::FlashCoopEmulated,
    ] {
        let opts = AttentionOptions::new().kernel(kernel);
        let runs = if kernel == AttentionKernel::FlashCoop {
            has_tc
        } else {
            emu_ok
        };
        if !runs {
            assert!(matches!(
                backward(DType::F16, 32, &opts),
                Err(Error::UnsupportedFeature { .. })
            ));
            continue;
        }
        assert!(matches!(
            backward(DType::F32, 32, &opts),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            backward(DType::F16, 40, &opts),
            Err(Error::InvalidArgument(_))
        ));
        // A tile far over the workgroup-memory limit.
        let mut huge = opts.clone();
        huge.backward_coop_tiles = Some(BackwardCoopTiles {
            subgroups: 64,
            block: 256,
        });
        assert!(matches!(
            backward(DType::F16, 32, &huge),
            Err(Error::InvalidArgument(_))
        ));
    }
    for kernel in [
        AttentionKernel::DecodeCoop,
        AttentionKernel::DecodeCoopEmulated,
    ] {
        let runs = if kernel == AttentionKernel::DecodeCoop {
            has_tc
        } else {
            emu_ok
        };
        if !runs {
            assert!(matches!(
                decode(DType::F16, 32, kernel),
                Err(Error::UnsupportedFeature { .. })
            ));
            continue;
        }
        assert!(matches!(
            decode(DType::F32, 32, kernel),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            decode(DType::F16, 40, kernel),
            Err(Error::InvalidArgument(_))
        ));
    }
}

/// The same NaN rule for the tensor-core kernels (f16): the emulated ones on
/// every adapter with f16 and subgroups, the real ones where present. One
/// NaN in a query row makes that row (and only it) NaN, in the forward and
/// in the decode kernel.
#[test]
fn coop_nan_propagates_only_to_rows_it_touches() {
    let Some(ctx) = emulation_ctx("coop_nan_propagates_only_to_rows_it_touches") else {
        return;
    };
    let mut kernels = vec![
        AttentionKernel::FlashCoopEmulated,
        AttentionKernel::DecodeCoopEmulated,
    ];
    if wgtile::tune::has_coop_f16(ctx.profile()) {
        kernels.extend([AttentionKernel::FlashCoop, AttentionKernel::DecodeCoop]);
    }
    let (hq, sq, sk, d) = (2, 40, 70, 32);
    let mut qh = common::random(hq * sq * d, 120);
    // Head 1, row 7.
    qh[(sq + 7) * d + 3] = f32::NAN;
    let (q, _) = common::upload(&ctx, &qh, &[1, hq, sq, d], DType::F16);
    let k = ctx
        .rand_uniform([1, 1, sk, d], -1.0, 1.0, DType::F16, 121)
        .unwrap();
    let v = ctx
        .rand_uniform([1, 1, sk, d], -1.0, 1.0, DType::F16, 122)
        .unwrap();
    for kernel in kernels {
        let (o, lse) = run_poisoned(
            &ctx,
            &q,
            &k,
            &v,
            &AttentionOptions::new().kernel(kernel).with_lse(),
        );
        for row in 0..hq * sq {
            let vals = &o[row * d..(row + 1) * d];
            if row == sq + 7 {
                assert!(
                    vals.iter().all(|x| x.is_nan()) && lse[row].is_nan(),
                    "{kernel:?}: the NaN row should be NaN: {vals:?}, lse {}",
                    lse[row]
                );
            } else {
                assert!(
                    vals.iter().all(|x| x.is_finite()) && lse[row].is_finite(),
                    "{kernel:?}: row {row} touched by NaN"
                );
            }
        }
    }
}

/// A fused QKV projection read in place by the tensor-core kernels (forward,
/// decode, the f32 split's scaling pass) and their emulations gives what
/// the same kernel gives on three copies of its parts, bit for bit.
#[test]
fn coop_fused_qkv_matches_copies() {
    let Some(ctx) = emulation_ctx("coop_fused_qkv_matches_copies") else {
        return;
    };
    let mut kernels = vec![
        (AttentionKernel::FlashCoopEmulated, DType::F16, 37),
        (AttentionKernel::DecodeCoopEmulated, DType::F16, 3),
    ];
    if wgtile::tune::has_coop_f16(ctx.profile()) {
        kernels.extend([
            (AttentionKernel::FlashCoop, DType::F16, 100),
            (AttentionKernel::FlashCoop, DType::F32, 100),
            (AttentionKernel::DecodeCoop, DType::F16, 5),
        ]);
    }
    let (b, hq, hkv, d) = (2, 4, 2, 64);
    let width = (hq + 2 * hkv) * d;
    for (kernel, dtype, s) in kernels {
        let (qkv, _) = common::upload(
            &ctx,
            &common::random(b * s * width, 77),
            &[b, s, width],
            dtype,
        );
        let opts = AttentionOptions::new()
            .packed_dims(hq, hkv, d, d)
            .causal(DiagonalAlignment::BottomRight)
            .kernel(kernel);
        let (plan, out) = ctx.attention_qkv_plan(&qkv, &opts).unwrap();
        ctx.fill(&out.o, f32::NAN).unwrap();
        plan.run().unwrap();
        let fused = out.o.to_f32_vec_blocking().unwrap();
        let parts = ctx.split(&qkv, 2, &[hq * d, hkv * d, hkv * d]).unwrap();
        let (copies, _) = run_poisoned(&ctx, &parts[0], &parts[1], &parts[2], &opts);
        assert_eq!(fused.len(), copies.len());
        for (i, (a, e)) in fused.iter().zip(&copies).enumerate() {
            assert!(
                a == e,
                "{kernel:?} {dtype:?} element {i}: fused {a} vs copies {e}"
            );
        }
    }
}
