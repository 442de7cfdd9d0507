//! A BERT encoder on wgtile: the configuration and weights of a Hugging
//! Face checkpoint (`config.json`, `model.safetensors`), and the forward
//! pass from token ids to mean-pooled, L2-normalised sentence embeddings,
//! entirely on the GPU.
//!
//! The forward is written once, as a sequence of plans. Run each plan as
//! it is built and it is op by op; inside [`wgtile::Context::batch`] it is
//! one submission; built once with [`Encoder::plan`] and replayed it is one
//! submission with nothing built per run (the fast path for serving).

#![allow(dead_code)]

use std::collections::HashMap;
use std::path::Path;

use safetensors::{Dtype, SafeTensors};
use wgtile::{
    AttentionOptions, Axis, Context, DType, Epilogue, Error, MatmulOptions, Plan, QuantAxis,
    QuantFormat, QuantTensor, Reduction, Result, Tensor,
};

fn bad(what: impl Into<String>) -> Error {
    Error::InvalidArgument(what.into())
}

/// The feed-forward activation (`hidden_act` in `config.json`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Act {
    /// `gelu`: the exact (erf) form, BERT's and PyTorch's default.
    GeluErf,
    /// `gelu_new`, `gelu_pytorch_tanh`: the tanh approximation.
    GeluTanh,
}

/// The shape of a BERT encoder: the fields of `config.json` it uses.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    pub vocab: usize,
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub ffn: usize,
    pub max_positions: usize,
    pub type_vocab: usize,
    pub eps: f32,
    pub act: Act,
}

impl Config {
    /// all-MiniLM-L6-v2's shapes (6 layers, hidden 384, 12 heads, FFN 1536).
    pub fn minilm_l6() -> Self {
        Self {
            vocab: 30522,
            hidden: 384,
            layers: 6,
            heads: 12,
            ffn: 1536,
            max_positions: 512,
            type_vocab: 2,
            eps: 1e-12,
            act: Act::GeluErf,
        }
    }

    /// BERT-base's shapes (12 layers, hidden 768, 12 heads, FFN 3072).
    pub fn bert_base() -> Self {
        Self {
            hidden: 768,
            layers: 12,
            ffn: 3072,
            ..Self::minilm_l6()
        }
    }

    /// Parses a Hugging Face `config.json` of a BERT-family model.
    pub fn from_json(text: &str) -> Result<Self> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| bad(format!("config.json: {e}")))?;
        let num = |key: &str| -> Result<usize> {
            v.get(key)
                .and_then(serde_json::Value::as_u64)
                .map(|n| n as usize)
                .ok_or_else(|| bad(format!("config.json has no integer `{key}`")))
        };
        let act = match v
            .get("hidden_act")
            .and_then(|a| a.as_str())
            .unwrap_or("gelu")
        {
            "gelu" => Act::GeluErf,
            "gelu_new" | "gelu_pytorch_tanh" => Act::GeluTanh,
            other => {
                return Err(bad(format!(
                    "config.json: hidden_act `{other}` is not a GELU"
                )));
            }
        };
        if let Some(kind) = v.get("position_embedding_type").and_then(|a| a.as_str())
            && kind != "absolute"
        {
            return Err(bad(format!(
                "config.json: position_embedding_type `{kind}` (only absolute positions)"
            )));
        }
        let cfg = Self {
            vocab: num("vocab_size")?,
            hidden: num("hidden_size")?,
            layers: num("num_hidden_layers")?,
            heads: num("num_attention_heads")?,
            ffn: num("intermediate_size")?,
            max_positions: num("max_position_embeddings")?,
            type_vocab: num("type_vocab_size").unwrap_or(2),
            eps: v
                .get("layer_norm_eps")
                .and_then(serde_json::Value::as_f64)
                .unwrap_or(1e-12) as f32,
            act,
        };
        if cfg.heads == 0 || !cfg.hidden.is_multiple_of(cfg.heads) {
            return Err(bad(format!(
                "config.json: hidden_size {} is not a multiple of num_attention_heads {}",
                cfg.hidden, cfg.heads
            )));
        }
        Ok(cfg)
    }

    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }
}

/// One encoder layer's weights, linear weights stored `[in, out]`.
pub struct Layer {
    /// The query, key and value projections side by side: `[H, 3H]`.
    pub wqkv: Tensor,
    pub bqkv: Tensor,
    pub wo: Tensor,
    pub bo: Tensor,
    pub ln1: (Tensor, Tensor),
    pub wi: Tensor,
    pub bi: Tensor,
    pub wf: Tensor,
    pub bf: Tensor,
    pub ln2: (Tensor, Tensor),
    /// `wqkv`, `wo`, `wi` and `wf` quantised (blocks along K), which the
    /// forward pass then multiplies by instead (`Encoder::quantize_linears`).
    pub quant: Option<[QuantTensor; 4]>,
}

/// A BERT encoder's weights on the GPU, in one compute dtype.
pub struct Encoder {
    pub cfg: Config,
    pub dtype: DType,
    pub word: Tensor,
    /// Position embeddings plus token type 0's embedding (every token of a
    /// single sentence has type 0), summed once at load: `[max_positions, H]`.
    pub position: Tensor,
    pub ln: (Tensor, Tensor),
    pub layers: Vec<Layer>,
}

/// What a forward pass returns.
#[derive(Clone)]
pub struct Output {
    /// Each layer's hidden states `[B, S, H]` (when asked for), the last
    /// one last.
    pub hidden: Vec<Tensor>,
    /// The last layer's hidden states.
    pub last: Tensor,
    /// Mean over the tokens the mask keeps, L2-normalised: `[B, H]`.
    pub embeddings: Tensor,
}

/// The checkpoint's tensors, read from one safetensors file, widened to f32.
pub struct Checkpoint {
    tensors: HashMap<String, (Vec<usize>, Vec<f32>)>,
}

impl Checkpoint {
    /// Reads every f32, f16 or bf16 tensor of a safetensors file.
    pub fn read(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).map_err(|e| bad(format!("{}: {e}", path.display())))?;
        Self::parse(&bytes)
    }

    /// [`Checkpoint::read`] of bytes already in memory.
    pub fn parse(bytes: &[u8]) -> Result<Self> {
        let file = SafeTensors::deserialize(bytes).map_err(|e| bad(format!("safetensors: {e}")))?;
        let mut tensors = HashMap::new();
        for (name, view) in file.tensors() {
            let data = view.data();
            let values: Vec<f32> = match view.dtype() {
                Dtype::F32 => data
                    .chunks_exact(4)
                    .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                    .collect(),
                Dtype::F16 => data
                    .chunks_exact(2)
                    .map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32())
                    .collect(),
                Dtype::BF16 => data
                    .chunks_exact(2)
                    .map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32())
                    .collect(),
                // Integer buffers (position_ids) are not weights.
                _ => continue,
            };
            tensors.insert(name, (view.shape().to_vec(), values));
        }
        Ok(Self { tensors })
    }

    /// The tensor `name` (with or without a `bert.` prefix) of `shape`.
    fn take(&mut self, name: &str, shape: &[usize]) -> Result<Vec<f32>> {
        // Older checkpoints name layer-norm parameters gamma and beta.
        let alternatives = [
            name.to_string(),
            name.replace("LayerNorm.weight", "LayerNorm.gamma")
                .replace("LayerNorm.bias", "LayerNorm.beta"),
        ];
        let found = alternatives.iter().find_map(|n| {
            self.tensors
                .remove(n)
                .or_else(|| self.tensors.remove(&format!("bert.{n}")))
        });
        let (got, values) = found.ok_or_else(|| bad(format!("the checkpoint has no `{name}`")))?;
        if got != shape {
            return Err(bad(format!(
                "`{name}` has shape {got:?}, the config needs {shape:?}"
            )));
        }
        Ok(values)
    }
}

/// A PyTorch linear weight `[out, in]` as the `[in, out]` matrix wgtile's
/// matmul reads without a transpose.
fn transposed(w: &[f32], out: usize, inp: usize) -> Vec<f32> {
    let mut t = vec![0.0; w.len()];
    for o in 0..out {
        for i in 0..inp {
            t[i * out + o] = w[o * inp + i];
        }
    }
    t
}

impl Encoder {
    /// Loads `config.json` and `model.safetensors` from `dir`, converting
    /// the weights (f32, f16 or bf16 in the file) to `dtype`.
    pub fn load(ctx: &Context, dir: &Path, dtype: DType) -> Result<Self> {
        let config = std::fs::read_to_string(dir.join("config.json"))
            .map_err(|e| bad(format!("{}: {e}", dir.join("config.json").display())))?;
        let cfg = Config::from_json(&config)?;
        let mut file = Checkpoint::read(&dir.join("model.safetensors"))?;
        Self::from_checkpoint(ctx, cfg, &mut file, dtype)
    }

    /// The encoder of `cfg` from a checkpoint's tensors.
    pub fn from_checkpoint(
        ctx: &Context,
        cfg: Config,
        file: &mut Checkpoint,
        dtype: DType,
    ) -> Result<Self> {
        let (h, f) = (cfg.hidden, cfg.ffn);
        let up = |v: &[f32], shape: &[usize]| ctx.tensor_from_f32(v, shape, dtype);
        let ln = |file: &mut Checkpoint, at: &str| -> Result<(Tensor, Tensor)> {
            let g = file.take(&format!("{at}.LayerNorm.weight"), &[h])?;
            let b = file.take(&format!("{at}.LayerNorm.bias"), &[h])?;
            Ok((up(&g, &[h])?, up(&b, &[h])?))
        };
        let word = file.take("embeddings.word_embeddings.weight", &[cfg.vocab, h])?;
        let pos = file.take(
            "embeddings.position_embeddings.weight",
            &[cfg.max_positions, h],
        )?;
        let kind = file.take(
            "embeddings.token_type_embeddings.weight",
            &[cfg.type_vocab, h],
        )?;
        let position: Vec<f32> = pos
            .chunks(h)
            .flat_map(|row| row.iter().zip(&kind[..h]).map(|(p, k)| p + k))
            .collect();
        let embeddings_ln = ln(file, "embeddings")?;
        let mut layers = Vec::with_capacity(cfg.layers);
        for l in 0..cfg.layers {
            let at = format!("encoder.layer.{l}");
            let linear = |file: &mut Checkpoint, name: &str, out: usize, inp: usize| {
                let w = file.take(&format!("{at}.{name}.weight"), &[out, inp])?;
                let b = file.take(&format!("{at}.{name}.bias"), &[out])?;
                Ok::<_, Error>((w, b))
            };
            let (wq, bq) = linear(file, "attention.self.query", h, h)?;
            let (wk, bk) = linear(file, "attention.self.key", h, h)?;
            let (wv, bv) = linear(file, "attention.self.value", h, h)?;
            let (wo, bo) = linear(file, "attention.output.dense", h, h)?;
            let (wi, bi) = linear(file, "intermediate.dense", f, h)?;
            let (wf, bf) = linear(file, "output.dense", h, f)?;
            // Rows of [out, in] stacked: q, k, v outputs side by side.
            let wqkv = [wq, wk, wv].concat();
            let bqkv = [bq, bk, bv].concat();
            layers.push(Layer {
                wqkv: up(&transposed(&wqkv, 3 * h, h), &[h, 3 * h])?,
                bqkv: up(&bqkv, &[3 * h])?,
                wo: up(&transposed(&wo, h, h), &[h, h])?,
                bo: up(&bo, &[h])?,
                ln1: ln(file, &format!("{at}.attention.output"))?,
                wi: up(&transposed(&wi, f, h), &[h, f])?,
                bi: up(&bi, &[f])?,
                wf: up(&transposed(&wf, h, f), &[f, h])?,
                bf: up(&bf, &[h])?,
                ln2: ln(file, &format!("{at}.output"))?,
                quant: None,
            });
        }
        Ok(Self {
            word: up(&word, &[cfg.vocab, h])?,
            position: up(&position, &[cfg.max_positions, h])?,
            ln: embeddings_ln,
            layers,
            cfg,
            dtype,
        })
    }

    /// An encoder of `cfg` with random weights made on the GPU (for
    /// benchmarks): linear weights uniform in +-1/sqrt(in), biases small,
    /// layer-norm scales near 1.
    pub fn random(ctx: &Context, cfg: Config, dtype: DType, seed: u64) -> Result<Self> {
        let (h, f) = (cfg.hidden, cfg.ffn);
        let mut seed = seed;
        let mut r = |shape: &[usize], low: f32, high: f32| {
            seed += 1;
            ctx.rand_uniform(shape, low, high, dtype, seed)
        };
        let lim = |inp: usize| 1.0 / (inp as f32).sqrt();
        let word = r(&[cfg.vocab, h], -1.0, 1.0)?;
        let position = r(&[cfg.max_positions, h], -1.0, 1.0)?;
        let embeddings_ln = (r(&[h], 0.9, 1.1)?, r(&[h], -0.1, 0.1)?);
        let mut layers = Vec::with_capacity(cfg.layers);
        for _ in 0..cfg.layers {
            layers.push(Layer {
                wqkv: r(&[h, 3 * h], -lim(h), lim(h))?,
                bqkv: r(&[3 * h], -0.1, 0.1)?,
                wo: r(&[h, h], -lim(h), lim(h))?,
                bo: r(&[h], -0.1, 0.1)?,
                ln1: (r(&[h], 0.9, 1.1)?, r(&[h], -0.1, 0.1)?),
                wi: r(&[h, f], -lim(h), lim(h))?,
                bi: r(&[f], -0.1, 0.1)?,
                wf: r(&[f, h], -lim(f), lim(f))?,
                bf: r(&[h], -0.1, 0.1)?,
                ln2: (r(&[h], 0.9, 1.1)?, r(&[h], -0.1, 0.1)?),
                quant: None,
            });
        }
        Ok(Self {
            word,
            position,
            ln: embeddings_ln,
            layers,
            cfg,
            dtype,
        })
    }

    /// Quantises every layer's linear weights to `format` (blocks along K,
    /// the layout the quantised GEMV reads fastest); the forward pass then
    /// multiplies by them through `Context::matmul_quantized_with`, with
    /// the same fused bias, activation and residual. f32 encoders only (the
    /// quantised products take f32 bias and residual and write f32).
    /// Returns the packed bytes per weight.
    pub fn quantize_linears(&mut self, ctx: &Context, format: QuantFormat) -> Result<f64> {
        if self.dtype != DType::F32 {
            return Err(bad(format!(
                "quantised linear layers need an f32 encoder, not {}",
                self.dtype
            )));
        }
        let (mut bytes, mut weights) = (0u64, 0usize);
        for l in &mut self.layers {
            let q = |w: &Tensor| ctx.quantize(w, format, QuantAxis::Columns);
            let quant = [q(&l.wqkv)?, q(&l.wo)?, q(&l.wi)?, q(&l.wf)?];
            bytes += quant.iter().map(|t| t.packed_bytes()).sum::<u64>();
            weights += [&l.wqkv, &l.wo, &l.wi, &l.wf]
                .iter()
                .map(|t| t.numel())
                .sum::<usize>();
            l.quant = Some(quant);
        }
        Ok(bytes as f64 / weights.max(1) as f64)
    }

    /// The forward pass from `ids` (`I32 [B, S]`) and `mask` (`[B, S]` of
    /// the encoder's dtype, 1 for a token, 0 for padding), handing each op's
    /// plan to `sink`, which runs or keeps it and returns its output. Every
    /// layer's hidden states are returned when `all_layers`.
    pub fn build(
        &self,
        ctx: &Context,
        ids: &Tensor,
        mask: &Tensor,
        all_layers: bool,
        sink: &mut dyn FnMut(Plan) -> Result<Tensor>,
    ) -> Result<Output> {
        let cfg = &self.cfg;
        let [b, s] = ids.shape()[..] else {
            return Err(bad(format!(
                "token ids must be [B, S], not {:?}",
                ids.shape()
            )));
        };
        if s > cfg.max_positions {
            return Err(bad(format!(
                "{s} tokens per sentence, the model has {} positions",
                cfg.max_positions
            )));
        }
        let (h, d) = (cfg.hidden, cfg.head_dim());
        let words = sink(ctx.gather_plan(&self.word, ids, 0)?)?;
        let position = sink(ctx.narrow_plan(&self.position, 0, 0, s)?)?;
        // The embedding sum and its layer norm in one kernel (bf16 too: the
        // sum stays f32 in registers, the norm's result is rounded once).
        let sum = words.expr() + position.expr();
        let (g, beta) = (Some(&self.ln.0), Some(&self.ln.1));
        let mut x = sink(ctx.layer_norm_of_plan(&sum, g, beta, cfg.eps, None)?)?;
        // Padding keys are hidden from every query (BERT's attention mask).
        let attention = AttentionOptions::new()
            .packed_dims(cfg.heads, cfg.heads, d, d)
            .bool_mask(&mask.reshape([b, 1, 1, s])?);
        let act = match cfg.act {
            Act::GeluErf => Epilogue::new().gelu(),
            Act::GeluTanh => Epilogue::new().gelu_tanh(),
        };
        let plain = MatmulOptions::default();
        // x @ W with a fused epilogue: the weight as it is, or quantised.
        let linear = |x: &Tensor, w: &Tensor, q: Option<&QuantTensor>, e: &Epilogue| match q {
            Some(q) => ctx.matmul_quantized_plan_with(x, q, e),
            None => ctx.matmul_plan_with(x, w, None, &plain, e),
        };
        let mut hidden = Vec::new();
        for l in &self.layers {
            let q = |i: usize| l.quant.as_ref().map(|q| &q[i]);
            let qkv = sink(linear(&x, &l.wqkv, q(0), &Epilogue::new().bias(&l.bqkv))?)?;
            // q, k and v read in place from the fused projection.
            let a = sink(ctx.attention_qkv_plan(&qkv, &attention)?.0)?;
            let o = sink(linear(
                &a,
                &l.wo,
                q(1),
                &Epilogue::new().bias(&l.bo).residual(&x),
            )?)?;
            let x1 = sink(ctx.layer_norm_plan(&o, Some(&l.ln1.0), Some(&l.ln1.1), cfg.eps)?)?;
            let inner = sink(linear(&x1, &l.wi, q(2), &act.clone().bias(&l.bi))?)?;
            let f = sink(linear(
                &inner,
                &l.wf,
                q(3),
                &Epilogue::new().bias(&l.bf).residual(&x1),
            )?)?;
            x = sink(ctx.layer_norm_plan(&f, Some(&l.ln2.0), Some(&l.ln2.1), cfg.eps)?)?;
            if all_layers {
                hidden.push(x.clone());
            }
        }
        // Mean pooling over the kept tokens: weights mask / count, then one
        // batched [1, S] x [S, H] product per sentence.
        let counts = sink(ctx.reduce_plan(mask, Reduction::Sum, Axis::Last)?)?.reshape([b, 1])?;
        let weights = sink(ctx.eval_plan(&(mask.expr() / counts.expr()))?)?;
        let pooled = sink(ctx.matmul_plan(&weights.reshape([b, 1, s])?, &x, None, &plain)?)?;
        let embeddings = sink(ctx.l2_normalize_plan(&pooled.reshape([b, h])?, 1e-12)?)?;
        if !all_layers {
            hidden.push(x.clone());
        }
        Ok(Output {
            hidden,
            last: x,
            embeddings,
        })
    }

    /// The forward pass op by op (or recorded, inside a
    /// [`Context::batch`]).
    pub fn forward(
        &self,
        ctx: &Context,
        ids: &Tensor,
        mask: &Tensor,
        all_layers: bool,
    ) -> Result<Output> {
        self.build(ctx, ids, mask, all_layers, &mut |plan: Plan| {
            plan.run()?;
            Ok(plan.into_output())
        })
    }

    /// The forward pass for `batch` sentences of `seq` tokens, built once:
    /// [`EncoderPlan::run`] writes new ids and a mask and replays it.
    pub fn plan(&self, ctx: &Context, batch: usize, seq: usize) -> Result<EncoderPlan> {
        let ids = ctx.zeros([batch, seq], DType::I32)?;
        let mask = ctx.zeros([batch, seq], self.dtype)?;
        let mut plans = Vec::new();
        let output = self.build(ctx, &ids, &mask, false, &mut |plan: Plan| {
            let out = plan.output().clone();
            plans.push(plan);
            Ok(out)
        })?;
        Ok(EncoderPlan {
            ids,
            mask,
            plans,
            output,
        })
    }
}

/// A forward pass built once for fixed batch and sequence sizes.
pub struct EncoderPlan {
    ids: Tensor,
    mask: Tensor,
    plans: Vec<Plan>,
    pub output: Output,
}

impl EncoderPlan {
    /// Writes `ids` and `mask` (`B * S` values each, row-major) and submits
    /// the whole forward pass in one command buffer; `output` holds the
    /// results once it has run.
    pub fn run(&self, ctx: &Context, ids: &[i32], mask: &[f32]) -> Result<()> {
        ctx.write(&self.ids, ids)?;
        // The mask is in the model's dtype; write_f32 rounds the 0s and 1s to it.
        ctx.write_f32(&self.mask, mask)?;
        let plans: Vec<&Plan> = self.plans.iter().collect();
        ctx.run_plans(&plans)
    }

    /// The plans of a forward pass, in run order.
    pub fn plans(&self) -> &[Plan] {
        &self.plans
    }

    /// Kernel launches per forward pass.
    pub fn dispatches(&self) -> usize {
        self.plans.iter().map(Plan::dispatch_count).sum()
    }
}
