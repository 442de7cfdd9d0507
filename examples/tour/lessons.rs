//! The lessons with kernels of their own (`Context::divergence_plan`,
//! `sigmoid_chain_plans`, `ordered_copy_plan`, `naive_transpose_plan`,
//! `relu_fp8_plan`), and low precision.

use wgtile::{Activations, BranchForm, Context, DType, MatmulKernel, MatmulOptions, ReadOrder};

use crate::Args;
use crate::common::{max_error, random_matrix};
use crate::report::{Ceilings, Recorder, Section};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

/// The section's variants as bars of their times (ms).
fn time_bars(rec: &mut Recorder, id: &str, title: &str) -> Result<()> {
    let values: Vec<(String, f64)> = rec
        .section
        .rows
        .iter()
        .map(|r| (r.variant.clone(), r.seconds * 1e3))
        .collect();
    let svg = crate::figures::bars(title, "ms (median)", &values)?;
    rec.figure(
        id,
        &format!("{title}: the time of each variant, measured in this run."),
        svg,
    );
    Ok(())
}

/// The largest |got - want| over a sample of every `step`-th element.
fn sampled_error(got: &[f32], step: usize, want: impl Fn(usize) -> f64) -> f64 {
    (0..got.len())
        .step_by(step.max(1))
        .map(|i| {
            let e = (f64::from(got[i]) - want(i)).abs();
            if e.is_nan() { f64::INFINITY } else { e }
        })
        .fold(0.0, f64::max)
}

pub fn low_precision(ctx: &Context, args: &Args, c: &Ceilings) -> Result<Section> {
    let mut rec = Recorder::new("low-precision", "Low precision: fewer bytes per value", c);
    let profile = ctx.profile();
    rec.intro(
        "ReLU reads a value and writes one for one FLOP: 8 bytes per FLOP in f32, 4 in\n\
         f16 and bf16, 2 in FP8 (E4M3 codes, four to a word). Memory-bound, so its time\n\
         should follow the bytes. Then the matmul with f16 inputs and f32 accumulation:\n\
         half the bytes, and on tensor cores (cooperative matrices) the matrix units.",
    );
    let n: usize = args.fit(ctx, args.size(ctx, 1 << 20, 1 << 22, 1 << 28));
    let host = wgtile::uniform_values(n.min(1 << 20), -1.0, 1.0, 31);
    let x = ctx.rand_uniform([n], -1.0, 1.0, DType::F32, 31)?;
    let mut times = std::collections::HashMap::new();
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        if dtype == DType::F16 && !profile.shader_f16 {
            rec.note("f16 ReLU: skipped (no shader-f16 on this adapter)");
            continue;
        }
        let xd = ctx.cast(&x, dtype)?;
        let plan = ctx.eval_plan(&xd.expr().relu())?;
        ctx.fill(plan.output(), f32::NAN)?;
        let t = args.seconds(ctx, &plan, 2)?;
        let got = plan.output().to_f32_vec_blocking()?;
        let wide = xd.to_f32_vec_blocking()?;
        let err = sampled_error(&got, 61, |i| f64::from(wide[i]).max(0.0));
        let per = 2 * dtype.size();
        rec.row(
            &format!("ReLU {dtype}"),
            t,
            n as u64,
            plan.bytes(),
            dtype != DType::F32,
            Some(err),
            &format!("{per} bytes per FLOP"),
            plan.label(),
        );
        times.insert(dtype.to_string(), t);
    }
    // FP8: random E4M3 codes, four per word.
    let words: Vec<u32> = host
        .iter()
        .map(|v| v.to_bits().wrapping_mul(2654435761))
        .collect();
    let reps = (n / 4).div_ceil(words.len());
    let codes: Vec<u32> = words
        .iter()
        .copied()
        .cycle()
        .take(words.len() * reps)
        .collect();
    let ct = ctx.tensor(&codes, [codes.len()])?;
    let plan = ctx.relu_fp8_plan(&ct)?;
    let t = args.seconds(ctx, &plan, 2)?;
    let got = plan.output().to_vec_blocking::<u32>()?;
    let relu = |b: u32| {
        if b & 0x7f == 0x7f || b & 0x80 == 0 {
            b
        } else {
            0
        }
    };
    let wrong = codes
        .iter()
        .zip(&got)
        .step_by(61)
        .filter(|&(&w, &g)| {
            (0..4).fold(0, |acc, j| acc | (relu((w >> (8 * j)) & 0xff) << (8 * j))) != g
        })
        .count();
    rec.plan_row(
        "ReLU FP8 (E4M3)",
        t,
        &plan,
        false,
        Some(wrong as f64),
        "2 bytes per FLOP (error: wrong codes)",
    );
    let t32 = times["f32"];
    if let Some(t16) = times.get("f16") {
        rec.compare(
            "ReLU f32 / f16",
            "8 bytes per FLOP against 4",
            Some(2.0),
            t32 / t16,
        );
    }
    rec.compare(
        "ReLU f32 / bf16",
        "8 bytes per FLOP against 4",
        Some(2.0),
        t32 / times["bf16"],
    );
    rec.compare(
        "ReLU f32 / FP8",
        "8 bytes per FLOP against 2",
        Some(4.0),
        t32 / t,
    );
    if profile.is_cpu() {
        rec.note(
            "On a CPU adapter the bytes matter less than the instructions: llvmpipe converts \
             f16 and bf16 to f32 one value at a time and unpacks FP8 codes with integer \
             operations, so the ratios fall short of the bytes' (a GPU converts in its load \
             path).",
        );
    }

    // The matmul: f32 against f16 inputs.
    if !profile.shader_f16 {
        rec.note("f16 matmul: skipped (no shader-f16 on this adapter)");
        time_bars(&mut rec, "low-precision-figure", "ReLU by precision")?;
        return Ok(rec.done());
    }
    let m = args.size(ctx, 128, 256, 4096);
    let coop = wgtile::tune::has_coop_f16(profile);
    rec.note(if coop {
        "Tensor cores (cooperative matrices): available here."
    } else {
        "Tensor cores (cooperative matrices): not available here."
    });
    let mut mm = Vec::new();
    for dtype in [DType::F32, DType::F16] {
        let (a, ha) = random_matrix(ctx, m, 1, dtype)?;
        let (b, hb) = random_matrix(ctx, m, 2, dtype)?;
        let choice = ctx.explain_matmul(dtype, m, m, m, 1)?;
        let mut runs = vec![(MatmulOptions::default(), "the dispatcher's kernel")];
        if dtype == DType::F16 && matches!(choice.kernel(), MatmulKernel::Coop { .. }) {
            let cuda = wgtile::tune::choose_matmul(profile, DType::F32, m, m, m, 1).kernel;
            if cuda.accepts(dtype, m, m, m) {
                runs.insert(
                    0,
                    (
                        MatmulOptions::with_kernel(cuda),
                        "the same f16 problem on the CUDA-core kernel",
                    ),
                );
            }
        }
        for (options, why) in runs {
            let plan = ctx.matmul_plan(&a, &b, None, &options)?;
            ctx.fill(plan.output(), f32::NAN)?;
            let t = args.seconds(ctx, &plan, 1)?;
            let out = plan.output().to_f32_vec_blocking()?;
            let err = max_error(&ha, &hb, &out, m);
            rec.plan_row(
                &format!("matmul {dtype} n = {m}"),
                t,
                &plan,
                dtype == DType::F16,
                Some(err),
                why,
            );
            mm.push(t);
        }
    }
    time_bars(
        &mut rec,
        "low-precision-figure",
        "ReLU and matmul by precision",
    )?;
    rec.compare(
        &format!("matmul f32 / f16 (the dispatcher's) at n = {m}"),
        "matrix units make matmul 10x+ faster than other FLOPs where present; half the bytes elsewhere",
        None,
        mm[0] / mm[mm.len() - 1],
    );
    Ok(rec.done())
}

pub fn divergence(ctx: &Context, args: &Args, c: &Ceilings) -> Result<Section> {
    let mut rec = Recorder::new("divergence", "Control divergence", c);
    let profile = ctx.profile();
    let lanes = profile.subgroup_max_size.max(1) as usize;
    let (n, steps) = args.size(ctx, (1usize << 14, 32u32), (1 << 16, 64), (1 << 24, 256));
    rec.intro(&format!(
        "Every element runs one of two loops of {steps} steps, chosen by its sign. A subgroup\n\
         ({lanes} lanes here) executes one instruction for all its lanes: where its lanes\n\
         disagree it runs both loops, half its lanes idle in each. Three ways over the\n\
         same work: signs alternating lane by lane, signs in blocks of a whole subgroup,\n\
         and the alternating signs again with the choice made by select on the loop's\n\
         constants (one loop for every lane). The lecture: prefer arithmetic masks to if."
    ));
    let base = wgtile::uniform_values(n, 0.0, 1.0, 41);
    let mut times = Vec::new();
    let mut first: Option<Vec<f32>> = None;
    for (name, form, alternate, idle) in [
        (
            "branch, signs alternating by lane",
            BranchForm::Branch,
            true,
            50,
        ),
        (
            "branch, signs in whole subgroups",
            BranchForm::Branch,
            false,
            0,
        ),
        (
            "select, signs alternating by lane",
            BranchForm::Select,
            true,
            0,
        ),
    ] {
        let xs: Vec<f32> = base
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let negative = if alternate {
                    i % 2 == 1
                } else {
                    (i / lanes) % 2 == 1
                };
                if negative { -v } else { v }
            })
            .collect();
        let x = ctx.tensor(&xs, [n])?;
        let plan = ctx.divergence_plan(&x, form, steps)?;
        ctx.fill(plan.output(), f32::NAN)?;
        let t = args.seconds(ctx, &plan, 1)?;
        let got = plan.output().to_vec_blocking::<f32>()?;
        let err = sampled_error(&got, 97, |i| {
            let (a, c) = if xs[i] >= 0.0 {
                (0.5, 0.25)
            } else {
                (-0.5, 0.5)
            };
            let mut z = 0.5 * f64::from(xs[i]);
            for _ in 0..steps {
                z = a * z * z + c;
            }
            z
        });
        if alternate {
            // Branch and select over the same data must agree.
            match &first {
                None => first = Some(got),
                Some(f) => assert_eq!(f.len(), got.len()),
            }
        }
        rec.plan_row(
            name,
            t,
            &plan,
            false,
            Some(err),
            &format!("{idle}% of lanes idle by construction"),
        );
        times.push(t);
    }
    rec.compare(
        "branch: alternating / whole subgroups",
        "a divergent subgroup runs both sides",
        Some(2.0),
        times[0] / times[1],
    );
    rec.compare(
        "alternating: branch / select",
        "select the constants, run one loop",
        Some(2.0),
        times[0] / times[2],
    );
    if profile.is_cpu() {
        rec.note(
            "On a CPU adapter a subgroup is one SIMD vector of the CPU: masked lanes cost the \
             same as on a GPU, so the lesson holds there too.",
        );
    }
    time_bars(&mut rec, "divergence-figure", "Control divergence")?;
    Ok(rec.done())
}

pub fn recompute(ctx: &Context, args: &Args, c: &Ceilings) -> Result<Section> {
    let mut rec = Recorder::new("recompute", "Recomputation: the chain of three sigmoids", c);
    let n: usize = args.fit(ctx, args.size(ctx, 1 << 18, 1 << 20, 1 << 26));
    rec.intro(&format!(
        "y = s(s(s(x))) over {n} f32 elements, forward and backward. Storing the two\n\
         activations for the backward costs 8 global accesses per element (forward:\n\
         read x, write a1, a2, y; backward: read dy, a1, a2, write dx); recomputing them\n\
         in the backward costs 5 (read x, write y; read x, dy, write dx): cheap FLOPs\n\
         traded for bytes (lecture: recomputation). FLOPs counted as 4 per sigmoid."
    ));
    let xs: Vec<f32> = wgtile::uniform_values(n, -4.0, 4.0, 51);
    let dys = wgtile::uniform_values(n, -1.0, 1.0, 52);
    let x = ctx.tensor(&xs, [n])?;
    let dy = ctx.tensor(&dys, [n])?;
    let s = |v: f64| 1.0 / (1.0 + (-v).exp());
    let reference = |i: usize| {
        let a1 = s(f64::from(xs[i]));
        let a2 = s(a1);
        let y = s(a2);
        (
            y,
            f64::from(dys[i]) * y * (1.0 - y) * a2 * (1.0 - a2) * a1 * (1.0 - a1),
        )
    };
    let mut totals = Vec::new();
    for (activations, flops) in [
        (Activations::Store, (12u64, 12u64)),
        (Activations::Recompute, (12, 20)),
    ] {
        let chain = ctx.sigmoid_chain_plans(&x, &dy, activations)?;
        let mut total = 0.0;
        for (pass, plan, per) in [
            ("forward", &chain.forward, flops.0),
            ("backward", &chain.backward, flops.1),
        ] {
            ctx.fill(plan.output(), f32::NAN)?;
            let t = args.seconds(ctx, plan, 2)?;
            plan.run()?;
            let got = plan.output().to_vec_blocking::<f32>()?;
            let err = sampled_error(&got, 89, |i| {
                if pass == "forward" {
                    reference(i).0
                } else {
                    reference(i).1
                }
            });
            let accesses = plan.bytes() / 4 / n as u64;
            rec.row(
                &format!("{activations:?}: {pass}"),
                t,
                per * n as u64,
                plan.bytes(),
                false,
                Some(err),
                &format!("{accesses} global accesses per element"),
                plan.label(),
            );
            total += t;
        }
        totals.push(total);
    }
    rec.compare(
        "forward + backward: stored / recomputed",
        "8 global accesses per element against 5",
        Some(8.0 / 5.0),
        totals[0] / totals[1],
    );
    if ctx.profile().is_cpu() {
        rec.note(
            "On a CPU adapter each exp is tens of instructions per lane (the 4 FLOPs per \
             sigmoid counted here undercount it) while the bytes are cheap next to a GPU's, so \
             recomputing two sigmoids costs about what the saved bytes buy. The lecture's \
             trade is for GPUs, whose FLOPs are cheap next to their bytes.",
        );
    }
    time_bars(
        &mut rec,
        "recompute-figure",
        "Stored against recomputed activations",
    )?;
    Ok(rec.done())
}

pub fn coalescing(ctx: &Context, args: &Args, c: &Ceilings) -> Result<Section> {
    let mut rec = Recorder::new("coalescing", "Memory coalescing", c);
    let side: usize =
        (args.fit(ctx, args.size(ctx, 512usize, 1024, 8192).pow(2)) as f64).sqrt() as usize;
    rec.intro(&format!(
        "A row-major [{side}, {side}] f32 matrix copied element by element, the same bytes in\n\
         two orders: the lanes of a subgroup on consecutive addresses of a row (one\n\
         ~128-byte burst serves 32 lanes), or walking down a column ({} bytes apart: a\n\
         burst per lane). Then the transpose, which must read one way and write the\n\
         other: naively (coalesced reads, strided writes), and through 32 x 32 tiles in\n\
         workgroup memory (coalesced both ways).",
        4 * side
    ));
    let xs = wgtile::uniform_values(side * side, -1.0, 1.0, 61);
    let x = ctx.tensor(&xs, [side, side])?;
    let mut times = Vec::new();
    let plans = [
        (
            "copy along rows",
            ctx.ordered_copy_plan(&x, ReadOrder::Rows)?,
            false,
            "consecutive lanes, consecutive addresses",
        ),
        (
            "copy down columns",
            ctx.ordered_copy_plan(&x, ReadOrder::Columns)?,
            false,
            "consecutive lanes a row apart",
        ),
        (
            "transpose, naive",
            ctx.naive_transpose_plan(&x)?,
            true,
            "coalesced reads, strided writes",
        ),
        (
            "transpose, tiled",
            ctx.permute_plan(&x, &[1, 0])?,
            true,
            "32 x 32 tiles through workgroup memory",
        ),
    ];
    for (name, plan, transposed, why) in &plans {
        ctx.fill(plan.output(), f32::NAN)?;
        let t = args.seconds(ctx, plan, 2)?;
        let got = plan.output().to_vec_blocking::<f32>()?;
        let wrong = (0..got.len())
            .step_by(101)
            .filter(|&i| {
                let want = if *transposed {
                    xs[(i % side) * side + i / side]
                } else {
                    xs[i]
                };
                got[i].to_bits() != want.to_bits()
            })
            .count();
        rec.row(
            name,
            t,
            0,
            plan.bytes(),
            false,
            Some(wrong as f64),
            why,
            plan.label(),
        );
        times.push(t);
    }
    rec.compare(
        "copy: columns / rows",
        "a burst per lane instead of one per 32 lanes",
        None,
        times[1] / times[0],
    );
    rec.compare(
        "transpose: naive / tiled",
        "tiles make both sides coalesced",
        None,
        times[2] / times[3],
    );
    rec.note("(error column: elements that differ from the exact result, sampled)");
    if ctx.profile().is_cpu() {
        rec.note(
            "On a CPU adapter a strided lane costs a cache line, not a DRAM burst, and \
             workgroup memory is ordinary memory reached through a loop over the lanes: the \
             tiled transpose pays for its staging and barriers without the GPU's gain.",
        );
    }
    time_bars(&mut rec, "coalescing-figure", "Access order")?;
    Ok(rec.done())
}
