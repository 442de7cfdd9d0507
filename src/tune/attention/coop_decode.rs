//! The tensor-core decode kernel's specialisation
//! (`shaders/attention_decode_coop.wgsl`): its generated blocks and splits.

use std::fmt::Write as _;

use crate::context::AdapterProfile;
use crate::dtype::DType;
use crate::kernels::{Kernel, Spec};

/// Query rows one workgroup of the tensor-core decode kernel serves (one
/// 16-row fragment of the packed rows of a KV head).
pub const DECODE_COOP_ROWS: usize = 16;

/// The kernel's generated blocks for head dims `d`, `dv`: `emulated` gives
/// loops over fragment arrays (the emulated matrix operations), else every
/// fragment is a named variable.
pub fn decode_coop_blocks(d: u32, dv: u32, emulated: bool) -> Vec<(&'static str, String)> {
    let (d16, dv16) = (d / 16, dv / 16);
    let pad = "    ";
    let pad2 = "        ";
    let pad3 = "            ";
    if emulated {
        let qk = |load: &str| {
            format!(
                "{pad2}{{
{pad2}    var s = zc;
{pad2}    for (var i = 0u; i < D16; i++) {{
{pad2}        s = mma(qa[i], {load}, s);
{pad2}    }}
{pad2}    store_c_s(s, 0u, LDS);
{pad2}}}
"
            )
        };
        let pv = |load: &str| {
            format!(
                "{pad2}{{
{pad2}    let p = load_a_p(0u, LDP);
{pad2}    for (var x = 0u; x < DV16; x++) {{
{pad2}        oa[x] = mma(p, {load}, oa[x]);
{pad2}    }}
{pad2}}}
"
            )
        };
        return vec![
            (
                "declare",
                format!(
                    "{pad}var qa: array<MatA, D16>;\n{pad}var oa: array<MatC, DV16>;\n{pad}for (var x = 0u; x < DV16; x++) {{ oa[x] = zc; }}\n"
                ),
            ),
            (
                "load_q",
                format!(
                    "{pad}for (var i = 0u; i < D16; i++) {{ qa[i] = load_a_kv(i * 16u, LDKV); }}\n"
                ),
            ),
            (
                "qk_direct",
                qk("load_bt_k(k_base + j0 * params.k_sr + i * 16u, params.k_sr)"),
            ),
            ("qk_staged", qk("load_bt_kv(i * 16u, LDKV)")),
            (
                "pv_direct",
                pv("load_b_v(v_base + j0 * params.v_sr + x * 16u, params.v_sr)"),
            ),
            ("pv_staged", pv("load_b_kv(x * 16u, LDKV)")),
            (
                "rescale",
                format!(
                    "{pad3}for (var x = 0u; x < DV16; x++) {{
{pad3}    store_c_s(oa[x], 0u, LDS);
{pad3}    workgroupBarrier();
{pad3}    scale_tile(lane);
{pad3}    workgroupBarrier();
{pad3}    oa[x] = load_c_s(0u, LDS);
{pad3}    workgroupBarrier();
{pad3}}}
"
                ),
            ),
            (
                "store",
                format!(
                    "{pad}for (var x = 0u; x < DV16; x++) {{
{pad}    store_c_s(oa[x], 0u, LDS);
{pad}    workgroupBarrier();
{pad}    write_state_tile(lane, b, hk, r0, split, x);
{pad}    workgroupBarrier();
{pad}}}
"
                ),
            ),
        ];
    }
    let mut declare = String::new();
    let mut load_q = String::new();
    for i in 0..d16 {
        writeln!(declare, "{pad}var q{i}: MatA;").unwrap();
        writeln!(load_q, "{pad}q{i} = load_a_kv({}u, LDKV);", i * 16).unwrap();
    }
    for x in 0..dv16 {
        writeln!(declare, "{pad}var o{x} = zc;").unwrap();
    }
    let qk = |load: &dyn Fn(u32) -> String| {
        let mut out = format!("{pad2}{{\n{pad2}    var s = zc;\n");
        for i in 0..d16 {
            writeln!(out, "{pad2}    let k{i} = {};", load(i * 16)).unwrap();
        }
        for i in 0..d16 {
            writeln!(out, "{pad2}    s = mma(q{i}, k{i}, s);").unwrap();
        }
        write!(out, "{pad2}    store_c_s(s, 0u, LDS);\n{pad2}}}\n").unwrap();
        out
    };
    let pv = |load: &dyn Fn(u32) -> String| {
        let mut out = format!("{pad2}{{\n{pad2}    let p = load_a_p(0u, LDP);\n");
        for x in 0..dv16 {
            writeln!(out, "{pad2}    let v{x} = {};", load(x * 16)).unwrap();
        }
        for x in 0..dv16 {
            writeln!(out, "{pad2}    o{x} = mma(p, v{x}, o{x});").unwrap();
        }
        writeln!(out, "{pad2}}}").unwrap();
        out
    };
    let mut rescale = String::new();
    let mut store = String::new();
    for x in 0..dv16 {
        write!(
            rescale,
            "{pad3}store_c_s(o{x}, 0u, LDS);
{pad3}workgroupBarrier();
{pad3}scale_tile(lane);
{pad3}workgroupBarrier();
{pad3}o{x} = load_c_s(0u, LDS);
{pad3}workgroupBarrier();
"
        )
        .unwrap();
        write!(
            store,
            "{pad}store_c_s(o{x}, 0u, LDS);
{pad}workgroupBarrier();
{pad}write_state_tile(lane, b, hk, r0, split, {x}u);
{pad}workgroupBarrier();
"
        )
        .unwrap();
    }
    vec![
        ("declare", declare),
        ("load_q", load_q),
        (
            "qk_direct",
            qk(&|c| format!("load_bt_k(k_base + j0 * params.k_sr + {c}u, params.k_sr)")),
        ),
        ("qk_staged", qk(&|c| format!("load_bt_kv({c}u, LDKV)"))),
        (
            "pv_direct",
            pv(&|c| format!("load_b_v(v_base + j0 * params.v_sr + {c}u, params.v_sr)")),
        ),
        ("pv_staged", pv(&|c| format!("load_b_kv({c}u, LDKV)"))),
        ("rescale", rescale),
        ("store", store),
    ]
}

/// The specialisation for head dims `d`, `dv` (multiples of 16 up to 256)
/// and subgroup size `sg` (`emulated`: 16 virtual lanes, emulated matrix
/// operations).
pub fn decode_coop_spec(d: usize, dv: usize, sg: u32, emulated: bool) -> Spec {
    let kernel = if emulated {
        Kernel::AttentionDecodeCoopEmulated
    } else {
        Kernel::AttentionDecodeCoop
    };
    let mut spec = Spec::new(kernel)
        .dtype(DType::F16)
        .constant("SG", if emulated { 16 } else { sg })
        .constant("D", d as u32)
        .constant("DV", dv as u32);
    for (name, text) in decode_coop_blocks(d as u32, dv as u32, emulated) {
        spec = spec.block(name, text);
    }
    spec
}

/// Workgroup memory of the kernel in bytes.
pub const fn decode_coop_workgroup_bytes(d: u32, dv: u32) -> u32 {
    let dx = if d > dv { d } else { dv };
    2 * 16 * (dx + 8) + 4 * 16 * 20 + 2 * 16 * 24 + 4 * 32 + 16
}

/// Whether the adapter runs the kernel (`emulated`: the emulated variant)
/// for head dims `d`, `dv`.
pub fn decode_coop_fits(p: &AdapterProfile, d: usize, dv: usize, emulated: bool) -> bool {
    let dim_ok = |x: usize| (16..=super::MAX_FLASH_COOP_DIM).contains(&x) && x.is_multiple_of(16);
    let sg = if emulated { 16 } else { p.subgroup_max_size };
    let hw = if emulated {
        p.shader_f16 && p.subgroups
    } else {
        crate::tune::has_coop_f16(p)
    };
    hw && dim_ok(d)
        && dim_ok(dv)
        && sg >= 16
        && sg.is_multiple_of(16)
        && sg <= p.max_invocations
        && sg <= p.max_workgroup_size_x
        && p.max_storage_buffers_per_stage >= 6
        && decode_coop_workgroup_bytes(d as u32, dv as u32) <= p.max_workgroup_storage
}

/// Key splits of the kernel: enough one-subgroup workgroups for about 8
/// per compute unit (`workgroups` is the grid without splitting), each
/// split a multiple of 16 keys and at least 64 long.
pub fn decode_coop_splits(p: &AdapterProfile, workgroups: u64, sk: usize) -> usize {
    let target = u64::from(p.compute_units.max(1)) * 8;
    let want = target.div_ceil(workgroups.max(1)).max(1) as usize;
    want.min(sk.div_ceil(64)).max(1)
}
