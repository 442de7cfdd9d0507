//! Tensors, the context and timing on a real adapter.

mod common;

use wgtile::{Context, DType, MatmulKernel, TimingOptions};

#[test]
fn f32_and_f16_round_trip_exactly() {
    let Some(ctx) = common::ctx() else { return };
    for n in [1usize, 2, 3, 7, 13, 1021] {
        let data = common::random(n, n as u64);
        let t = ctx.tensor(&data, [n]).unwrap();
        assert_eq!(t.to_vec_blocking::<f32>().unwrap(), data);
        let h: Vec<wgtile::f16> = data.iter().map(|&v| wgtile::f16::from_f32(v)).collect();
        let t = ctx.tensor(&h, [n]).unwrap();
        assert_eq!(t.dtype(), DType::F16);
        assert_eq!(t.to_vec_blocking::<wgtile::f16>().unwrap(), h);
    }
}

#[test]
fn zeros_full_and_rand_uniform() {
    let Some(ctx) = common::ctx() else { return };
    let z = ctx.zeros([3, 5, 7], DType::F32).unwrap();
    assert_eq!(z.shape(), [3, 5, 7]);
    assert_eq!(z.to_vec_blocking::<f32>().unwrap(), vec![0.0; 105]);
    // Odd f16 length: the fill writes whole words, the read returns exactly n.
    let f = ctx.full([3, 3], 1.5, DType::F16).unwrap();
    let v = f.to_vec_blocking::<wgtile::f16>().unwrap();
    assert_eq!(v, vec![wgtile::f16::from_f32(1.5); 9]);
    let r = ctx
        .rand_uniform([4, 1000], -2.0, 3.0, DType::F32, 42)
        .unwrap();
    let v = r.to_vec_blocking::<f32>().unwrap();
    assert_eq!(v, wgtile::uniform_values(4000, -2.0, 3.0, 42));
    assert!(v.iter().all(|x| (-2.0..3.0).contains(x)));
    let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / 4000.0;
    assert!((mean - 0.5).abs() < 0.1, "mean {mean}");
    let again = ctx
        .rand_uniform([4, 1000], -2.0, 3.0, DType::F32, 43)
        .unwrap();
    assert_ne!(again.to_vec_blocking::<f32>().unwrap(), v);
}

#[test]
fn empty_tensors_and_reshape() {
    let Some(ctx) = common::ctx() else { return };
    let e = ctx.tensor::<f32>(&[], [0, 4]).unwrap();
    assert!(e.is_empty());
    assert!(e.to_vec_blocking::<f32>().unwrap().is_empty());
    let t = ctx.tensor(&common::random(12, 1), [3, 4]).unwrap();
    let r = t.reshape([2, 6]).unwrap();
    assert_eq!(r.shape(), [2, 6]);
    assert_eq!(
        r.to_vec_blocking::<f32>().unwrap(),
        t.to_vec_blocking::<f32>().unwrap()
    );
}

#[test]
fn context_is_send_sync_and_usable_from_threads() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<Context>();
    assert_send_sync::<wgtile::Tensor>();
    let Some(ctx) = common::ctx() else { return };
    let handles: Vec<_> = (0..3)
        .map(|i| {
            let ctx = ctx.clone();
            std::thread::spawn(move || {
                let n = 17 + i;
                let a = ctx
                    .rand_uniform([n, n], -1.0, 1.0, DType::F32, i as u64)
                    .unwrap();
                let c = ctx.matmul(&a, &a).unwrap();
                c.to_vec_blocking::<f32>().unwrap().len()
            })
        })
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.join().unwrap(), (17 + i) * (17 + i));
    }
}

#[test]
fn profile_prints_a_readable_block() {
    let Some(ctx) = common::ctx() else { return };
    let text = ctx.profile().to_string();
    for key in [
        "adapter",
        "backend",
        "subgroups",
        "features",
        "workgroups",
        "buffers",
    ] {
        assert!(text.contains(key), "{text}");
    }
    assert!(ctx.profile().max_workgroup_storage >= 16 << 10);
}

#[test]
fn timing_reports_positive_samples() {
    let Some(ctx) = common::ctx() else { return };
    let a = ctx
        .rand_uniform([64, 64], -1.0, 1.0, DType::F32, 1)
        .unwrap();
    let plan = ctx
        .matmul_plan(
            &a,
            &a,
            None,
            &wgtile::MatmulOptions::with_kernel(MatmulKernel::naive_for(ctx.profile())),
        )
        .unwrap();
    let t = ctx
        .time(
            &plan,
            &TimingOptions {
                warmup: 1,
                warmup_seconds: 0.0,
                repeats: 5,
            },
        )
        .unwrap();
    assert_eq!(t.samples.len(), 5);
    assert!(t.samples.iter().all(|&s| s > 0.0 && s < 10.0), "{t}");
    assert!(t.min() <= t.median());
    assert!(t.gflops(plan.flops()) > 0.0);
}

#[test]
fn gpu_random_fill_is_uniform_and_deterministic() {
    let Some(ctx) = common::ctx() else { return };
    for dtype in [DType::F32, DType::F16] {
        if dtype == DType::F16 && !ctx.profile().shader_f16 {
            continue;
        }
        let t = ctx.zeros([1001], dtype).unwrap();
        ctx.fill_random(&t, 7).unwrap();
        let v = t.to_f32_vec_blocking().unwrap();
        assert!(v.iter().all(|x| (-1.0..1.0).contains(x)), "{dtype}");
        let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 0.1, "{dtype}: mean {mean}");
        let distinct = v
            .iter()
            .map(|x| x.to_bits())
            .collect::<std::collections::HashSet<_>>();
        assert!(distinct.len() > 900, "{dtype}: {} distinct", distinct.len());
        let again = ctx.zeros([1001], dtype).unwrap();
        ctx.fill_random(&again, 7).unwrap();
        assert_eq!(again.to_f32_vec_blocking().unwrap(), v);
    }
}
