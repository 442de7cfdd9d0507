//! Generated blocks of the tensor-core matmul (`shaders/matmul_coop.wgsl`):
//! the plain kernel's empty blocks, the f32 split form's binding,
//! exponents and per-slice products, and the quantised B operand's parts.

use crate::kernels::registry::{MATMUL_COOP_QUANT, QUANT_B_OPERAND, QUANT_CODEC, QUANT_DECODE};

/// `shaders/matmul_coop.wgsl`'s generated blocks without the split or a
/// quantised B: no extra binding, no exponents, no extra products.
pub(crate) const COOP_PLAIN_BLOCKS: [(&str, &str); 7] = [
    ("split_decl", ""),
    ("split_exps", ""),
    ("split_products", ""),
    ("quant_decl", ""),
    ("quant_run", ""),
    ("quant_fetch", ""),
    ("quant_put", ""),
];

/// The blocks that make B a quantised weight (`shaders/matmul_coop_quant.wgsl`):
/// format `format` (quant_decode.wgsl's code), blocks of `block` elements
/// (a multiple of 8) of `words` packed words, blocked down the columns of
/// a `[K, N]` weight (`cols`) or along the rows of an `[N, K]` one.
pub(crate) fn coop_quant_blocks(
    format: u32,
    block: u32,
    words: u32,
    cols: bool,
) -> [(&'static str, String); 4] {
    // ZS = 0: scales and zero points read apart (the paired word of
    // quant_scale_check.wgsl lost on this kernel).
    let consts = format!(
        "const FORMAT: u32 = {format}u;\nconst BLK: u32 = {block}u;\nconst WPB: u32 = {words}u;\nconst COLS: u32 = {}u;\nconst ZS: u32 = 0u;\n",
        u32::from(cols)
    );
    [
        ("quant_decl", format!("{consts}{MATMUL_COOP_QUANT}{QUANT_B_OPERAND}{QUANT_DECODE}{QUANT_CODEC}")),
        (
            "quant_run",
            "        return vec3<u32>(quant_word(gn, gk), gk, u32(inside));\n".into(),
        ),
        ("quant_fetch", "    return quant_fetch(r.x);\n".into()),
        (
            "quant_put",
            "                quant_put((i / B_RUNS) * LDB + (i % B_RUNS) * 8u, r, pb[j]);\n                continue;\n"
                .into(),
        ),
    ]
}

/// The split's binding: the largest finite |A| and |B| as bits
/// (matmul_split_scale.wgsl).
pub(crate) const COOP_SPLIT_DECL: &str =
    "@group(0) @binding(9) var<storage, read> split_max: array<u32, 2>;\n";

/// The split's exponents (uniform: every invocation reads the same two
/// words).
pub(crate) const COOP_SPLIT_EXPS: &str = "    let ea = split_exponent(bitcast<f32>(split_max[0]));
    let eb = split_exponent(bitcast<f32>(split_max[1]));
    unscale = vec2<i32>(ea, eb);
    split_scale = vec2<f32>(ldexp(1.0, ea), ldexp(1.0, eb));
    var zc: coop_mat16x16<f32, C>;
";

/// The split's products of one 16-wide k slice, for `frags_n` B fragments
/// per subgroup: per accumulator tile, lo*hi + hi*lo + hi*hi into a zeroed
/// fragment, added to the accumulator in plain f32 (the kernel's common
/// hi*hi products are skipped). The tensor cores truncate when they
/// accumulate: three products a slice into the running sum made the
/// error grow with K, 3.5-7x the tiled kernel's at K 1024-4096 (H200,
/// runs 70-77); summed per slice with rounded adds it stays near it.
pub(crate) fn coop_split_products(frags_n: u32) -> String {
    use std::fmt::Write as _;
    let pad = "                ";
    let mut out = String::new();
    for i in 0..4 {
        let row = if i == 0 {
            "wr".to_string()
        } else {
            format!("wr + {}u", 16 * i)
        };
        writeln!(out, "{pad}let ah{i} = frag_a({row}, kk);").unwrap();
        writeln!(out, "{pad}let al{i} = frag_a_lo({row}, kk);").unwrap();
    }
    for j in 0..frags_n {
        let col = if j == 0 {
            "wc".to_string()
        } else {
            format!("wc + {}u", 16 * j)
        };
        writeln!(out, "{pad}let bh{j} = frag_b(kk, {col});").unwrap();
        writeln!(out, "{pad}let bl{j} = frag_b_lo(kk, {col});").unwrap();
    }
    for i in 0..4 {
        for j in 0..frags_n {
            writeln!(
                out,
                "{pad}let t{i}{j} = coopMultiplyAdd(ah{i}, bh{j}, coopMultiplyAdd(ah{i}, bl{j}, coopMultiplyAdd(al{i}, bh{j}, zc)));"
            )
            .unwrap();
            writeln!(out, "{pad}acc{i}{j} = acc{i}{j} + t{i}{j};").unwrap();
        }
    }
    writeln!(out, "{pad}continue;").unwrap();
    out
}
