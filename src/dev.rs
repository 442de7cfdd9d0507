//! Experiment overrides: timing probes (which make results wrong by design)
//! and A/B switches between kernel variants, for the `wgtile-dev` crate's
//! measurements.
//!
//! In a default build [`overrides`] is a constant [`DevOverrides::DEFAULT`]:
//! nothing in the environment or in user code can reach a probe or a switch.
//! With the `dev` feature, [`set_overrides`] replaces them for the process
//! (before the first op that reads them), and [`DevOverrides::from_env`]
//! reads the `WGTILE_*` experiment variables the benchmark scripts set.
//!
//! The probes' shader branches test a `const PROBE` that is 0 unless set
//! here; removing them from the text changed no speed on the H200 (runs
//! 127-128 of docs/perf/log-2026-12.md), so they stay.

/// Every probe and A/B switch the library's kernels and plans read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevOverrides {
    /// Timing bits of the tensor-core matmul (`PROBE` in
    /// `shaders/matmul_coop.wgsl`); results wrong while non-zero.
    pub coop_probe: u32,
    /// Probe of the tensor-core attention forward (`PROBE` in
    /// `shaders/attention_flash_coop.wgsl`); results wrong while non-zero.
    pub coop_attn_probe: u32,
    /// Timing bits of the tensor-core attention backward; results wrong.
    pub coop_bwd_probe: u32,
    /// Timing bits of the decode kernel (`shaders/attention_decode.wgsl`):
    /// bit 0 drops the score math, 1 the softmax and P V, 2 the epilogue, 3
    /// the key loop; results wrong.
    pub decode_probe: u32,
    /// The decode epilogue's value elements per barrier pair (2 or 4)
    /// instead of the dtype's default.
    pub decode_ce: Option<u32>,
    /// The subgroup barrier in the tensor-core backward where the adapter
    /// allows it (`false` keeps workgroup barriers, to measure).
    pub sub_barrier: bool,
    /// One f32 split tensor-core layout `(warps_m, warps_n, bk, frags_n)`
    /// for every shape, to compare layouts through whole plans.
    pub split_layout: Option<(u32, u32, u32, u32)>,
    /// The one-dispatch GEMV's workgroup (16-byte lanes, row slices)
    /// instead of 4 x 64.
    pub gemv_wide_shape: Option<(u32, u32)>,
    /// Forces the one-dispatch GEMV on (`Some(true)`, where aligned) or off.
    pub gemv_wide: Option<bool>,
    /// The split GEMV reads column pairs where aligned (`false`: one column).
    pub gemv_pairs: bool,
    /// Transposed tensor-core operands staged as stored and read column-major
    /// (`false`: scattered into row-major tiles).
    pub coop_colmajor: bool,
    /// The f32 split kernel drops edge checks in whole-block dimensions and
    /// runs padded K (`false` keeps the checks, to measure both).
    pub coop_edges: bool,
    /// Floats per padded row of the f32 split kernel's operands (a multiple
    /// of 4) instead of 4.
    pub split_pad_floats: Option<usize>,
    /// The column-blocked quantised GEMV's workgroup (a power of two from
    /// 32 to 1024) instead of the tuned one.
    pub quant_cols_wg: Option<u32>,
    /// Adjacent columns per workgroup of the column-blocked quantised GEMV
    /// (32, 64 or 128) instead of 32.
    pub quant_cols_columns: Option<u32>,
    /// Workgroups along K per group of columns of the column-blocked
    /// quantised GEMV (1 to 16) instead of 1.
    pub quant_cols_ksplit: Option<u32>,
    /// Steps a `Context::batch` records before submitting them (0: one
    /// submission at the end) instead of the default.
    pub batch_chunk: Option<usize>,
    /// bf16 products on the tensor cores scale each operand by a power of
    /// two before the narrowing to f16 (no check pass, no fallback)
    /// instead of the range test and its armed f32 fallback.
    pub bf16_scaled: bool,
    /// bf16 products on the tensor cores staged to f16 by the checked cast
    /// (`Some(true)`: the f16 kernel reads the copies) or read in place
    /// after a check pass (`Some(false)`) instead of `tune::bf16_staged`'s
    /// choice.
    pub bf16_staged: Option<bool>,
    /// Timing bits of the per-word quantisers (`PROBE` in
    /// `shaders/quant_common.wgsl`): bit 0 drops the element rounding, bit
    /// 1 the exchange of block statistics; results wrong while non-zero.
    pub quant_probe: u32,
    /// The per-word quantisers meeting block statistics in workgroup
    /// memory, along rows in place of subgroup shuffles and down columns in
    /// place of one block per invocation (to measure).
    pub quant_slots: bool,
    /// MXFP4 elements rounded by `round_fast`'s bit arithmetic instead of
    /// seven compares (`E2M1_COMPARE` in `shaders/quant_common.wgsl`).
    pub e2m1_bits: bool,
}

impl DevOverrides {
    /// What a default build runs: no probe, every switch at the product's choice.
    pub const DEFAULT: Self = Self {
        coop_probe: 0,
        coop_attn_probe: 0,
        coop_bwd_probe: 0,
        decode_probe: 0,
        decode_ce: None,
        sub_barrier: true,
        split_layout: None,
        gemv_wide_shape: None,
        gemv_wide: None,
        gemv_pairs: true,
        coop_colmajor: true,
        coop_edges: true,
        split_pad_floats: None,
        quant_cols_wg: None,
        quant_cols_columns: None,
        quant_cols_ksplit: None,
        batch_chunk: None,
        bf16_scaled: false,
        bf16_staged: None,
        quant_probe: 0,
        quant_slots: false,
        e2m1_bits: false,
    };
}

impl Default for DevOverrides {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The overrides in force: [`DevOverrides::DEFAULT`] in a default build.
#[cfg(not(feature = "dev"))]
#[inline(always)]
pub(crate) fn overrides() -> DevOverrides {
    DevOverrides::DEFAULT
}

#[cfg(feature = "dev")]
static OVERRIDES: std::sync::RwLock<DevOverrides> = std::sync::RwLock::new(DevOverrides::DEFAULT);

/// The overrides in force (set by [`set_overrides`]).
#[cfg(feature = "dev")]
pub(crate) fn overrides() -> DevOverrides {
    *OVERRIDES.read().unwrap_or_else(|p| p.into_inner())
}

/// Replaces the overrides for this process. Pipelines already compiled and
/// plans already built keep what they were made with.
#[cfg(feature = "dev")]
pub fn set_overrides(overrides: DevOverrides) {
    *OVERRIDES.write().unwrap_or_else(|p| p.into_inner()) = overrides;
}

#[cfg(feature = "dev")]
impl DevOverrides {
    /// The experiment variables the benchmark scripts set, over the
    /// defaults: `WGTILE_COOP_PROBE`, `WGTILE_COOP_ATTN_PROBE`,
    /// `WGTILE_COOP_BWD_PROBE`, `WGTILE_DECODE_PROBE` (numbers),
    /// `WGTILE_DECODE_CE` (2 or 4), `WGTILE_SUB_BARRIER`,
    /// `WGTILE_GEMV_WIDE`, `WGTILE_GEMV_PAIRS`, `WGTILE_COOP_COLMAJOR`,
    /// `WGTILE_COOP_EDGES` (switches), `WGTILE_SPLIT_LAYOUT=WMxWNxBKxFN`,
    /// `WGTILE_GEMV_WIDE_SHAPE=LxS`, `WGTILE_SPLIT_PAD_FLOATS`,
    /// `WGTILE_QUANT_COLS_WG`, `WGTILE_QUANT_COLS_COLUMNS`,
    /// `WGTILE_QUANT_COLS_KSPLIT`, `WGTILE_BATCH_CHUNK`, `WGTILE_BF16_SCALED`, `WGTILE_BF16_STAGED`, `WGTILE_QUANT_PROBE`, `WGTILE_QUANT_SLOTS`, `WGTILE_E2M1_BITS`. A value that
    /// does not parse logs a warning and keeps the default.
    pub fn from_env() -> Self {
        let text = |name: &str| {
            std::env::var(name)
                .ok()
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let warn = |name: &str, v: &str| log::warn!("{name}={v:?} does not parse; ignored");
        let number =
            |name: &str| text(name).and_then(|v| v.parse::<u32>().map_err(|_| warn(name, &v)).ok());
        let switch = |name: &str| text(name).and_then(|v| crate::config::parse_switch(name, &v));
        let dims = |name: &str, n: usize| {
            text(name).and_then(|v| {
                let d: Option<Vec<u32>> = v.split('x').map(|s| s.trim().parse().ok()).collect();
                let d = d.filter(|d| d.len() == n);
                if d.is_none() {
                    warn(name, &v);
                }
                d
            })
        };
        let d = Self::DEFAULT;
        let wide_shape = dims("WGTILE_GEMV_WIDE_SHAPE", 2)
            .map(|d| (d[0], d[1]))
            .filter(|&(l, s)| {
                matches!(l, 1 | 2 | 4 | 8) && s.is_power_of_two() && s >= 16 && l * s <= 256
            });
        Self {
            coop_probe: number("WGTILE_COOP_PROBE").unwrap_or(d.coop_probe),
            coop_attn_probe: number("WGTILE_COOP_ATTN_PROBE").unwrap_or(d.coop_attn_probe),
            coop_bwd_probe: number("WGTILE_COOP_BWD_PROBE").unwrap_or(d.coop_bwd_probe),
            decode_probe: number("WGTILE_DECODE_PROBE").unwrap_or(d.decode_probe),
            decode_ce: number("WGTILE_DECODE_CE").filter(|ce| matches!(ce, 2 | 4)),
            sub_barrier: switch("WGTILE_SUB_BARRIER").unwrap_or(d.sub_barrier),
            split_layout: dims("WGTILE_SPLIT_LAYOUT", 4).map(|d| (d[0], d[1], d[2], d[3])),
            gemv_wide_shape: wide_shape,
            gemv_wide: switch("WGTILE_GEMV_WIDE"),
            gemv_pairs: switch("WGTILE_GEMV_PAIRS").unwrap_or(d.gemv_pairs),
            coop_colmajor: switch("WGTILE_COOP_COLMAJOR").unwrap_or(d.coop_colmajor),
            coop_edges: switch("WGTILE_COOP_EDGES").unwrap_or(d.coop_edges),
            split_pad_floats: number("WGTILE_SPLIT_PAD_FLOATS")
                .map(|f| f as usize)
                .filter(|&f| f > 0 && f.is_multiple_of(4)),
            quant_cols_wg: number("WGTILE_QUANT_COLS_WG")
                .filter(|wg| wg.is_power_of_two() && (32..=1024).contains(wg)),
            quant_cols_columns: number("WGTILE_QUANT_COLS_COLUMNS").filter(|c| matches!(c, 32 | 64 | 128)),
            quant_cols_ksplit: number("WGTILE_QUANT_COLS_KSPLIT").filter(|k| (1..=16).contains(k)),
            batch_chunk: number("WGTILE_BATCH_CHUNK").map(|c| c as usize),
            bf16_scaled: switch("WGTILE_BF16_SCALED").unwrap_or(d.bf16_scaled),
            bf16_staged: switch("WGTILE_BF16_STAGED"),
            quant_probe: number("WGTILE_QUANT_PROBE").unwrap_or(d.quant_probe),
            quant_slots: switch("WGTILE_QUANT_SLOTS").unwrap_or(d.quant_slots),
            e2m1_bits: switch("WGTILE_E2M1_BITS").unwrap_or(d.e2m1_bits),
        }
    }
}
