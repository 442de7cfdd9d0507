//! Square matmul throughput against N, the lecture's alignment figure: a rising
//! (memory-bound) slope, then a flat roof; sizes whose largest power-of-two
//! divisor is 1 or 2 fall well below it (bounds checks, no vector loads),
//! multiples of 16 and 32 reach it, and sudden drops come from wave
//! quantisation (one more row of tiles than fills the last wave). With the
//! padding layer (`Padding::Auto`) the misaligned sizes should catch up.
//!
//! ```text
//! cargo run --release --example matmul_sweep -- [--min N --max N --step S] [--sizes a,b,c]
//!     [--dtype f32|f16] [--no-pad] [--csv FILE] [--svg FILE] [--repeats R] [--title T]
//!     [--note TEXT] [--warmup-seconds S]
//! ```
//!
//! Defaults suit the adapter: on a CPU adapter (lavapipe) N = 64..=320 step 3
//! and no timed warm-up (`--warmup-seconds 0`: see its help), about a minute
//! on two cores; on a GPU N = 256..=4352 step 64 plus every N in 1790..=1795
//! and 4094..=4099 (windows clipped to `--min`/`--max`; none with `--sizes`)
//! after the library's default warm-up. Both time 10 runs per size and mode.
//!
//! Each N is measured with `Padding::Never` ("unpadded") and, unless
//! `--no-pad`, `Padding::Auto` ("padded"), always with the dispatcher's kernel.
//! Problems of 1 GFLOP and more (N >= 813) get the autotuner's kernel when it
//! is on (`WGTILE_AUTOTUNE`, default `fast`): its first call per shape bucket
//! times candidates while planning, outside the measurement;
//! `WGTILE_AUTOTUNE=off` plots the heuristic's picks alone.
//! The CSV has the columns `n,pow2_divisor,mode,gflops,median_ms,kernel`
//! after `#` comment lines (adapter, dtype, timing source, `--note`); the SVG
//! (only with `--svg`) plots GFLOP/s against N, coloured by the divisor class.
//! Axis and legend text are SVG `<text>` elements: plotters' SVG backend
//! without font features sizes them with a crude built-in estimate and the
//! viewer draws them with its own sans-serif font.

use std::error::Error;
use std::fmt::Write as _;
use std::time::Instant;

use clap::Parser;
use plotters::prelude::*;
use wgtile::{
    Context, ContextOptions, DType, MatmulOptions, Padding, Tensor, TimeSource, TimingOptions,
};

#[derive(Parser, Debug)]
struct Args {
    /// Smallest N (default: 64 on a CPU adapter, 256 on a GPU).
    #[arg(long)]
    min: Option<usize>,
    /// Largest N, inclusive (default: 320 on a CPU adapter, 4352 on a GPU).
    #[arg(long)]
    max: Option<usize>,
    /// Step between sizes (default: 3 on a CPU adapter, 64 on a GPU).
    #[arg(long)]
    step: Option<usize>,
    /// Explicit sizes instead of the range.
    #[arg(long, value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Element type of A, B and C (accumulation is f32 either way).
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Measure only `Padding::Never`.
    #[arg(long)]
    no_pad: bool,
    /// The padded mode uses `Padding::Always` instead of `Padding::Auto`
    /// (to measure what the copies would cost where the model declines them).
    #[arg(long)]
    always_pad: bool,
    /// The padding layer's last rows apart in the padded mode: `auto` (its
    /// wave rule decides), `off`, or a row count (forced whenever it pads
    /// one matrix); to measure what it buys.
    #[arg(long, default_value = "auto")]
    fringe: String,
    /// Also time each kernel of a plan of several kernels alone (padding
    /// copies, the kernel, the last-row GEMV) and print the times.
    #[arg(long)]
    stages: bool,
    /// Write the measurements as CSV.
    #[arg(long)]
    csv: Option<String>,
    /// Draw the figure as SVG.
    #[arg(long)]
    svg: Option<String>,
    /// Measured runs per size and mode (the median counts).
    #[arg(long, default_value_t = 10)]
    repeats: u32,
    /// Seconds of warm-up before each measurement, until the time per run
    /// settles (default: the library's 0.3 on a GPU, whose clocks ramp up; 0 on
    /// a CPU adapter, where noise from other processes keeps it from settling
    /// and the doubling warm-up batches can then take tens of seconds per size).
    #[arg(long)]
    warmup_seconds: Option<f64>,
    /// Figure title (default: adapter name and dtype).
    #[arg(long)]
    title: Option<String>,
    /// Free text written as a comment line into the CSV (conditions, caveats).
    #[arg(long)]
    note: Option<String>,
    /// Measure nothing: read a CSV this example wrote and draw it to `--svg`
    /// (for figures measured on another machine).
    #[arg(long)]
    replot: Option<String>,
}

/// The divisor classes of the figure: largest power-of-two divisor, capped at 32.
const CLASSES: [u32; 6] = [1, 2, 4, 8, 16, 32];

/// One colour per class (red to purple: the misaligned sizes are the warm ones).
const PALETTE: [RGBColor; 6] = [
    RGBColor(0xd6, 0x27, 0x28), // 1: red
    RGBColor(0xff, 0x7f, 0x0e), // 2: orange
    RGBColor(0xbc, 0xbd, 0x22), // 4: olive
    RGBColor(0x2c, 0xa0, 0x2c), // 8: green
    RGBColor(0x1f, 0x77, 0xb4), // 16: blue
    RGBColor(0x94, 0x67, 0xbd), // 32+: purple
];

/// Largest power of two dividing `n`, capped at 32 (the "32+" class).
fn pow2_class(n: usize) -> u32 {
    1u32 << n.trailing_zeros().min(5)
}

fn class_index(class: u32) -> usize {
    class.trailing_zeros() as usize
}

fn legend_label(class: u32) -> &'static str {
    [
        "N odd",
        "N = 2 x odd",
        "N = 4 x odd",
        "N = 8 x odd",
        "N = 16 x odd",
        "N multiple of 32",
    ][class_index(class)]
}

fn class_label(class: u32) -> &'static str {
    ["1 (odd)", "2", "4", "8", "16", "32+"][class_index(class)]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    Unpadded,
    Padded,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Unpadded => "unpadded",
            Mode::Padded => "padded",
        }
    }

    fn padding(self) -> Padding {
        match self {
            Mode::Unpadded => Padding::Never,
            Mode::Padded => Padding::Auto,
        }
    }
}

#[derive(Clone, Debug)]
struct Sample {
    n: usize,
    class: u32,
    mode: Mode,
    gflops: f64,
    median_ms: f64,
    kernel: String,
}

fn main() -> Result<(), Box<dyn Error>> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args = Args::parse();
    if let Some(csv) = &args.replot {
        return replot(csv, &args);
    }
    let dtype = match args.dtype.as_str() {
        "f32" => DType::F32,
        "f16" => DType::F16,
        other => return Err(format!("--dtype must be f32 or f16, not {other}").into()),
    };
    let fringe = match args.fringe.as_str() {
        "auto" => None,
        "off" => Some(0),
        rows => Some(
            rows.parse::<usize>()
                .map_err(|_| format!("--fringe must be auto, off or a row count, not {rows}"))?,
        ),
    };
    let ctx = Context::new_blocking(ContextOptions {
        cooperative_matrix: Some(true),
        ..Default::default()
    })?;
    let profile = ctx.profile();
    let cpu = profile.is_cpu();
    println!(
        "{} ({:?}, {})",
        profile.name,
        profile.backend,
        if cpu { "CPU adapter" } else { "GPU" }
    );
    let sizes = sizes(&args, cpu)?;
    let repeats = args.repeats.max(1);
    let mut timing_options = TimingOptions {
        repeats,
        ..Default::default()
    };
    if let Some(seconds) = args.warmup_seconds {
        timing_options.warmup_seconds = seconds;
    } else if cpu {
        timing_options.warmup_seconds = 0.0;
    }
    let modes: &[Mode] = if args.no_pad {
        &[Mode::Unpadded]
    } else {
        &[Mode::Unpadded, Mode::Padded]
    };
    println!(
        "{} sizes from {} to {}, {dtype}, {repeats} repeats after {} warm-up runs + {} s, modes: {}",
        sizes.len(),
        sizes[0],
        sizes[sizes.len() - 1],
        timing_options.warmup,
        timing_options.warmup_seconds,
        modes
            .iter()
            .map(|m| m.name())
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "{:>6} {:>5} {:>11} {:>11}  kernel",
        "N", "pow2", "unpadded", "padded"
    );

    let started = Instant::now();
    let mut samples: Vec<Sample> = Vec::new();
    let mut source: Option<TimeSource> = None;
    for &n in &sizes {
        let class = pow2_class(n);
        let operands = ctx
            .rand_uniform([n, n], -1.0, 1.0, dtype, 1)
            .and_then(|a| Ok((a, ctx.rand_uniform([n, n], -1.0, 1.0, dtype, 2)?)));
        let (a, b) = match operands {
            Ok(ab) => ab,
            Err(e) => {
                println!("{n:>6} {:>5} operands failed: {e}", class_label(class));
                continue;
            }
        };
        let mut gflops = [None, None];
        let mut labels: Vec<String> = Vec::new();
        for (slot, &mode) in modes.iter().enumerate() {
            let how = How {
                options: &timing_options,
                always_pad: args.always_pad,
                fringe,
                stages: args.stages,
            };
            match measure(&ctx, &a, &b, mode, &how) {
                Ok((sample, src)) => {
                    source.get_or_insert(src);
                    gflops[slot] = Some(sample.gflops);
                    if !labels.contains(&sample.kernel) {
                        labels.push(sample.kernel.clone());
                    }
                    samples.push(sample);
                }
                Err(e) => labels.push(format!("{} failed: {e}", mode.name())),
            }
        }
        drop((a, b));
        let cell = |g: Option<f64>| g.map_or_else(|| "-".to_string(), |g| format!("{g:.1}"));
        println!(
            "{n:>6} {:>5} {:>11} {:>11}  {}",
            class_label(class),
            cell(gflops[0]),
            cell(gflops[1]),
            labels.join(" | padded: ")
        );
    }
    let elapsed = started.elapsed().as_secs_f64();
    if samples.is_empty() {
        return Err("nothing was measured".into());
    }

    summary(&samples, modes);
    println!("sweep took {elapsed:.1} s");

    let source_name = match source {
        Some(TimeSource::GpuTimestamps) => "GPU timestamps",
        _ => "wall clock",
    };
    if let Some(path) = &args.csv {
        let mut text = String::new();
        writeln!(
            text,
            "# wgtile matmul_sweep: {} ({:?}), {dtype}, median of {repeats} runs ({source_name}) \
             after {} warm-up runs + {} s; sweep took {elapsed:.0} s",
            profile.name, profile.backend, timing_options.warmup, timing_options.warmup_seconds
        )?;
        if let Some(note) = &args.note {
            for line in note.lines() {
                writeln!(text, "# {line}")?;
            }
        }
        writeln!(text, "n,pow2_divisor,mode,gflops,median_ms,kernel")?;
        for s in &samples {
            writeln!(
                text,
                "{},{},{},{:.3},{:.4},{}",
                s.n,
                s.class,
                s.mode.name(),
                s.gflops,
                s.median_ms,
                csv_field(&s.kernel)
            )?;
        }
        std::fs::write(path, text)?;
        println!("wrote {path}");
    }
    if let Some(path) = &args.svg {
        let title = args
            .title
            .clone()
            .unwrap_or_else(|| format!("{} {dtype}: square matmul throughput", profile.name));
        draw(path, &title, &samples, modes)?;
        println!("wrote {path}");
    }
    Ok(())
}

/// The sizes to sweep, sorted and deduplicated.
/// Reads a CSV written by this example and draws it (`--replot`).
fn replot(csv: &str, args: &Args) -> Result<(), Box<dyn Error>> {
    let text = std::fs::read_to_string(csv)?;
    let mut samples = Vec::new();
    let mut title = None;
    for line in text.lines() {
        if let Some(comment) = line.strip_prefix("# wgtile matmul_sweep: ") {
            title.get_or_insert_with(|| {
                let head = comment.split(", median").next().unwrap_or(comment);
                format!("{head}: square matmul throughput")
            });
            continue;
        }
        if line.starts_with('#') || line.starts_with("n,") || line.trim().is_empty() {
            continue;
        }
        let fields: Vec<&str> = line.splitn(6, ',').collect();
        let [n, class, mode, gflops, median_ms, kernel] = fields[..] else {
            return Err(format!("{csv}: malformed line {line:?}").into());
        };
        samples.push(Sample {
            n: n.parse()?,
            class: class.parse()?,
            mode: if mode == "padded" {
                Mode::Padded
            } else {
                Mode::Unpadded
            },
            gflops: gflops.parse()?,
            median_ms: median_ms.parse()?,
            kernel: kernel.trim_matches('"').to_string(),
        });
    }
    if samples.is_empty() {
        return Err(format!("{csv}: no measurements").into());
    }
    let modes: &[Mode] = if samples.iter().any(|s| s.mode == Mode::Padded) {
        &[Mode::Unpadded, Mode::Padded]
    } else {
        &[Mode::Unpadded]
    };
    summary(&samples, modes);
    let path = args.svg.as_deref().ok_or("--replot needs --svg")?;
    let title = args
        .title
        .clone()
        .or(title)
        .unwrap_or_else(|| "square matmul throughput".into());
    draw(path, &title, &samples, modes)?;
    println!("wrote {path}");
    Ok(())
}

fn sizes(args: &Args, cpu: bool) -> Result<Vec<usize>, Box<dyn Error>> {
    let mut sizes = if !args.sizes.is_empty() {
        args.sizes.clone()
    } else {
        let (min, max, step) = if cpu { (64, 320, 3) } else { (256, 4352, 64) };
        let min = args.min.unwrap_or(min);
        let max = args.max.unwrap_or(max);
        let step = args.step.unwrap_or(step);
        if step == 0 || min > max {
            return Err(
                format!("need --step > 0 and --min <= --max (got {min}, {max}, {step})").into(),
            );
        }
        let mut sizes: Vec<usize> = (min..=max).step_by(step).collect();
        if !cpu {
            // Every N around two large powers of two, so the alignment drops show.
            sizes.extend(
                (1790..=1795)
                    .chain(4094..=4099)
                    .filter(|n| (min..=max).contains(n)),
            );
        }
        sizes
    };
    sizes.retain(|&n| n > 0);
    sizes.sort_unstable();
    sizes.dedup();
    if sizes.is_empty() {
        return Err("no sizes to measure".into());
    }
    Ok(sizes)
}

/// How `measure` plans and times.
struct How<'a> {
    options: &'a TimingOptions,
    always_pad: bool,
    fringe: Option<usize>,
    stages: bool,
}

/// Plans and times one square matmul with the dispatcher's kernel.
fn measure(
    ctx: &Context,
    a: &Tensor,
    b: &Tensor,
    mode: Mode,
    how: &How,
) -> wgtile::Result<(Sample, TimeSource)> {
    let padding = match mode {
        Mode::Padded if how.always_pad => Padding::Always,
        _ => mode.padding(),
    };
    let mut matmul_options = MatmulOptions::with_padding(padding);
    matmul_options.fringe_rows = how.fringe;
    let plan = ctx.matmul_plan(a, b, None, &matmul_options)?;
    let timing = ctx.time(&plan, how.options)?;
    let stages = plan.stages();
    if how.stages && stages.len() > 1 {
        let mut us = Vec::new();
        for stage in &stages {
            us.push(format!(
                "{:.1}",
                ctx.time(stage, how.options)?.median() * 1e6
            ));
        }
        println!(
            "{:>6} {} stages (us, each alone): {} = {:.1} in one plan",
            a.shape()[0],
            mode.name(),
            us.join(" + "),
            timing.median() * 1e6
        );
    }
    Ok((
        Sample {
            n: a.shape()[0],
            class: pow2_class(a.shape()[0]),
            mode,
            gflops: timing.gflops(plan.flops()),
            median_ms: timing.median() * 1e3,
            kernel: plan.label().to_string(),
        },
        timing.source,
    ))
}

/// Mean GFLOP/s per divisor class and mode.
fn summary(samples: &[Sample], modes: &[Mode]) {
    println!();
    print!("{:>8} {:>6}", "pow2", "sizes");
    for m in modes {
        print!(" {:>10}", m.name());
    }
    if modes.len() == 2 {
        print!(" {:>15}", "padded/unpadded");
    }
    println!("   (mean GFLOP/s)");
    for class in CLASSES {
        let mean = |mode: Mode| {
            let v: Vec<f64> = samples
                .iter()
                .filter(|s| s.class == class && s.mode == mode)
                .map(|s| s.gflops)
                .collect();
            (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
        };
        let count = samples
            .iter()
            .filter(|s| s.class == class && s.mode == Mode::Unpadded)
            .count();
        let means: Vec<Option<f64>> = modes.iter().map(|&m| mean(m)).collect();
        if means.iter().all(Option::is_none) {
            continue;
        }
        print!("{:>8} {count:>6}", class_label(class));
        for m in &means {
            match m {
                Some(g) => print!(" {g:>10.1}"),
                None => print!(" {:>10}", "-"),
            }
        }
        if let [Some(u), Some(p)] = means[..] {
            print!(" {:>14.2}x", p / u);
        }
        println!();
    }
}

/// Quotes a CSV field when it needs it.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// The figure: GFLOP/s against N, one colour per divisor class, unpadded
/// filled, padded hollow (and larger, so a coinciding pair shows as a ring).
fn draw(path: &str, title: &str, samples: &[Sample], modes: &[Mode]) -> Result<(), Box<dyn Error>> {
    let n_min = samples.iter().map(|s| s.n).min().unwrap_or(0) as f64;
    let n_max = samples.iter().map(|s| s.n).max().unwrap_or(1) as f64;
    let margin = ((n_max - n_min) * 0.02).max(1.0);
    let g_max = samples.iter().map(|s| s.gflops).fold(0.0, f64::max);
    // Headroom above the roof for the legend.
    let y_max = if g_max > 0.0 { g_max * 1.3 } else { 1.0 };

    // Enough decimals for about ten labels over 0..y_max.
    let decimals = (-(y_max / 10.0).log10().floor()).clamp(0.0, 4.0) as usize;
    let y_label = move |v: &f64| format!("{v:.decimals$}");

    let root = SVGBackend::new(path, (1000, 600)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(50)
        .y_label_area_size(70)
        .build_cartesian_2d((n_min - margin)..(n_max + margin), 0.0..y_max)?;
    chart
        .configure_mesh()
        .x_desc("N  (C[N,N] = A[N,N] x B[N,N])")
        .y_desc("GFLOP/s")
        .axis_desc_style(("sans-serif", 16))
        .label_style(("sans-serif", 13))
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&y_label)
        .bold_line_style(BLACK.mix(0.12))
        .light_line_style(BLACK.mix(0.04))
        .draw()?;

    // A faint line through the unpadded points in N order, to guide the eye
    // to the slope, the roof and the drops.
    let mut line: Vec<(f64, f64)> = samples
        .iter()
        .filter(|s| s.mode == Mode::Unpadded)
        .map(|s| (s.n as f64, s.gflops))
        .collect();
    line.sort_by(|a, b| a.0.total_cmp(&b.0));
    chart.draw_series(LineSeries::new(line, BLACK.mix(0.18).stroke_width(1)))?;

    for &mode in modes {
        for class in CLASSES {
            let color = PALETTE[class_index(class)];
            let points: Vec<(f64, f64)> = samples
                .iter()
                .filter(|s| s.class == class && s.mode == mode)
                .map(|s| (s.n as f64, s.gflops))
                .collect();
            let series = chart.draw_series(points.into_iter().map(|p| match mode {
                Mode::Unpadded => Circle::new(p, 3, color.filled()),
                Mode::Padded => Circle::new(p, 5, color.stroke_width(1)),
            }))?;
            if mode == Mode::Unpadded {
                series
                    .label(legend_label(class))
                    .legend(move |(x, y)| Circle::new((x + 10, y), 4, color.filled()));
            }
        }
    }
    // Legend entries for the two marker styles.
    let marker_key: [(Mode, &str); 2] = [
        (Mode::Unpadded, "filled: unpadded (Padding::Never)"),
        (Mode::Padded, "hollow: padded (Padding::Auto)"),
    ];
    for (mode, text) in marker_key {
        if !modes.contains(&mode) {
            continue;
        }
        chart
            .draw_series(std::iter::empty::<Circle<(f64, f64), i32>>())?
            .label(text)
            .legend(move |(x, y)| match mode {
                Mode::Unpadded => Circle::new((x + 10, y), 4, BLACK.filled()),
                Mode::Padded => Circle::new((x + 10, y), 5, BLACK.stroke_width(1)),
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .label_font(("sans-serif", 13))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.4))
        .draw()?;
    root.present()?;
    Ok(())
}
