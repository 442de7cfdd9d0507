//! The tour: the lecture's techniques, each run and measured on this
//! adapter against its own ceilings. `cargo xtask tour` runs it in release
//! mode after checking for a Vulkan driver.
//!
//! ```text
//! cargo run --release --example tour -- [--quick] [--only SECTION[,..]]
//!     [--json FILE] [--html DIR] [--sizes 256,512] [--repeats N]
//! ```
//!
//! First the ceilings: the copy bandwidth and the best matmul rates (f32,
//! and f16 on tensor cores where present). Then one section per lesson,
//! each a table of variants with their time, GFLOP/s, GB/s and fraction of
//! the roof their operational intensity puts them under, the lecture's
//! prediction next to the measured ratio, and figures: tiling, low
//! precision, padding and wave quantisation (throughput against N around a
//! tile boundary), the memory-bound GEMV, fusion, row operations, control
//! divergence, recomputation, coalescing, attention (naive against
//! FlashAttention as S grows), fewer bits, and a roofline with every
//! kernel of the run. Every result is checked against an f64 CPU
//! reference. The report is written to `target/wgtile-tour/report.html`
//! (self-contained: tables and inline SVG) and `report.json`.
//!
//! It opts in to wgpu's experimental cooperative matrices, and autotunes large
//! shapes on GPUs (`WGTILE_AUTOTUNE=off` shows the heuristic's picks).

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Instant;

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use wgtile::{Context, ContextOptions, DType, MatmulOptions, TimingOptions};

#[path = "../common/mod.rs"]
mod common;
mod figures;
mod lessons;
mod report;
mod sections;

use report::{Ceilings, Recorder, Report, Section};

#[derive(Parser, Debug)]
#[command(about = "Run and measure every wgtile technique on this adapter")]
pub struct Args {
    /// Square matmul sizes for the tiling section (default: suited to the adapter).
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Measured runs per kernel and size.
    #[arg(long, default_value_t = 5)]
    repeats: u32,
    /// Smallest sizes only (a smoke run).
    #[arg(long)]
    quick: bool,
    /// Only these sections (ids: ceilings always runs).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Also write the report as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Where report.html and report.json go.
    #[arg(long, default_value = "target/wgtile-tour")]
    html: PathBuf,
}

impl Args {
    /// The largest power of two of `elements` or fewer whose f32 tensor
    /// fits one of the adapter's storage bindings.
    pub fn fit(&self, ctx: &Context, elements: usize) -> usize {
        let most = (ctx.profile().max_tensor_bytes().0 / 4).max(1) as usize;
        let n = elements.min(most);
        1 << (usize::BITS - 1 - n.leading_zeros())
    }

    /// `quick` under `--quick`, `cpu` on a CPU adapter, else `gpu`.
    pub fn size<T>(&self, ctx: &Context, quick: T, cpu: T, gpu: T) -> T {
        if self.quick {
            quick
        } else if ctx.profile().is_cpu() {
            cpu
        } else {
            gpu
        }
    }

    /// Median seconds of `plan` over `self.repeats * factor` runs.
    pub fn seconds(&self, ctx: &Context, plan: &wgtile::Plan, factor: u32) -> wgtile::Result<f64> {
        Ok(self.timing(ctx, plan, factor)?.median())
    }

    /// The runs of `plan`, `self.repeats * factor` of them.
    pub fn timing(
        &self,
        ctx: &Context,
        plan: &wgtile::Plan,
        factor: u32,
    ) -> wgtile::Result<wgtile::Timing> {
        let opts = TimingOptions {
            repeats: self.repeats.max(1) * factor,
            ..TimingOptions::default()
        };
        ctx.time(plan, &opts)
    }
}

type SectionFn = fn(&Context, &Args, &Ceilings) -> Result<Section, Box<dyn std::error::Error>>;

/// The sections in order: (id, title, function).
const SECTIONS: &[(&str, &str, SectionFn)] = &[
    (
        "tiling",
        "Tiling: naive vs tiled matmul (f32)",
        sections::tiling,
    ),
    (
        "low-precision",
        "Low precision: fewer bytes per value",
        lessons::low_precision,
    ),
    (
        "padding",
        "Alignment, padding and wave quantisation",
        sections::padding,
    ),
    (
        "gemv",
        "Matrix-vector products: memory-bound (GEMV)",
        sections::gemv,
    ),
    (
        "fusion",
        "Fusion: one kernel instead of five",
        sections::fusion,
    ),
    (
        "rows",
        "Row operations against the copy bandwidth",
        sections::rows,
    ),
    ("divergence", "Control divergence", lessons::divergence),
    (
        "recompute",
        "Recomputation: the chain of three sigmoids",
        lessons::recompute,
    ),
    ("coalescing", "Memory coalescing", lessons::coalescing),
    (
        "attention",
        "Attention: naive vs FlashAttention, and decoding",
        sections::attention,
    ),
    (
        "fewer-bits",
        "Fewer bits: bf16, FP8, microscaling and blocked integers",
        sections::fewer_bits,
    ),
];

static BAR: OnceLock<ProgressBar> = OnceLock::new();

/// Prints a line above the progress bar.
pub fn say(text: &str) {
    match BAR.get() {
        Some(bar) => bar.suspend(|| println!("{text}")),
        None => println!("{text}"),
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = Args::parse();
    for id in &args.only {
        if !SECTIONS.iter().any(|s| s.0 == id) {
            let ids: Vec<&str> = SECTIONS.iter().map(|s| s.0).collect();
            return Err(format!(
                "--only {id}: no such section (sections: {})",
                ids.join(", ")
            )
            .into());
        }
    }
    let start = Instant::now();
    // The tour shows every technique, tensor cores included: it opts in to
    // wgpu's experimental cooperative matrices where the adapter has them.
    let ctx = Context::new_blocking(ContextOptions {
        cooperative_matrix: Some(true),
        ..Default::default()
    })?;
    let chosen: Vec<_> = SECTIONS
        .iter()
        .filter(|s| args.only.is_empty() || args.only.iter().any(|o| o == s.0))
        .collect();
    let bar = ProgressBar::new(chosen.len() as u64 + 1);
    bar.set_style(ProgressStyle::with_template(
        "{bar:30} {pos}/{len} {msg} ({elapsed})",
    )?);
    let _ = BAR.set(bar.clone());

    say("== The adapter ====================================================");
    say(&ctx.profile().to_string());
    let mut report = Report {
        adapter: ctx.profile().name.clone(),
        profile: ctx.profile().to_string(),
        timing: if ctx.profile().timestamps {
            "GPU timestamps, median".into()
        } else {
            "wall clock, median".into()
        },
        wgtile: env!("CARGO_PKG_VERSION").into(),
        ..Report::default()
    };
    bar.set_message("ceilings");
    report.ceilings = ceilings(&ctx, &args)?;
    bar.inc(1);
    for &&(id, title, run) in &chosen {
        bar.set_message(title);
        // A section that fails (a limit of this adapter, say) is reported
        // as such and the tour goes on.
        let began = Instant::now();
        let mut section = match run(&ctx, &args, &report.ceilings) {
            Ok(section) => section,
            Err(e) => Recorder::new(id, title, &report.ceilings).skip(&format!("failed: {e}")),
        };
        section.seconds = began.elapsed().as_secs_f64();
        say(&format!("  ({:.1} s)", section.seconds));
        report.sections.push(section);
        // Written after every section: a tour stopped part-way still
        // leaves the report of what it ran.
        report.seconds = start.elapsed().as_secs_f64();
        write_report(&report, &args)?;
        bar.inc(1);
    }
    bar.finish_and_clear();

    // The roofline: every kernel of the run on the adapter's ceilings.
    let mut roof = Recorder::new("roofline", "Roofline", &report.ceilings);
    roof.note(
        "Every variant above with FLOPs, at its operational intensity (FLOPs over the bytes \
         it must move) and achieved rate, under the copy bandwidth's slope and the matmul \
         rates' roofs measured first. Left of the ridge a kernel can only be as fast as its \
         bytes; right of it, as its FLOPs.",
    );
    let svg = figures::roofline(&report)?;
    roof.figure(
        "roofline-figure",
        "Achieved GFLOP/s against FLOP per byte, log-log.",
        svg,
    );
    report.sections.push(roof.done());

    report.seconds = start.elapsed().as_secs_f64();
    let html = write_report(&report, &args)?;
    say(&format!(
        "\ntour finished in {:.1} s; report: {}",
        report.seconds,
        std::fs::canonicalize(&html).unwrap_or(html).display()
    ));
    Ok(())
}

/// Writes report.html and report.json (and `--json`'s copy); returns the
/// page's path.
fn write_report(report: &Report, args: &Args) -> Result<PathBuf, Box<dyn std::error::Error>> {
    std::fs::create_dir_all(&args.html)?;
    let html = args.html.join("report.html");
    std::fs::write(&html, report.html())?;
    let json = serde_json::to_string_pretty(report)?;
    std::fs::write(args.html.join("report.json"), &json)?;
    if let Some(path) = &args.json {
        std::fs::write(path, &json)?;
    }
    Ok(html)
}

/// The adapter's ceilings: a large copy's bandwidth and the best matmul
/// rates (f32; f16, on tensor cores where present), each the dispatcher's
/// own kernel at a size that fills the adapter, from its fastest run (a
/// ceiling is what the adapter can do, not what it usually does).
fn ceilings(ctx: &Context, args: &Args) -> Result<Ceilings, Box<dyn std::error::Error>> {
    say("\n== Ceilings =======================================================");
    let words = args.fit(ctx, args.size(ctx, 1 << 20, 1 << 22, 1 << 26));
    let x = ctx.rand_uniform([words], -1.0, 1.0, DType::F32, 1)?;
    let copy = ctx.copy_plan(&x)?;
    let t = args.timing(ctx, &copy, 4)?.min();
    let copy_gbps = copy.bytes() as f64 / t / 1e9;
    let mut how = vec![format!(
        "copy: {} MiB read and written by the copy kernel, {:.3} ms",
        (words * 4) >> 20,
        t * 1e3
    )];
    say(&format!("  copy bandwidth        {copy_gbps:>10.1} GB/s"));
    let n = args.size(ctx, 256, 512, 4096);
    let rate = |dtype: DType| -> Result<(f64, String), Box<dyn std::error::Error>> {
        let a = ctx.rand_uniform([n, n], -1.0, 1.0, dtype, 2)?;
        let b = ctx.rand_uniform([n, n], -1.0, 1.0, dtype, 3)?;
        let plan = ctx.matmul_plan(&a, &b, None, &MatmulOptions::default())?;
        let t = args.timing(ctx, &plan, 2)?.min();
        Ok((plan.flops() as f64 / t / 1e9, plan.label().to_string()))
    };
    let (f32_gflops, label) = rate(DType::F32)?;
    say(&format!(
        "  f32 matmul {n}^3      {f32_gflops:>10.1} GFLOP/s  ({label})"
    ));
    how.push(format!("f32 matmul: {label}"));
    let mut f16_gflops = None;
    if ctx.profile().shader_f16 {
        let (g, label) = rate(DType::F16)?;
        say(&format!(
            "  f16 matmul {n}^3      {g:>10.1} GFLOP/s  ({label})"
        ));
        how.push(format!("f16 matmul: {label}"));
        f16_gflops = Some(g);
    } else {
        say("  f16 matmul: skipped (no shader-f16 on this adapter)");
    }
    say(&format!(
        "  ridge point: {:.1} FLOP per byte (f32): kernels below it are memory-bound",
        f32_gflops / copy_gbps
    ));
    Ok(Ceilings {
        copy_gbps,
        f32_gflops,
        f16_gflops,
        how,
    })
}
