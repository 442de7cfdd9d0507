//! WGSL from lowered expressions: the fused elementwise kernel (vec4 and
//! scalar paths), its structural cache key, and the matmul epilogue.

use super::*;

/// Generates the fused kernel for `expr` without a GPU (leaves may be
/// tensors or [`Expr::input`] symbols): the text [`Context::eval`] would
/// compile for these shapes and dtypes.
pub fn generate(expr: &Expr) -> Result<Generated> {
    generate_many(std::slice::from_ref(expr))
}

/// [`generate`] for one kernel with several outputs ([`Context::eval_many`]).
pub fn generate_many(exprs: &[Expr]) -> Result<Generated> {
    let lowered = lower_many(exprs)?;
    refuse_acc(&lowered)?;
    let (vec4, inputs) = plan_access(&lowered, &[]);
    let outputs: Vec<(usize, DType)> = lowered
        .roots
        .iter()
        .map(|&r| (r, lowered.dtype_of(r)))
        .collect();
    Ok(emit(
        &lowered.ops,
        &inputs,
        lowered.constants.len(),
        &outputs,
        vec4,
    ))
}

pub(crate) fn unary_code(op: UnaryOp, a: &str) -> String {
    match op {
        UnaryOp::Neg => format!("-{a}"),
        UnaryOp::Exp => format!("exp({a})"),
        UnaryOp::Log => format!("ew_log({a})"),
        UnaryOp::Sqrt => format!("ew_sqrt({a})"),
        UnaryOp::Rsqrt => format!("ew_rsqrt({a})"),
        UnaryOp::Sin => format!("sin(ew_reduce({a}))"),
        UnaryOp::Cos => format!("cos(ew_reduce({a}))"),
        UnaryOp::Tanh => format!("ew_tanh({a})"),
        UnaryOp::Sigmoid => format!("1.0 / (1.0 + exp(-{a}))"),
        UnaryOp::Relu => format!("select({a}, V(0.0), {a} < V(0.0))"),
        UnaryOp::Gelu => format!("ew_gelu({a})"),
        UnaryOp::GeluErf => format!("ew_gelu_erf({a})"),
        UnaryOp::Erf => format!("ew_erf({a})"),
        UnaryOp::Silu => format!("ew_silu({a})"),
        UnaryOp::Abs => format!("abs({a})"),
        UnaryOp::Square => format!("{a} * {a}"),
    }
}

pub(crate) fn binary_code(op: BinaryOp, a: &str, b: &str) -> String {
    // Comparisons are made NaN-exact with bit tests (a compiler assuming
    // finite math, or an ordered `!=`, would get NaN wrong otherwise).
    let mask =
        |cmp: &str| format!("select(V(0.0), V(1.0), ({a} {cmp} {b}) & ew_ordered({a}, {b}))");
    match op {
        BinaryOp::Add => format!("{a} + {b}"),
        BinaryOp::Sub => format!("{a} - {b}"),
        BinaryOp::Mul => format!("{a} * {b}"),
        BinaryOp::Div => format!("{a} / {b}"),
        BinaryOp::Pow => format!("ew_pow({a}, {b})"),
        BinaryOp::Min => format!("ew_min({a}, {b})"),
        BinaryOp::Max => format!("ew_max({a}, {b})"),
        BinaryOp::Lt => mask("<"),
        BinaryOp::Le => mask("<="),
        BinaryOp::Gt => mask(">"),
        BinaryOp::Ge => mask(">="),
        BinaryOp::Eq => mask("=="),
        BinaryOp::Ne => format!("select(V(1.0), V(0.0), ({a} == {b}) & ew_ordered({a}, {b}))"),
    }
}

/// Helper functions, each emitted only when an op needs it (with the helpers
/// it calls). Written for the alias `V` (f32 or vec4<f32>), `VU`, `VB`.
pub(crate) const HELPERS: &[(&str, &[&str], &str)] = &[
    (
        "ew_nan",
        &[],
        "fn ew_nan() -> V { return V(bitcast<f32>(ew_p[0].z)); }\n",
    ),
    (
        "ew_inf",
        &[],
        "fn ew_inf() -> V { return V(bitcast<f32>(ew_p[0].w)); }\n",
    ),
    (
        "ew_isnan",
        &[],
        "// NaN by its bits: survives compilers that assume finite math.\n\
         fn ew_isnan(x: V) -> VB { return (bitcast<VU>(x) & VU(0x7fffffffu)) > VU(0x7f800000u); }\n",
    ),
    (
        "ew_ordered",
        &["ew_isnan"],
        "fn ew_ordered(a: V, b: V) -> VB { return !(ew_isnan(a) | ew_isnan(b)); }\n",
    ),
    (
        "ew_log",
        &["ew_nan", "ew_inf", "ew_isnan"],
        "fn ew_log(x: V) -> V {\n\
         \x20   let r = select(select(log(x), -ew_inf(), x == V(0.0)), ew_nan(), x < V(0.0));\n\
         \x20   return select(r, x, ew_isnan(x));\n}\n",
    ),
    (
        "ew_sqrt",
        &["ew_nan", "ew_isnan"],
        "fn ew_sqrt(x: V) -> V {\n\
         \x20   return select(select(sqrt(x), ew_nan(), x < V(0.0)), x, ew_isnan(x));\n}\n",
    ),
    (
        "ew_rsqrt",
        &["ew_nan", "ew_inf", "ew_isnan"],
        "fn ew_rsqrt(x: V) -> V {\n\
         \x20   var r = select(inverseSqrt(x), ew_inf(), x == V(0.0));\n\
         \x20   r = select(r, V(0.0), x == ew_inf());\n\
         \x20   return select(select(r, ew_nan(), x < V(0.0)), x, ew_isnan(x));\n}\n",
    ),
    (
        "ew_reduce",
        &[],
        "// x - 2πk with k = round(x / 2π): Cody-Waite with 2π split in two f32\n\
         // constants (the second is 2π minus the first, with its sign).\n\
         fn ew_reduce(x: V) -> V {\n\
         \x20   let k = round(x * 0.15915494309189535);\n\
         \x20   return fma(k, V(-6.2831854820251465), x) + k * 1.7484556000744487e-7;\n}\n",
    ),
    (
        "ew_tanh",
        &[],
        "// tanh(|x|) = (1 - e) / (1 + e), e = exp(-2|x|), no overflow; below\n\
         // |x| = 0.125 a Taylor polynomial (relative error < 2e-9) avoids the\n\
         // cancellation in 1 - e.\n\
         fn ew_tanh(x: V) -> V {\n\
         \x20   let a = abs(x);\n\
         \x20   let e = exp(-2.0 * a);\n\
         \x20   let x2 = x * x;\n\
         \x20   let small = a * (1.0 + x2 * (-0.33333333333 + x2 * (0.13333333333 + x2 * -0.05396825397)));\n\
         \x20   let t = select((1.0 - e) / (1.0 + e), small, a < V(0.125));\n\
         \x20   return select(t, -t, x < V(0.0));\n}\n",
    ),
    (
        "ew_gelu",
        &["ew_inf"],
        "// 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)): no cancellation for x < 0.\n\
         fn ew_gelu(x: V) -> V {\n\
         \x20   let u = 0.7978845608028654 * (x + 0.044715 * x * x * x);\n\
         \x20   return select(x / (1.0 + exp(-2.0 * u)), V(0.0), x == -ew_inf());\n}\n",
    ),
    (
        "ew_silu",
        &["ew_inf"],
        "fn ew_silu(x: V) -> V {\n\
         \x20   return select(x / (1.0 + exp(-x)), V(0.0), x == -ew_inf());\n}\n",
    ),
    (
        "ew_erfc",
        &[],
        "// erfc(z) for z >= 0: Numerical Recipes' Chebyshev fit (erfcc),\n\
         // fractional error below 1.2e-7 for every z (1.05e-7 measured).\n\
         fn ew_erfc(z: V) -> V {\n\
         \x20   let t = 1.0 / (1.0 + 0.5 * z);\n\
         \x20   let p = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418\n\
         \x20       + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587\n\
         \x20       + t * (-0.82215223 + t * 0.17087277))))))));\n\
         \x20   return t * exp(p - z * z);\n}\n",
    ),
    (
        "ew_gelu_erf",
        &["ew_erfc", "ew_inf"],
        "// 0.5 x erfc(-x/√2): erfc directly for x < 0 (small relative error in\n\
         // the tail), 2 - erfc(x/√2) for x >= 0.\n\
         fn ew_gelu_erf(x: V) -> V {\n\
         \x20   let e = ew_erfc(abs(x) * 0.7071067811865476);\n\
         \x20   let phi2 = select(2.0 - e, e, x < V(0.0));\n\
         \x20   return select(0.5 * x * phi2, V(0.0), x == -ew_inf());\n}\n",
    ),
    (
        "ew_erf",
        &["ew_erfc"],
        "// erf: the odd Taylor series 2/√π (x - x³/3 + x⁵/10 - ...) to x^13\n\
         // below |x| = 0.5, 1 - erfc(|x|) with x's sign above.\n\
         fn ew_erf(x: V) -> V {\n\
         \x20   let a = abs(x);\n\
         \x20   let s = x * x;\n\
         \x20   let series = 1.1283791670955126 * x * (1.0 + s * (-0.3333333333333333 + s * (0.1\n\
         \x20       + s * (-0.023809523809523808 + s * (0.004629629629629629\n\
         \x20       + s * (-0.0007575757575757576 + s * 0.00010683760683760684))))));\n\
         \x20   return select(sign(x) * (1.0 - ew_erfc(a)), series, a < V(0.5));\n}\n",
    ),
    (
        "ew_pow",
        &["ew_nan", "ew_inf"],
        "// |x|^p = exp2(p log2|x|), the sign of x for odd integer p, NaN for\n\
         // x < 0 and non-integer p, 1 for p = 0 (IEEE pow).\n\
         fn ew_pow(x: V, p: V) -> V {\n\
         \x20   let ax = abs(x);\n\
         \x20   var m = exp2(p * select(log2(ax), -ew_inf(), ax == V(0.0)));\n\
         \x20   let integer = floor(p) == p;\n\
         \x20   let odd = integer & (abs(p - 2.0 * floor(0.5 * p)) == V(1.0));\n\
         \x20   let negative = x < V(0.0);\n\
         \x20   m = select(m, -m, negative & odd);\n\
         \x20   m = select(m, ew_nan(), negative & !integer);\n\
         \x20   return select(m, V(1.0), p == V(0.0));\n}\n",
    ),
    (
        "ew_min",
        &["ew_nan", "ew_isnan"],
        "fn ew_min(a: V, b: V) -> V { return select(min(a, b), ew_nan(), ew_isnan(a) | ew_isnan(b)); }\n",
    ),
    (
        "ew_max",
        &["ew_nan", "ew_isnan"],
        "fn ew_max(a: V, b: V) -> V { return select(max(a, b), ew_nan(), ew_isnan(a) | ew_isnan(b)); }\n",
    ),
];

pub(crate) fn helper_names(op: &Op) -> &'static [&'static str] {
    match op {
        Op::Unary(u, _) => match u {
            UnaryOp::Log => &["ew_log"],
            UnaryOp::Sqrt => &["ew_sqrt"],
            UnaryOp::Rsqrt => &["ew_rsqrt"],
            UnaryOp::Sin | UnaryOp::Cos => &["ew_reduce"],
            UnaryOp::Tanh => &["ew_tanh"],
            UnaryOp::Gelu => &["ew_gelu"],
            UnaryOp::GeluErf => &["ew_gelu_erf"],
            UnaryOp::Erf => &["ew_erf"],
            UnaryOp::Silu => &["ew_silu"],
            _ => &[],
        },
        Op::Binary(b, ..) => match b {
            BinaryOp::Pow => &["ew_pow"],
            BinaryOp::Min => &["ew_min"],
            BinaryOp::Max => &["ew_max"],
            BinaryOp::Lt
            | BinaryOp::Le
            | BinaryOp::Gt
            | BinaryOp::Ge
            | BinaryOp::Eq
            | BinaryOp::Ne => &["ew_ordered"],
            _ => &[],
        },
        Op::Where(..) => &[],
        _ => &[],
    }
}

pub(crate) fn key_of(
    ops: &[Op],
    inputs: &[InputDesc],
    constants: usize,
    outputs: &[(usize, DType)],
    vec4: bool,
) -> String {
    let mut k = format!("{};k={constants};out=", if vec4 { "v4" } else { "s" });
    for (root, dtype) in outputs {
        let _ = write!(k, "{dtype}@{root},");
    }
    k.push_str(";in=");
    for i in inputs {
        let a = match i.access {
            Access::Contiguous => "c",
            Access::Single => "1",
            Access::Broadcast { inner_unit: true } => "b",
            Access::Broadcast { inner_unit: false } => "z",
            Access::Output => "o",
        };
        let _ = write!(k, "{}{a},", i.dtype);
    }
    k.push_str(";ops=");
    for op in ops {
        let _ = match op {
            Op::Load(i) => write!(k, "L{i},"),
            Op::Const(i) => write!(k, "K{i},"),
            Op::Unary(u, a) => write!(k, "{u:?}({a}),"),
            Op::Binary(b, x, y) => write!(k, "{b:?}({x} {y}),"),
            Op::Where(c, x, y) => write!(k, "W({c} {x} {y}),"),
        };
    }
    k
}

/// Emits the WGSL of one fused kernel.
pub(crate) fn emit(
    ops: &[Op],
    inputs: &[InputDesc],
    constants: usize,
    outputs: &[(usize, DType)],
    vec4: bool,
) -> Generated {
    let key = key_of(ops, inputs, constants, outputs, vec4);
    let mut s = String::new();
    let f16 =
        outputs.iter().any(|o| o.1 == DType::F16) || inputs.iter().any(|i| i.dtype == DType::F16);
    let bf16 = outputs.iter().any(|o| o.1 == DType::BF16)
        || inputs.iter().any(|i| i.dtype == DType::BF16);
    let _ = writeln!(
        s,
        "// wgtile fused elementwise kernel, generated by src/kernels/codegen/fusion.\n\
         // key: {key}\n\
         // One invocation per {} ({}), workgroup WG x 1 x 1 (default {WORKGROUP_SIZE}),\n\
         // 2-D grid: unit = (gid.y * groups_x) * WG + gid.x. Math in f32.",
        if vec4 { "4 elements" } else { "element" },
        if vec4 {
            "vec4 loads and stores"
        } else {
            "scalar path"
        }
    );
    if f16 {
        s.push_str("enable f16;\n");
    }
    let (v, vu, vb) = if vec4 {
        ("vec4<f32>", "vec4<u32>", "vec4<bool>")
    } else {
        ("f32", "u32", "bool")
    };
    let _ = writeln!(s, "alias V = {v};\nalias VU = {vu};\nalias VB = {vb};");
    let _ = writeln!(
        s,
        "// [0] = (units, elements, NaN bits, +inf bits), [1] = output dims (4-D),\n\
         // [2 + j] = element strides of input j (0 along broadcast dims).\n\
         @group(0) @binding(0) var<uniform> ew_p: array<vec4<u32>, {}>;",
        2 + inputs.len()
    );
    if constants > 0 {
        s.push_str("@group(0) @binding(1) var<storage, read> ew_k: array<f32>;\n");
    }
    for (r, &(_, dtype)) in outputs.iter().enumerate() {
        let elem = match (dtype, vec4) {
            // bf16 pairs in u32 words; the scalar path writes its half of a
            // word with two atomics (the neighbour writes the other half).
            (DType::BF16, true) => "vec2<u32>".to_string(),
            (DType::BF16, false) => "atomic<u32>".to_string(),
            (d, true) => format!("vec4<{}>", d.wgsl()),
            (d, false) => d.wgsl().to_string(),
        };
        let _ = writeln!(
            s,
            "@group(0) @binding({}) var<storage, read_write> {}: array<{elem}>;",
            output_binding(r, inputs.len()),
            output_name(r)
        );
    }
    for (j, input) in inputs.iter().enumerate() {
        if matches!(input.access, Access::Output) {
            continue;
        }
        let _ = writeln!(
            s,
            "@group(0) @binding({}) var<storage, read> ew_in{j}: array<{}>;",
            3 + j,
            input_elem(*input, vec4)
        );
    }
    let _ = writeln!(s, "override WG: u32 = {WORKGROUP_SIZE}u;\n");

    s.push_str(&helpers_text(ops, false));
    if bf16 {
        s.push_str(BF16_UNPACK);
        s.push_str(BF16_PACK);
        s.push_str(crate::kernels::HALF_BITS);
    }

    s.push_str(
        "\n@compute @workgroup_size(WG, 1, 1)\n\
         fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {\n\
         \x20   let i = gid.y * groups.x * WG + gid.x;\n\
         \x20   if i >= ew_p[0].x {\n        return;\n    }\n",
    );
    if inputs
        .iter()
        .any(|i| matches!(i.access, Access::Broadcast { .. }))
    {
        let _ = writeln!(
            s,
            "    // 4-D coordinates of the (first) element of this unit.\n\
             \x20   let e = i{};\n\
             \x20   let d = ew_p[1];\n\
             \x20   let c3 = e % d.w;\n\
             \x20   let r2 = e / d.w;\n\
             \x20   let c2 = r2 % d.z;\n\
             \x20   let r1 = r2 / d.z;\n\
             \x20   let c1 = r1 % d.y;\n\
             \x20   let c0 = r1 / d.y;",
            if vec4 { " * 4u" } else { "" }
        );
    }
    let load = |j: usize| load_code(inputs[j], j, vec4);
    let constant = |k: usize| format!("V(ew_k[{k}])");
    s.push_str(&op_lines(ops, &load, &constant));
    for (r, &(root, dtype)) in outputs.iter().enumerate() {
        let name = output_name(r);
        let store = match (vec4, dtype) {
            // Integer leaves are refused when lowering; nothing computes in them.
            (_, DType::F32 | DType::I32 | DType::U32) => format!("v{root}"),
            (true, DType::F16) => format!("vec4<f16>(v{root})"),
            (false, DType::F16) => format!("f16(v{root})"),
            (true, DType::BF16) => format!("ew_pack_bf16x4(v{root})"),
            (false, DType::BF16) => {
                let _ = writeln!(
                    s,
                    "    atomicAnd(&{name}[i >> 1u], ~(0xffffu << ((i & 1u) * 16u)));\n\
                     \x20   atomicOr(&{name}[i >> 1u], \
                     f32_bits_to_bf16(bitcast<u32>(v{root})) << ((i & 1u) * 16u));"
                );
                continue;
            }
        };
        let _ = writeln!(s, "    {name}[i] = {store};");
    }
    s.push_str("}\n");
    Generated {
        key,
        wgsl: s,
        vec4,
        inputs: inputs.to_vec(),
        constants,
    }
}

/// Binding of output `r`: 2 for the first (so one-output kernels keep the
/// layout in the module docs), after the inputs for the others.
pub(crate) fn output_binding(r: usize, inputs: usize) -> usize {
    if r == 0 { 2 } else { 3 + inputs + r - 1 }
}

pub(crate) fn output_name(r: usize) -> String {
    if r == 0 {
        "ew_out".into()
    } else {
        format!("ew_out{r}")
    }
}

/// The WGSL expression loading input `j` for the current unit.
pub(crate) fn load_code(input: InputDesc, j: usize, vec4: bool) -> String {
    let widen = |x: String| {
        if vec4 {
            format!("vec4<f32>({x})")
        } else {
            format!("f32({x})")
        }
    };
    let off = || {
        format!(
            "(c0 * ew_p[{0}].x + c1 * ew_p[{0}].y + c2 * ew_p[{0}].z + c3 * ew_p[{0}].w)",
            2 + j
        )
    };
    if input.dtype == DType::BF16 {
        // Pairs in u32 words, widened exactly: a vec4 unit is one vec2<u32>.
        let one = |word: String, e: String| {
            format!("V(bitcast<f32>(({word} >> ((({e}) & 1u) * 16u)) << 16u))")
        };
        return match input.access {
            Access::Output if vec4 => "ew_unpack_bf16x4(ew_out[i])".into(),
            Access::Output => one("atomicLoad(&ew_out[i >> 1u])".into(), "i".into()),
            Access::Contiguous if vec4 => format!("ew_unpack_bf16x4(ew_in{j}[i])"),
            Access::Contiguous => one(format!("ew_in{j}[i >> 1u]"), "i".into()),
            Access::Single => format!("V(bitcast<f32>(ew_in{j}[0] << 16u))"),
            Access::Broadcast { inner_unit: true } if vec4 => {
                format!("ew_unpack_bf16x4(ew_in{j}[{} / 4u])", off())
            }
            Access::Broadcast { .. } => one(format!("ew_in{j}[{} >> 1u]", off()), off()),
        };
    }
    match input.access {
        Access::Output => widen("ew_out[i]".into()),
        Access::Contiguous => widen(format!("ew_in{j}[i]")),
        Access::Single => format!("V(f32(ew_in{j}[0]))"),
        Access::Broadcast { inner_unit } => {
            if vec4 && inner_unit {
                widen(format!("ew_in{j}[{} / 4u]", off()))
            } else {
                format!("V(f32(ew_in{j}[{}]))", off())
            }
        }
    }
}

/// The element type of input `input`'s binding (`array<...>`).
pub(crate) fn input_elem(input: InputDesc, vec4: bool) -> String {
    let wide = vec4
        && matches!(
            input.access,
            Access::Contiguous | Access::Broadcast { inner_unit: true }
        );
    match (input.dtype, wide) {
        (DType::BF16, true) => "vec2<u32>".into(),
        (DType::BF16, false) => "u32".into(),
        (d, true) => format!("vec4<{}>", d.wgsl()),
        (d, false) => d.wgsl().to_string(),
    }
}

/// The helper of kernels that read bf16: four bf16 in a vec2<u32> widened
/// exactly (also spliced into the row kernels' generated load parts).
pub(crate) const BF16_UNPACK: &str = "
fn ew_unpack_bf16x4(w: vec2<u32>) -> vec4<f32> {
    return bitcast<vec4<f32>>(vec4<u32>(w.x << 16u, w.x & 0xffff0000u, w.y << 16u, w.y & 0xffff0000u));
}
";

/// The helper of kernels that write bf16: four f32s rounded to nearest even
/// into a vec2<u32> (`f32_bits_to_bf16` of `shaders/half_bits.wgsl`).
pub(crate) const BF16_PACK: &str = "fn ew_pack_bf16x4(v: vec4<f32>) -> vec2<u32> {
    let b = bitcast<vec4<u32>>(v);
    return vec2<u32>(
        f32_bits_to_bf16(b.x) | (f32_bits_to_bf16(b.y) << 16u),
        f32_bits_to_bf16(b.z) | (f32_bits_to_bf16(b.w) << 16u),
    );
}
";

/// One `let vN: V = ...;` line per SSA value.
pub(crate) fn op_lines(
    ops: &[Op],
    load: &dyn Fn(usize) -> String,
    constant: &dyn Fn(usize) -> String,
) -> String {
    let mut s = String::new();
    for (n, op) in ops.iter().enumerate() {
        let a = |x: &usize| format!("v{x}");
        let code = match op {
            Op::Load(j) => load(*j),
            Op::Const(k) => constant(*k),
            Op::Unary(u, x) => unary_code(*u, &a(x)),
            Op::Binary(b, x, y) => binary_code(*b, &a(x), &a(y)),
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

/// The helper functions `ops` need, dependencies first, each once.
/// `epilogue` builds NaN and +inf without the elementwise uniform.
pub(crate) fn helpers_text(ops: &[Op], epilogue: bool) -> String {
    let mut wanted: Vec<&str> = Vec::new();
    pub(crate) fn want(name: &'static str, wanted: &mut Vec<&'static str>) {
        if wanted.contains(&name) {
            return;
        }
        let (_, deps, _) = HELPERS.iter().find(|h| h.0 == name).expect("helper");
        for d in *deps {
            want(d, wanted);
        }
        wanted.push(name);
    }
    for op in ops {
        for name in helper_names(op) {
            want(name, &mut wanted);
        }
    }
    let mut s = String::new();
    for name in &wanted {
        let (_, _, text) = HELPERS.iter().find(|h| h.0 == *name).expect("helper");
        match (*name, epilogue) {
            // A runtime operand (`params.m & 0u`) keeps WGSL's constant
            // evaluation, which rejects NaN and infinities, out of it.
            ("ew_nan", true) => s.push_str(
                "fn ew_nan() -> V { return V(bitcast<f32>(0x7fc00000u | (params.m & 0u))); }\n",
            ),
            ("ew_inf", true) => s.push_str(
                "fn ew_inf() -> V { return V(bitcast<f32>(0x7f800000u | (params.m & 0u))); }\n",
            ),
            _ => s.push_str(text),
        }
    }
    s
}

pub(crate) fn refuse_acc(lowered: &Lowered) -> Result<()> {
    if lowered.leaves.iter().any(|l| matches!(l, Leaf::Acc)) {
        return Err(Error::InvalidArgument(
            "Expr::acc() stands for a matmul accumulator: use it in Epilogue::expr".into(),
        ));
    }
    Ok(())
}

/// A matmul epilogue generated from an expression of [`Expr::acc`].
pub struct EpilogueCode {
    /// WGSL defining `fn epilogue(acc: f32, z: u32, row: u32, col: u32) -> f32`
    /// (and its helpers), spliced into a matmul kernel in place of the
    /// built-in one ([`crate::kernels::Spec::epilogue`]).
    pub wgsl: String,
    /// The rank-1 tensor read per output column (binding 5), if any.
    pub bias: Option<Tensor>,
    /// The tensor of the output's shape (binding 6), if any.
    pub residual: Option<Tensor>,
    /// The scalars the text reads from the parameters' `epi_k`, in order.
    pub data_constants: Vec<f32>,
    /// Whether a leaf is a symbolic input (text for validation only: it has
    /// no tensor to bind).
    pub symbolic: bool,
}

/// Scalars of a generated matmul epilogue passed as data (`epi_k` in
/// `shaders/matmul_params.wgsl`); any further ones are baked into the text.
pub const EPILOGUE_DATA_CONSTANTS: usize = 8;

/// Generates a matmul epilogue from `expr`, whose leaves are [`Expr::acc`],
/// scalars (the first [`EPILOGUE_DATA_CONSTANTS`] passed as data, further
/// ones baked into the text), at most one rank-1 tensor (the bias: one value per output
/// column) and at most one tensor of higher rank (the residual: the output's
/// shape). Shapes and dtypes are checked against the matmul when it runs.
/// Leaves may be [`Expr::input`] symbols (classified the same way) to
/// generate text without a GPU.
pub fn generate_epilogue(expr: &Expr) -> Result<EpilogueCode> {
    let lowered = lower(expr)?;
    let mut bias: Option<(usize, Option<Tensor>)> = None;
    let mut residual: Option<(usize, Option<Tensor>)> = None;
    for (j, leaf) in lowered.leaves.iter().enumerate() {
        let tensor = match leaf {
            Leaf::Acc => continue,
            Leaf::Tensor(t) => Some(t.clone()),
            Leaf::Symbol { .. } => None,
        };
        let slot = if leaf.shape().len() == 1 {
            &mut bias
        } else {
            &mut residual
        };
        if slot.is_some() {
            return Err(Error::InvalidArgument(format!(
                "a matmul epilogue reads at most one rank-1 tensor (bias, per column) and one \
                 tensor of the output's shape (residual); {expr} has more"
            )));
        }
        *slot = Some((j, tensor));
    }
    if let Some(c) = lowered.constants.iter().find(|c| !c.is_finite()) {
        return Err(Error::InvalidArgument(format!(
            "matmul epilogue constants must be finite, not {c}"
        )));
    }
    let bias_leaf = bias.as_ref().map(|b| b.0);
    let residual_leaf = residual.as_ref().map(|r| r.0);
    let load = |j: usize| {
        if Some(j) == bias_leaf {
            "f32(epi_bias[cc])".to_string()
        } else if Some(j) == residual_leaf {
            "f32(epi_residual[(z * params.m + rr) * params.n + cc])".to_string()
        } else {
            "acc".to_string()
        }
    };
    // The first scalars are read from the parameters (data: epilogues that
    // differ only in them share a pipeline); any further ones are baked in.
    let constant = |k: usize| {
        if k < EPILOGUE_DATA_CONSTANTS {
            format!("params.epi_k[{}u][{}u]", k / 4, k % 4)
        } else {
            format!("bitcast<f32>({}u)", lowered.constants[k].to_bits())
        }
    };
    let data_constants: Vec<f32> = lowered
        .constants
        .iter()
        .copied()
        .take(EPILOGUE_DATA_CONSTANTS)
        .collect();
    let mut s = String::from(
        "\n// Generated epilogue (kernels/codegen/fusion): its scalars are data (epi_k).\n\
         // It replaces the built-in `epilogue` (renamed `epilogue_builtin`). Reads\n\
         // clamp row and col into C, so tiles past the edge read valid memory\n\
         // (their results are not stored).\n\
         alias V = f32;\nalias VU = u32;\nalias VB = bool;\n"
    );
    s.push_str(&helpers_text(&lowered.ops, true));
    s.push_str(
        "fn epilogue(acc: f32, z: u32, row: u32, col: u32) -> f32 {\n\
         \x20   let rr = min(row, params.m - 1u);\n\
         \x20   let cc = min(col, params.n - 1u);\n\
         \x20   // Never true (the EPI_* consts stay 0 here): keeps bindings 5 and 6\n\
         \x20   // in the pipeline layout when the expression reads neither.\n\
         \x20   if EPI_BIAS == 1u && EPI_RESIDUAL == 1u {\n\
         \x20       return f32(epi_bias[0]) + f32(epi_residual[0]);\n\
         \x20   }\n",
    );
    s.push_str(&op_lines(&lowered.ops, &load, &constant));
    let _ = writeln!(s, "    return v{};\n}}", lowered.roots[0]);
    Ok(EpilogueCode {
        wgsl: s,
        bias: bias.and_then(|b| b.1),
        residual: residual.and_then(|r| r.1),
        data_constants,
        symbolic: lowered
            .leaves
            .iter()
            .any(|l| matches!(l, Leaf::Symbol { .. })),
    })
}
