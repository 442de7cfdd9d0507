//! The tensor-core flash forward's tile shape and its generated blocks
//! (`shaders/attention_flash_coop.wgsl`): the resource arithmetic the
//! shader's constants imply and every fragment loop unrolled.

use std::fmt;

use crate::dtype::DType;
use crate::gpu::AdapterProfile;

/// Tile shape of the tensor-core flash forward
/// (`shaders/attention_flash_coop.wgsl`): a workgroup is `subgroups`
/// subgroups, each owning `rf` fragments of 16 query rows (`br() = 16 *
/// subgroups * rf` rows), and streams `bc` keys per block through workgroup
/// memory. The head dims and the subgroup size are part of the
/// specialisation ([`FlashCoopTiles::spec`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FlashCoopTiles {
    /// Subgroups per workgroup (W).
    pub subgroups: u32,
    /// 16-row fragments per subgroup (RF): 1 or 2.
    pub rf: u32,
    /// Keys per block (a multiple of 16).
    pub bc: u32,
}

impl FlashCoopTiles {
    /// Why these tiles cannot be the tensor-core flash kernel's, naming the
    /// field.
    pub fn invalid_reason(self) -> Option<String> {
        if self.subgroups == 0 {
            return Some("tensor-core flash tiles subgroups = 0 (must be at least 1)".into());
        }
        if !matches!(self.rf, 1 | 2) {
            return Some(format!("tensor-core flash tiles rf = {} (must be 1 or 2)", self.rf));
        }
        if self.bc == 0 || !self.bc.is_multiple_of(16) {
            return Some(format!(
                "tensor-core flash tiles bc = {} (must be a positive multiple of 16)",
                self.bc
            ));
        }
        None
    }
}

/// Largest head dimension (D and Dv) of the tensor-core flash kernel.
pub const MAX_FLASH_COOP_DIM: usize = 256;

/// What one tensor-core attention kernel (forward, backward, decode) asks of
/// the adapter per workgroup: invocations, workgroup memory in bytes and
/// storage buffers bound.
pub(crate) struct CoopLaunch {
    pub(crate) threads: u32,
    pub(crate) bytes: u32,
    pub(crate) buffers: u32,
}

impl CoopLaunch {
    /// Whether the adapter runs it with head dims `d`, `dv` (multiples of 16
    /// in 16..=256) and subgroup size `sg` (a multiple of 16; the caller
    /// checks the cooperative-matrix or emulation features).
    pub(crate) fn fits(&self, p: &AdapterProfile, d: usize, dv: usize, sg: u32) -> bool {
        let dim_ok = |x: usize| (16..=MAX_FLASH_COOP_DIM).contains(&x) && x.is_multiple_of(16);
        dim_ok(d)
            && dim_ok(dv)
            && sg >= 16
            && sg.is_multiple_of(16)
            && p.max_storage_buffers_per_stage >= self.buffers
            && self.threads <= p.max_invocations
            && self.threads <= p.max_workgroup_size_x
            && self.bytes <= p.max_workgroup_storage
    }
}

impl FlashCoopTiles {
    /// Query rows per workgroup.
    pub const fn br(self) -> u32 {
        16 * self.subgroups * self.rf
    }

    /// Invocations per workgroup for subgroup size `sg`.
    pub const fn threads(self, sg: u32) -> u32 {
        self.subgroups * sg
    }

    /// Workgroup memory in bytes for head dims `d`, `dv` and inputs of
    /// `dtype` (the arithmetic of the shader's `kv_sh`, `s_sh`, `p_sh`,
    /// `alpha_sh`, `l_sh` and flag; f32 inputs hold K/V and P twice, as hi
    /// and lo halves).
    pub const fn workgroup_bytes(self, d: u32, dv: u32, dtype: DType) -> u32 {
        let rows = self.br();
        let halves = if matches!(dtype, DType::F32) { 2 } else { 1 };
        2 * halves * self.kv_elems(d, dv)
            + 4 * rows * (self.bc + 8)
            + 2 * halves * rows * (self.bc + 8)
            + 8 * rows
            + 16
    }

    /// Halves of the shader's `kv_sh` (`KV_ELEMS`): K's or V's block
    /// ([BC][max(D, Dv) + 8]) or 24 halves per query row (the least Q
    /// staging pass), whichever is larger.
    const fn kv_elems(self, d: u32, dv: u32) -> u32 {
        let dx = if d > dv { d } else { dv };
        let kv_block = self.bc * (dx + 8);
        let q_min = self.br() * 24;
        if kv_block > q_min { kv_block } else { q_min }
    }

    /// Q columns staged per pass through `kv_sh` (the shader's `QCH`, which
    /// it checks with a `const_assert`): all of D when BR rows of D + 8
    /// halves fit, else the largest multiple of 16 that does.
    pub const fn qch(self, d: u32, dv: u32) -> u32 {
        let fit = (self.kv_elems(d, dv) / self.br() - 8) / 16 * 16;
        if d < fit { d } else { fit }
    }

    /// The kernel's generated blocks for head dims `d`, `dv` and `split`
    /// (f32 inputs as hi and lo halves): every loop over cooperative-matrix
    /// fragments unrolled, so each fragment is a named variable (`// @gen
    /// NAME` markers of `shaders/attention_flash_coop.wgsl`).
    // Long on purpose: one emitter per generated block of the shader, in the shader's order,
    // so the text reads as the kernel it writes.
    pub fn blocks(self, d: u32, dv: u32, split: bool) -> Vec<(&'static str, String)> {
        use std::fmt::Write as _;
        let (rf, d16, dv16, bc16) = (self.rf, d / 16, dv / 16, self.bc / 16);
        let qch = self.qch(d, dv);
        let pad = "    ";
        let mut declare = String::new();
        for f in 0..rf {
            for i in 0..d16 {
                writeln!(declare, "{pad}var q{f}_{i}: MatA;").unwrap();
                if split {
                    writeln!(declare, "{pad}var ql{f}_{i}: MatA;").unwrap();
                }
            }
            for x in 0..dv16 {
                writeln!(declare, "{pad}var o{f}_{x}: MatC;").unwrap();
            }
        }
        let mut load_q = String::new();
        let parts: &[(u32, &str)] = if split {
            &[(0, "q"), (1, "ql")]
        } else {
            &[(0, "q")]
        };
        for dc0 in (0..d).step_by(qch as usize) {
            for &(part, name) in parts {
                writeln!(
                    load_q,
                    "{pad}stage_q(tid, {dc0}u, i0, rows, q_base, {part}u, sq);"
                )
                .unwrap();
                writeln!(load_q, "{pad}workgroupBarrier();").unwrap();
                for f in 0..rf {
                    for i in dc0 / 16..(dc0 + qch).min(d) / 16 {
                        let col = i * 16 - dc0;
                        writeln!(
                            load_q,
                            "{pad}{name}{f}_{i} = load_a_kv((sub_row0 + {}u) * LQ + {col}u, LQ);",
                            f * 16
                        )
                        .unwrap();
                    }
                }
                writeln!(load_q, "{pad}workgroupBarrier();").unwrap();
            }
        }
        let pad2 = "        ";
        let mut qk = String::new();
        for c in 0..bc16 {
            writeln!(qk, "{pad2}{{").unwrap();
            for f in 0..rf {
                writeln!(qk, "{pad2}    var s{f} = zc;").unwrap();
            }
            for i in 0..d16 {
                writeln!(
                    qk,
                    "{pad2}    let k{i} = load_bt_kv({}u * LDKV + {}u, LDKV);",
                    c * 16,
                    i * 16
                )
                .unwrap();
                if split {
                    // lo*hi + hi*lo + hi*hi from zero, added in f32: the
                    // tensor cores truncate when they accumulate, so the
                    // running sum takes rounded adds only.
                    writeln!(
                        qk,
                        "{pad2}    let kl{i} = load_bt_kv(KV_LO + {}u * LDKV + {}u, LDKV);",
                        c * 16,
                        i * 16
                    )
                    .unwrap();
                    for f in 0..rf {
                        writeln!(
                            qk,
                            "{pad2}    s{f} = s{f} + mma(q{f}_{i}, k{i}, mma(q{f}_{i}, kl{i}, mma(ql{f}_{i}, k{i}, zc)));"
                        )
                        .unwrap();
                    }
                    continue;
                }
                for f in 0..rf {
                    writeln!(qk, "{pad2}    s{f} = mma(q{f}_{i}, k{i}, s{f});").unwrap();
                }
            }
            for f in 0..rf {
                writeln!(
                    qk,
                    "{pad2}    store_c_s(s{f}, s_base + {}u * LDS + {}u, LDS);",
                    f * 16,
                    c * 16
                )
                .unwrap();
            }
            writeln!(qk, "{pad2}}}").unwrap();
        }
        // O's tiles pass through the subgroup's S scratch (16 rows x BC
        // columns per fragment), bc16 tiles at a time: stored, barrier, `body`
        // on each, barrier, and with `reload` loaded back (then a barrier
        // before the scratch is reused).
        let through_scratch = |ind: &str, reload: bool, body: &dyn Fn(u32, u32, &str) -> String| {
            let mut out = String::new();
            for f in 0..rf {
                for x0 in (0..dv16).step_by(bc16 as usize) {
                    let group = x0..(x0 + bc16).min(dv16);
                    let at = |x: u32| format!("s_base + {}u * LDS + {}u", f * 16, (x - x0) * 16);
                    for x in group.clone() {
                        writeln!(out, "{ind}store_c_s(o{f}_{x}, {}, LDS);", at(x)).unwrap();
                    }
                    writeln!(out, "{ind}workgroupBarrier();").unwrap();
                    for x in group.clone() {
                        writeln!(out, "{ind}{}", body(f, x, &at(x))).unwrap();
                    }
                    writeln!(out, "{ind}workgroupBarrier();").unwrap();
                    if reload {
                        for x in group.clone() {
                            writeln!(out, "{ind}o{f}_{x} = load_c_s({}, LDS);", at(x)).unwrap();
                        }
                        writeln!(out, "{ind}workgroupBarrier();").unwrap();
                    }
                }
            }
            out
        };
        let rescale = through_scratch("            ", true, &|f, _, at| {
            format!("scale_tile(lane, {at}, sub_row0 + {}u);", f * 16)
        });
        let store_o = through_scratch(pad, false, &|f, x, at| {
            format!(
                "write_tile(lane, {at}, sub_row0 + {}u, i0, rows, o_base, {x}u, o_unscale);",
                f * 16
            )
        });
        let mut pv = String::new();
        for c in 0..bc16 {
            writeln!(pv, "{pad2}{{").unwrap();
            for f in 0..rf {
                writeln!(
                    pv,
                    "{pad2}    let p{f} = load_a_p(p_base + {}u * LDP + {}u, LDP);",
                    f * 16,
                    c * 16
                )
                .unwrap();
                if split {
                    writeln!(
                        pv,
                        "{pad2}    let pl{f} = load_a_p(P_LO + p_base + {}u * LDP + {}u, LDP);",
                        f * 16,
                        c * 16
                    )
                    .unwrap();
                }
            }
            for x in 0..dv16 {
                writeln!(
                    pv,
                    "{pad2}    let v{x} = load_b_kv({}u * LDKV + {}u, LDKV);",
                    c * 16,
                    x * 16
                )
                .unwrap();
                if split {
                    writeln!(
                        pv,
                        "{pad2}    let vl{x} = load_b_kv(KV_LO + {}u * LDKV + {}u, LDKV);",
                        c * 16,
                        x * 16
                    )
                    .unwrap();
                    for f in 0..rf {
                        writeln!(
                            pv,
                            "{pad2}    o{f}_{x} = o{f}_{x} + mma(p{f}, v{x}, mma(p{f}, vl{x}, mma(pl{f}, v{x}, zc)));"
                        )
                        .unwrap();
                    }
                    continue;
                }
                for f in 0..rf {
                    writeln!(pv, "{pad2}    o{f}_{x} = mma(p{f}, v{x}, o{f}_{x});").unwrap();
                }
            }
            writeln!(pv, "{pad2}}}").unwrap();
        }
        let mut blocks = vec![
            ("declare", declare),
            ("load_q", load_q),
            ("qk", qk),
            ("rescale", rescale),
            ("pv", pv),
            ("store_o", store_o),
        ];
        blocks.extend(split_blocks(split));
        blocks
    }

    /// The emulated kernel's blocks: the same algorithm with the fragments
    /// in arrays walked by loops (unrolled, the emulated matrices, 256
    /// floats each, make a shader llvmpipe takes minutes to compile).
    pub fn blocks_looped(self, d: u32, dv: u32, split: bool) -> Vec<(&'static str, String)> {
        let qch = self.qch(d, dv);
        let mut declare =
            "    var qa: array<MatA, RF * D16>;\n    var oa: array<MatC, RF * DV16>;\n".to_string();
        if split {
            declare.push_str("    var qla: array<MatA, RF * D16>;\n");
        }
        let parts: &[(u32, &str)] = if split {
            &[(0, "qa"), (1, "qla")]
        } else {
            &[(0, "qa")]
        };
        let mut load_q = String::new();
        for dc0 in (0..d).step_by(qch as usize) {
            let (lo, hi) = (dc0 / 16, (dc0 + qch).min(d) / 16);
            for &(part, name) in parts {
                load_q.push_str(&format!(
                    "    stage_q(tid, {dc0}u, i0, rows, q_base, {part}u, sq);
    workgroupBarrier();
    for (var f = 0u; f < RF; f++) {{
        for (var i = {lo}u; i < {hi}u; i++) {{
            {name}[f * D16 + i] = load_a_kv((sub_row0 + f * 16u) * LQ + i * 16u - {dc0}u, LQ);
        }}
    }}
    workgroupBarrier();
"
                ));
            }
        }
        // The split products' small terms (emulated products are exact in
        // f32 as on tensor cores; only the term order is kept).
        let (qk_lo, pv_lo) = if split {
            (
                "
                    s = mma(qla[f * D16 + i], load_bt_kv(c * 16u * LDKV + i * 16u, LDKV), s);
                    s = mma(qa[f * D16 + i], load_bt_kv(KV_LO + c * 16u * LDKV + i * 16u, LDKV), s);",
                "
                    oa[f * DV16 + x] = mma(load_a_p(P_LO + p_base + f * 16u * LDP + c * 16u, LDP), load_b_kv(c * 16u * LDKV + x * 16u, LDKV), oa[f * DV16 + x]);
                    oa[f * DV16 + x] = mma(pf, load_b_kv(KV_LO + c * 16u * LDKV + x * 16u, LDKV), oa[f * DV16 + x]);",
            )
        } else {
            ("", "")
        };
        let qk = format!(
            "        for (var c = 0u; c < BC16; c++) {{
            for (var f = 0u; f < RF; f++) {{
                var s = zc;
                for (var i = 0u; i < D16; i++) {{{qk_lo}
                    s = mma(qa[f * D16 + i], load_bt_kv(c * 16u * LDKV + i * 16u, LDKV), s);
                }}
                store_c_s(s, s_base + f * 16u * LDS + c * 16u, LDS);
            }}
        }}
"
        );
        let rescale = "            for (var f = 0u; f < RF; f++) {
                for (var x = 0u; x < DV16; x++) {
                    let at = s_base + f * 16u * LDS;
                    store_c_s(oa[f * DV16 + x], at, LDS);
                    workgroupBarrier();
                    scale_tile(lane, at, sub_row0 + f * 16u);
                    workgroupBarrier();
                    oa[f * DV16 + x] = load_c_s(at, LDS);
                    workgroupBarrier();
                }
            }
"
        .to_string();
        let pv = format!(
            "        for (var c = 0u; c < BC16; c++) {{
            for (var f = 0u; f < RF; f++) {{
                let pf = load_a_p(p_base + f * 16u * LDP + c * 16u, LDP);
                for (var x = 0u; x < DV16; x++) {{{pv_lo}
                    oa[f * DV16 + x] = mma(pf, load_b_kv(c * 16u * LDKV + x * 16u, LDKV), oa[f * DV16 + x]);
                }}
            }}
        }}
"
        );
        let store_o = "    for (var f = 0u; f < RF; f++) {
        let at = s_base + f * 16u * LDS;
        for (var x = 0u; x < DV16; x++) {
            store_c_s(oa[f * DV16 + x], at, LDS);
            workgroupBarrier();
            write_tile(lane, at, sub_row0 + f * 16u, i0, rows, o_base, x, o_unscale);
            workgroupBarrier();
        }
    }
"
        .to_string();
        let mut blocks = vec![
            ("declare", declare),
            ("load_q", load_q),
            ("qk", qk),
            ("rescale", rescale),
            ("pv", pv),
            ("store_o", store_o),
        ];
        blocks.extend(split_blocks(split));
        blocks
    }
}

/// The tensor-core flash kernel's `split_decl` and `split_exps` blocks: with
/// `split` (f32 inputs) the exponents' binding and the per-head exponents
/// of q, k and v with what undoes them; else zero exponents and factors of
/// 1 (the f16 kernel binds nothing more).
pub(crate) fn split_blocks(split: bool) -> [(&'static str, String); 2] {
    if split {
        [
            (
                "split_decl",
                "@group(0) @binding(13) var<storage, read> ex: array<u32>;\n".into(),
            ),
            (
                "split_exps",
                "    let eq = split_exponent(bitcast<f32>(ex[b * params.hq + h]));
    let ek = split_exponent(bitcast<f32>(ex[params.batch * params.hq + b * params.hkv + hk]));
    let ev = split_exponent(bitcast<f32>(
        ex[params.batch * (params.hq + params.hkv) + b * params.hkv + hk],
    ));
    let qk_unscale = ldexp(ldexp(1.0, -eq), -ek);
    let o_unscale = ldexp(1.0, -ev);
    // The scales as factors (2^e is a normal f32 for |e| <= 120): one
    // multiply per value where a vector ldexp cost the H200 kernel 40% of
    // its time (runs 78-85).
    let sq = ldexp(1.0, eq);
    let sk = ldexp(1.0, ek);
    let sv = ldexp(1.0, ev);
"
                .into(),
            ),
        ]
    } else {
        [
            ("split_decl", String::new()),
            (
                "split_exps",
                "    let eq = 0i;
    let ek = 0i;
    let ev = 0i;
    let qk_unscale = 1.0;
    let o_unscale = 1.0;
    let sq = 1.0;
    let sk = 1.0;
    let sv = 1.0;
"
                .into(),
            ),
        ]
    }
}

impl fmt::Display for FlashCoopTiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "coop Br={} ({} subgroups x {} rows) Bc={}",
            self.br(),
            self.subgroups,
            16 * self.rf,
            self.bc
        )
    }
}

/// The tile `shaders/attention_flash_coop.wgsl`'s constants default to
/// (W = 4, RF = 1, BC = 64 at D = Dv = 128): the blocks `Spec::new` fills
/// in for the unspecialised text.
pub const FLASH_COOP_TEXT_DEFAULT: FlashCoopTiles = FlashCoopTiles {
    subgroups: 4,
    rf: 1,
    bc: 64,
};
