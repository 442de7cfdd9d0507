//! The padding layer's decisions.

use super::*;
use super::matmul::h200_like;

// ---- the padding layer's decisions ----

/// A CPU adapter of 2 cores with [`gpu`]'s other limits.
fn cpu_adapter() -> AdapterProfile {
    let mut p = gpu().with_units(2);
    p.device_type = wgpu::DeviceType::Cpu;
    p
}

#[test]
fn cost_model_decisions() {
    use crate::tune::pad::choose;
    let gpu = h200_like();
    // Aligned shapes, tiny shapes and the Never policy: no padding.
    assert_eq!(
        choose(&gpu, DType::F32, 4096, 4096, 4096, 1, Padding::Auto),
        None
    );
    assert_eq!(choose(&gpu, DType::F32, 7, 13, 31, 1, Padding::Auto), None);
    assert_eq!(
        choose(&gpu, DType::F32, 4097, 4097, 4097, 1, Padding::Never),
        None
    );
    // 4097 in f32: the vec4 kernel on 4100 is no faster than the scalar
    // loads on 4097 (H200, with register prefetch): Auto copies nothing, but
    // takes the last row apart (1089 workgroups of 128 x 128 are 8.25 waves,
    // 1056 are 8); Always pads (for measuring).
    let p = choose(&gpu, DType::F32, 4097, 4097, 4097, 1, Padding::Auto).unwrap();
    assert!(!p.copies && p.fringe_rows == 1, "{p}");
    assert_eq!((p.k, p.n), (4097, 4097));
    assert!(p.to_string().starts_with("no copies"), "{p}");
    assert!(
        matches!(p.kernel, MatmulKernel::Tiled { .. }),
        "{p}"
    );
    // 1793: 225 workgroups (1.70 waves) and 210 without the last row (1.59):
    // no wave saved, nothing to do.
    assert_eq!(
        choose(&gpu, DType::F32, 1793, 1793, 1793, 1, Padding::Auto),
        None
    );
    let p = choose(&gpu, DType::F32, 4097, 4097, 4097, 1, Padding::Always).unwrap();
    assert_eq!((p.k, p.n), (4100, 4100));
    assert!(
        matches!(p.kernel, MatmulKernel::Tiled { vec4: true, .. }),
        "{p}"
    );
    // 1793 and 1028 in f16 on tensor cores: the coop kernel's word-load
    // variant reads any row-major layout, but at about 0.6x of its 16-byte
    // loads (H200, run 15), so copying the unaligned operands into rows of a
    // multiple of 8 halves pays (rows padded to 32 halves: 64 bytes)...
    let p = choose(&gpu, DType::F16, 1793, 1793, 1793, 1, Padding::Auto).unwrap();
    assert_eq!((p.k, p.n), (1824, 1824));
    assert!(matches!(p.kernel, MatmulKernel::Coop { .. }), "{p}");
    assert!(!p.crop, "{p}");
    let p = choose(&gpu, DType::F16, 1024, 1028, 1024, 1, Padding::Auto).unwrap();
    assert_eq!((p.k, p.n), (1024, 1056));
    // A dimension already on 16 bytes is left alone (N = 1032).
    let p = choose(&gpu, DType::F16, 1024, 1032, 1025, 1, Padding::Auto).unwrap();
    assert_eq!((p.k, p.n), (1056, 1032));
    // ...and without padding the dispatcher still takes tensor cores.
    let c = tune::choose_matmul(&gpu, DType::F16, 1793, 1793, 1793, 1);
    assert!(matches!(c.kernel, MatmulKernel::Coop { .. }), "{c}");
    // N = 3 padded to 4 would add a third more work than the kernel gains:
    // Auto runs the raw shape; Always pads anyway (it is for measuring).
    assert_eq!(
        choose(&gpu, DType::F32, 4096, 3, 4096, 1, Padding::Auto),
        None
    );
    assert!(choose(&gpu, DType::F32, 4096, 3, 4096, 1, Padding::Always).is_some());
    // Small shapes: the copies cost more than they save on a GPU...
    assert_eq!(choose(&gpu, DType::F32, 33, 65, 65, 1, Padding::Auto), None);
    // ...but Always pads whenever there is a gain at all.
    assert!(choose(&gpu, DType::F32, 33, 65, 65, 1, Padding::Always).is_some());
    // The last-row split: at 4097 the coop grid (256-row blocks) is 17 x 33
    // = 561 workgroups, 5 waves on 132 units; without the last row 528, 4.
    let p = choose(&gpu, DType::F16, 4097, 4097, 4097, 1, Padding::Auto).unwrap();
    assert!(p.fringe_rows == 1, "{p}");
    assert!(p.to_string().contains("last row of C as a GEMV"), "{p}");
    // 1793: 120 workgroups either way within one wave: no rows apart; nor
    // for batches. The tiled kernels take them on GPUs (f32 4097 padded to
    // 4100: 1089 workgroups, 8.25 waves, 1056 without the last row), never
    // on CPU adapters.
    let rows_apart = |m: usize, batch: usize| {
        choose(&gpu, DType::F16, m, 4097, 4097, batch, Padding::Auto)
            .unwrap()
            .fringe_rows
    };
    assert_eq!(
        choose(&gpu, DType::F16, 1793, 1793, 1793, 1, Padding::Auto)
            .unwrap()
            .fringe_rows,
        0
    );
    assert_eq!(rows_apart(4097, 2), 0);
    let tiled = choose(&gpu, DType::F32, 4097, 4097, 4097, 1, Padding::Always).unwrap();
    assert!(tiled.copies && tiled.fringe_rows == 1, "{tiled}");
    assert_eq!(
        tune::pad::fringe_rows(&cpu_adapter(), tiled.kernel, 4097, 4097, 1),
        0
    );
    // Two and three rows past a block: as many GEMVs (each reads B once)
    // against a fifth round; four rows past it: the fifth round.
    assert_eq!(rows_apart(4098, 1), 2);
    assert_eq!(rows_apart(4099, 1), 3);
    assert_eq!(rows_apart(4100, 1), 0);
    let p = choose(&gpu, DType::F16, 4099, 4097, 4097, 1, Padding::Auto).unwrap();
    assert!(p.to_string().contains("last 3 rows of C as GEMVs"), "{p}");
    let coop = choose(&gpu, DType::F16, 4097, 4097, 4097, 1, Padding::Auto)
        .unwrap()
        .kernel;
    assert_eq!(tune::pad::fringe_rows(&gpu, coop, 4097, 4097, 1), 1);
    assert_eq!(tune::pad::fringe_rows(&gpu, coop, 4097, 4097, 3), 0);
}

#[test]
fn split_kernel_padding_decisions() {
    use crate::tune::pad::choose_for;
    let gpu = h200_like();
    let split = |(m, n, k)| {
        tune::coop_split_for_shape(&gpu, (m, n, k), 1, false).expect("tensor cores")
    };
    // The padding layer's decision for the split kernel the dispatcher
    // picks for the shape as it is.
    let decide = |shape, policy| choose_for(&gpu, split(shape), DType::F32, shape, 1, policy);
    let auto = |shape| decide(shape, Padding::Auto).unwrap();
    let is_split = |k: MatmulKernel| matches!(k, MatmulKernel::Coop { split: true, .. });
    // Aligned rows: nothing to copy, and at 4096 no wave to save.
    assert_eq!(decide((4096, 4096, 4096), Padding::Auto), None);
    // The K step of a split kernel.
    let bk = |k: MatmulKernel| match k {
        MatmulKernel::Coop { bk, .. } => bk as usize,
        other => panic!("not a coop kernel: {other}"),
    };
    // 1793: rows of 1793 floats take the word loads (about 0.8x of the
    // 16-byte ones); the copies cost a fraction of that and the split
    // kernel stays. Both operands are copied, so the kernel runs on the
    // padded K (a whole number of K steps; B's rows past 1793 zero) and
    // N is padded to 4 floats.
    let p = auto((1793, 1793, 1793));
    assert!(p.copies && !p.crop && p.full_k, "{p}");
    assert!(is_split(p.kernel), "{p}");
    assert_eq!(p.k, 1793usize.next_multiple_of(bk(p.kernel)), "{p}");
    assert_eq!(p.n, 1796);
    // Only the unaligned operand is copied: N = 1028 is on 16 bytes
    // already, B stays as it is and the kernel runs K = 1025.
    let p = auto((1024, 1028, 1025));
    assert_eq!((p.k, p.n), (1028, 1028));
    assert!(!p.full_k, "{p}");
    // 4097: padded, and on 128x128 blocks with the last row apart (1056
    // workgroups, 8 whole rounds on 132 units; 128x256 blocks would take 5
    // rounds with or without it, the fifth a quarter full).
    let p = auto((4097, 4097, 4097));
    assert!(p.copies && p.fringe_rows == 1 && p.full_k, "{p}");
    assert_eq!((p.k, p.n), (4128, 4100));
    assert!(
        matches!(
            p.kernel,
            MatmulKernel::Coop {
                warps_m: 2,
                warps_n: 4,
                bk: 32,
                frags_n: 2,
                split: true,
                ..
            }
        ),
        "{p}"
    );
    // Aligned rows and M one past a block: the last row apart alone (N =
    // 4224: 561 blocks of 128x256 or 1056 of 128x128 on 4096 rows)...
    let p = auto((4097, 4224, 4096));
    assert!(!p.copies && p.fringe_rows == 1, "{p}");
    // ...but not where no round is saved (N = 4096: 528 blocks of 128x256
    // are 4 whole rounds already).
    assert_eq!(decide((4097, 4096, 4096), Padding::Auto), None);
    // Small problems (forced onto the split kernel): the copies cost more
    // than the word loads do, the raw shape runs; Never never pads.
    let small = tune::coop_split_for_shape(&gpu, (67, 45, 129), 1, true).unwrap();
    assert_eq!(
        choose_for(&gpu, small, DType::F32, (67, 45, 129), 1, Padding::Auto),
        None
    );
    assert_eq!(decide((1793, 1793, 1793), Padding::Never), None);
    // Zero-sized problems are never padded.
    assert_eq!(
        choose_for(&gpu, small, DType::F32, (0, 4097, 4097), 1, Padding::Always),
        None
    );
}
