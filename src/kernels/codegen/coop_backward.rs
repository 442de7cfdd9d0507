//! The tensor-core attention backward's tile shape and generated blocks
//! (`shaders/attention_bwd_coop_dkdv.wgsl`, `shaders/attention_bwd_coop_dq.wgsl`).

use std::fmt;
use std::fmt::Write as _;

use crate::kernels::Kernel;

/// Which of the two tensor-core backward kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BackwardCoopPass {
    /// dK and dV: a workgroup owns `16 * subgroups` keys and walks query blocks.
    DkDv,
    /// dQ: a workgroup owns `16 * subgroups` query rows and walks key blocks.
    Dq,
}

/// Tile shape of the tensor-core backward kernels: a workgroup is
/// `subgroups` subgroups, each owning 16 keys (dK/dV) or 16 query rows
/// (dQ) whose operands it keeps in cooperative matrices, and streams the
/// other side `block` rows at a time through workgroup memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct BackwardCoopTiles {
    /// Subgroups per workgroup (W).
    pub subgroups: u32,
    /// Query rows (dK/dV) or keys (dQ) per streamed block, a multiple of 16.
    pub block: u32,
}

impl BackwardCoopTiles {
    /// Why these tiles cannot be the tensor-core backward kernels', naming
    /// the field.
    pub fn invalid_reason(self) -> Option<String> {
        if self.subgroups == 0 {
            return Some("tensor-core backward tiles subgroups = 0 (must be at least 1)".into());
        }
        if self.block == 0 || !self.block.is_multiple_of(16) {
            return Some(format!(
                "tensor-core backward tiles block = {} (must be a positive multiple of 16)",
                self.block
            ));
        }
        None
    }
}

/// The fragment names and operands of one pass: (staged operand 1, its
/// dim, staged operand 2, its dim) and the accumulators.
struct PassText {
    /// Staging of the register operands: (op, rows limit, base, stride, dim, prefix).
    staged: [(
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
    ); 2],
    /// Gradient products: (p_sh tile 0 | 1, accumulator prefix, streamed operand 0 | 1, dim).
    grads: &'static [(u32, &'static str, u32, &'static str)],
    /// Stores: (accumulator prefix, dim, output binding, limit, base, stride).
    stores: &'static [(
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
        &'static str,
    )],
}

impl BackwardCoopPass {
    fn text(self) -> PassText {
        match self {
            BackwardCoopPass::DkDv => PassText {
                staged: [
                    ("OP_K", "keys", "k_base", "params.k_sr", "D", "a"),
                    ("OP_V", "keys", "v_base", "params.v_sr", "DV", "b"),
                ],
                // dV += P^T dO, dK += dS^T Q.
                grads: &[(0, "g2_", 1, "DV"), (1, "g1_", 0, "D")],
                stores: &[
                    ("g1_", "D", "dk_out", "params.sk", "k_base", "params.k_sr"),
                    ("g2_", "DV", "dv_out", "params.sk", "v_base", "params.v_sr"),
                ],
            },
            BackwardCoopPass::Dq => PassText {
                staged: [
                    ("OP_Q", "rows", "q_base", "params.q_sr", "D", "a"),
                    ("OP_DO", "rows", "o_base", "params.o_sr", "DV", "b"),
                ],
                // dQ += dS K.
                grads: &[(0, "g1_", 0, "D")],
                stores: &[("g1_", "D", "dq_out", "params.sq", "q_base", "params.q_sr")],
            },
        }
    }

    /// The streamed block's row count constant in the shader.
    pub(crate) fn block_const(self) -> &'static str {
        match self {
            BackwardCoopPass::DkDv => "BQ",
            BackwardCoopPass::Dq => "BC",
        }
    }

    fn row0(self) -> &'static str {
        match self {
            BackwardCoopPass::DkDv => "j0",
            BackwardCoopPass::Dq => "i0",
        }
    }

    /// Row stride of the streamed blocks in kv_sh.
    fn ld(self) -> &'static str {
        match self {
            BackwardCoopPass::DkDv => "LDQ",
            BackwardCoopPass::Dq => "LDK",
        }
    }

    /// The marker name of the one-time staging block.
    fn load_marker(self) -> &'static str {
        match self {
            BackwardCoopPass::DkDv => "load_kv",
            BackwardCoopPass::Dq => "load_qdo",
        }
    }

    pub(crate) fn kernel(self, emulated: bool) -> Kernel {
        match (self, emulated) {
            (BackwardCoopPass::DkDv, false) => Kernel::AttentionBwdCoopDkDv,
            (BackwardCoopPass::DkDv, true) => Kernel::AttentionBwdCoopDkDvEmulated,
            (BackwardCoopPass::Dq, false) => Kernel::AttentionBwdCoopDq,
            (BackwardCoopPass::Dq, true) => Kernel::AttentionBwdCoopDqEmulated,
        }
    }
}

/// The tile the shaders' text constants default to (W = 4, 16-row blocks
/// at D = Dv = 128): the blocks `Spec::new` fills in.
pub const BACKWARD_COOP_TEXT_DEFAULT: BackwardCoopTiles = BackwardCoopTiles {
    subgroups: 4,
    block: 16,
};

impl BackwardCoopTiles {
    /// Keys (dK/dV) or query rows (dQ) per workgroup.
    pub const fn rows(self) -> u32 {
        16 * self.subgroups
    }

    /// Invocations per workgroup for subgroup size `sg`.
    pub const fn threads(self, sg: u32) -> u32 {
        self.subgroups * sg
    }

    /// Halves of the shaders' `kv_sh`: two streamed blocks ([block][max(D,
    /// Dv) + 8] each) or 24 halves per owned row (the least staging pass).
    const fn kv_elems(self, d: u32, dv: u32) -> u32 {
        let dx = if d > dv { d } else { dv };
        let blocks = 2 * self.block * (dx + 8);
        let least = self.rows() * 24;
        if blocks > least { blocks } else { least }
    }

    /// Columns staged per pass when loading the register operands (the
    /// shaders' `CH`, checked there by a `const_assert`).
    pub const fn ch(self, d: u32, dv: u32) -> u32 {
        let dx = if d > dv { d } else { dv };
        let fit = (self.kv_elems(d, dv) / self.rows() - 8) / 16 * 16;
        if dx < fit { dx } else { fit }
    }

    /// Workgroup memory in bytes of `pass` for head dims `d`, `dv`.
    pub const fn workgroup_bytes(self, pass: BackwardCoopPass, d: u32, dv: u32) -> u32 {
        // dK/dV: P^T and dS^T per subgroup, and the block's (lse2, Delta).
        let (p_rows, stats) = match pass {
            BackwardCoopPass::DkDv => (32, 8 * self.block),
            BackwardCoopPass::Dq => (16, 0),
        };
        2 * self.kv_elems(d, dv)
            + 4 * self.subgroups * 32 * (self.block + 8)
            + 2 * self.subgroups * p_rows * (self.block + 8)
            + stats
    }

    /// The generated blocks of `pass` for head dims `d`, `dv`: every loop
    /// over fragments unrolled, each fragment a named variable (as
    /// `super::FlashCoopTiles::blocks`).
    pub fn blocks(self, pass: BackwardCoopPass, d: u32, dv: u32) -> Vec<(&'static str, String)> {
        let t = pass.text();
        let dim = |name: &str| if name == "D" { d / 16 } else { dv / 16 };
        let (pad, pad2) = ("    ", "            ");
        let mut declare = String::new();
        for (.., dname, prefix) in t.staged {
            for i in 0..dim(dname) {
                writeln!(declare, "{pad}var {prefix}{i}: MatA;").unwrap();
            }
        }
        for (acc, dname, ..) in t.stores {
            for i in 0..dim(dname) {
                writeln!(declare, "{pad}var {acc}{i} = zc;").unwrap();
            }
        }
        let ch = self.ch(d, dv);
        let mut load = String::new();
        for (op, limit, base, stride, dname, prefix) in t.staged {
            let n = dim(dname) * 16;
            for dc0 in (0..n).step_by(ch as usize) {
                let width = ch.min(n - dc0);
                writeln!(
                    load,
                    "{pad}stage_block(tid, {op}, {}u, {width}u, {}, {limit}, {base}, {stride}, {dc0}u, {dname}, LCH);",
                    self.rows(),
                    pass.row0()
                )
                .unwrap();
                writeln!(load, "{pad}workgroupBarrier();").unwrap();
                for i in dc0 / 16..(dc0 + width) / 16 {
                    writeln!(
                        load,
                        "{pad}{prefix}{i} = load_a_kv(sub * 16u * LCH + {}u, LCH);",
                        i * 16 - dc0
                    )
                    .unwrap();
                }
                writeln!(load, "{pad}workgroupBarrier();").unwrap();
            }
        }
        let (blk, ld) = (pass.block_const(), pass.ld());
        let mut products = String::new();
        for c in 0..self.block / 16 {
            writeln!(products, "{pad2}{{").unwrap();
            for (tile, (.., dname, prefix)) in t.staged.iter().enumerate() {
                let s = format!("s{tile}");
                writeln!(products, "{pad2}    var {s} = zc;").unwrap();
                for i in 0..dim(dname) {
                    let row = if tile == 0 {
                        format!("{}u", c * 16)
                    } else {
                        format!("({blk} + {}u)", c * 16)
                    };
                    writeln!(
                        products,
                        "{pad2}    {s} = mma({prefix}{i}, load_bt_kv({row} * {ld} + {}u, {ld}), {s});",
                        i * 16
                    )
                    .unwrap();
                }
                writeln!(
                    products,
                    "{pad2}    store_c_s({s}, s_base + {}u * LDS + {}u, LDS);",
                    tile * 16,
                    c * 16
                )
                .unwrap();
            }
            writeln!(products, "{pad2}}}").unwrap();
        }
        let mut grads = String::new();
        for c in 0..self.block / 16 {
            writeln!(grads, "{pad2}{{").unwrap();
            for &(ptile, acc, src, dname) in t.grads {
                writeln!(
                    grads,
                    "{pad2}    let pa{ptile} = load_a_p(p_base + {}u * LDP + {}u, LDP);",
                    ptile * 16,
                    c * 16
                )
                .unwrap();
                let row = if src == 0 {
                    format!("{}u", c * 16)
                } else {
                    format!("({blk} + {}u)", c * 16)
                };
                for i in 0..dim(dname) {
                    writeln!(
                        grads,
                        "{pad2}    {acc}{i} = mma(pa{ptile}, load_b_kv({row} * {ld} + {}u, {ld}), {acc}{i});",
                        i * 16
                    )
                    .unwrap();
                }
            }
            writeln!(grads, "{pad2}}}").unwrap();
        }
        let mut store = String::new();
        for &(acc, dname, out, limit, base, stride) in t.stores {
            for i in 0..dim(dname) {
                writeln!(store, "{pad}store_c_s({acc}{i}, s_base, LDS);").unwrap();
                store.push_str(&write_tile(
                    pad,
                    out,
                    limit,
                    base,
                    stride,
                    &format!("{}u", i * 16),
                ));
            }
        }
        vec![
            ("declare", declare),
            (pass.load_marker(), load),
            ("products", products),
            ("grads", grads),
            ("store", store),
        ]
    }

    /// The emulated kernels' blocks: the same algorithm with the fragments
    /// in arrays walked by loops (unrolled emulated matrices make shaders
    /// llvmpipe takes minutes to compile).
    pub fn blocks_looped(
        self,
        pass: BackwardCoopPass,
        d: u32,
        dv: u32,
    ) -> Vec<(&'static str, String)> {
        let t = pass.text();
        let mut declare = String::new();
        for (.., dname, prefix) in t.staged {
            writeln!(declare, "    var {prefix}a: array<MatA, {dname}16>;").unwrap();
        }
        for (acc, dname, ..) in t.stores {
            writeln!(
                declare,
                "    var {acc}a: array<MatC, {dname}16>;\n    for (var i = 0u; i < {dname}16; i++) {{ {acc}a[i] = zc; }}"
            )
            .unwrap();
        }
        let ch = self.ch(d, dv);
        let dims = |name: &str| if name == "D" { d } else { dv };
        let mut load = String::new();
        for (op, limit, base, stride, dname, prefix) in t.staged {
            let n = dims(dname);
            for dc0 in (0..n).step_by(ch as usize) {
                let width = ch.min(n - dc0);
                let (lo, hi) = (dc0 / 16, (dc0 + width) / 16);
                write!(
                    load,
                    "    stage_block(tid, {op}, {rows}u, {width}u, {row0}, {limit}, {base}, {stride}, {dc0}u, {dname}, LCH);
    workgroupBarrier();
    for (var i = {lo}u; i < {hi}u; i++) {{
        {prefix}a[i] = load_a_kv(sub * 16u * LCH + i * 16u - {dc0}u, LCH);
    }}
    workgroupBarrier();
",
                    rows = self.rows(),
                    row0 = pass.row0()
                )
                .unwrap();
            }
        }
        let (blk, ld) = (pass.block_const(), pass.ld());
        let mut products = format!("        for (var c = 0u; c < {blk} / 16u; c++) {{\n");
        for (tile, (.., dname, prefix)) in t.staged.iter().enumerate() {
            let row = if tile == 0 {
                "c * 16u".to_string()
            } else {
                format!("({blk} + c * 16u)")
            };
            write!(
                products,
                "            var s{tile} = zc;
            for (var i = 0u; i < {dname}16; i++) {{
                s{tile} = mma({prefix}a[i], load_bt_kv({row} * {ld} + i * 16u, {ld}), s{tile});
            }}
            store_c_s(s{tile}, s_base + {}u * LDS + c * 16u, LDS);
",
                tile * 16
            )
            .unwrap();
        }
        products.push_str("        }\n");
        let mut grads = format!("        for (var c = 0u; c < {blk} / 16u; c++) {{\n");
        for &(ptile, acc, src, dname) in t.grads {
            let row = if src == 0 {
                "c * 16u".to_string()
            } else {
                format!("({blk} + c * 16u)")
            };
            write!(
                grads,
                "            let pa{ptile} = load_a_p(p_base + {}u * LDP + c * 16u, LDP);
            for (var i = 0u; i < {dname}16; i++) {{
                {acc}a[i] = mma(pa{ptile}, load_b_kv({row} * {ld} + i * 16u, {ld}), {acc}a[i]);
            }}
",
                ptile * 16
            )
            .unwrap();
        }
        grads.push_str("        }\n");
        let mut store = String::new();
        for &(acc, dname, out, limit, base, stride) in t.stores {
            writeln!(store, "    for (var i = 0u; i < {dname}16; i++) {{").unwrap();
            writeln!(store, "        store_c_s({acc}a[i], s_base, LDS);").unwrap();
            store.push_str(&write_tile("        ", out, limit, base, stride, "i * 16u"));
            writeln!(store, "    }}").unwrap();
        }
        vec![
            ("declare", declare),
            (pass.load_marker(), load),
            ("products", products),
            ("grads", grads),
            ("store", store),
        ]
    }
}

/// The body of the shaders' `sub_barrier()`.
pub(crate) fn sub_barrier_text(subgroup: bool) -> String {
    let call = if subgroup {
        "subgroupBarrier"
    } else {
        "workgroupBarrier"
    };
    format!("    {call}();\n")
}

/// WGSL writing the subgroup's 16 x 16 f32 tile at `s_sh[s_base]` (rows of
/// LDS, stored just before) to rows `row0 ..` (those below `limit`) and
/// columns `col ..` of the output binding `out` (element base, row stride)
/// as Elem, between barriers. One loop per output, since WGSL functions
/// cannot take storage pointers and a switch over the outputs would bind
/// all three in each kernel.
fn write_tile(pad: &str, out: &str, limit: &str, base: &str, stride: &str, col: &str) -> String {
    format!(
        "{pad}workgroupBarrier();
{pad}for (var e = lane; e < 64u; e += SG) {{
{pad}    let r = row0 + e / 4u;
{pad}    if r < {limit} {{
{pad}        let x = s_sh[(s_base + (e / 4u) * LDS) / 4u + e % 4u];
{pad}        let dst = {base} + r * {stride} + {col} + (e % 4u) * 4u;
{pad}        {out}[dst] = Elem(x.x);
{pad}        {out}[dst + 1u] = Elem(x.y);
{pad}        {out}[dst + 2u] = Elem(x.z);
{pad}        {out}[dst + 3u] = Elem(x.w);
{pad}    }}
{pad}}}
{pad}workgroupBarrier();
"
    )
}

impl fmt::Display for BackwardCoopTiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "coop {} subgroups x 16 rows, blocks of {}",
            self.subgroups, self.block
        )
    }
}

/// The text-default blocks of a backward coop kernel (for `Spec::new`).
pub(crate) fn default_blocks(kernel: Kernel) -> Option<Vec<(&'static str, String)>> {
    let t = BACKWARD_COOP_TEXT_DEFAULT;
    let mut blocks = match kernel {
        Kernel::AttentionBwdCoopDkDv => t.blocks(BackwardCoopPass::DkDv, 128, 128),
        Kernel::AttentionBwdCoopDq => t.blocks(BackwardCoopPass::Dq, 128, 128),
        Kernel::AttentionBwdCoopDkDvEmulated => t.blocks_looped(BackwardCoopPass::DkDv, 128, 128),
        Kernel::AttentionBwdCoopDqEmulated => t.blocks_looped(BackwardCoopPass::Dq, 128, 128),
        _ => return None,
    };
    blocks.push(("sub_barrier", sub_barrier_text(false)));
    Some(blocks)
}
