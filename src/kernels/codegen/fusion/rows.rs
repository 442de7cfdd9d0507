//! Expressions fused into the row kernels (reductions, softmax, norms).
//!
//! The row kernels read their input only through the load hook part
//! (`shaders/rowops_load.wgsl`: `load_x`, `load_x4`) and write their row
//! output only through the store hook part (`shaders/rowops_store.wgsl`:
//! `store_y`, `store_y4`). This module generates both parts from
//! expressions:
//!
//! - **load** (`x`): the row kernel's input is an elementwise expression of
//!   tensors and scalars, computed on the fly as the kernel loads each chunk
//!   (`sum(x*x)`, `softmax(x*scale + mask)`, `rms_norm(x + residual)`);
//! - **store** (`epilogue`): an expression of [`Expr::acc`] (standing for
//!   the row op's f32 result at that element) and tensors of the output's
//!   shape or broadcast to it, applied before the store
//!   (`gelu(layer_norm(x))`, `softmax(x) * dropout_mask`).
//!
//! Both expressions are lowered together (one SSA list, one constants
//! buffer, one table of tensors: a tensor read by both is bound once) and
//! indexed as the elementwise kernels index theirs: the flat element index
//! `row * params.n + col` is decomposed into 4-D coordinates of the result
//! shape and dotted with each tensor's broadcast strides.
//!
//! # Bindings (free in every row kernel: 0-4 are theirs)
//! 5 = uniform `ew_p: array<vec4<u32>>` laid out as the elementwise
//! kernels' (`[0]` = units, elements, NaN bits, +inf bits; `[1]` = result
//! dims; `[2 + j]` = strides of leaf `j`), 6 = `ew_k` constants (`array<f32>`,
//! only when the expressions have scalars), `7 + j` = tensor leaf `j`. The
//! generated store part re-declares the output `y` at binding 2.
//!
//! # Paths
//! When the row kernel uses vector chunks (`VEC == 4`, the row length a
//! multiple of 4) and every leaf allows it (the rules of the elementwise
//! vec4 path), the math is `vec4<f32>` (`V`), one 16-byte load per
//! contiguous input; otherwise scalar, `load_x4` assembling four `load_x`.
//! The hook functions the kernel does not call on a path (`load_x` when
//! `VEC == 4`) are still correct: they compute their element through the
//! other path.
//!
//! # Bounds (why the spliced modules stay trusted)
//! The row kernels are compiled without wgpu's runtime bounds checks
//! (`Kernel::trusted`). The generated parts keep that sound: they clamp
//! `row` below `params.rows` and `col` below `params.n` (two `min`s per
//! chunk; the plans make `rows * n` the result's element count), so every
//! element index they compute is inside the result and a leaf's offset
//! (coordinates below the result dims dotted with its own strides) stays
//! below its own element count whatever `row`/`col` a caller passes; scalar
//! constants are read at
//! indices fixed in the text, below the buffer's length; the store writes
//! `y` at the element the kernel names, exactly as the stock hook does
//! (callers guarantee `row < rows`, `col < n`). `WGTILE_CHECKED_SHADERS=1`
//! compiles them checked, as every other kernel.

use std::fmt::Write as _;

use super::{
    Access, BF16_PACK, BF16_UNPACK, InputDesc, Leaf, Lowered, Op, broadcast, helpers_text,
    input_elem, key_of, load_code, lower_roots, plan_access, unary_code,
};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::expr::Expr;

/// Binding of the generated parts' uniform (`ew_p`).
pub const ROW_UNIFORM_BINDING: u32 = 5;
/// Binding of the generated parts' scalar constants (`ew_k`).
pub const ROW_CONSTANTS_BINDING: u32 = 6;
/// Binding of tensor leaf 0; leaf `j` is at `ROW_FIRST_INPUT_BINDING + j`.
pub const ROW_FIRST_INPUT_BINDING: u32 = 7;

/// Generated load (and store) parts for a row kernel.
#[derive(Clone, Debug)]
pub struct RowHooks {
    /// Canonical structure key: everything the text depends on (path, dtypes,
    /// access kinds, SSA lists); scalar values and shapes are runtime data.
    pub key: String,
    /// WGSL replacing `shaders/rowops_load.wgsl` (declarations, helpers,
    /// `load_x`, `load_x4`).
    pub load: String,
    /// WGSL replacing `shaders/rowops_store.wgsl` (`y`, `store_y`,
    /// `store_y4`), when there is an epilogue.
    pub store: Option<String>,
    /// Whether the math is `vec4<f32>`.
    pub vec4: bool,
    /// Whether the parts read the uniform (binding 5 is in the layout).
    pub uniform: bool,
    /// Whether the parts use `f16` (the module needs `enable f16;`).
    pub f16: bool,
    /// The leaves in binding order (the accumulator leaf, if any, has no binding).
    pub inputs: Vec<InputDesc>,
    /// Number of scalar constants.
    pub constants: usize,
    /// The load expression's result dtype (the row op's output dtype).
    pub dtype: DType,
    /// The load expression's result shape.
    pub shape: Vec<usize>,
}

/// The load expression and the optional epilogue lowered together.
pub(crate) struct RowLowered {
    pub(crate) lowered: Lowered,
    pub(crate) epilogue: bool,
    /// `Display` of the load expression and of the epilogue.
    pub(crate) names: Vec<String>,
}

pub(crate) fn lower_rows(x: &Expr, epilogue: Option<&Expr>) -> Result<RowLowered> {
    let exprs: Vec<Expr> = std::iter::once(x.clone())
        .chain(epilogue.cloned())
        .collect();
    let (lowered, shapes) = lower_roots(&exprs, false)?;
    let acc_leaf = lowered.leaves.iter().position(|l| matches!(l, Leaf::Acc));
    if let Some(a) = acc_leaf
        && lowered.leaves_of(lowered.roots[0]).contains(&a)
    {
        return Err(Error::InvalidArgument(
            "Expr::acc() stands for the row op's result: use it in the epilogue, not its input"
                .into(),
        ));
    }
    let shape = shapes[0].clone();
    if let Some(epi) = shapes.get(1) {
        let joint = broadcast(&shape, epi).map_err(|_| epilogue_shape_error(&shape, epi))?;
        if joint != shape {
            return Err(epilogue_shape_error(&shape, epi));
        }
    }
    for leaf in &lowered.leaves {
        if let Leaf::Tensor(t) = leaf {
            t.require_contiguous("a fused row-op expression")?;
        }
    }
    Ok(RowLowered {
        lowered,
        epilogue: epilogue.is_some(),
        names: exprs.iter().map(|e| e.to_string()).collect(),
    })
}

fn epilogue_shape_error(shape: &[usize], epi: &[usize]) -> Error {
    Error::shape(
        "row-op epilogue",
        shape,
        epi,
        "the epilogue's tensors must broadcast to the row op's output shape (left) without \
         enlarging it",
    )
}

/// Whether the row kernel writes a result of dtype `result` as bf16 itself
/// (its store part packs each chunk's 4 values into 2 words, one writer per
/// word: the chunks must be vectors, `row_vec4`); elsewhere a bf16 result
/// is written as f32 and rounded by a cast behind the kernel.
pub(crate) fn row_writes_bf16(result: DType, row_vec4: bool) -> bool {
    result == DType::BF16 && row_vec4
}

/// Generates the load part (and the store part when `epilogue` is given or,
/// for a kernel with a store hook part (`store_part`), the result is
/// written as bf16: [`row_writes_bf16`]) for
/// a row kernel whose chunks are vectors when `row_vec4` (`VEC == 4`: the row
/// length is a multiple of 4). Leaves may be tensors or [`Expr::input`]
/// symbols (to generate text without a GPU); the epilogue's leaves are
/// [`Expr::acc`] (the row op's result), scalars and tensors broadcasting to
/// the load expression's shape.
pub fn generate_row_hooks(x: &Expr, epilogue: Option<&Expr>, row_vec4: bool, store_part: bool) -> Result<RowHooks> {
    let rl = lower_rows(x, epilogue)?;
    let bf16_out = store_part && row_writes_bf16(rl.lowered.dtype_of(rl.lowered.roots[0]), row_vec4);
    Ok(emit_rows(&rl, row_vec4, bf16_out))
}

/// `rf_epi`, the epilogue (the second root) at (row, col) given the row
/// op's result there.
fn epilogue_fn(rl: &RowLowered, prologue: &str, load: &dyn Fn(usize) -> String) -> String {
    let root = rl.lowered.roots[1];
    format!(
        "\n// The epilogue at (row, col) given the row op's result there.\n\
         fn rf_epi(row: u32, col: u32, acc: V) -> V {{\n{prologue}{}    return v{root};\n}}\n",
        lines_for(&rl.lowered.ops, root, load)
    )
}

/// The store part of a row kernel with an epilogue: `rf_epi` of the row
/// op's result, stored in `Elem`.
fn epilogue_store(rl: &RowLowered, prologue: &str, load: &dyn Fn(usize) -> String, vec4: bool) -> String {
    let mut t = format!(
        "// Generated by src/kernels/codegen/fusion/rows.rs (replaces rowops_store.wgsl): stores\n\
         // the epilogue (output {} of the key) of the row op's result `acc`.\n\
         @group(0) @binding(2) var<storage, read_write> y: array<vec4<Elem>>;\n{}",
        rl.lowered.roots[1],
        epilogue_fn(rl, prologue, load)
    );
    if vec4 {
        t.push_str(
            "\nfn store_y4(row: u32, c: u32, v: vec4<f32>) {\n\
             \x20   y[row * (params.n / 4u) + c] = vec4<Elem>(rf_epi(row, 4u * c, v));\n}\n\
             \n// Not called when VEC == 4 (always here); correct anyway.\n\
             fn store_y(row: u32, col: u32, v: f32) {\n\
             \x20   let e = row * params.n + col;\n\
             \x20   let r = rf_epi(row, col - col % 4u, vec4<f32>(v));\n\
             \x20   y[e / 4u][e % 4u] = Elem(r[col % 4u]);\n}\n",
        );
    } else {
        t.push_str(
            "\nfn store_y(row: u32, col: u32, v: f32) {\n\
             \x20   let e = row * params.n + col;\n\
             \x20   y[e / 4u][e % 4u] = Elem(rf_epi(row, col, v));\n}\n\
             \nfn store_y4(row: u32, c: u32, v: vec4<f32>) {\n\
             \x20   for (var j = 0u; j < 4u; j++) {\n\
             \x20       let col = 4u * c + j;\n\
             \x20       let e = row * params.n + col;\n\
             \x20       y[e / 4u][e % 4u] = Elem(rf_epi(row, col, v[j]));\n\
             \x20   }\n}\n",
        );
    }
    t
}

/// The store part of a row kernel writing its result as bf16
/// ([`row_writes_bf16`]): each chunk's 4 values (through the epilogue, if
/// any) rounded to nearest even and packed into two words, the rounding
/// of `shaders/half_bits.wgsl` (the cast's, bit for bit).
fn bf16_store(rl: &RowLowered, prologue: &str, load: &dyn Fn(usize) -> String, vec4: bool) -> String {
    let mut t = String::from(
        "// Generated by src/kernels/codegen/fusion/rows.rs (replaces rowops_store.wgsl): writes\n\
         // the row op's result as bf16, a chunk of 4 values as 2 words.\n\
         @group(0) @binding(2) var<storage, read_write> y: array<vec2<u32>>;\n",
    );
    let chunk = if rl.epilogue {
        t.push_str(&epilogue_fn(rl, prologue, load));
        if vec4 {
            "rf_epi(row, 4u * c, v)"
        } else {
            "vec4<f32>(rf_epi(row, 4u * c, v.x), rf_epi(row, 4u * c + 1u, v.y), \
             rf_epi(row, 4u * c + 2u, v.z), rf_epi(row, 4u * c + 3u, v.w))"
        }
    } else {
        "v"
    };
    let _ = write!(
        t,
        "\nfn store_y4(row: u32, c: u32, v: vec4<f32>) {{\n\
         \x20   y[row * (params.n / 4u) + c] = ew_pack_bf16x4({chunk});\n}}\n\
         \n// Never called: the row kernels write bf16 only where VEC == 4.\n\
         fn store_y(row: u32, col: u32, v: f32) {{}}\n\n"
    );
    t.push_str(BF16_PACK);
    t.push_str(crate::kernels::HALF_BITS);
    t
}

/// SSA values `root` depends on.
fn reachable(ops: &[Op], root: usize) -> Vec<bool> {
    let mut seen = vec![false; ops.len()];
    let mut stack = vec![root];
    while let Some(v) = stack.pop() {
        if std::mem::replace(&mut seen[v], true) {
            continue;
        }
        match ops[v] {
            Op::Load(_) | Op::Const(_) => {}
            Op::Unary(_, a) => stack.push(a),
            Op::Binary(_, a, b) => stack.extend([a, b]),
            Op::Where(c, a, b) => stack.extend([c, a, b]),
        }
    }
    seen
}

/// `let vN: V = ...;` lines for the values `root` needs.
fn lines_for(ops: &[Op], root: usize, load: &dyn Fn(usize) -> String) -> String {
    let need = reachable(ops, root);
    let mut s = String::new();
    for (n, op) in ops.iter().enumerate() {
        if !need[n] {
            continue;
        }
        let a = |x: &usize| format!("v{x}");
        let code = match op {
            Op::Load(j) => load(*j),
            Op::Const(k) => format!("V(ew_k[{k}])"),
            Op::Unary(u, x) => unary_code(*u, &a(x)),
            Op::Binary(b, x, y) => super::binary_code(*b, &a(x), &a(y)),
            Op::Where(c, x, y) => format!(
                "select({}, {}, (bitcast<VU>({}) & VU(0x7fffffffu)) != VU(0u))",
                a(y),
                a(x),
                a(c)
            ),
        };
        let _ = writeln!(s, "    let v{n}: V = {code};");
    }
    s
}

// Long on purpose: the load and store hook parts written in one pass over the lowered
// expression, in the order the row kernels call them.
/// `bf16_out`: the store part writes the result as bf16 (the host's choice,
/// [`row_writes_bf16`]; needs `row_vec4`).
pub(crate) fn emit_rows(rl: &RowLowered, row_vec4: bool, bf16_out: bool) -> RowHooks {
    let lowered = &rl.lowered;
    let (plan_vec4, inputs) = plan_access(lowered, &[]);
    let vec4 = row_vec4 && plan_vec4;
    let dtype = lowered.dtype_of(lowered.roots[0]);
    let acc_leaf = lowered.leaves.iter().position(|l| matches!(l, Leaf::Acc));
    let mut outputs = vec![(lowered.roots[0], dtype)];
    if rl.epilogue {
        outputs.push((lowered.roots[1], DType::F32));
    }
    let bf16_out = bf16_out && row_vec4;
    let key = format!(
        "rows;vec{};epi={};bf16out={bf16_out};{}",
        if row_vec4 { 4 } else { 1 },
        rl.epilogue,
        key_of(
            &lowered.ops,
            &inputs,
            lowered.constants.len(),
            &outputs,
            vec4
        )
    );
    let f16 = inputs
        .iter()
        .enumerate()
        .any(|(j, i)| Some(j) != acc_leaf && i.dtype == DType::F16);
    let (v, vu, vb) = if vec4 {
        ("vec4<f32>", "vec4<u32>", "vec4<bool>")
    } else {
        ("f32", "u32", "bool")
    };
    let mut s = String::new();
    let _ = writeln!(
        s,
        "// Generated by src/kernels/codegen/fusion/rows.rs (replaces rowops_load.wgsl): the row\n\
         // kernel's input is the expression whose SSA list ends the key.\n\
         // key: {key}\n\
         // Element e = row * params.n + col, row and col clamped into the result;\n\
         // {} math.",
        if vec4 {
            "vec4 (V = vec4<f32>, a unit is 4 elements)"
        } else {
            "scalar (V = f32, a unit is one element)"
        },
    );
    let _ = writeln!(s, "alias V = {v};\nalias VU = {vu};\nalias VB = {vb};");
    let _ = writeln!(
        s,
        "@group(0) @binding({ROW_UNIFORM_BINDING}) var<uniform> ew_p: array<vec4<u32>, {}>;",
        2 + inputs.len()
    );
    if !lowered.constants.is_empty() {
        let _ = writeln!(
            s,
            "@group(0) @binding({ROW_CONSTANTS_BINDING}) var<storage, read> ew_k: array<f32>;"
        );
    }
    for (j, input) in inputs.iter().enumerate() {
        if Some(j) == acc_leaf {
            continue;
        }
        let elem = input_elem(*input, vec4);
        let _ = writeln!(
            s,
            "@group(0) @binding({}) var<storage, read> ew_in{j}: array<{elem}>;",
            ROW_FIRST_INPUT_BINDING + j as u32
        );
    }
    s.push_str(&helpers_text(&lowered.ops, false));
    // bf16 leaves are read as u32 words and widened in registers, as the
    // elementwise kernels read them (exact: a bf16 is the top half of an f32).
    if inputs
        .iter()
        .enumerate()
        .any(|(j, i)| Some(j) != acc_leaf && i.dtype == DType::BF16)
    {
        s.push_str(BF16_UNPACK);
    }
    // Row and column (the chunk's first column on the vec4 path) clamped
    // into the result (rows * n elements), the flat element e, the unit i,
    // and for broadcast leaves the 4-D coordinates; over the last axis
    // (dims.w == n) they come from (row, col) without dividing the element
    // index, and depend on the row only, so compilers hoist them out of
    // the kernels' column loops.
    let mut prologue = format!(
        "    let r = min(row, params.rows - 1u);\n\
         \x20   let k = min(col, params.n - {}u);\n\
         \x20   let e = r * params.n + k;\n\
         \x20   let i = e{};\n",
        if vec4 { 4 } else { 1 },
        if vec4 { " / 4u" } else { "" }
    );
    if inputs
        .iter()
        .any(|i| matches!(i.access, Access::Broadcast { .. }))
    {
        prologue.push_str(
            "    let d = ew_p[1];\n\
             \x20   var c3 = k;\n\
             \x20   var r2 = r;\n\
             \x20   if d.w != params.n {\n\
             \x20       c3 = e % d.w;\n\
             \x20       r2 = e / d.w;\n\
             \x20   }\n\
             \x20   let c2 = r2 % d.z;\n\
             \x20   let r1 = r2 / d.z;\n\
             \x20   let c1 = r1 % d.y;\n\
             \x20   let c0 = r1 / d.y;\n",
        );
    }
    let load = |j: usize| {
        if Some(j) == acc_leaf {
            "acc".to_string()
        } else {
            load_code(inputs[j], j, vec4)
        }
    };
    let root = lowered.roots[0];
    let _ = write!(
        s,
        "\n// The input at (row, col){}.\n\
         fn rf_load(row: u32, col: u32) -> V {{\n{prologue}{}    return v{root};\n}}\n",
        if vec4 {
            ", col a multiple of 4: 4 columns"
        } else {
            ""
        },
        lines_for(&lowered.ops, root, &load)
    );
    if vec4 {
        s.push_str(
            "\nfn load_x4(row: u32, c: u32) -> vec4<f32> {\n\
             \x20   return rf_load(row, 4u * c);\n}\n\
             \n// Not called when VEC == 4 (always here); correct anyway.\n\
             fn load_x(row: u32, col: u32) -> f32 {\n\
             \x20   return rf_load(row, col - col % 4u)[col % 4u];\n}\n",
        );
    } else {
        s.push_str(
            "\nfn load_x(row: u32, col: u32) -> f32 {\n\
             \x20   return rf_load(row, col);\n}\n\
             \nfn load_x4(row: u32, c: u32) -> vec4<f32> {\n\
             \x20   let col = 4u * c;\n\
             \x20   return vec4<f32>(rf_load(row, col), rf_load(row, col + 1u),\n\
             \x20       rf_load(row, col + 2u), rf_load(row, col + 3u));\n}\n",
        );
    }
    let store = if bf16_out {
        Some(bf16_store(rl, &prologue, &load, vec4))
    } else {
        rl.epilogue.then(|| epilogue_store(rl, &prologue, &load, vec4))
    };
    // The uniform is read only by broadcast leaves and the NaN/Inf helpers
    // (the pipeline layout has binding 5 only then).
    let uniform = s.contains("ew_p[") || store.as_ref().is_some_and(|t| t.contains("ew_p["));
    RowHooks {
        key,
        load: s,
        store,
        uniform,
        vec4,
        f16,
        inputs,
        constants: lowered.constants.len(),
        dtype,
        shape: lowered.shape.clone(),
    }
}
