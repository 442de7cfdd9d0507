//! Every error path returns its exact `Error` variant: never a panic, a hang
//! or a wgpu validation error.

#[path = "../common/mod.rs"]
mod common;

mod table;

use wgtile::{Context, ContextOptions, DType, Error, wgpu};

#[test]
fn no_adapter_matches_the_filter() {
    let err = Context::new_blocking(ContextOptions {
        adapter: Some("no-such-adapter-zz9".into()),
        ..Default::default()
    })
    .unwrap_err();
    assert!(matches!(err, Error::NoAdapter(_)), "{err}");
}

#[test]
fn device_request_over_the_adapter_limits() {
    let Some(ctx) = common::ctx() else { return };
    let mut limits = ctx.adapter().limits();
    limits.max_compute_workgroup_storage_size = limits.max_compute_workgroup_storage_size * 4 + 1;
    let err = Context::new_blocking(ContextOptions {
        adapter: Some(ctx.profile().name.clone()),
        backends: Some(ctx.profile().backend.into()),
        limits: Some(limits),
        ..Default::default()
    })
    .unwrap_err();
    assert!(matches!(err, Error::RequestDevice(_)), "{err}");
}

#[test]
fn shape_mismatches_name_both_shapes() {
    let Some(ctx) = common::ctx() else { return };
    let a = ctx.zeros([3, 4], DType::F32).unwrap();
    let b = ctx.zeros([5, 6], DType::F32).unwrap();
    match ctx.matmul(&a, &b).unwrap_err() {
        Error::ShapeMismatch { lhs, rhs, .. } => {
            assert_eq!(lhs, [3, 4]);
            assert_eq!(rhs, [5, 6]);
        }
        e => panic!("wrong variant: {e}"),
    }
    let a = ctx.zeros([2, 3, 4], DType::F32).unwrap();
    let b = ctx.zeros([3, 4, 5], DType::F32).unwrap();
    assert!(matches!(
        ctx.matmul(&a, &b),
        Err(Error::ShapeMismatch { .. })
    ));
    let a = ctx.zeros([3, 4], DType::F32).unwrap();
    let b = ctx.zeros([4, 5], DType::F32).unwrap();
    let out = ctx.zeros([3, 6], DType::F32).unwrap();
    assert!(matches!(
        ctx.matmul_into(&a, &b, &out),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        a.reshape([5, 2]),
        Err(Error::ShapeMismatch { .. })
    ));
    let scalar = ctx.zeros([], DType::F32).unwrap();
    assert!(matches!(
        ctx.matmul(&scalar, &b),
        Err(Error::ShapeMismatch { .. })
    ));
}

#[test]
fn dtype_mismatches() {
    let Some(ctx) = common::ctx() else { return };
    let a = ctx.zeros([3, 4], DType::F32).unwrap();
    let b = ctx.zeros([4, 5], DType::F16).unwrap();
    assert!(matches!(
        ctx.matmul(&a, &b),
        Err(Error::DTypeMismatch { .. })
    ));
    assert!(matches!(
        a.to_vec_blocking::<wgtile::f16>(),
        Err(Error::DTypeMismatch { .. })
    ));
    let b32 = ctx.zeros([4, 5], DType::F32).unwrap();
    let out16 = ctx.zeros([3, 5], DType::F16).unwrap();
    assert!(matches!(
        ctx.matmul_into(&a, &b32, &out16),
        Err(Error::DTypeMismatch { .. })
    ));
}

#[test]
fn invalid_arguments() {
    let Some(ctx) = common::ctx() else { return };
    let data = common::random(10, 1);
    assert!(matches!(
        ctx.tensor(&data, [3, 4]),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        ctx.zeros([1, 1, 1, 1, 1], DType::F32),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        ctx.zeros([usize::MAX, 4], DType::F32),
        Err(Error::InvalidArgument(_))
    ));
    // A tensor from another context is refused, not silently misused.
    let other = private_context(&ctx);
    let a = ctx.zeros([2, 2], DType::F32).unwrap();
    let b = other.zeros([2, 2], DType::F32).unwrap();
    assert!(matches!(ctx.matmul(&a, &b), Err(Error::InvalidArgument(_))));
}

#[test]
fn f16_without_shader_f16_is_unsupported() {
    let Some(ctx) = common::ctx() else { return };
    let weak = common::context_without(&ctx, wgpu::Features::SHADER_F16);
    assert!(!weak.profile().shader_f16);
    let a = weak.zeros([3, 4], DType::F16).unwrap();
    let b = weak.zeros([4, 5], DType::F16).unwrap();
    match weak.matmul(&a, &b).unwrap_err() {
        Error::UnsupportedFeature { feature, .. } => assert_eq!(feature, "shader-f16"),
        e => panic!("wrong variant: {e}"),
    }
    // A padded f16 tensor made into a contiguous one: the feature, not a
    // shader compiler message.
    let host = vec![wgtile::f16::from_f32(1.0); 12];
    let padded = weak.tensor_padded(&host, [3, 4], 8).unwrap();
    match weak.contiguous(&padded).unwrap_err() {
        Error::UnsupportedFeature { feature, .. } => assert_eq!(feature, "shader-f16"),
        e => panic!("wrong variant: {e}"),
    }
}

/// The tensor-core kernel forced on an adapter without cooperative
/// matrices names the missing feature (it used to report an invocation
/// limit).
#[test]
fn forced_tensor_cores_without_them_name_the_feature() {
    use wgtile::MatmulOptions;
    let Some(ctx) = common::ctx() else { return };
    if ctx.profile().cooperative_matrix {
        return;
    }
    let a = ctx.zeros([64, 64], DType::F16).unwrap();
    let kernel = common::coop_kernel();
    let r = ctx.matmul_plan(&a, &a, None, &MatmulOptions::with_kernel(kernel));
    match r {
        Err(Error::UnsupportedFeature { feature, .. }) => {
            assert!(feature.contains("COOPERATIVE_MATRIX"), "{feature}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn tensors_over_the_binding_limit_are_refused_with_the_limit_named() {
    let Some(ctx) = common::ctx() else { return };
    let (max, limit) = ctx.profile().max_tensor_bytes();
    let elements = (max / 4 + 1) as usize;
    match ctx.zeros([elements], DType::F32).unwrap_err() {
        Error::LimitExceeded {
            limit: named,
            requested,
            max: m,
            ..
        } => {
            assert_eq!(named, limit);
            assert_eq!(m, max);
            assert!(requested > max);
        }
        e => panic!("wrong variant: {e}"),
    }
    // The same through a device created with a deliberately small binding limit.
    let mut limits = ctx.adapter().limits();
    limits.max_storage_buffer_binding_size = 1 << 20;
    let small = Context::new_blocking(ContextOptions {
        adapter: Some(ctx.profile().name.clone()),
        backends: Some(ctx.profile().backend.into()),
        limits: Some(limits),
        ..Default::default()
    })
    .unwrap();
    let a = small.zeros([512, 512], DType::F32).unwrap();
    small.matmul(&a, &a).unwrap();
    assert!(matches!(
        small.zeros([513, 512], DType::F32),
        Err(Error::LimitExceeded {
            limit: "max_storage_buffer_binding_size",
            ..
        })
    ));
}

#[test]
fn shader_failures_come_back_as_errors() {
    let Some(ctx) = common::ctx() else { return };
    let parse = ctx
        .compile_wgsl("broken", "fn main( {", "main")
        .unwrap_err();
    assert!(matches!(parse, Error::Shader { .. }), "{parse}");
    let invalid = "@group(0) @binding(0) var<storage, read_write> x: array<f32>;\n\
                   @compute @workgroup_size(64) fn main() { x[0] = true; }";
    let err = ctx.compile_wgsl("invalid", invalid, "main").unwrap_err();
    assert!(matches!(err, Error::Shader { .. }), "{err}");
    let missing_entry = "@compute @workgroup_size(1) fn main() {}";
    let err = ctx
        .compile_wgsl("entry", missing_entry, "nope")
        .unwrap_err();
    assert!(matches!(err, Error::Shader { .. }), "{err}");
    // And a valid one passes.
    ctx.compile_wgsl("ok", missing_entry, "main").unwrap();
}

#[test]
fn forced_kernels_over_the_workgroup_limits_are_refused() {
    let Some(ctx) = common::ctx() else { return };
    let a = ctx.zeros([4, 4], DType::F32).unwrap();
    let huge = wgtile::MatmulKernel::Naive {
        wg_x: 1024,
        wg_y: 1024,
    };
    assert!(matches!(
        ctx.matmul_with_kernel(&a, &a, huge),
        Err(Error::LimitExceeded { .. })
    ));
}

#[test]
fn forced_vec4_kernel_on_unaligned_shapes_is_refused() {
    let Some(ctx) = common::ctx() else { return };
    let a = ctx.zeros([8, 6], DType::F32).unwrap();
    let b = ctx.zeros([6, 8], DType::F32).unwrap();
    let vec4 = wgtile::MatmulKernel::Tiled {
        tile: wgtile::tune::TILE_CONFIGS[0],
        vec4: true,
    };
    assert!(matches!(
        ctx.matmul_with_kernel(&a, &b, vec4),
        Err(Error::InvalidArgument(_))
    ));
}

/// A second context on the same adapter, for tests that break their device.
fn private_context(ctx: &Context) -> Context {
    common::context_without(ctx, wgpu::Features::empty())
}

#[test]
fn destroyed_buffers_give_gpu_errors_not_panics() {
    let Some(ctx) = common::ctx() else { return };
    let ctx = private_context(&ctx);
    let a = ctx.rand_uniform([8, 8], -1.0, 1.0, DType::F32, 1).unwrap();
    a.buffer().destroy();
    match ctx.matmul(&a, &a) {
        Err(Error::Gpu { during, .. }) => assert!(during.contains("matmul"), "{during}"),
        other => panic!("expected Error::Gpu, got {other:?}"),
    }
    assert!(matches!(a.to_vec_blocking::<f32>(), Err(Error::Gpu { .. })));
}

#[test]
fn a_lost_device_fails_fast_with_device_lost() {
    let Some(ctx) = common::ctx() else { return };
    let ctx = private_context(&ctx);
    let a = ctx.rand_uniform([8, 8], -1.0, 1.0, DType::F32, 1).unwrap();
    ctx.device().destroy();
    // The lost callback may run on the next poll; give it one.
    let _ = ctx.device().poll(wgpu::PollType::Poll);
    assert!(matches!(ctx.matmul(&a, &a), Err(Error::DeviceLost(_))));
    assert!(matches!(
        a.to_vec_blocking::<f32>(),
        Err(Error::DeviceLost(_))
    ));
    assert!(matches!(
        ctx.zeros([4], DType::F32),
        Err(Error::DeviceLost(_))
    ));
}

#[test]
fn outputs_aliasing_inputs_are_refused() {
    let Some(ctx) = common::ctx() else { return };
    let a = ctx.zeros([4, 4], DType::F32).unwrap();
    let b = ctx.zeros([4, 4], DType::F32).unwrap();
    assert!(matches!(
        ctx.matmul_into(&a, &b, &a),
        Err(Error::InvalidArgument(_))
    ));
    let out = ctx.zeros([4, 4], DType::F32).unwrap();
    let epi = wgtile::Epilogue::new().residual(&out);
    let plan = ctx.matmul_plan_with(&a, &b, Some(&out), &Default::default(), &epi);
    assert!(matches!(plan, Err(Error::InvalidArgument(_))));
}

/// Every public entry point refuses a tensor made on another context with
/// `InvalidArgument`, whichever argument it is (operand, output, mask,
/// weight, bias, cache, plan), and the context still works after each
/// refusal. Without the check wgpu panics on the foreign buffer, or reads a
/// buffer of this context that has the same id.
#[test]
fn tensors_of_another_context_are_refused_everywhere() {
    use wgtile::{AttentionOptions, Axis, Epilogue, Expr, KvCache, Reduction, Tensor};
    let Some(ctx) = common::ctx() else { return };
    let other = private_context(&ctx);
    let ours = |shape: &[usize]| ctx.rand_uniform(shape, -1.0, 1.0, DType::F32, 3).unwrap();
    let theirs = |shape: &[usize]| other.rand_uniform(shape, -1.0, 1.0, DType::F32, 4).unwrap();
    let (a, b, c) = (ours(&[4, 8]), ours(&[8, 5]), ours(&[4, 5]));
    let (fa, fb, fc) = (theirs(&[4, 8]), theirs(&[8, 5]), theirs(&[4, 5]));
    let (row, frow) = (ours(&[8]), theirs(&[8]));
    let qkv = |f: &dyn Fn(&[usize]) -> Tensor| f(&[1, 2, 6, 8]);
    let (q, k, v) = (qkv(&ours), qkv(&ours), qkv(&ours));
    let (fq, fk) = (qkv(&theirs), qkv(&theirs));
    let fmask = other.zeros([6, 6], DType::F32).unwrap();
    let opts = AttentionOptions::new();
    let masked = AttentionOptions::new().additive_mask(&fmask);
    let fwd = ctx
        .attention(&q, &k, &v, &AttentionOptions::new().with_lse())
        .unwrap();
    let (o, lse) = (fwd.o.clone(), fwd.lse.clone().unwrap());
    let fo = qkv(&theirs);
    let mut cache = KvCache::new(&ctx, 1, 2, 8, 8, 4, DType::F32).unwrap();
    let fcache = KvCache::new(&other, 1, 2, 8, 8, 4, DType::F32).unwrap();
    let foreign_plan = other.copy_plan(&theirs(&[4, 4])).unwrap();
    type Case<'a> = (&'a str, Box<dyn Fn() -> wgtile::Result<()> + 'a>);
    let cases: Vec<Case> = vec![
        ("matmul A", Box::new(|| ctx.matmul(&fa, &b).map(drop))),
        ("matmul B", Box::new(|| ctx.matmul(&a, &fb).map(drop))),
        ("matmul out", Box::new(|| ctx.matmul_into(&a, &b, &fc))),
        (
            "matmul bias",
            Box::new(|| {
                ctx.matmul_with(&a, &b, &Epilogue::new().bias(&theirs(&[5])))
                    .map(drop)
            }),
        ),
        (
            "matmul residual",
            Box::new(|| {
                ctx.matmul_with(&a, &b, &Epilogue::new().residual(&fc))
                    .map(drop)
            }),
        ),
        (
            "eval leaf",
            Box::new(|| ctx.eval(&(fa.expr() + 1.0)).map(drop)),
        ),
        (
            "eval out",
            Box::new(|| ctx.eval_into(&(c.expr() * 2.0), &fc)),
        ),
        (
            "eval_many leaf",
            Box::new(|| ctx.eval_many(&[a.expr(), fa.expr()]).map(drop)),
        ),
        (
            "eval_unfused leaf",
            Box::new(|| ctx.eval_unfused(&(fa.expr() + 1.0)).map(drop)),
        ),
        ("contiguous", Box::new(|| ctx.contiguous(&fa).map(drop))),
        ("fill", Box::new(|| ctx.fill(&fa, 1.0))),
        ("fill_random", Box::new(|| ctx.fill_random(&fa, 1))),
        ("sum", Box::new(|| ctx.sum(&fa, Axis::Last).map(drop))),
        (
            "reduce all",
            Box::new(|| ctx.reduce(&fa, Reduction::Max, Axis::All).map(drop)),
        ),
        (
            "sum_of leaf",
            Box::new(|| ctx.sum_of(&(fa.expr() * 2.0), Axis::Last).map(drop)),
        ),
        ("softmax", Box::new(|| ctx.softmax(&fa).map(drop))),
        ("log_softmax", Box::new(|| ctx.log_softmax(&fa).map(drop))),
        (
            "softmax_of leaf",
            Box::new(|| ctx.softmax_of(&fa.expr(), None).map(drop)),
        ),
        (
            "softmax_of epilogue",
            Box::new(|| {
                ctx.softmax_of(&a.expr(), Some(&(Expr::acc() * &frow)))
                    .map(drop)
            }),
        ),
        (
            "layer_norm x",
            Box::new(|| ctx.layer_norm(&fa, None, None, 1e-5).map(drop)),
        ),
        (
            "layer_norm weight",
            Box::new(|| ctx.layer_norm(&a, Some(&frow), None, 1e-5).map(drop)),
        ),
        (
            "layer_norm bias",
            Box::new(|| ctx.layer_norm(&a, Some(&row), Some(&frow), 1e-5).map(drop)),
        ),
        (
            "rms_norm weight",
            Box::new(|| ctx.rms_norm(&a, Some(&frow), 1e-5).map(drop)),
        ),
        (
            "layer_norm_of weight",
            Box::new(|| {
                ctx.layer_norm_of(&a.expr(), Some(&frow), None, 1e-5, None)
                    .map(drop)
            }),
        ),
        ("copy", Box::new(|| ctx.copy_plan(&fa).map(drop))),
        (
            "attention q",
            Box::new(|| ctx.attention(&fq, &k, &v, &opts).map(drop)),
        ),
        (
            "attention k",
            Box::new(|| ctx.attention(&q, &fk, &v, &opts).map(drop)),
        ),
        (
            "attention mask",
            Box::new(|| ctx.attention(&q, &k, &v, &masked).map(drop)),
        ),
        (
            "attention bool mask",
            Box::new(|| {
                let m = other.zeros([6, 6], DType::F32).unwrap();
                ctx.attention(&q, &k, &v, &AttentionOptions::new().bool_mask(&m))
                    .map(drop)
            }),
        ),
        (
            "attention_backward o",
            Box::new(|| {
                ctx.attention_backward(&q, &k, &v, &fo, &o, &lse, &opts)
                    .map(drop)
            }),
        ),
        (
            "attention_backward mask",
            Box::new(|| {
                ctx.attention_backward(&q, &k, &v, &o, &o, &lse, &masked)
                    .map(drop)
            }),
        ),
        (
            "attention_cached cache",
            Box::new(|| ctx.attention_cached(&q, &fcache, &opts).map(drop)),
        ),
        (
            "time",
            Box::new(|| ctx.time(&foreign_plan, &Default::default()).map(drop)),
        ),
    ];
    for (what, case) in &cases {
        match case() {
            Err(Error::InvalidArgument(msg)) => {
                assert!(msg.contains("another Context"), "{what}: {msg}")
            }
            other => panic!("{what}: expected InvalidArgument, got {other:?}"),
        }
        // The context is still usable after the refusal.
        let s = ctx
            .sum(&row, Axis::All)
            .unwrap()
            .to_vec_blocking::<f32>()
            .unwrap();
        assert_eq!(s.len(), 1, "{what}");
    }
    let appended = cache.append(&theirs(&[1, 2, 1, 8]), &theirs(&[1, 2, 1, 8]));
    assert!(
        matches!(appended, Err(Error::InvalidArgument(_))),
        "{appended:?}"
    );
    assert_eq!(cache.len(), 0);
}

/// A huge random tensor is refused by its size before any host value is
/// generated (it used to abort with "capacity overflow").
#[test]
fn huge_random_tensors_are_refused_before_generating() {
    let Some(ctx) = common::ctx() else { return };
    for shape in [
        vec![1usize << 40, 1 << 10],
        vec![1 << 31, 1 << 31],
        vec![usize::MAX, 2],
    ] {
        let r = ctx.rand_uniform(&shape, -1.0, 1.0, DType::F32, 1);
        assert!(
            matches!(
                r,
                Err(Error::LimitExceeded { .. } | Error::InvalidArgument(_))
            ),
            "{shape:?}: {r:?}"
        );
    }
    // And the context still works.
    let t = ctx.rand_uniform([3, 5], -1.0, 1.0, DType::F32, 1).unwrap();
    assert_eq!(t.to_vec_blocking::<f32>().unwrap().len(), 15);
}

/// Forced kernels and tiles with zero or malformed sizes are refused with
/// `InvalidArgument` naming the field (they used to divide by zero).
#[test]
fn malformed_forced_configurations_are_named_errors() {
    use wgtile::{AttentionOptions, FlashTiles, MatmulKernel, MatmulOptions, TileConfig};
    let Some(ctx) = common::ctx() else { return };
    let a = ctx.zeros([8, 8], DType::F32).unwrap();
    let b = ctx.zeros([8, 8], DType::F32).unwrap();
    let tile = TileConfig::new(64, 64, 8);
    for (kernel, field) in [
        (MatmulKernel::Naive { wg_x: 0, wg_y: 16 }, "naive workgroup"),
        (
            MatmulKernel::Tiled {
                tile: TileConfig::new(0, 64, 8),
                vec4: false,
            },
            "tile bm",
        ),
        (
            MatmulKernel::Tiled {
                tile: TileConfig::new(64, 64, 0),
                vec4: false,
            },
            "tile bk",
        ),
        (
            MatmulKernel::SplitK {
                tile,
                vec4: false,
                splits: 0,
            },
            "splits",
        ),
    ] {
        let r = ctx.matmul_plan(&a, &b, None, &MatmulOptions::with_kernel(kernel));
        match r {
            Err(Error::InvalidArgument(msg)) => assert!(msg.contains(field), "{kernel:?}: {msg}"),
            other => panic!("{kernel:?}: {other:?}"),
        }
    }
    let q = ctx.zeros([1, 1, 4, 8], DType::F32).unwrap();
    let zeros = FlashTiles {
        br: 0,
        tr: 0,
        nc: 0,
        td: 0,
        dk: 0,
        vk: 0,
    };
    let r = ctx.attention(&q, &q, &q, &AttentionOptions::new().tiles(zeros));
    assert!(
        matches!(&r, Err(Error::InvalidArgument(m)) if m.contains("flash tiles")),
        "{r:?}"
    );
}
