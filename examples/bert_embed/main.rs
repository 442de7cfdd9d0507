//! Sentence embeddings from a BERT-family checkpoint, entirely on the GPU
//! after upload: token lookup, layer norms, fused QKV projections with
//! bias, attention with the padding mask, the exact-GELU feed-forward,
//! residuals, masked mean pooling and L2 normalisation, in one submission.
//!
//! ```text
//! cargo run --release --example bert_embed -- --model DIR [--dtype f32|f16|bf16] [--quant FORMAT] [SENTENCE ...]
//! cargo run --release --example bert_embed -- --model DIR --reference ref.json
//! cargo run --release --example bert_embed -- --bench [--shape minilm|base] [--batch 1,32,128] [--seq 128]
//! ```
//! `DIR` holds `config.json`, `model.safetensors` (f32, f16 or bf16) and
//! `tokenizer.json`, as a Hugging Face model repository does (for example
//! `sentence-transformers/all-MiniLM-L6-v2`; see examples/bert_embed/README.md).
//! `--reference` compares with embeddings that `reference.py` wrote with
//! sentence-transformers. `--bench` runs random weights of the given shapes
//! three ways (op by op, one `Context::batch`, a plan built once) and prints
//! sentences per second. `--quant` (an f32 encoder) multiplies by the
//! linear layers' weights quantised to a `QuantFormat` (`mxfp8e4m3`,
//! `mxfp4`, `fp8e4m3`, `int8`, ...), and says how far the embeddings move.

mod model;

use std::path::PathBuf;
use std::time::Instant;

use clap::Parser;
use model::{Config, Encoder};
use wgtile::{Context, ContextOptions, DType, QuantFormat, Result};

#[derive(Parser, Debug)]
struct Args {
    /// A checkpoint directory (config.json, model.safetensors, tokenizer.json).
    #[arg(long)]
    model: Option<PathBuf>,
    /// Compute dtypes (comma-separated for --bench).
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// A JSON file of {"sentences": [...], "embeddings": [[...]]} to compare with.
    #[arg(long)]
    reference: Option<PathBuf>,
    /// Benchmark random weights instead of embedding sentences.
    #[arg(long)]
    bench: bool,
    /// --bench: `minilm` (6 x 384, FFN 1536) or `base` (12 x 768, FFN 3072).
    #[arg(long, default_value = "minilm")]
    shape: String,
    /// --bench: sentences per forward pass (comma-separated).
    #[arg(long, default_value = "1,32,128")]
    batch: String,
    /// --bench: tokens per sentence.
    #[arg(long, default_value_t = 128)]
    seq: usize,
    /// --bench: seconds of timed runs per case (after three warm-up runs).
    #[arg(long, default_value_t = 1.0)]
    seconds: f64,
    /// --bench: also time each plan of the forward pass alone (GPU
    /// timestamps) and print the time per kind of op.
    #[arg(long)]
    profile: bool,
    /// Bytes of free buffers the context keeps for reuse, in MiB (0: no
    /// pool; default: the library's).
    #[arg(long)]
    pool_mib: Option<u64>,
    /// Quantise the linear layers' weights to this format (`QuantFormat`'s
    /// variant names: mxfp8e4m3, mxfp4, nvfp4, int8, int4, fp8e4m3, ...;
    /// an f32 encoder).
    #[arg(long)]
    quant: Option<String>,
    /// Sentences to embed.
    sentences: Vec<String>,
}

/// The format `--quant` names, if any.
fn quant_format(args: &Args) -> Result<Option<QuantFormat>> {
    let Some(name) = &args.quant else {
        return Ok(None);
    };
    QuantFormat::ALL
        .into_iter()
        .find(|f| format!("{f:?}").eq_ignore_ascii_case(name.trim()))
        .map(Some)
        .ok_or_else(|| wgtile::Error::InvalidArgument(format!("unknown --quant format `{name}`")))
}

/// The worst cosine similarity between the rows of two `[B, H]`
/// embeddings.
fn worst_cosine(a: &[f32], b: &[f32], h: usize) -> f64 {
    a.chunks(h)
        .zip(b.chunks(h))
        .map(|(x, y)| {
            let dot: f64 = x
                .iter()
                .zip(y)
                .map(|(p, q)| f64::from(*p) * f64::from(*q))
                .sum();
            let norm = |v: &[f32]| v.iter().map(|p| f64::from(*p).powi(2)).sum::<f64>().sqrt();
            dot / (norm(x) * norm(y))
        })
        .fold(1.0, f64::min)
}

fn dtype_of(name: &str) -> Result<DType> {
    match name.trim() {
        "f32" => Ok(DType::F32),
        "f16" => Ok(DType::F16),
        "bf16" => Ok(DType::BF16),
        other => Err(wgtile::Error::InvalidArgument(format!(
            "unknown dtype `{other}`"
        ))),
    }
}

fn main() -> Result<()> {
    env_logger::init();
    let args = Args::parse();
    let mut options = ContextOptions::default();
    if let Some(mib) = args.pool_mib {
        options.buffer_pool_bytes = mib << 20;
    }
    let ctx = Context::new_blocking(options)?;
    println!("adapter: {}", ctx.profile().name);
    if args.bench {
        return bench(&ctx, &args);
    }
    let Some(dir) = &args.model else {
        return Err(wgtile::Error::InvalidArgument(
            "give --model DIR (a checkpoint directory) or --bench".into(),
        ));
    };
    embed(&ctx, &args, dir)
}

/// The tokenised batch: ids and the attention mask, `B x S` each (padded
/// to the longest sentence).
fn tokenize(dir: &std::path::Path, sentences: &[String]) -> Result<(Vec<i32>, Vec<f32>, usize)> {
    let fail = |e: Box<dyn std::error::Error + Send + Sync>| {
        wgtile::Error::InvalidArgument(format!("tokenizer.json: {e}"))
    };
    let mut tokenizer =
        tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).map_err(fail)?;
    // Pad to the batch's longest sentence, not to the file's fixed length.
    let mut padding = tokenizer.get_padding().cloned().unwrap_or_default();
    padding.strategy = tokenizers::PaddingStrategy::BatchLongest;
    tokenizer.with_padding(Some(padding));
    let encodings = tokenizer
        .encode_batch(sentences.to_vec(), true)
        .map_err(fail)?;
    let seq = encodings.first().map_or(0, |e| e.get_ids().len());
    let ids = encodings
        .iter()
        .flat_map(|e| e.get_ids().iter().map(|&i| i as i32))
        .collect();
    let mask = encodings
        .iter()
        .flat_map(|e| e.get_attention_mask().iter().map(|&m| m as f32))
        .collect();
    Ok((ids, mask, seq))
}

fn embed(ctx: &Context, args: &Args, dir: &std::path::Path) -> Result<()> {
    let dtype = dtype_of(&args.dtype)?;
    let reference: Option<(Vec<String>, Vec<Vec<f64>>)> = match &args.reference {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .map_err(|e| wgtile::Error::InvalidArgument(format!("{}: {e}", path.display())))?;
            let v: serde_json::Value = serde_json::from_str(&text)
                .map_err(|e| wgtile::Error::InvalidArgument(format!("{}: {e}", path.display())))?;
            let sentences = serde_json::from_value(v["sentences"].clone()).unwrap_or_default();
            let embeddings = serde_json::from_value(v["embeddings"].clone()).unwrap_or_default();
            Some((sentences, embeddings))
        }
        None => None,
    };
    let sentences: Vec<String> = match (&reference, args.sentences.is_empty()) {
        (Some((s, _)), true) => s.clone(),
        (_, false) => args.sentences.clone(),
        (None, true) => vec![
            "The cat sits outside.".into(),
            "A man is playing guitar.".into(),
            "The new movie is awesome.".into(),
            "A cat is sitting outdoors.".into(),
        ],
    };
    let started = Instant::now();
    let mut encoder = Encoder::load(ctx, dir, dtype)?;
    ctx.synchronize()?;
    println!(
        "loaded {} layers, hidden {}, {} heads as {dtype} in {:.2} s",
        encoder.cfg.layers,
        encoder.cfg.hidden,
        encoder.cfg.heads,
        started.elapsed().as_secs_f64()
    );
    if let Some(format) = quant_format(args)? {
        let per = encoder.quantize_linears(ctx, format)?;
        println!("linear layers quantised to {format}: {per:.3} bytes per weight");
    }
    let (ids, mask, seq) = tokenize(dir, &sentences)?;
    let b = sentences.len();
    let ids_t = ctx.tensor(&ids, [b, seq])?;
    let mask_t = ctx.tensor_from_f32(&mask, [b, seq], dtype)?;
    let submits = ctx.submissions();
    let out = ctx.batch(|| encoder.forward(ctx, &ids_t, &mask_t, false))?;
    let submits = ctx.submissions() - submits;
    let emb = out.embeddings.to_f32_vec_blocking()?;
    let h = encoder.cfg.hidden;
    println!("{b} sentences, {seq} tokens each after padding, {submits} submission(s)");
    for (i, s) in sentences.iter().enumerate() {
        let row = &emb[i * h..(i + 1) * h];
        let head: Vec<String> = row.iter().take(6).map(|v| format!("{v:+.4}")).collect();
        println!("  [{}] {s:?}", head.join(" "));
    }
    println!("cosine similarity:");
    for i in 0..b {
        let cells: Vec<String> = (0..b)
            .map(|j| {
                let c: f32 = (0..h).map(|u| emb[i * h + u] * emb[j * h + u]).sum();
                format!("{c:6.3}")
            })
            .collect();
        println!("  {}", cells.join(" "));
    }
    if let Some((ref_sentences, ref_emb)) = &reference {
        if ref_sentences != &sentences || ref_emb.len() != b {
            return Err(wgtile::Error::InvalidArgument(
                "the reference holds other sentences than the ones embedded".into(),
            ));
        }
        let mut worst_cos = 1.0f64;
        let mut worst_abs = 0.0f64;
        for (i, want) in ref_emb.iter().enumerate() {
            let got = &emb[i * h..(i + 1) * h];
            let dot: f64 = got.iter().zip(want).map(|(g, w)| f64::from(*g) * w).sum();
            let ng = got
                .iter()
                .map(|g| f64::from(*g).powi(2))
                .sum::<f64>()
                .sqrt();
            let nw = want.iter().map(|w| w * w).sum::<f64>().sqrt();
            worst_cos = worst_cos.min(dot / (ng * nw));
            for (g, w) in got.iter().zip(want) {
                worst_abs = worst_abs.max((f64::from(*g) - w).abs());
            }
        }
        println!(
            "against the reference: lowest cosine {worst_cos:.9} (1 - {:.2e}), largest difference {worst_abs:.2e}",
            1.0 - worst_cos
        );
    }
    Ok(())
}

/// Median seconds of `f` (followed by a wait for the GPU) over `seconds`,
/// after three warm-up runs.
fn median_time(ctx: &Context, seconds: f64, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..3 {
        f()?;
        ctx.synchronize()?;
    }
    let mut times = Vec::new();
    let start = Instant::now();
    while times.len() < 5 || (start.elapsed().as_secs_f64() < seconds && times.len() < 200) {
        let t = Instant::now();
        f()?;
        ctx.synchronize()?;
        times.push(t.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

fn bench(ctx: &Context, args: &Args) -> Result<()> {
    let cfg = match args.shape.as_str() {
        "minilm" => Config::minilm_l6(),
        "base" => Config::bert_base(),
        other => {
            return Err(wgtile::Error::InvalidArgument(format!(
                "unknown --shape `{other}` (minilm or base)"
            )));
        }
    };
    let batches: Vec<usize> = args
        .batch
        .split(',')
        .map(|b| {
            b.trim()
                .parse()
                .map_err(|e| wgtile::Error::InvalidArgument(format!("--batch: {e}")))
        })
        .collect::<Result<_>>()?;
    let seq = args.seq;
    println!(
        "encoder {} ({} layers, hidden {}, {} heads, FFN {}), {seq} tokens per sentence, random weights",
        args.shape, cfg.layers, cfg.hidden, cfg.heads, cfg.ffn
    );
    let mut rows = Vec::new();
    let inputs =
        |b: usize, dtype: DType| -> Result<(Vec<i32>, Vec<f32>, wgtile::Tensor, wgtile::Tensor)> {
            let host_ids: Vec<i32> = wgtile::uniform_values(b * seq, 1000.0, 30000.0, b as u64)
                .iter()
                .map(|&v| v as i32)
                .collect();
            let host_mask = vec![1.0f32; b * seq];
            let ids = ctx.tensor(&host_ids, [b, seq])?;
            let mask = ctx.tensor_from_f32(&host_mask, [b, seq], dtype)?;
            Ok((host_ids, host_mask, ids, mask))
        };
    for name in args.dtype.split(',') {
        let dtype = dtype_of(name)?;
        let mut encoder = Encoder::random(ctx, cfg.clone(), dtype, 7)?;
        let mut label = dtype.to_string();
        if let Some(format) = quant_format(args)? {
            // The embeddings of the first batch before and after.
            let b = batches.first().copied().unwrap_or(1);
            let (_, _, ids, mask) = inputs(b, dtype)?;
            let embed = |e: &Encoder| -> Result<Vec<f32>> {
                ctx.batch(|| e.forward(ctx, &ids, &mask, false))?
                    .embeddings
                    .to_f32_vec_blocking()
            };
            let before = embed(&encoder)?;
            let per = encoder.quantize_linears(ctx, format)?;
            let worst = worst_cosine(&before, &embed(&encoder)?, cfg.hidden);
            println!(
                "  linear layers quantised to {format} ({per:.3} bytes per weight): the worst cosine to the {dtype} weights' embeddings {worst:.5}"
            );
            label = format!("{dtype}, {format} weights");
        }
        for &b in &batches {
            let (host_ids, host_mask, ids, mask) = inputs(b, dtype)?;
            let eager = median_time(ctx, args.seconds, || {
                encoder.forward(ctx, &ids, &mask, false).map(drop)
            })?;
            let batched = median_time(ctx, args.seconds, || {
                ctx.batch(|| encoder.forward(ctx, &ids, &mask, false))
                    .map(drop)
            })?;
            let built = Instant::now();
            let plan = encoder.plan(ctx, b, seq)?;
            let build = built.elapsed().as_secs_f64();
            let planned = median_time(ctx, args.seconds, || plan.run(ctx, &host_ids, &host_mask))?;
            // The three ways agree (one forward each, compared at the end).
            let want = ctx
                .batch(|| encoder.forward(ctx, &ids, &mask, false))?
                .embeddings
                .to_f32_vec_blocking()?;
            let got = plan.output.embeddings.to_f32_vec_blocking()?;
            let diff = want
                .iter()
                .zip(&got)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            println!(
                "  {dtype} batch {b:>3}: op by op {:8.3} ms, batch {:8.3} ms, plan {:8.3} ms ({} launches, built in {:.1} ms; plan vs batch max diff {diff:.1e})",
                eager * 1e3,
                batched * 1e3,
                planned * 1e3,
                plan.dispatches(),
                build * 1e3
            );
            if args.profile {
                profile(ctx, &plan, planned)?;
            }
            rows.push((label.clone(), b, eager, batched, planned));
        }
    }
    println!();
    println!(
        "| dtype | batch | op by op (sent/s) | one batch (sent/s) | plan (sent/s) | plan ms | plan vs op by op |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    for (dtype, b, eager, batched, planned) in rows {
        let per = |t: f64| b as f64 / t;
        println!(
            "| {dtype} | {b} | {:.0} | {:.0} | {:.0} | {:.3} | {:.2}x |",
            per(eager),
            per(batched),
            per(planned),
            planned * 1e3,
            eager / planned
        );
    }
    Ok(())
}

/// Each plan of `plan` timed alone (it has run, so its inputs hold real
/// values), summed by the kind of op (the label's first word).
fn profile(ctx: &Context, plan: &model::EncoderPlan, whole: f64) -> Result<()> {
    let mut kinds: Vec<(String, f64, usize)> = Vec::new();
    let mut each: Vec<(f64, &wgtile::Plan)> = Vec::new();
    let options = wgtile::TimingOptions {
        warmup: 2,
        warmup_seconds: 0.0,
        repeats: 5,
    };
    for p in plan.plans() {
        let t = ctx.time(p, &options)?.median();
        each.push((t, p));
        let kind: String = p
            .label()
            .split([' ', '(', '['])
            .next()
            .unwrap_or("")
            .to_string();
        match kinds.iter_mut().find(|k| k.0 == kind) {
            Some(k) => {
                k.1 += t;
                k.2 += 1;
            }
            None => kinds.push((kind, t, 1)),
        }
    }
    kinds.sort_by(|a, b| b.1.total_cmp(&a.1));
    let total: f64 = kinds.iter().map(|k| k.1).sum();
    println!(
        "    GPU time of the plans one by one: {:.3} ms (the replayed forward: {:.3} ms)",
        total * 1e3,
        whole * 1e3
    );
    for (kind, t, n) in kinds {
        println!(
            "      {:>8.3} ms {:>5.1}%  {n:>3} x {kind}",
            t * 1e3,
            100.0 * t / total
        );
    }
    each.sort_by(|a, b| b.0.total_cmp(&a.0));
    println!("    the slowest plans:");
    for (t, p) in each.iter().take(6) {
        println!(
            "      {:>8.3} ms {:>7.1} TFLOP/s {:>7.0} GB/s  {}",
            t * 1e3,
            p.flops() as f64 / t / 1e12,
            p.bytes() as f64 / t / 1e9,
            p.label()
        );
    }
    Ok(())
}
