//! bf16, measured: the ops that take bf16 next to the same ops in f16 and
//! f32, on this adapter.
//!
//! ```text
//! cargo run --release --example bf16 -- [--quick]
//! ```
//! bf16 is a storage dtype: matmul stages it to f16 (with an exactness
//! flag that arms an f32 fallback), the other ops to f32, so each bf16 row
//! shows what the staging costs against the dtype it runs in. Times are
//! medians of GPU timestamps; GB/s counts the bytes each op must move,
//! TFLOP/s the useful multiply-adds (x2). Compare with
//! `python3 bench/torch_bf16.py` (same shapes).

use clap::Parser;
use wgtile::{
    AttentionOptions, Context, ContextOptions, DType, Plan, Tensor, TimingOptions, bf16, f16,
};

#[derive(Parser, Debug)]
struct Args {
    /// Small shapes (seconds on a software adapter).
    #[arg(long)]
    quick: bool,
    /// Measured runs per case.
    #[arg(long, default_value_t = 30)]
    repeats: u32,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::init();
    let args = Args::parse();
    let ctx = Context::new_blocking(ContextOptions {
        cooperative_matrix: Some(true),
        ..Default::default()
    })?;
    println!("adapter: {}", ctx.profile().name);
    let opts = TimingOptions {
        warmup: 3,
        warmup_seconds: if args.quick { 0.0 } else { 0.3 },
        repeats: args.repeats.max(1),
    };
    let time = |plan: &Plan| -> wgtile::Result<f64> { Ok(ctx.time(plan, &opts)?.median()) };
    let mut dtypes = vec![DType::BF16, DType::F32];
    if ctx.profile().shader_f16 {
        dtypes.insert(1, DType::F16);
    }
    println!(
        "{:<34} {:>6} {:>11} {:>9} {:>9}",
        "op", "dtype", "time (us)", "TFLOP/s", "GB/s"
    );
    let row = |what: &str, d: DType, plan: &Plan, t: f64| {
        println!(
            "{what:<34} {:>6} {:>11.1} {:>9.2} {:>9.1}",
            d.to_string(),
            t * 1e6,
            plan.flops() as f64 / t / 1e12,
            plan.bytes() as f64 / t / 1e9
        );
    };
    // Each dispatch of a bf16 plan alone (staging, kernel, fallback, rounding).
    let stages = |plan: &Plan| -> wgtile::Result<()> {
        for (i, stage) in plan.stages().iter().enumerate() {
            plan.run()?;
            println!("    stage {:>2}: {:>9.1} us", i + 1, time(stage)? * 1e6);
        }
        Ok(())
    };
    let sizes: &[usize] = if args.quick { &[256] } else { &[2048, 4096] };
    for &n in sizes {
        for &d in &dtypes {
            let a = ctx.rand_uniform([n, n], -1.0, 1.0, d, 1)?;
            let b = ctx.rand_uniform([n, n], -1.0, 1.0, d, 2)?;
            let plan = ctx.matmul_plan(&a, &b, None, &Default::default())?;
            let t = time(&plan)?;
            row(&format!("matmul {n}^3"), d, &plan, t);
            if d == DType::BF16 {
                stages(&plan)?;
            }
        }
        // bf16 as models hold it: normal activations times a normal weight
        // of standard deviation 0.02. Unlike the uniform data above (a
        // grid of multiples of 2^-23, every value an f16 value), a few
        // values fall below 2^-17, where bf16's 8 significant bits need
        // more than f16's subnormals; the range test keeps the f16 kernels
        // for them (they move by at most 2^-24).
        let (a, a_out) = normal_bf16(&ctx, &[n, n], 1.0, 7)?;
        let (b, b_out) = normal_bf16(&ctx, &[n, n], 0.02, 8)?;
        let plan = ctx.matmul_plan(&a, &b, None, &Default::default())?;
        let t = time(&plan)?;
        row(&format!("matmul {n}^3, normal data"), DType::BF16, &plan, t);
        println!("    values f16 cannot hold: {a_out} in A, {b_out} in B");
    }
    let (bh, s, hd) = if args.quick {
        (2, 256, 64)
    } else {
        (16, 4096, 128)
    };
    // Normal q, k, v (as a model's projections give them).
    let qkv: Vec<Tensor> = (0..3)
        .map(|i| Ok(normal_bf16(&ctx, &[1, bh, s, hd], 1.0, 9 + i)?.0))
        .collect::<wgtile::Result<_>>()?;
    let (plan, _) = ctx.attention_plan(&qkv[0], &qkv[1], &qkv[2], &AttentionOptions::new())?;
    let t = time(&plan)?;
    row(
        &format!("attention {bh}x{s}x{hd}, normal data"),
        DType::BF16,
        &plan,
        t,
    );
    for &d in &dtypes {
        let q = ctx.rand_uniform([1, bh, s, hd], -1.0, 1.0, d, 3)?;
        let k = ctx.rand_uniform([1, bh, s, hd], -1.0, 1.0, d, 4)?;
        let v = ctx.rand_uniform([1, bh, s, hd], -1.0, 1.0, d, 5)?;
        let (plan, _) = ctx.attention_plan(&q, &k, &v, &AttentionOptions::new())?;
        let t = time(&plan)?;
        row(&format!("attention {bh}x{s}x{hd}"), d, &plan, t);
        if d == DType::BF16 {
            stages(&plan)?;
        }
    }
    let (rows, cols) = if args.quick {
        (256, 1024)
    } else {
        (8192, 8192)
    };
    for &d in &dtypes {
        let x = ctx.rand_uniform([rows, cols], -4.0, 4.0, d, 6)?;
        let plan = ctx.softmax_plan(&x)?;
        row(&format!("softmax {rows}x{cols}"), d, &plan, time(&plan)?);
        let plan = ctx.eval_plan(&x.expr().relu())?;
        row(
            &format!("relu (fused) {rows}x{cols}"),
            d,
            &plan,
            time(&plan)?,
        );
        if d != DType::F32 {
            let plan = ctx.cast_plan(&x, DType::F32)?;
            row(
                &format!("cast to f32 {rows}x{cols}"),
                d,
                &plan,
                time(&plan)?,
            );
        }
    }
    Ok(())
}

/// A bf16 tensor of normal samples of standard deviation `sigma`, and how
/// many of its values f16 cannot hold exactly.
fn normal_bf16(
    ctx: &Context,
    shape: &[usize],
    sigma: f64,
    seed: u64,
) -> wgtile::Result<(Tensor, usize)> {
    let t = ctx.rand_normal(shape, 0.0, sigma as f32, DType::BF16, seed)?;
    let values = t.to_vec_blocking::<bf16>()?;
    let outside = values
        .iter()
        .filter(|v| f16::from_f32(v.to_f32()).to_f64() != v.to_f64())
        .count();
    Ok((t, outside))
}
