//! The shader registry: every `shaders/*.wgsl` embedded with `include_str!`,
//! specialised, compiled once per device and cached.
//!
//! Specialisation comes in two forms, each used where it can express the
//! parameter:
//! - **WGSL `override` constants** (workgroup sizes, loop bounds): passed as
//!   pipeline constants, no text changes.
//! - **Text specialisation**, only for what WGSL cannot parameterise at pipeline
//!   creation: the element type (`alias Elem = f32;` becomes `f16` with
//!   `enable f16;`) and `const` values that size function-scope arrays
//!   (register tiles: `const TM: u32 = 4u;`). Each shader is valid WGSL as
//!   written (its defaults), so tools can read the files directly.
//!
//! This module never decides which kernel runs; `tune` does.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub mod cast;
pub mod codegen;
mod registry;

pub use registry::Kernel;
pub(crate) use registry::HALF_BITS;

pub(crate) use crate::gpu::Dispatch;
use crate::dtype::DType;
use crate::error::{Error, Result};

const ELEM_ALIAS: &str = "alias Elem = f32;";
const OUT_ALIAS: &str = "alias Out = Elem;";

/// One specialisation of a kernel: what the pipeline cache is keyed by.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Spec {
    /// The kernel family.
    pub kernel: Kernel,
    /// Element type substituted for `Elem` (F32 for kernels that are not dtype-generic).
    pub dtype: DType,
    /// `const NAME: u32` values rewritten in the text (register-tile sizes).
    pub consts: Vec<(&'static str, u32)>,
    /// WGSL `override` values passed as pipeline constants.
    pub overrides: Vec<(&'static str, u32)>,
    /// Generated WGSL replacing the matmul epilogue (kernels with
    /// [`Kernel::has_epilogue`] only): it defines `fn epilogue(acc: f32, z:
    /// u32, row: u32, col: u32) -> f32`, and the built-in one is renamed
    /// `epilogue_builtin`. Made by [`crate::kernels::codegen::fusion::generate_epilogue`].
    pub epilogue: Option<String>,
    /// The output's element type where it differs from `dtype`: substituted
    /// for `Out` in the kernels that declare `alias Out = Elem;` (the matmul
    /// kernels: f16 operands with an f32 result, or the reverse).
    pub out_dtype: Option<DType>,
    /// Generated WGSL replacing marker lines `// @gen NAME` (trimmed), as
    /// (NAME, text) pairs: code the host unrolls, such as the tensor-core
    /// attention kernel's named fragments. Every pair must find its marker.
    pub blocks: Vec<(&'static str, String)>,
    /// Type aliases rewritten in the text, as (NAME, type) pairs: the line
    /// `alias NAME = ...;` becomes `alias NAME = type;` (an output bound as
    /// u32 words of two bf16 values). Every pair must find its line.
    pub aliases: Vec<(&'static str, &'static str)>,
}

impl Spec {
    /// The kernel at its defaults (f32, or its fixed dtype).
    pub fn new(kernel: Kernel) -> Self {
        // The tensor-core attention kernel's unrolled blocks, for the tile
        // and head dims its text defaults to (FlashCoopTiles::spec replaces
        // them).
        let blocks = match kernel {
            Kernel::AttentionFlashCoop => {
                codegen::flash_coop::FLASH_COOP_TEXT_DEFAULT.blocks(128, 128, false)
            }
            Kernel::AttentionFlashCoopEmulated => {
                codegen::flash_coop::FLASH_COOP_TEXT_DEFAULT.blocks_looped(128, 128, false)
            }
            Kernel::AttentionDecodeCoop => {
                codegen::coop_decode::decode_coop_blocks(1, 128, 128, false)
            }
            Kernel::AttentionDecodeCoopEmulated => {
                codegen::coop_decode::decode_coop_blocks(1, 128, 128, true)
            }
            Kernel::MatmulTiled
            | Kernel::MatmulTiledVec4
            | Kernel::QuantMatmulTiled
            | Kernel::AttentionFlash => {
                vec![("guard_decl", String::new()), ("guard", String::new())]
            }
            Kernel::Cast | Kernel::CastVec | Kernel::CastCheck => {
                ["flag_decl", "flag", "flag8", "flag_end", "check_flag"]
                    .map(|name| (name, String::new()))
                    .to_vec()
            }
            Kernel::MatmulCoop => codegen::matmul_coop::COOP_PLAIN_BLOCKS
                .iter()
                .map(|&(name, text)| (name, text.to_string()))
                .collect(),
            _ => codegen::coop_backward::default_blocks(kernel).unwrap_or_default(),
        };
        Self {
            kernel,
            dtype: kernel.fixed_dtype(),
            consts: Vec::new(),
            overrides: Vec::new(),
            epilogue: None,
            out_dtype: None,
            blocks,
            aliases: Vec::new(),
        }
    }

    /// Rewrites the line `alias name = ...;` to `alias name = ty;` (a
    /// second call for the same name replaces the first type).
    pub fn alias(mut self, name: &'static str, ty: &'static str) -> Self {
        match self.aliases.iter_mut().find(|(n, _)| *n == name) {
            Some(a) => a.1 = ty,
            None => self.aliases.push((name, ty)),
        }
        self
    }

    /// Sets the output's element type (see [`Spec::out_dtype`]).
    pub fn output(mut self, dtype: DType) -> Self {
        self.out_dtype = Some(dtype);
        self
    }

    /// Replaces the matmul epilogue with generated WGSL (see [`Spec::epilogue`]).
    pub fn epilogue_text(mut self, wgsl: impl Into<String>) -> Self {
        self.epilogue = Some(wgsl.into());
        self
    }

    /// Sets the element type.
    pub fn dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }

    /// Rewrites `const name: u32 = ...;` to `value` (a second call for the
    /// same name replaces the first value).
    pub fn constant(mut self, name: &'static str, value: u32) -> Self {
        match self.consts.iter_mut().find(|(n, _)| *n == name) {
            Some(c) => c.1 = value,
            None => self.consts.push((name, value)),
        }
        self
    }

    /// Replaces the marker line `// @gen name` with `text` (see
    /// [`Spec::blocks`]).
    pub fn block(mut self, name: &'static str, text: impl Into<String>) -> Self {
        let text = text.into();
        match self.blocks.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = text,
            None => self.blocks.push((name, text)),
        }
        self
    }

    /// Fills the `guard_decl` and `guard` blocks (the split plans'
    /// fallbacks: `shaders/matmul_tiled_core.wgsl`,
    /// `shaders/attention_flash.wgsl`): the storage buffer at `binding` is
    /// read as `array<u32>`, invocation `tid` 0 loads word `flag` (a WGSL
    /// expression) and `workgroupUniformLoad` shares it; while it is 0,
    /// every workgroup returns at once.
    pub fn guarded(self, binding: u32, flag: &str) -> Self {
        self.block(
            "guard_decl",
            format!(
                "@group(0) @binding({binding}) var<storage, read> split_flag: array<u32>;\n\
                 var<workgroup> guard_sh: u32;\n"
            ),
        )
        .block(
            "guard",
            format!(
                "    if tid == 0u {{\n        guard_sh = split_flag[{flag}];\n    }}\n    \
                 if workgroupUniformLoad(&guard_sh) == 0u {{\n        return;\n    }}\n"
            ),
        )
    }

    /// Sets the `override name: u32` to `value`.
    pub fn override_(mut self, name: &'static str, value: u32) -> Self {
        self.overrides.push((name, value));
        self
    }

    /// The specialised WGSL text (dtype and consts applied; overrides are not
    /// textual and stay for pipeline creation).
    pub fn wgsl(&self) -> Result<String> {
        let src = self.kernel.parts().concat();
        let fail = |message: String| Error::Shader {
            kernel: self.kernel.name().to_string(),
            message,
        };
        let mut out = String::with_capacity(src.len() + 64);
        let generic = self.kernel.is_dtype_generic();
        if !generic && self.dtype != self.kernel.fixed_dtype() {
            return Err(fail(format!(
                "kernel has no `alias Elem` and works in {} only, not {}",
                self.kernel.fixed_dtype(),
                self.dtype
            )));
        }
        if generic && (self.dtype == DType::F16 || self.out_dtype == Some(DType::F16)) {
            out.push_str("enable f16;\n");
        }
        if self.out_dtype.is_some() && !src.lines().any(|l| l.trim() == OUT_ALIAS) {
            return Err(fail(
                "kernel has no `alias Out = Elem;` to specialise".into(),
            ));
        }
        if self.epilogue.is_some() && !self.kernel.has_epilogue() {
            return Err(fail("kernel has no epilogue to replace".into()));
        }
        let mut applied = vec![false; self.consts.len()];
        let mut blocks_applied = vec![false; self.blocks.len()];
        let mut aliases_applied = vec![false; self.aliases.len()];
        for line in src.lines() {
            let trimmed = line.trim();
            if let Some(name) = trimmed.strip_prefix("// @gen ") {
                let Some(i) = self.blocks.iter().position(|(n, _)| *n == name.trim()) else {
                    return Err(fail(format!("no generated block for `// @gen {name}`")));
                };
                blocks_applied[i] = true;
                out.push_str(&self.blocks[i].1);
                if !self.blocks[i].1.ends_with('\n') {
                    out.push('\n');
                }
                continue;
            }
            if self.epilogue.is_some() && trimmed.starts_with("fn epilogue(") {
                out.push_str(&line.replacen("fn epilogue(", "fn epilogue_builtin(", 1));
                out.push('\n');
                continue;
            }
            let aliased = self.aliases.iter().position(|(name, _)| {
                trimmed
                    .strip_prefix("alias ")
                    .and_then(|rest| rest.strip_prefix(name))
                    .is_some_and(|rest| rest.trim_start().starts_with('='))
            });
            if let Some(i) = aliased {
                aliases_applied[i] = true;
                let (name, ty) = self.aliases[i];
                out.push_str(&format!("alias {name} = {ty};\n"));
                continue;
            }
            if trimmed == ELEM_ALIAS {
                out.push_str(&format!("alias Elem = {};\n", self.dtype.wgsl()));
                continue;
            }
            if let (Some(o), OUT_ALIAS) = (self.out_dtype, trimmed) {
                out.push_str(&format!("alias Out = {};\n", o.wgsl()));
                continue;
            }
            let replaced = self.consts.iter().enumerate().find(|(_, (name, _))| {
                trimmed
                    .strip_prefix("const ")
                    .and_then(|rest| rest.strip_prefix(name))
                    .is_some_and(|rest| rest.trim_start().starts_with(": u32 ="))
            });
            match replaced {
                Some((i, (name, value))) => {
                    applied[i] = true;
                    out.push_str(&format!("const {name}: u32 = {value}u;\n"));
                }
                None => {
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
        if let Some(text) = &self.epilogue {
            out.push_str(text);
        }
        if let Some(i) = blocks_applied.iter().position(|a| !a) {
            return Err(fail(format!(
                "no `// @gen {}` line for the generated block",
                self.blocks[i].0
            )));
        }
        if let Some(i) = aliases_applied.iter().position(|a| !a) {
            return Err(fail(format!(
                "no `alias {} = ...;` line to specialise",
                self.aliases[i].0
            )));
        }
        if let Some(i) = applied.iter().position(|a| !a) {
            return Err(fail(format!(
                "no `const {}: u32 = ...;` line to specialise",
                self.consts[i].0
            )));
        }
        Ok(out)
    }

    /// Override constants in the form wgpu takes.
    pub fn pipeline_constants(&self) -> Vec<(&'static str, f64)> {
        self.overrides
            .iter()
            .map(|&(k, v)| (k, f64::from(v)))
            .collect()
    }

    fn label(&self) -> String {
        let mut s = format!("{}<{}>", self.kernel.name(), self.dtype);
        if let Some(o) = self.out_dtype {
            s.push_str(&format!("->{o}"));
        }
        for (k, v) in self.consts.iter().chain(&self.overrides) {
            s.push_str(&format!(" {k}={v}"));
        }
        if let Some(text) = &self.epilogue {
            s.push_str(&format!(" epilogue={}B", text.len()));
        }
        for (name, ty) in &self.aliases {
            s.push_str(&format!(" {name}={ty}"));
        }
        if !self.blocks.is_empty() {
            let bytes: usize = self.blocks.iter().map(|(_, t)| t.len()).sum();
            s.push_str(&format!(" generated={bytes}B"));
        }
        s
    }
}

/// Most pipelines of specialisations (`Spec`) kept per device; the least
/// recently used goes first. Every kernel the dispatcher picks for a run of
/// ordinary shapes is a few dozen; the bound matters for epilogues with a new
/// scalar each call (each value is its own text) and for sweeps.
pub const PIPELINE_CACHE_CAPACITY: usize = 512;

/// Most generated pipelines (fused elementwise kernels, fused row kernels)
/// kept per device; the least recently used goes first.
pub const GENERATED_CACHE_CAPACITY: usize = 64;

/// A map of at most `capacity` pipelines; a miss compiles outside the lock
/// (slow on some drivers, and the autotuner compiles candidates on threads
/// at once), and when full the least recently used entry goes.
pub(crate) struct Lru<K, V = Arc<wgpu::ComputePipeline>> {
    capacity: usize,
    map: Mutex<Clocked<K, V>>,
}

/// The use clock and each entry with the tick of its last use.
type Clocked<K, V> = (u64, HashMap<K, (u64, V)>);

impl<K: std::hash::Hash + Eq + Clone, V: Clone> Lru<K, V> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            map: Mutex::new((0, HashMap::new())),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Clocked<K, V>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The value under `key`, made by `make` on a miss. Two threads missing
    /// the same key both make it; the first insert wins. The key is looked
    /// up borrowed and cloned only to insert.
    pub(crate) fn get_or_compile<Q>(&self, key: &Q, make: impl FnOnce() -> Result<V>) -> Result<V>
    where
        K: std::borrow::Borrow<Q>,
        Q: std::hash::Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        {
            let mut guard = self.lock();
            let (clock, map) = &mut *guard;
            *clock += 1;
            if let Some((used, p)) = map.get_mut(key) {
                *used = *clock;
                return Ok(p.clone());
            }
        }
        let value = make()?;
        let mut guard = self.lock();
        let (clock, map) = &mut *guard;
        if !map.contains_key(key) && map.len() >= self.capacity {
            let oldest = map
                .iter()
                .min_by_key(|(_, (used, _))| *used)
                .map(|(k, _)| k.clone());
            if let Some(oldest) = oldest {
                map.remove::<K>(&oldest);
            }
        }
        let now = *clock;
        Ok(map.entry(key.to_owned()).or_insert((now, value)).1.clone())
    }

    /// Number of pipelines held.
    pub(crate) fn len(&self) -> usize {
        self.lock().1.len()
    }
}

/// Compiled pipelines of one device, keyed by specialisation.
pub(crate) struct PipelineCache(Lru<Spec>);

impl Default for PipelineCache {
    fn default() -> Self {
        Self(Lru::new(PIPELINE_CACHE_CAPACITY))
    }
}

impl PipelineCache {
    /// The pipeline for `spec`, compiled on first use.
    pub(crate) fn get(
        &self,
        device: &wgpu::Device,
        spec: &Spec,
    ) -> Result<Arc<wgpu::ComputePipeline>> {
        self.0.get_or_compile(spec, || {
            let elapsed = stopwatch();
            let source = spec.wgsl()?;
            let pipeline = compile(
                device,
                &spec.label(),
                &source,
                spec.kernel.entry_point(),
                &spec.pipeline_constants(),
                spec.kernel.trusted(),
            )?;
            log::debug!(
                "compiled pipeline {} in {:.1} ms",
                spec.label(),
                elapsed() * 1e3
            );
            Ok(Arc::new(pipeline))
        })
    }

    /// Number of pipelines held.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

/// Pipelines of host-generated kernels, keyed by their generated text's key.
pub(crate) struct GeneratedCache(Lru<String>);

impl Default for GeneratedCache {
    fn default() -> Self {
        Self(Lru::new(GENERATED_CACHE_CAPACITY))
    }
}

impl GeneratedCache {
    /// The pipeline cached under `key`, compiled by `compile` on a miss.
    pub(crate) fn get_or_compile(
        &self,
        key: &str,
        compile: impl FnOnce() -> Result<wgpu::ComputePipeline>,
    ) -> Result<Arc<wgpu::ComputePipeline>> {
        self.0.get_or_compile(key, || {
            log::debug!("compiling fused kernel {key}");
            compile().map(Arc::new)
        })
    }

    /// Number of pipelines held.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
}

/// Seconds since the call, for log lines: NaN on wasm32, where
/// `std::time::Instant` is not available.
pub(crate) fn stopwatch() -> impl Fn() -> f64 {
    #[cfg(not(target_arch = "wasm32"))]
    {
        let start = std::time::Instant::now();
        move || start.elapsed().as_secs_f64()
    }
    #[cfg(target_arch = "wasm32")]
    {
        || f64::NAN
    }
}

/// Creates a shader module and compute pipeline inside an error scope, so a
/// failure comes back as [`Error::Shader`].
pub(crate) fn compile(
    device: &wgpu::Device,
    label: &str,
    source: &str,
    entry_point: &str,
    constants: &[(&str, f64)],
    trusted: bool,
) -> Result<wgpu::ComputePipeline> {
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let desc = wgpu::ShaderModuleDescriptor {
        label: Some(label),
        source: wgpu::ShaderSource::Wgsl(source.into()),
    };
    let module = if trusted && !checked_shaders_forced() {
        // SAFETY: only kernels listed by `Kernel::trusted`, whose accesses are
        // explicitly bounds-checked or in bounds by construction (see there).
        unsafe { device.create_shader_module_trusted(desc, wgpu::ShaderRuntimeChecks::unchecked()) }
    } else {
        device.create_shader_module(desc)
    };
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(label),
        layout: None,
        module: &module,
        entry_point: Some(entry_point),
        compilation_options: wgpu::PipelineCompilationOptions {
            constants,
            // Every kernel writes its workgroup tiles before reading them.
            zero_initialize_workgroup_memory: false,
        },
        cache: None,
    });
    match crate::gpu::settle(label, scope.pop()) {
        Some(e) => Err(Error::Shader {
            kernel: label.to_string(),
            message: e.to_string(),
        }),
        None => Ok(pipeline),
    }
}

/// `WGTILE_CHECKED_SHADERS=1` compiles every kernel with wgpu's runtime checks,
/// to debug a suspected out-of-bounds access or to measure what trust buys.
fn checked_shaders_forced() -> bool {
    crate::config::get().checked_shaders
}

#[cfg(test)]
mod tests {
    use super::Lru;
    use std::cell::Cell;

    #[test]
    fn the_cache_is_bounded_and_evicts_the_least_recently_used() {
        let made = Cell::new(0);
        let lru: Lru<u32, u32> = Lru::new(3);
        let get = |k: u32| {
            lru.get_or_compile(&k, || {
                made.set(made.get() + 1);
                Ok(k * 10)
            })
            .unwrap()
        };
        assert_eq!((get(1), get(2), get(3)), (10, 20, 30));
        assert_eq!(get(1), 10); // a hit: 1 is now the most recent
        assert_eq!(made.get(), 3);
        get(4); // full: 2, the least recently used, goes
        assert_eq!(lru.len(), 3);
        get(1);
        get(3);
        assert_eq!(made.get(), 4, "1 and 3 stayed");
        get(2);
        assert_eq!(made.get(), 5, "2 was evicted and made again");
        for k in 100..1000 {
            get(k);
            assert!(lru.len() <= 3);
        }
        // A failed make inserts nothing.
        assert!(lru.get_or_compile(&7, || Err(crate::Error::InvalidArgument("no".into()))).is_err());
        assert!(lru.len() <= 3);
    }
}
