//! Shared test helpers: the test context, CPU references in f64, tolerances,
//! seeded random data.

#![allow(dead_code)]

#[cfg(not(target_arch = "wasm32"))]
pub mod naga_check;

#[cfg(not(target_arch = "wasm32"))]
use std::sync::OnceLock;

use wgtile::{BinaryOp, Context, DType, MatmulShape, Tensor, UnaryOp};
#[cfg(not(target_arch = "wasm32"))]
use wgtile::{ContextOptions, wgpu};

/// The shared test context: the default adapter (the software one, lavapipe,
/// when no GPU is present). `None` (test skipped) only when there is no
/// adapter and `CI` is unset; under CI a missing adapter fails loudly.
#[cfg(not(target_arch = "wasm32"))]
static CTX: OnceLock<Option<Context>> = OnceLock::new();

#[cfg(not(target_arch = "wasm32"))]
pub fn ctx() -> Option<TestCtx> {
    shared_ctx().map(TestCtx)
}

/// The shared test context as one test holds it: dropped at the end of the
/// test, it waits for the GPU work the test left in flight. A software
/// adapter compiles a kernel when its first dispatch runs; at process
/// exit that compile raced the driver's exit handlers (lavapipe crashed or
/// hung there after the test passed), and an exit handler of ours runs too
/// late to wait for it.
#[cfg(not(target_arch = "wasm32"))]
pub struct TestCtx(Context);

#[cfg(not(target_arch = "wasm32"))]
impl std::ops::Deref for TestCtx {
    type Target = Context;
    fn deref(&self) -> &Context {
        &self.0
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl Drop for TestCtx {
    fn drop(&mut self) {
        // A lost device (a test may lose its own) has nothing to wait for.
        let _ = self.0.synchronize();
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn shared_ctx() -> Option<Context> {
    CTX.get_or_init(|| {
        let _ = env_logger::builder().is_test(true).try_init();
        match Context::new_blocking(ContextOptions::default()) {
            Ok(ctx) => {
                eprintln!("test adapter:\n{}", ctx.profile());
                // The shared context is never dropped: free its pooled
                // buffers at exit, before the driver's own exit handlers
                // (registered earlier, so run later) tear the device down
                // under them. Each test waits for its own work
                // ([`TestCtx`]'s drop).
                // SAFETY: `atexit` is the C library's; the callback takes
                // and returns nothing and does not unwind.
                unsafe { atexit(wait_at_exit) };
                Some(ctx)
            }
            Err(e) => {
                let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false");
                if ci {
                    panic!(
                        "no GPU adapter under CI: {e}. Install a Vulkan driver \
                         (apt-get install mesa-vulkan-drivers libvulkan1) or run `cargo xtask test`."
                    );
                }
                eprintln!("skipping GPU tests: {e}");
                None
            }
        }
    })
    .clone()
}

#[cfg(not(target_arch = "wasm32"))]
unsafe extern "C" {
    fn atexit(callback: extern "C" fn()) -> std::ffi::c_int;
}

#[cfg(not(target_arch = "wasm32"))]
extern "C" fn wait_at_exit() {
    if let Some(Some(ctx)) = CTX.get() {
        let _ = ctx.synchronize();
        ctx.release_buffer_pool();
    }
}

/// A second context on `ctx`'s adapter with `disabled` features turned off
/// (`wgpu::Features::empty()`: just another context, for foreign tensors or
/// a device a test may break).
#[cfg(not(target_arch = "wasm32"))]
pub fn context_without(ctx: &Context, disabled: wgpu::Features) -> Context {
    Context::new_blocking(ContextOptions {
        adapter: Some(ctx.profile().name.clone()),
        backends: Some(ctx.profile().backend.into()),
        disabled_features: disabled,
        ..Default::default()
    })
    .unwrap()
}

/// Softmax of each row of `n` values in f64 (a row of -inf gives zeros).
pub fn softmax_rows(z: &[f64], n: usize) -> Vec<f64> {
    let mut out = Vec::with_capacity(z.len());
    for row in z.chunks(n) {
        let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        if m == f64::NEG_INFINITY {
            out.extend(std::iter::repeat_n(0.0, n));
            continue;
        }
        let s: f64 = row.iter().map(|v| (v - m).exp()).sum();
        out.extend(row.iter().map(|v| (v - m).exp() / s));
    }
    out
}

/// A well-formed tensor-core kernel (2 x 2 subgroups of 32, a K step of
/// 32): for the tests that force it where the adapter has no tensor cores.
pub fn coop_kernel() -> wgtile::MatmulKernel {
    wgtile::MatmulKernel::Coop {
        warps_m: 2,
        warps_n: 2,
        bk: 32,
        frags_n: 2,
        subgroup: 32,
        split: false,
    }
}

/// Seeded uniform data in [-1, 1): never zeros, reproducible.
pub fn random(n: usize, seed: u64) -> Vec<f32> {
    wgtile::uniform_values(n, -1.0, 1.0, seed)
}

/// Uploads `data` as `dtype` (rounded to f16 or bf16 when asked) and returns the tensor
/// with the values it actually holds, widened to f32.
pub fn upload(ctx: &Context, data: &[f32], shape: &[usize], dtype: DType) -> (Tensor, Vec<f32>) {
    let back = data.iter().map(|&v| dtype.round(v)).collect();
    (ctx.tensor_from_f32(data, shape, dtype).unwrap(), back)
}

/// Reference batched matmul in f64: returns (C, sum_k |a_ik * b_kj|) per output,
/// the second for the error bound. `a_off(z)` / `b_off(z)` give each batch's
/// matrix offset (broadcasting shows up as repeated offsets).
pub fn matmul_ref(
    a: &[f32],
    b: &[f32],
    m: usize,
    n: usize,
    k: usize,
    offsets: &[(usize, usize)],
) -> (Vec<f64>, Vec<f64>) {
    let mut c = vec![0.0; offsets.len() * m * n];
    let mut mag = vec![0.0; offsets.len() * m * n];
    for (z, &(ao, bo)) in offsets.iter().enumerate() {
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut t) = (0.0f64, 0.0f64);
                for p in 0..k {
                    let prod = f64::from(a[ao + i * k + p]) * f64::from(b[bo + p * n + j]);
                    s += prod;
                    t += prod.abs();
                }
                c[(z * m + i) * n + j] = s;
                mag[(z * m + i) * n + j] = t;
            }
        }
    }
    (c, mag)
}

/// Error bound for one matmul output with f32 accumulation over `k` terms:
/// |got - ref| <= 2 k u32 sum|a b| (+ one f16 or bf16 rounding of the
/// result), where u32 = 2^-24, u16 = 2^-11 and ubf16 = 2^-8 are the unit
/// roundoffs.
pub fn matmul_tolerance(dtype: DType, k: usize, reference: f64, magnitude: f64) -> f64 {
    let accumulate = 2.0 * k.max(1) as f64 * 2f64.powi(-24) * magnitude;
    match dtype {
        DType::F32 => accumulate + 1e-30,
        DType::F16 => accumulate + 2f64.powi(-11) * reference.abs() + 6e-8,
        DType::BF16 => accumulate + 2f64.powi(-8) * reference.abs() + 1e-38,
        other => panic!("no matmul tolerance for {other}: matmul refuses it"),
    }
}

/// Asserts every element is within its bound; reports the worst offender.
pub fn assert_close(what: &str, got: &[f32], want: &[f64], bound: impl Fn(usize) -> f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst: Option<(usize, f64)> = None;
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        let err = (f64::from(g) - w).abs();
        let ratio = if err.is_nan() {
            f64::INFINITY
        } else {
            err / bound(i)
        };
        if ratio > 1.0 && worst.is_none_or(|(_, r)| ratio > r) {
            worst = Some((i, ratio));
        }
    }
    if let Some((i, ratio)) = worst {
        panic!(
            "{what}: element {i} is {} but the f64 reference is {} (error {:e}, {ratio:.1}x the bound {:e})",
            got[i],
            want[i],
            (f64::from(got[i]) - want[i]).abs(),
            bound(i)
        );
    }
}

/// Each output matrix's (A offset, B offset), following the batch strides.
pub fn batch_offsets(shape: &MatmulShape) -> Vec<(usize, usize)> {
    let inner = shape.batch[1];
    (0..shape.batch_count())
        .map(|z| {
            let (z0, z1) = (z / inner, z % inner);
            (
                z0 * shape.a_strides[0] + z1 * shape.a_strides[1],
                z0 * shape.b_strides[0] + z1 * shape.b_strides[1],
            )
        })
        .collect()
}

/// The dispatcher (None) and one kernel of each family, for the epilogue
/// tests: naive, GEMV, tiled scalar and vec4, split-K, every coop layout.
pub fn epilogue_kernels(ctx: &Context) -> Vec<Option<wgtile::MatmulKernel>> {
    let mut ks = vec![
        None,
        Some(wgtile::MatmulKernel::naive_for(ctx.profile())),
        Some(wgtile::MatmulKernel::Gemv),
    ];
    for vec4 in [false, true] {
        ks.push(Some(wgtile::MatmulKernel::Tiled {
            tile: wgtile::tune::TILE_CONFIGS[1],
            vec4,
        }));
    }
    ks.push(Some(wgtile::MatmulKernel::SplitK {
        tile: wgtile::tune::TILE_CONFIGS[2],
        vec4: false,
        splits: 2,
    }));
    ks.extend(
        wgtile::tune::COOP_CONFIGS
            .into_iter()
            .filter_map(|c| wgtile::MatmulKernel::coop_for(ctx.profile(), c))
            .map(Some),
    );
    ks
}

/// Every unary op of the expression IR, for the elementwise tests.
pub const UNARY: [UnaryOp; 16] = [
    UnaryOp::Neg,
    UnaryOp::Exp,
    UnaryOp::Log,
    UnaryOp::Sqrt,
    UnaryOp::Rsqrt,
    UnaryOp::Sin,
    UnaryOp::Cos,
    UnaryOp::Tanh,
    UnaryOp::Sigmoid,
    UnaryOp::Relu,
    UnaryOp::Gelu,
    UnaryOp::GeluErf,
    UnaryOp::Silu,
    UnaryOp::Erf,
    UnaryOp::Abs,
    UnaryOp::Square,
];

/// Every binary op of the expression IR.
pub const BINARY: [BinaryOp; 13] = [
    BinaryOp::Add,
    BinaryOp::Sub,
    BinaryOp::Mul,
    BinaryOp::Div,
    BinaryOp::Pow,
    BinaryOp::Min,
    BinaryOp::Max,
    BinaryOp::Lt,
    BinaryOp::Le,
    BinaryOp::Gt,
    BinaryOp::Ge,
    BinaryOp::Eq,
    BinaryOp::Ne,
];

/// erf in f64: its power series below 2 (relative precision kept for tiny
/// x), 1 - erfc beyond.
pub fn erf64(x: f64) -> f64 {
    if x.is_nan() || x.abs() >= 2.0 {
        return if x.is_nan() {
            x
        } else {
            x.signum() * (1.0 - erfc64(x.abs()))
        };
    }
    let mut sum = 0.0;
    let mut power = x; // x^(2n+1) / n!
    for n in 0..200 {
        let term = power / (2 * n + 1) as f64;
        sum += if n % 2 == 0 { term } else { -term };
        if term.abs() < 1e-18 * sum.abs().max(1e-300) {
            break;
        }
        power *= x * x / (n + 1) as f64;
    }
    2.0 / std::f64::consts::PI.sqrt() * sum
}

/// erfc in f64: power series of erf below 2, Laplace's continued fraction above.
pub fn erfc64(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x < 0.0 {
        return 2.0 - erfc64(-x);
    }
    if x < 2.0 {
        let mut sum = 0.0;
        let mut power = x; // x^(2n+1) / n!
        for n in 0..200 {
            let term = power / (2 * n + 1) as f64;
            sum += if n % 2 == 0 { term } else { -term };
            if term.abs() < 1e-18 {
                break;
            }
            power *= x * x / (n + 1) as f64;
        }
        1.0 - 2.0 / std::f64::consts::PI.sqrt() * sum
    } else {
        let mut f = x;
        for n in (1..=600).rev() {
            f = x + (n as f64 / 2.0) / f;
        }
        (-x * x).exp() / std::f64::consts::PI.sqrt() / f
    }
}

/// A small deterministic generator (a 64-bit LCG) of indices and picks.
pub struct Lcg(pub u64);

impl Lcg {
    /// The next value below `n`.
    pub fn below(&mut self, n: usize) -> usize {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }

    /// The next value below `m`, as u32.
    pub fn below_u32(&mut self, m: u32) -> u32 {
        self.below(m as usize) as u32
    }

    /// An element of `from`, picked at random.
    pub fn of<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.below(from.len())]
    }
}
