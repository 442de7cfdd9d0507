//! Generated blocks of the tensor-core decode kernel
//! (`shaders/attention_decode_coop.wgsl`): every fragment a named variable,
//! or loops over fragment arrays for the emulated matrix operations.

use std::fmt::Write as _;

/// The kernel's generated blocks for `rf` row fragments and head dims `d`,
/// `dv`: `emulated` gives loops over fragment arrays (the emulated matrix
/// operations), else every fragment is a named variable.
pub fn decode_coop_blocks(rf: u32, d: u32, dv: u32, emulated: bool) -> Vec<(&'static str, String)> {
    if emulated {
        return decode_coop_blocks_looped();
    }
    let (d16, dv16) = (d / 16, dv / 16);
    let pad = "    ";
    let pad2 = "        ";
    let pad3 = "            ";
    let mut declare = String::new();
    let mut load_q = String::new();
    for f in 0..rf {
        for i in 0..d16 {
            writeln!(declare, "{pad}var q{f}_{i}: MatA;").unwrap();
            writeln!(
                load_q,
                "{pad}q{f}_{i} = load_a_kv({}u * LDKV + {}u, LDKV);",
                f * 16,
                i * 16
            )
            .unwrap();
        }
        for x in 0..dv16 {
            writeln!(declare, "{pad}var o{f}_{x} = zc;").unwrap();
        }
    }
    let qk = |load: &dyn Fn(u32) -> String| {
        let mut out = format!("{pad2}{{\n");
        for f in 0..rf {
            writeln!(out, "{pad2}    var s{f} = zc;").unwrap();
        }
        for i in 0..d16 {
            writeln!(out, "{pad2}    let k{i} = {};", load(i * 16)).unwrap();
        }
        for i in 0..d16 {
            for f in 0..rf {
                writeln!(out, "{pad2}    s{f} = mma(q{f}_{i}, k{i}, s{f});").unwrap();
            }
        }
        for f in 0..rf {
            writeln!(out, "{pad2}    store_c_s(s{f}, {}u * LDS, LDS);", f * 16).unwrap();
        }
        writeln!(out, "{pad2}}}").unwrap();
        out
    };
    let pv = |load: &dyn Fn(u32) -> String| {
        let mut out = format!("{pad2}{{\n");
        for f in 0..rf {
            writeln!(
                out,
                "{pad2}    let p{f} = load_a_p({}u * LDP, LDP);",
                f * 16
            )
            .unwrap();
        }
        for x in 0..dv16 {
            writeln!(out, "{pad2}    let v{x} = {};", load(x * 16)).unwrap();
        }
        for x in 0..dv16 {
            for f in 0..rf {
                writeln!(out, "{pad2}    o{f}_{x} = mma(p{f}, v{x}, o{f}_{x});").unwrap();
            }
        }
        writeln!(out, "{pad2}}}").unwrap();
        out
    };
    let mut rescale = String::new();
    let mut store = String::new();
    for x in 0..dv16 {
        for f in 0..rf {
            writeln!(
                rescale,
                "{pad3}store_c_s(o{f}_{x}, {}u * LDS, LDS);",
                f * 16
            )
            .unwrap();
            writeln!(store, "{pad}store_c_s(o{f}_{x}, {}u * LDS, LDS);", f * 16).unwrap();
        }
        writeln!(rescale, "{pad3}workgroupBarrier();").unwrap();
        writeln!(store, "{pad}workgroupBarrier();").unwrap();
        for f in 0..rf {
            writeln!(rescale, "{pad3}scale_tile(lane, {f}u);").unwrap();
            writeln!(
                store,
                "{pad}write_state_tile(lane, b, hk, r0, split, {f}u, {x}u);"
            )
            .unwrap();
        }
        writeln!(rescale, "{pad3}workgroupBarrier();").unwrap();
        writeln!(store, "{pad}workgroupBarrier();").unwrap();
        for f in 0..rf {
            writeln!(
                rescale,
                "{pad3}o{f}_{x} = load_c_s({}u * LDS, LDS);",
                f * 16
            )
            .unwrap();
        }
        writeln!(rescale, "{pad3}workgroupBarrier();").unwrap();
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

/// The emulated kernel's blocks: loops over fragment arrays (RF, D16 and
/// DV16 are the shader's constants).
fn decode_coop_blocks_looped() -> Vec<(&'static str, String)> {
    let qk = |load: &str| {
        format!(
            "        for (var f = 0u; f < RF; f++) {{
            var s = zc;
            for (var i = 0u; i < D16; i++) {{
                s = mma(qa[f * D16 + i], {load}, s);
            }}
            store_c_s(s, f * 16u * LDS, LDS);
        }}
"
        )
    };
    let pv = |load: &str| {
        format!(
            "        for (var f = 0u; f < RF; f++) {{
            let p = load_a_p(f * 16u * LDP, LDP);
            for (var x = 0u; x < DV16; x++) {{
                oa[f * DV16 + x] = mma(p, {load}, oa[f * DV16 + x]);
            }}
        }}
"
        )
    };
    vec![
        (
            "declare",
            "    var qa: array<MatA, RF * D16>;
    var oa: array<MatC, RF * DV16>;
    for (var x = 0u; x < RF * DV16; x++) { oa[x] = zc; }
"
            .to_string(),
        ),
        (
            "load_q",
            "    for (var f = 0u; f < RF; f++) {
        for (var i = 0u; i < D16; i++) { qa[f * D16 + i] = load_a_kv(f * 16u * LDKV + i * 16u, LDKV); }
    }
"
            .to_string(),
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
            "            for (var f = 0u; f < RF; f++) {
                for (var x = 0u; x < DV16; x++) {
                    store_c_s(oa[f * DV16 + x], f * 16u * LDS, LDS);
                    workgroupBarrier();
                    scale_tile(lane, f);
                    workgroupBarrier();
                    oa[f * DV16 + x] = load_c_s(f * 16u * LDS, LDS);
                    workgroupBarrier();
                }
            }
"
            .to_string(),
        ),
        (
            "store",
            "    for (var f = 0u; f < RF; f++) {
        for (var x = 0u; x < DV16; x++) {
            store_c_s(oa[f * DV16 + x], f * 16u * LDS, LDS);
            workgroupBarrier();
            write_state_tile(lane, b, hk, r0, split, f, x);
            workgroupBarrier();
        }
    }
"
            .to_string(),
        ),
    ]
}
