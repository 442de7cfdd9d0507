//! Every shader, at its defaults and in every specialisation the dispatcher can
//! produce, parses and validates with naga and translates to SPIR-V, MSL and
//! HLSL. Needs no GPU: a shader that would break Metal or DX12 fails here.

use crate::common::naga_check::{check_spec as check, check_spec_source as check_source};
use wgtile::DType;
use wgtile::kernels::{Kernel, Spec};

#[test]
fn every_kernel_at_its_defaults() {
    for kernel in Kernel::ALL {
        check(&Spec::new(kernel));
        if kernel.is_dtype_generic() {
            check(&Spec::new(kernel).dtype(DType::F16));
        }
    }
}

#[test]
fn every_dispatcher_specialisation() {
    let specs = wgtile::tune::matmul_specs();
    assert!(specs.len() >= 8);
    for spec in &specs {
        check(spec);
    }
}

#[test]
fn fill_at_every_workgroup_size_used() {
    check(&Spec::new(Kernel::Fill).override_("WG", 256));
    check(&Spec::new(Kernel::Fill).override_("WG", 64));
}

#[test]
fn bad_specialisations_are_errors_not_silent() {
    let missing = Spec::new(Kernel::MatmulTiled).constant("NOPE", 4);
    assert!(matches!(missing.wgsl(), Err(wgtile::Error::Shader { .. })));
    let not_generic = Spec::new(Kernel::Fill).dtype(DType::F16);
    assert!(matches!(
        not_generic.wgsl(),
        Err(wgtile::Error::Shader { .. })
    ));
    let no_alias = Spec::new(Kernel::MatmulTiled).alias("OutStore", "u32");
    assert!(matches!(no_alias.wgsl(), Err(wgtile::Error::Shader { .. })));
}

#[test]
fn alias_specialisation_rewrites_only_the_named_alias() {
    let src = Spec::new(Kernel::MatmulCoop)
        .alias("OutStore", "f16")
        .alias("OutStore", "u32")
        .wgsl()
        .unwrap();
    assert!(src.contains("alias OutStore = u32;"));
    assert!(!src.contains("alias OutStore = Elem;"));
    assert!(!src.contains("alias OutStore = f16;"));
    assert!(src.contains("alias Elem = f32;"));
}

#[test]
fn const_specialisation_rewrites_only_the_named_line() {
    let spec = Spec::new(Kernel::MatmulTiled)
        .constant("BM", 32)
        .constant("BK", 16);
    let src = spec.wgsl().unwrap();
    assert!(src.contains("const BM: u32 = 32u;"));
    assert!(src.contains("const BK: u32 = 16u;"));
    assert!(src.contains("const BN: u32 = 128u;"));
    assert!(!src.contains("const BM: u32 = 128u;"));
    // A second value for the same name replaces the first.
    let twice = Spec::new(Kernel::MatmulTiled)
        .constant("BM", 32)
        .constant("BM", 64)
        .wgsl()
        .unwrap();
    assert!(twice.contains("const BM: u32 = 64u;"));
    assert!(!twice.contains("const BM: u32 = 32u;"));
    let f16 = Spec::new(Kernel::MatmulNaive)
        .dtype(DType::F16)
        .wgsl()
        .unwrap();
    assert!(f16.starts_with("enable f16;"));
    assert!(f16.contains("alias Elem = f16;"));
}

#[test]
fn every_row_op_specialisation() {
    let specs = wgtile::ops::rows::rowops_specs();
    assert!(specs.len() >= 100, "{} row-op specs", specs.len());
    eprintln!("{} row-op specialisations", specs.len());
    for spec in &specs {
        check(spec);
    }
    // Subgroup reductions translate to every backend (checked above); make
    // sure the subgroup kernels really contain them.
    let sg = Spec::new(Kernel::SoftmaxSubgroup).wgsl().unwrap();
    assert!(sg.contains("subgroupAdd(") && sg.contains("subgroupMax("));
    assert!(Kernel::SoftmaxSubgroup.uses_subgroups());
    assert!(!Kernel::Softmax.uses_subgroups());
}

#[test]
fn row_kernels_accept_generated_load_and_store_parts() {
    use wgtile::ops::rows::spliced_wgsl;
    // What the elementwise code generator will produce: softmax of a scaled,
    // masked input (two extra bindings), sum of squares, and a norm whose
    // store adds a residual.
    let scaled_masked = r#"
@group(0) @binding(1) var<storage, read> x: array<vec4<Elem>>;
@group(0) @binding(5) var<storage, read> mask: array<f32>;
const SCALE: f32 = 0.125;
fn load_x(row: u32, col: u32) -> f32 {
    let i = row * params.n + col;
    return SCALE * f32(x[i / 4u][i % 4u]) + mask[col];
}
fn load_x4(row: u32, c: u32) -> vec4<f32> {
    let m = vec4<f32>(mask[4u * c], mask[4u * c + 1u], mask[4u * c + 2u], mask[4u * c + 3u]);
    return SCALE * vec4<f32>(x[row * (params.n / 4u) + c]) + m;
}
"#;
    let squares = r#"
@group(0) @binding(1) var<storage, read> x: array<vec4<Elem>>;
fn load_x(row: u32, col: u32) -> f32 {
    let i = row * params.n + col;
    let v = f32(x[i / 4u][i % 4u]);
    return v * v;
}
fn load_x4(row: u32, c: u32) -> vec4<f32> {
    let v = vec4<f32>(x[row * (params.n / 4u) + c]);
    return v * v;
}
"#;
    let residual = r#"
@group(0) @binding(2) var<storage, read_write> y: array<vec4<Elem>>;
@group(0) @binding(5) var<storage, read> res: array<vec4<Elem>>;
fn store_y(row: u32, col: u32, v: f32) {
    let i = row * params.n + col;
    y[i / 4u][i % 4u] = Elem(v + f32(res[i / 4u][i % 4u]));
}
fn store_y4(row: u32, c: u32, v: vec4<f32>) {
    let i = row * (params.n / 4u) + c;
    y[i] = vec4<Elem>(v + vec4<f32>(res[i]));
}
"#;
    for dtype in [DType::F32, DType::F16] {
        for (kernel, load, store) in [
            (Kernel::Softmax, Some(scaled_masked), None),
            (Kernel::SoftmaxSubgroup, Some(scaled_masked), None),
            (Kernel::SoftmaxOnline, Some(scaled_masked), None),
            (Kernel::Reduce, Some(squares), None),
            (Kernel::ReduceSubgroup, Some(squares), None),
            (Kernel::Norm, None, Some(residual)),
            (Kernel::NormStreaming, Some(squares), Some(residual)),
        ] {
            let spec = Spec::new(kernel).dtype(dtype);
            let text = spliced_wgsl(&spec, load, store).unwrap();
            if let Some(load) = load {
                assert!(text.contains(load) && !text.contains(wgtile::ops::rows::LOAD_HOOK));
            }
            check_source(&format!("{kernel:?} spliced {dtype}"), &text, &spec);
        }
    }
    // Reduce has no store hook: an error, not a silent no-op.
    let spec = Spec::new(Kernel::Reduce);
    assert!(matches!(
        spliced_wgsl(&spec, None, Some(residual)),
        Err(wgtile::Error::Shader { .. })
    ));
}

#[test]
fn every_attention_specialisation() {
    let specs = wgtile::tune::attention::attention_specs();
    assert!(specs.len() >= 12);
    for spec in &specs {
        check(spec);
    }
    // The workgroup size ops::attention uses for the merge.
    check(&Spec::new(Kernel::AttentionMerge).override_("WG", 64));
    check(
        &Spec::new(Kernel::AttentionMerge)
            .override_("WG", 256)
            .override_("CW", 32),
    );
}

/// The tensor-core flash attention kernel: every specialisation the
/// dispatcher and the benchmark's sweep can produce (head dims 16..=256 in
/// steps of 16, each tile that fits 48 KiB, subgroup sizes 16/32/64). Like
/// matmul_coop it is Vulkan-only: naga validation and SPIR-V, no MSL/HLSL
/// (`check` skips those for cooperative-matrix kernels).
#[test]
fn every_attention_coop_specialisation() {
    let specs = wgtile::tune::attention::attention_coop_specs();
    assert!(specs.len() >= 500, "{} coop attention specs", specs.len());
    for spec in &specs {
        check(spec);
    }
}

#[test]
fn broadcast_core_matches_the_dispatcher_constants() {
    // The generated core is unrolled for one block shape; the dispatcher's
    // grid arithmetic (tune::BROADCAST_*) must agree with it, and both
    // preludes must take it, with the epilogue's terms on.
    let core = Kernel::MatmulBroadcast.parts()[1];
    assert!(core.starts_with("// matmul_broadcast_core: GENERATED"));
    for (name, value) in [
        ("ROWS", wgtile::tune::BROADCAST_ROWS),
        ("COLS", wgtile::tune::BROADCAST_COLS),
    ] {
        let line = format!("const {name}: u32 = {value}u;");
        assert!(core.lines().any(|l| l == line), "core lacks `{line}`");
    }
    let size = format!(
        "@compute @workgroup_size({}, 1, 1)",
        wgtile::tune::BROADCAST_SUBGROUP
    );
    assert!(core.contains(&size));
    for kernel in [Kernel::MatmulBroadcast, Kernel::MatmulBroadcastVec4] {
        assert!(kernel.uses_subgroups() && kernel.has_epilogue() && kernel.trusted());
        check(
            &Spec::new(kernel)
                .constant("EPI_BIAS", 1)
                .constant("EPI_RESIDUAL", 1)
                .constant("EPI_ACT", 2),
        );
    }
}

#[test]
fn every_quantisation_specialisation() {
    let specs = wgtile::ops::quant::quant_specs();
    assert!(specs.len() >= 40, "{} quantisation specs", specs.len());
    for spec in &specs {
        check(spec);
    }
}

#[test]
fn every_cast_specialisation() {
    let specs = wgtile::kernels::cast::cast_specs();
    assert_eq!(
        specs.len(),
        53,
        "25 dtype pairs and the checked cast, each also as the 8-element entry, and the check pass"
    );
    for spec in &specs {
        check(spec);
    }
}

#[test]
fn every_layout_and_index_specialisation() {
    let specs: Vec<_> = wgtile::ops::layout::layout_specs()
        .into_iter()
        .chain(wgtile::ops::index::index_specs())
        .collect();
    assert_eq!(specs.len(), 11);
    for spec in &specs {
        check(spec);
    }
}

#[test]
fn every_lesson_specialisation() {
    let specs = wgtile::ops::lessons::lesson_specs();
    assert_eq!(
        specs.len(),
        10,
        "two divergence forms and eight single kernels"
    );
    for spec in &specs {
        check(spec);
    }
}

#[test]
fn every_column_reduction_specialisation() {
    for kernel in [Kernel::ReduceCols, Kernel::ReduceColsCombine] {
        for dtype in [DType::F32, DType::F16] {
            for op in [0, 1] {
                check(
                    &Spec::new(kernel)
                        .dtype(dtype)
                        .constant("OP", op)
                        .override_("WG", 256),
                );
            }
        }
    }
}

#[test]
fn every_column_softmax_specialisation() {
    let specs = wgtile::ops::rows::softmax_cols_specs();
    assert_eq!(specs.len(), 6, "three entries, f32 and f16");
    for spec in &specs {
        check(spec);
    }
}

#[test]
fn every_column_norm_specialisation() {
    let specs = wgtile::ops::rows::norm_cols_specs();
    assert_eq!(specs.len(), 6, "three entries, f32 and f16");
    for spec in &specs {
        check(spec);
    }
}

/// The operator check refuses what WGSL refuses and naga takes: a shift
/// mixed with another arithmetic or bitwise operator without parentheses
/// (Chromium's compiler rejected such a fused bf16 load); the same with
/// parentheses, nested template brackets and comparisons pass.
#[test]
#[should_panic(expected = "mixes a shift")]
fn a_shift_mixed_with_a_product_is_refused() {
    let src = "@compute @workgroup_size(1) fn main() {\n    var i = 1u;\n    let x = 7u >> (i & 1u) * 16u;\n}\n";
    crate::common::naga_check::check_wgsl("mixed shift", src, "main", &[], false);
}

#[test]
fn parenthesised_shifts_pass_the_operator_check() {
    let src = "var<private> a: array<vec2<u32>, 2>;\n@compute @workgroup_size(1) fn main() {\n    var i = 1u;\n    let x = (7u >> ((i & 1u) * 16u)) | (a[0].x << 2u);\n    let b = x >> 1u == i;\n}\n";
    crate::common::naga_check::check_wgsl("parenthesised shift", src, "main", &[], false);
}
