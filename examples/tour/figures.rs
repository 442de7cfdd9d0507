//! The tour's figures as SVG text (plotters' SVG backend; text as SVG
//! `<text>`, drawn by the viewer's sans-serif font).

use plotters::prelude::*;

use crate::report::{Ceilings, Report};

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

const PALETTE: [RGBColor; 12] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(23, 190, 207),
    RGBColor(188, 189, 34),
    RGBColor(127, 127, 127),
    RGBColor(0, 0, 128),
    RGBColor(128, 0, 0),
];

/// The series' legend at `position`, framed.
fn legend<'a, CT: plotters::coord::CoordTranslate>(
    chart: &mut ChartContext<'a, SVGBackend<'a>, CT>,
    position: SeriesLabelPosition,
) -> Result<()> {
    chart
        .configure_series_labels()
        .position(position)
        .label_font(("sans-serif", 12))
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK.mix(0.4))
        .draw()?;
    Ok(())
}

/// Every measured variant of the tour on the adapter's roofline: achieved
/// GFLOP/s against operational intensity (FLOP per byte), log-log, with
/// the copy bandwidth's slope and the matmul rates' flat roofs.
pub fn roofline(report: &Report) -> Result<String> {
    let c: &Ceilings = &report.ceilings;
    let points: Vec<(usize, f64, f64)> = report
        .sections
        .iter()
        .enumerate()
        .flat_map(|(i, s)| {
            s.rows
                .iter()
                .filter(|r| r.flops > 0 && r.bytes > 0 && r.seconds > 0.0)
                .map(move |r| (i, r.flops as f64 / r.bytes as f64, r.gflops()))
        })
        .collect();
    let peak = c.peak(true).max(c.f32_gflops);
    let (mut x0, mut x1) = (0.01f64, 1000.0f64);
    for &(_, x, _) in &points {
        x0 = x0.min(x / 2.0);
        x1 = x1.max(x * 2.0);
    }
    let y1 = peak * 3.0;
    let y0 = points.iter().map(|p| p.2).fold(y1 / 1e5, f64::min) / 2.0;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 620)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "Roofline: every kernel of the tour on this adapter",
                ("sans-serif", 20),
            )
            .margin(15)
            .x_label_area_size(50)
            .y_label_area_size(80)
            .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())?;
        chart
            .configure_mesh()
            .x_desc("operational intensity (FLOP per byte moved)")
            .y_desc("achieved GFLOP/s")
            .axis_desc_style(("sans-serif", 15))
            .label_style(("sans-serif", 12))
            .x_label_formatter(&|v| format!("{v:.2e}"))
            .y_label_formatter(&|v| format!("{v:.1e}"))
            .bold_line_style(BLACK.mix(0.1))
            .light_line_style(BLACK.mix(0.03))
            .draw()?;
        let roof = |p: f64, x: f64| (x * c.copy_gbps).min(p);
        let xs: Vec<f64> = (0..=200)
            .map(|i| x0 * (x1 / x0).powf(i as f64 / 200.0))
            .collect();
        chart
            .draw_series(LineSeries::new(
                xs.iter().map(|&x| (x, roof(c.f32_gflops, x))),
                BLACK.stroke_width(2),
            ))?
            .label(format!(
                "f32 roof: {:.0} GB/s copy, {:.1} GFLOP/s matmul",
                c.copy_gbps, c.f32_gflops
            ))
            .legend(|(x, y)| PathElement::new([(x, y), (x + 18, y)], BLACK.stroke_width(2)));
        if let Some(f16) = c.f16_gflops {
            chart
                .draw_series(LineSeries::new(
                    xs.iter().map(|&x| (x, roof(f16, x))),
                    BLACK.mix(0.4).stroke_width(1),
                ))?
                .label(format!("f16 roof: {f16:.1} GFLOP/s matmul"))
                .legend(|(x, y)| {
                    PathElement::new([(x, y), (x + 18, y)], BLACK.mix(0.4).stroke_width(1))
                });
        }
        for (i, s) in report.sections.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let pts: Vec<(f64, f64)> = points
                .iter()
                .filter(|p| p.0 == i)
                .map(|p| (p.1, p.2))
                .collect();
            if pts.is_empty() {
                continue;
            }
            chart
                .draw_series(pts.into_iter().map(|p| Circle::new(p, 4, color.filled())))?
                .label(s.title.clone())
                .legend(move |(x, y)| Circle::new((x + 9, y), 4, color.filled()));
        }
        legend(&mut chart, SeriesLabelPosition::LowerRight)?;
        root.present()?;
    }
    Ok(svg)
}

/// One measured size of the throughput sweep.
pub struct SweepPoint {
    pub n: usize,
    pub gflops: f64,
    pub padded: bool,
}

/// The largest power of two dividing `n`, capped at 32 (the lecture's
/// colour classes: 1, 2, 4, 8, 16, 32 and more).
pub fn pow2_class(n: usize) -> usize {
    (1usize << n.trailing_zeros().min(5)).max(1)
}

/// GFLOP/s against N around a tile boundary, coloured by the largest power
/// of two dividing N; raw shapes filled, through the padding layer hollow.
pub fn sweep(title: &str, points: &[SweepPoint]) -> Result<String> {
    let n0 = points.iter().map(|p| p.n).min().unwrap_or(0) as f64 - 1.0;
    let n1 = points.iter().map(|p| p.n).max().unwrap_or(1) as f64 + 1.0;
    let y1 = points.iter().map(|p| p.gflops).fold(0.0, f64::max) * 1.35 + 1e-9;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 520)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(70)
            .build_cartesian_2d(n0..n1, 0.0..y1)?;
        chart
            .configure_mesh()
            .x_desc("N (C[N,N] = A[N,N] x B[N,N])")
            .y_desc("GFLOP/s")
            .axis_desc_style(("sans-serif", 15))
            .label_style(("sans-serif", 12))
            .x_label_formatter(&|v| format!("{v:.0}"))
            .bold_line_style(BLACK.mix(0.1))
            .light_line_style(BLACK.mix(0.03))
            .draw()?;
        for (j, class) in [1usize, 2, 4, 8, 16, 32].into_iter().enumerate() {
            let color = PALETTE[j];
            let raw: Vec<(f64, f64)> = points
                .iter()
                .filter(|p| !p.padded && pow2_class(p.n) == class)
                .map(|p| (p.n as f64, p.gflops))
                .collect();
            let padded: Vec<(f64, f64)> = points
                .iter()
                .filter(|p| p.padded && pow2_class(p.n) == class)
                .map(|p| (p.n as f64, p.gflops))
                .collect();
            if raw.is_empty() && padded.is_empty() {
                continue;
            }
            chart
                .draw_series(raw.into_iter().map(|p| Circle::new(p, 4, color.filled())))?
                .label(format!(
                    "largest power-of-two divisor {}{class}",
                    if class == 32 { ">= " } else { "" }
                ))
                .legend(move |(x, y)| Circle::new((x + 9, y), 4, color.filled()));
            chart.draw_series(
                padded
                    .into_iter()
                    .map(|p| Circle::new(p, 6, color.stroke_width(1))),
            )?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
        root.present()?;
    }
    Ok(svg)
}

/// Named series of (x, y) points as lines with markers, log-scaled x and y.
pub fn lines(
    title: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<String> {
    let all: Vec<(f64, f64)> = series.iter().flat_map(|s| s.1.iter().copied()).collect();
    let x0 = all
        .iter()
        .map(|p| p.0)
        .fold(f64::INFINITY, f64::min)
        .max(1e-9)
        / 1.5;
    let x1 = all.iter().map(|p| p.0).fold(x0 * 2.0, f64::max) * 1.5;
    let y0 = all
        .iter()
        .map(|p| p.1)
        .fold(f64::INFINITY, f64::min)
        .max(1e-9)
        / 2.0;
    let y1 = all.iter().map(|p| p.1).fold(1e-9, f64::max) * 3.0;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 480)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(45)
            .y_label_area_size(80)
            .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())?;
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .axis_desc_style(("sans-serif", 15))
            .label_style(("sans-serif", 12))
            .x_label_formatter(&|v| format!("{v:.0}"))
            .y_label_formatter(&|v| format!("{v:.1e}"))
            .bold_line_style(BLACK.mix(0.1))
            .light_line_style(BLACK.mix(0.03))
            .draw()?;
        for (j, (name, pts)) in series.iter().enumerate() {
            let color = PALETTE[j % PALETTE.len()];
            chart
                .draw_series(LineSeries::new(pts.iter().copied(), color.stroke_width(2)))?
                .label(name.clone())
                .legend(move |(x, y)| {
                    PathElement::new([(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart.draw_series(pts.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
        }
        legend(&mut chart, SeriesLabelPosition::UpperLeft)?;
        root.present()?;
    }
    Ok(svg)
}

/// Bars of `values` (a label and a value each) with the value written on
/// each bar.
pub fn bars(title: &str, y_desc: &str, values: &[(String, f64)]) -> Result<String> {
    let y1 = values.iter().map(|v| v.1).fold(1e-9, f64::max) * 1.2;
    let n = values.len().max(1);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 460)).into_drawing_area();
        root.fill(&WHITE)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 20))
            .margin(15)
            .x_label_area_size(70)
            .y_label_area_size(70)
            .build_cartesian_2d(0.0..n as f64, 0.0..y1)?;
        let labels: Vec<String> = values.iter().map(|v| v.0.clone()).collect();
        chart
            .configure_mesh()
            .disable_x_mesh()
            .y_desc(y_desc)
            .axis_desc_style(("sans-serif", 15))
            .label_style(("sans-serif", 11))
            .x_labels(n * 2 + 1)
            .x_label_formatter(&move |v| {
                let i = (*v - 0.5).round();
                if (v - 0.5 - i).abs() < 1e-6 && i >= 0.0 {
                    labels.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .draw()?;
        chart.draw_series(values.iter().enumerate().map(|(i, v)| {
            let color = PALETTE[i % PALETTE.len()];
            Rectangle::new(
                [(i as f64 + 0.15, 0.0), (i as f64 + 0.85, v.1)],
                color.filled(),
            )
        }))?;
        chart.draw_series(values.iter().enumerate().map(|(i, v)| {
            Text::new(
                format!("{:.3}", v.1),
                (i as f64 + 0.3, v.1 + y1 * 0.02),
                ("sans-serif", 12),
            )
        }))?;
        root.present()?;
    }
    Ok(svg)
}
