//! The tour's record of what it measured: one section per lesson, each a
//! table of variants (time, rate, fraction of the adapter's ceiling, why),
//! the lecture's predictions next to the measured ratios, and figures.
//! Printed as the tour goes; written at the end as `report.json` and a
//! self-contained `report.html` (well-formed XHTML with inline SVG).

use std::fmt::Write as _;

use serde::Serialize;

/// The adapter's own ceilings, measured first.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Ceilings {
    /// A large device copy: bytes read + written per second, in GB/s.
    pub copy_gbps: f64,
    /// The best f32 matmul rate measured, GFLOP/s.
    pub f32_gflops: f64,
    /// The best f16 matmul rate (tensor cores where present), GFLOP/s.
    pub f16_gflops: Option<f64>,
    /// What each was measured with.
    pub how: Vec<String>,
}

impl Ceilings {
    /// The compute roof: the f16 matmul rate for f16 work where measured,
    /// else the f32 one.
    pub fn peak(&self, f16: bool) -> f64 {
        if f16 {
            self.f16_gflops.unwrap_or(self.f32_gflops)
        } else {
            self.f32_gflops
        }
    }
}

/// Which roof a variant is judged against.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Roof {
    /// Bytes over the copy bandwidth.
    Memory,
    /// FLOPs over the f32 matmul rate.
    ComputeF32,
    /// FLOPs over the f16 matmul rate.
    ComputeF16,
}

/// One measured variant.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub variant: String,
    pub seconds: f64,
    pub flops: u64,
    pub bytes: u64,
    pub roof: Roof,
    /// Achieved rate over the roof's ceiling (GB/s over copy, or GFLOP/s
    /// over the matmul rate).
    pub fraction: f64,
    /// Largest error against the f64 reference, where checked.
    pub error: Option<f64>,
    pub why: String,
    /// What ran (the plan's label).
    pub kernel: String,
}

impl Row {
    pub fn gflops(&self) -> f64 {
        self.flops as f64 / self.seconds / 1e9
    }
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 / self.seconds / 1e9
    }
}

/// The lecture's prediction for a pair of variants next to the measured
/// ratio of their times.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    pub what: String,
    pub lecture: String,
    /// The predicted time ratio, where the lecture gives a number.
    pub predicted: Option<f64>,
    pub measured: f64,
}

/// A figure: its caption and its SVG text.
#[derive(Clone, Debug, Serialize)]
pub struct Figure {
    pub id: String,
    pub caption: String,
    pub svg: String,
}

/// One section of the tour.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Section {
    pub id: String,
    pub title: String,
    pub intro: String,
    pub rows: Vec<Row>,
    pub comparisons: Vec<Comparison>,
    pub notes: Vec<String>,
    pub figures: Vec<Figure>,
    /// Why the section did not run here, if it did not.
    pub skipped: Option<String>,
    /// Wall-clock seconds the section took, compilation included.
    pub seconds: f64,
}

/// The whole tour.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub adapter: String,
    pub profile: String,
    pub timing: String,
    pub wgtile: String,
    pub seconds: f64,
    pub ceilings: Ceilings,
    pub sections: Vec<Section>,
}

/// The print side of a section: every line also goes to the report.
pub struct Recorder<'a> {
    pub section: Section,
    pub ceilings: &'a Ceilings,
}

impl<'a> Recorder<'a> {
    pub fn new(id: &str, title: &str, ceilings: &'a Ceilings) -> Self {
        crate::say(&format!(
            "\n== {title} {}",
            "=".repeat(70usize.saturating_sub(title.len()))
        ));
        Recorder {
            section: Section {
                id: id.into(),
                title: title.into(),
                ..Section::default()
            },
            ceilings,
        }
    }

    /// The section's explanation, printed once before its table.
    pub fn intro(&mut self, text: &str) {
        crate::say(text);
        self.section.intro = text.into();
        crate::say(&format!(
            "  {:<46} {:>10} {:>10} {:>10} {:>7}  why",
            "variant", "time", "GFLOP/s", "GB/s", "of roof"
        ));
    }

    /// Records and prints one measured variant, judged against the roof its
    /// operational intensity puts it under (the roofline's lower bound);
    /// `f16` picks the f16 matmul rate as the compute roof.
    #[allow(clippy::too_many_arguments)]
    pub fn row(
        &mut self,
        variant: &str,
        seconds: f64,
        flops: u64,
        bytes: u64,
        f16: bool,
        error: Option<f64>,
        why: &str,
        kernel: &str,
    ) -> Row {
        let c = self.ceilings;
        let intensity = flops as f64 / (bytes as f64).max(1.0);
        let peak = c.peak(f16);
        let (roof, fraction) = if flops == 0 || intensity * c.copy_gbps <= peak {
            (Roof::Memory, bytes as f64 / seconds / 1e9 / c.copy_gbps)
        } else if f16 && c.f16_gflops.is_some() {
            (Roof::ComputeF16, flops as f64 / seconds / 1e9 / peak)
        } else {
            (Roof::ComputeF32, flops as f64 / seconds / 1e9 / peak)
        };
        let row = Row {
            variant: variant.into(),
            seconds,
            flops,
            bytes,
            roof,
            fraction,
            error,
            why: why.into(),
            kernel: kernel.into(),
        };
        let gflops = if flops > 0 {
            format!("{:.2}", row.gflops())
        } else {
            "-".into()
        };
        crate::say(&format!(
            "  {:<46} {:>10} {:>10} {:>10.2} {:>6.0}%  {}",
            variant,
            human_time(seconds),
            gflops,
            row.gbps(),
            100.0 * fraction,
            why
        ));
        self.section.rows.push(row.clone());
        row
    }

    /// [`Recorder::row`] with the FLOPs, bytes and label of `plan`.
    pub fn plan_row(
        &mut self,
        variant: &str,
        seconds: f64,
        plan: &wgtile::Plan,
        f16: bool,
        error: Option<f64>,
        why: &str,
    ) -> Row {
        self.row(
            variant,
            seconds,
            plan.flops(),
            plan.bytes(),
            f16,
            error,
            why,
            plan.label(),
        )
    }

    /// The lecture's prediction against the measured ratio of two times.
    pub fn compare(&mut self, what: &str, lecture: &str, predicted: Option<f64>, measured: f64) {
        let p = predicted.map_or_else(|| "-".to_string(), |p| format!("{p:.2}x"));
        crate::say(&format!(
            "  -> {what}: measured {measured:.2}x, lecture {p} ({lecture})"
        ));
        self.section.comparisons.push(Comparison {
            what: what.into(),
            lecture: lecture.into(),
            predicted,
            measured,
        });
    }

    pub fn note(&mut self, text: &str) {
        crate::say(&format!("  {text}"));
        self.section.notes.push(text.into());
    }

    pub fn figure(&mut self, id: &str, caption: &str, svg: String) {
        self.section.figures.push(Figure {
            id: id.into(),
            caption: caption.into(),
            svg,
        });
    }

    pub fn skip(mut self, why: &str) -> Section {
        crate::say(&format!("  skipped: {why}"));
        self.section.skipped = Some(why.into());
        self.section
    }

    pub fn done(self) -> Section {
        self.section
    }
}

/// Seconds as the unit that reads best.
pub fn human_time(s: f64) -> String {
    if s >= 1.0 {
        format!("{s:.3} s")
    } else if s >= 1e-3 {
        format!("{:.3} ms", s * 1e3)
    } else {
        format!("{:.1} us", s * 1e6)
    }
}

/// `text` escaped for XML content and attributes.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}\
table{border-collapse:collapse;margin:0.6em 0;font-size:0.9em}\
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}\
td.n{text-align:right;font-variant-numeric:tabular-nums}\
th{background:#f3f3f3}pre{white-space:pre-wrap;background:#fafafa;padding:0.5em}\
figure{margin:1em 0}figcaption{font-size:0.9em;color:#555}\
section{border-top:2px solid #ddd;margin-top:2em}.skip{color:#a60}";

impl Report {
    /// The report as one self-contained XHTML page.
    pub fn html(&self) -> String {
        let mut h = String::new();
        let e = escape;
        h.push_str("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<!DOCTYPE html>\n");
        h.push_str("<html xmlns=\"http://www.w3.org/1999/xhtml\" lang=\"en\">\n<head>\n<meta charset=\"UTF-8\"/>\n");
        let _ = writeln!(h, "<title>wgtile tour: {}</title>", e(&self.adapter));
        let _ = writeln!(h, "<style>{STYLE}</style>\n</head>\n<body>");
        let _ = writeln!(h, "<h1>wgtile tour: {}</h1>", e(&self.adapter));
        let _ = writeln!(
            h,
            "<p>wgtile {}, {}; the whole tour took {:.1} s. Every number below was measured in this run.</p>",
            e(&self.wgtile),
            e(&self.timing),
            self.seconds
        );
        let _ = writeln!(h, "<pre>{}</pre>", e(&self.profile));
        let c = &self.ceilings;
        h.push_str("<h2 id=\"ceilings\">Ceilings</h2>\n<table><tr><th>ceiling</th><th>measured</th></tr>\n");
        let _ = writeln!(
            h,
            "<tr><td>copy bandwidth</td><td class=\"n\">{:.1} GB/s</td></tr>",
            c.copy_gbps
        );
        let _ = writeln!(
            h,
            "<tr><td>f32 matmul</td><td class=\"n\">{:.1} GFLOP/s</td></tr>",
            c.f32_gflops
        );
        if let Some(f16) = c.f16_gflops {
            let _ = writeln!(
                h,
                "<tr><td>f16 matmul</td><td class=\"n\">{f16:.1} GFLOP/s</td></tr>"
            );
        }
        h.push_str("</table>\n<ul>\n");
        for how in &c.how {
            let _ = writeln!(h, "<li>{}</li>", e(how));
        }
        h.push_str("</ul>\n");
        for s in &self.sections {
            let _ = writeln!(h, "<section id=\"{}\">\n<h2>{}</h2>", e(&s.id), e(&s.title));
            if let Some(why) = &s.skipped {
                let _ = writeln!(
                    h,
                    "<p class=\"skip\">Skipped on this adapter: {}</p>\n</section>",
                    e(why)
                );
                continue;
            }
            let _ = writeln!(h, "<pre>{}</pre>", e(&s.intro));
            if !s.rows.is_empty() {
                h.push_str(
                    "<table><tr><th>variant</th><th>time</th><th>GFLOP/s</th><th>GB/s</th>\
                     <th>of roof</th><th>roof</th><th>error</th><th>why</th><th>kernel</th></tr>\n",
                );
                for r in &s.rows {
                    let gflops = if r.flops > 0 {
                        format!("{:.2}", r.gflops())
                    } else {
                        "-".into()
                    };
                    let err = r.error.map_or_else(|| "-".into(), |v| format!("{v:.1e}"));
                    let _ = writeln!(
                        h,
                        "<tr><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{:.2}</td>\
                         <td class=\"n\">{:.0}%</td><td>{:?}</td><td class=\"n\">{}</td><td>{}</td><td>{}</td></tr>",
                        e(&r.variant),
                        human_time(r.seconds),
                        gflops,
                        r.gbps(),
                        100.0 * r.fraction,
                        r.roof,
                        err,
                        e(&r.why),
                        e(&r.kernel)
                    );
                }
                h.push_str("</table>\n");
            }
            if !s.comparisons.is_empty() {
                h.push_str("<table><tr><th>comparison</th><th>the lecture</th><th>predicted</th><th>measured</th></tr>\n");
                for c in &s.comparisons {
                    let p = c
                        .predicted
                        .map_or_else(|| "-".into(), |p| format!("{p:.2}x"));
                    let _ = writeln!(
                        h,
                        "<tr><td>{}</td><td>{}</td><td class=\"n\">{p}</td><td class=\"n\">{:.2}x</td></tr>",
                        e(&c.what),
                        e(&c.lecture),
                        c.measured
                    );
                }
                h.push_str("</table>\n");
            }
            for n in &s.notes {
                let _ = writeln!(h, "<p>{}</p>", e(n));
            }
            for f in &s.figures {
                let _ = writeln!(
                    h,
                    "<figure id=\"{}\">\n{}\n<figcaption>{}</figcaption>\n</figure>",
                    e(&f.id),
                    strip_xml_declaration(&f.svg),
                    e(&f.caption)
                );
            }
            h.push_str("</section>\n");
        }
        h.push_str("</body>\n</html>\n");
        h
    }
}

/// An SVG document's text without its XML declaration (inline in the page).
fn strip_xml_declaration(svg: &str) -> &str {
    match svg.find("<svg") {
        Some(i) => &svg[i..],
        None => svg,
    }
}
