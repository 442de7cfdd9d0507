//! The behaviour snapshot: for fixed shapes on fake adapter profiles, every
//! WGSL text the kernels produce (hashed, comments stripped) and every
//! dispatcher decision (kernel, tiles, grid, splits, padding) written as one
//! line each and compared with `tests/snapshots/dispatch.txt`.
//!
//! A change that alters neither the snapshot nor any test changes no kernel
//! and no choice, so it changes no speed. When a change is meant to alter a
//! kernel or a choice, the test writes the new listing next to the old one
//! (`dispatch.txt.new`); review the diff and commit it with the change that
//! caused it, saying why. No GPU is needed.

use std::fmt::Write as _;

use crate::dtype::DType;
use crate::gpu::AdapterProfile;
use crate::kernels::{Kernel, Spec};
use crate::ops::matmul::{MatmulOptions, MatmulShape, Padding};
use crate::tune::{self, Layout, MatmulKernel, attention};

const SNAPSHOT: &str = "tests/snapshots/dispatch.txt";

/// FNV-1a, 64 bits: stable across Rust versions and platforms (std's
/// hasher is not).
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The text a compiler sees, without comments, trailing spaces and blank
/// lines: header and comment edits do not change it. (WGSL has no string
/// literals, so every `//` starts a comment; no shader uses `/* */`.)
fn code_hash(wgsl: &str) -> String {
    let mut code = String::with_capacity(wgsl.len());
    for line in wgsl.lines() {
        let line = line.split("//").next().unwrap_or("").trim_end();
        if !line.trim().is_empty() {
            code.push_str(line);
            code.push('\n');
        }
    }
    format!("{:016x}", fnv(&code))
}

fn spec_line(spec: &Spec) -> String {
    let hash = match spec.wgsl() {
        Ok(text) => code_hash(&text),
        Err(e) => format!("error: {e}"),
    };
    format!(
        "{} entry={} {hash}",
        spec_label(spec),
        spec.kernel.entry_point()
    )
}

fn spec_label(spec: &Spec) -> String {
    let mut s = format!("{}<{}>", spec.kernel.name(), spec.dtype);
    if let Some(o) = spec.out_dtype {
        write!(s, "->{o}").unwrap();
    }
    for (k, v) in &spec.consts {
        write!(s, " {k}={v}").unwrap();
    }
    for (k, v) in &spec.overrides {
        write!(s, " @{k}={v}").unwrap();
    }
    s
}

/// The profiles: an H200-like GPU with tensor cores, the same without, a
/// lavapipe-like CPU adapter (subgroups of 8), a SwiftShader-like browser
/// adapter (256 invocations, subgroups of 4, no f16), an AMD-like GPU with
/// 64-wide subgroups.
fn profiles() -> Vec<AdapterProfile> {
    vec![
        AdapterProfile::fake_h200(),
        AdapterProfile::fake_gpu().named("gpu-no-coop"),
        AdapterProfile::fake_lavapipe(),
        AdapterProfile::fake_swiftshader(),
        AdapterProfile::fake_amd(),
    ]
}

const MATMUL_SHAPES: [(usize, usize, usize, usize); 16] = [
    (1, 1, 1, 1),
    (8, 8, 8, 1),
    (1, 4096, 4096, 1),
    (4096, 1, 4096, 1),
    (3, 4096, 4096, 1),
    (97, 89, 101, 1),
    (256, 256, 256, 1),
    (512, 513, 512, 1),
    (1024, 1024, 1024, 1),
    (1792, 1792, 1792, 1),
    (1793, 1793, 1793, 1),
    (4096, 4096, 4096, 1),
    (4097, 4097, 4097, 1),
    (4096, 4096, 14336, 1),
    (512, 512, 512, 8),
    (64, 64, 65536, 1),
];

fn kernel_line(
    p: &AdapterProfile,
    k: MatmulKernel,
    dtype: DType,
    m: usize,
    n: usize,
    b: usize,
) -> String {
    format!(
        "{k} grid={} [{}]",
        tune::workgroup_count(k, m, n, b),
        spec_line(&k.spec(dtype))
    )
    .replace('\n', " ")
        + if k.fits(p) { "" } else { " (does not fit)" }
}

fn matmul_section(out: &mut String, p: &AdapterProfile) {
    for dtype in [DType::F32, DType::F16] {
        for (m, n, k, b) in MATMUL_SHAPES {
            for (ta, tb) in [(false, false), (true, false), (false, true)] {
                let layout = Layout::dense(m, n, k, ta, tb);
                let c = tune::choose_matmul_layout(p, dtype, (m, n, k), b, layout);
                let head = format!("{} matmul {dtype} {m}x{n}x{k} x{b} t={ta}{tb}", p.name);
                writeln!(
                    out,
                    "{head} choice: {} waves={:.3} ({})",
                    kernel_line(p, c.kernel, dtype, m, n, b),
                    c.waves,
                    c.reason
                )
                .unwrap();
                let cands = tune::matmul_candidates_layout(p, dtype, (m, n, k), b, layout);
                let names: Vec<String> = cands.iter().map(|c| c.to_string()).collect();
                writeln!(out, "{head} candidates: {}", names.join(", ")).unwrap();
                if dtype == DType::F32 {
                    let options = MatmulOptions::default();
                    let tc = crate::ops::matmul::f32_on_tensor_cores(
                        p,
                        &options,
                        (m, n, k),
                        b,
                        layout,
                        false,
                    );
                    if let Some(tc) = tc {
                        writeln!(
                            out,
                            "{head} f32 tensor cores: {}",
                            kernel_line(p, tc, dtype, m, n, b)
                        )
                        .unwrap();
                    }
                }
                route_lines(out, p, &head, dtype, (m, n, k), b, layout);
                if ta || tb {
                    continue;
                }
                let raw = c.kernel;
                for policy in [Padding::Auto, Padding::Always] {
                    let pad = crate::tune::pad::choose_for(p, raw, dtype, (m, n, k), b, policy);
                    if let Some(pad) = pad {
                        writeln!(out, "{head} pad {policy:?}: {pad}").unwrap();
                    }
                }
                if let Ok(shape) = MatmulShape::new(&[m, k], &[k, n]) {
                    if m == 1 || n == 1 {
                        writeln!(
                            out,
                            "{head} gemv: {:?}",
                            crate::ops::matmul::gemv_variant(p, dtype, &shape)
                        )
                        .unwrap();
                    }
                }
            }
        }
    }
}

/// The plan's route under a few option sets, as `ops::matmul` takes it for
/// dense operands of one dtype.
fn route_lines(
    out: &mut String,
    p: &AdapterProfile,
    head: &str,
    dtype: DType,
    mnk: (usize, usize, usize),
    batches: usize,
    layout: Layout,
) {
    use crate::tune::route::{RouteRequest, matmul_route};
    let options = [
        ("default", MatmulOptions::default()),
        ("never", MatmulOptions::with_padding(Padding::Never)),
        (
            "split",
            MatmulOptions {
                split_f32: Some(true),
                ..MatmulOptions::default()
            },
        ),
        (
            "reduced",
            MatmulOptions {
                reduced_precision: true,
                ..MatmulOptions::default()
            },
        ),
        (
            "fringe1",
            MatmulOptions {
                fringe_rows: Some(1),
                ..MatmulOptions::default()
            },
        ),
    ];
    for (name, o) in options {
        let variants: &[(&str, bool, bool)] = if name == "default" {
            &[
                ("", false, false),
                (" +bias", true, false),
                (" mixed", false, true),
            ]
        } else {
            &[("", false, false)]
        };
        for &(what, reads, mixed) in variants {
            let r = RouteRequest {
                dtype,
                mnk,
                batches,
                layout,
                epilogue_reads_tensors: reads,
                padded_operands: false,
                mixed,
                one_matrix: batches == 1,
            };
            let route = match matmul_route(p, &o, &r) {
                crate::tune::route::MatmulRoute::Padded(pad) => format!("padded: {pad}"),
                crate::tune::route::MatmulRoute::Kernel(k) => format!("kernel: {k}"),
                crate::tune::route::MatmulRoute::Autotune(k) => format!("autotune from: {k}"),
            };
            writeln!(out, "{head} route {name}{what}: {route}").unwrap();
        }
    }
}

fn attention_section(out: &mut String, p: &AdapterProfile) {
    for (d, dv) in [
        (16, 16),
        (64, 64),
        (80, 80),
        (128, 128),
        (96, 64),
        (256, 256),
    ] {
        let head = format!("{} attention d={d} dv={dv}", p.name);
        for sq in [1, 7, 128, 4096] {
            let t = attention::flash_tiles_for(p, sq, dv);
            writeln!(
                out,
                "{head} sq={sq} flash: {}",
                t.map_or("none".into(), |t| format!(
                    "{t} [{}] [{}]",
                    spec_line(&t.spec(DType::F32, false)),
                    spec_line(&t.spec(DType::F32, true))
                ))
            )
            .unwrap();
            if let Some(t) = t {
                for (wgs, sk) in [(1u64, 4096usize), (8, 32768), (1024, 4096)] {
                    writeln!(
                        out,
                        "{head} sq={sq} kv_splits(wg={wgs}, sk={sk}) = {}",
                        attention::kv_splits(p, wgs, sk, t)
                    )
                    .unwrap();
                }
            }
        }
        for dtype in [DType::F32, DType::F16] {
            let coop = attention::flash_coop_tiles(p, d, dv, dtype);
            let sg = p.subgroup_max_size;
            writeln!(
                out,
                "{head} {dtype} flash coop: {}",
                coop.map_or("none".into(), |t| format!(
                    "{t} [{}]",
                    spec_line(&t.spec(d, dv, sg, dtype))
                ))
            )
            .unwrap();
            let bt = attention::backward_tiles(p, d, dv);
            writeln!(
                out,
                "{head} {dtype} backward: {}",
                bt.map_or("none".into(), |t| format!(
                    "{t} [{}] [{}]",
                    spec_line(&t.spec(Kernel::AttentionBwdDkDv, dtype)),
                    spec_line(&t.spec(Kernel::AttentionBwdDq, dtype))
                ))
            )
            .unwrap();
            let bc = attention::coop_backward::backward_coop_tiles(p, d, dv);
            writeln!(
                out,
                "{head} {dtype} backward coop: {}",
                bc.map_or("none".into(), |t| t.to_string())
            )
            .unwrap();
            if attention::decode_fits(dtype, d, dv) {
                let t = attention::decode_kernel_tiles(dtype, d);
                for rows in [1, 4, 16] {
                    writeln!(
                        out,
                        "{head} {dtype} decode rows={rows}: {t} [{}] [{}]",
                        spec_line(&attention::decode_spec(dtype, rows, d, dv, t, false)),
                        spec_line(&attention::decode_spec(dtype, rows, d, dv, t, true)),
                    )
                    .unwrap();
                }
                for (wgs, sk) in [(8u64, 4096usize), (8, 32768), (256, 32768)] {
                    writeln!(
                        out,
                        "{head} {dtype} decode_splits(wg={wgs}, sk={sk}) = {} coop = {} shuffle_fits = {}",
                        attention::decode_splits(p, wgs, sk, t),
                        attention::coop_decode::decode_coop_splits(p, wgs, sk),
                        attention::decode_shuffle_fits(p, t),
                    )
                    .unwrap();
                }
            }
        }
    }
}

fn rows_section(out: &mut String, p: &AdapterProfile) {
    for n in [
        1u32, 3, 4, 31, 127, 128, 768, 1000, 4096, 4097, 32768, 50257,
    ] {
        let r = crate::ops::rows::register_layout(p, n);
        let red = crate::ops::rows::reduce::reduce_row_layout(p, n);
        writeln!(
            out,
            "{} rows n={n}: register wg={} t={} r={} vec4={} subgroup_ok={}; reduce wg={} t={} vec4={}",
            p.name,
            r.wg,
            r.t,
            r.r,
            r.vec4,
            r.subgroup_ok(p),
            red.wg,
            red.t,
            red.vec4
        )
        .unwrap();
    }
}

fn specs_section(out: &mut String) {
    for kernel in Kernel::ALL {
        writeln!(out, "default {}", spec_line(&Spec::new(kernel))).unwrap();
        if kernel.is_dtype_generic() {
            writeln!(
                out,
                "default {}",
                spec_line(&Spec::new(kernel).dtype(DType::F16))
            )
            .unwrap();
        }
    }
    let lists = [
        ("matmul", tune::matmul_specs()),
        ("attention", attention::attention_specs()),
        ("attention coop", attention::attention_coop_specs()),
        ("rows", crate::ops::rows::rowops_specs()),
        ("softmax cols", crate::ops::rows::softmax_cols_specs()),
        ("norm cols", crate::ops::rows::norm_cols_specs()),
        ("quant", crate::ops::quant::quant_specs()),
    ];
    for (name, specs) in lists {
        for spec in specs {
            writeln!(out, "{name} {}", spec_line(&spec)).unwrap();
        }
    }
}

fn fusion_section(out: &mut String) {
    use crate::{BinaryOp, Expr, UnaryOp};
    for dtype in [DType::F32, DType::F16] {
        for shape in [&[8usize, 12][..], &[5, 7], &[3, 8, 12]] {
            let x = Expr::input(0, shape, dtype);
            let y = Expr::input(1, shape, dtype);
            let row = Expr::input(2, &shape[shape.len() - 1..], dtype);
            let exprs = [
                x.clone().sin().square() + x.clone().cos().square(),
                Expr::apply_binary(BinaryOp::Mul, &x, &y) + &row,
                Expr::apply_unary(UnaryOp::GeluErf, &x),
                Expr::where_(x.clone().gt(0.0), &x, y.clone() * 2.0),
            ];
            for e in &exprs {
                let line = match crate::kernels::codegen::fusion::generate(e) {
                    Ok(g) => format!("{} vec4={} {}", g.key, g.vec4, code_hash(&g.wgsl)),
                    Err(err) => format!("error: {err}"),
                };
                writeln!(out, "fusion {dtype} {shape:?} {e}: {line}").unwrap();
            }
            if let Ok(epi) =
                crate::kernels::codegen::fusion::generate_epilogue(&(x.clone().tanh() * 0.5))
            {
                writeln!(out, "epilogue {dtype} {shape:?}: {}", code_hash(&epi.wgsl)).unwrap();
            }
        }
    }
}

fn listing() -> String {
    let mut out = String::new();
    specs_section(&mut out);
    fusion_section(&mut out);
    for p in profiles() {
        matmul_section(&mut out, &p);
        attention_section(&mut out, &p);
        rows_section(&mut out, &p);
    }
    out
}

#[test]
fn kernels_and_decisions_match_the_snapshot() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(SNAPSHOT);
    let now = listing();
    let before = std::fs::read_to_string(&path).unwrap_or_default();
    if now == before {
        return;
    }
    let new_path = path.with_extension("txt.new");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&new_path, &now).unwrap();
    let mut diff = String::new();
    let (old, new): (Vec<&str>, Vec<&str>) = (before.lines().collect(), now.lines().collect());
    let mut shown = 0;
    for i in 0..old.len().max(new.len()) {
        let (o, n) = (old.get(i).copied(), new.get(i).copied());
        if o != n && shown < 20 {
            writeln!(
                diff,
                "line {}:\n  - {}\n  + {}",
                i + 1,
                o.unwrap_or(""),
                n.unwrap_or("")
            )
            .unwrap();
            shown += 1;
        }
    }
    panic!(
        "the kernels or the dispatcher's decisions changed ({} lines before, {} now); \
         the new listing is in {}: review it and move it over {SNAPSHOT} if the change is meant\n{diff}",
        old.len(),
        new.len(),
        new_path.display()
    );
}
