//! The small transformer-style MLP stack of the `batch` example (per layer:
//! `gelu(x W1 + b1)`, `h W2 + x`, a layer norm), op by op and as plans:
//! shared with `wgtile-dev`'s `batch_sweep`.

use wgtile::{Context, DType, Epilogue, MatmulOptions, Plan, Result, Tensor};

/// One layer's weights.
pub struct Layer {
    pub w1: Tensor,
    pub b1: Tensor,
    pub w2: Tensor,
    pub gamma: Tensor,
    pub beta: Tensor,
}

/// `layers` layers of hidden size `d` (FFN 4d), seeded uniform in [-0.1, 0.1).
pub fn layers(ctx: &Context, layers: usize, d: usize) -> Result<Vec<Layer>> {
    let f = 4 * d;
    let rand = |shape: &[usize], seed: u64| ctx.rand_uniform(shape, -0.1, 0.1, DType::F32, seed);
    (0..layers)
        .map(|i| {
            let s = 10 * i as u64;
            Ok(Layer {
                w1: rand(&[d, f], s)?,
                b1: rand(&[f], s + 1)?,
                w2: rand(&[f, d], s + 2)?,
                gamma: ctx.full([d], 1.0, DType::F32)?,
                beta: ctx.zeros([d], DType::F32)?,
            })
        })
        .collect()
}

/// The forward pass op by op (inside `Context::batch` when called there).
pub fn forward(ctx: &Context, layers: &[Layer], x: &Tensor) -> Result<Tensor> {
    let mut x = x.clone();
    for l in layers {
        let h = ctx.matmul_with(&x, &l.w1, &Epilogue::new().bias(&l.b1).gelu())?;
        let y = ctx.matmul_with(&h, &l.w2, &Epilogue::new().residual(&x))?;
        x = ctx.layer_norm(&y, Some(&l.gamma), Some(&l.beta), 1e-5)?;
    }
    Ok(x)
}

/// The same forward pass as plans, built once (the last one's output is the result).
pub fn forward_plans(ctx: &Context, layers: &[Layer], x: &Tensor) -> Result<Vec<Plan>> {
    let mut plans: Vec<Plan> = Vec::new();
    let mut x = x.clone();
    let opts = MatmulOptions::default();
    for l in layers {
        let h =
            ctx.matmul_plan_with(&x, &l.w1, None, &opts, &Epilogue::new().bias(&l.b1).gelu())?;
        let y = ctx.matmul_plan_with(
            h.output(),
            &l.w2,
            None,
            &opts,
            &Epilogue::new().residual(&x),
        )?;
        let n = ctx.layer_norm_plan(y.output(), Some(&l.gamma), Some(&l.beta), 1e-5)?;
        x = n.output().clone();
        plans.extend([h, y, n]);
    }
    Ok(plans)
}
