//! The one naga check every shader test uses: parse, validate, apply the
//! pipeline's override constants, and translate to SPIR-V, MSL and HLSL.

use naga::back::{hlsl, msl, spv};
use naga::valid::{Capabilities, ValidationFlags, Validator};
use wgtile::kernels::Spec;

/// Checks WGSL `source` built for the compute entry point `entry` with
/// `overrides`. `spirv_only`: cooperative-matrix modules, which are Vulkan-only
/// here (naga's MSL backend offers 8x8 simdgroup matrices, its HLSL backend
/// none; the dispatcher selects them only on adapters reporting 16x16).
/// Validated without `subgroupBarrier()` (wgpu's native-only
/// `SUBGROUP_BARRIER`, which wgtile does not request: missing on WebGPU and
/// DX12): wgpu rejects a module that names it on a device without the feature
/// even where the call sits behind a false constant, as runs 37-41'
/// tensor-core attention kernel did on the H200.
/// Panics with `label` and the compiler's message on the first failure.
pub fn check_wgsl(
    label: &str,
    source: &str,
    entry: &str,
    overrides: &[(&str, u32)],
    spirv_only: bool,
) {
    check_wgsl_with(label, source, entry, overrides, spirv_only, false);
}

/// [`check_wgsl`], with `subgroup_barrier`: the module may call
/// `subgroupBarrier()` (specialisations the host builds only for devices
/// with wgpu's `SUBGROUP_BARRIER`).
pub fn check_wgsl_with(
    label: &str,
    source: &str,
    entry: &str,
    overrides: &[(&str, u32)],
    spirv_only: bool,
    subgroup_barrier: bool,
) {
    check_operator_mixing(label, source);
    check_nonfinite_constants(label, source);
    let module = naga::front::wgsl::parse_str(source)
        .unwrap_or_else(|e| panic!("{label}: parse: {}", e.emit_to_string(source)));
    let mut capabilities = Capabilities::all() - Capabilities::SUBGROUP_BARRIER;
    if subgroup_barrier {
        capabilities |= Capabilities::SUBGROUP_BARRIER;
    }
    let info = Validator::new(ValidationFlags::all(), capabilities)
        .validate(&module)
        .unwrap_or_else(|e| panic!("{label}: validate: {}", e.emit_to_string(source)));
    let mut constants = naga::back::PipelineConstants::default();
    for &(name, value) in overrides {
        constants.insert(name.to_string(), f64::from(value));
    }
    let (module, info) = naga::back::pipeline_constants::process_overrides(
        &module,
        &info,
        Some((naga::ShaderStage::Compute, entry)),
        &constants,
    )
    .unwrap_or_else(|e| panic!("{label}: overrides: {e}"));
    let spirv = spv::write_vec(
        &module,
        &info,
        &spv::Options::default(),
        Some(&spv::PipelineOptions {
            shader_stage: naga::ShaderStage::Compute,
            entry_point: entry.to_string(),
        }),
    )
    .unwrap_or_else(|e| panic!("{label}: SPIR-V: {e}"));
    assert!(!spirv.is_empty());
    if spirv_only {
        return;
    }
    msl::write_string(
        &module,
        &info,
        &msl::Options {
            lang_version: (2, 4),
            ..Default::default()
        },
        &msl::PipelineOptions {
            entry_point: Some((naga::ShaderStage::Compute, entry.to_string())),
            ..Default::default()
        },
    )
    .unwrap_or_else(|e| panic!("{label}: MSL: {e}"));
    // f16 needs shader model 6.2 on DX12 (wgpu's DXC path).
    let mut out = String::new();
    hlsl::Writer::new(
        &mut out,
        &hlsl::Options {
            shader_model: hlsl::ShaderModel::V6_2,
            ..Default::default()
        },
        &hlsl::PipelineOptions {
            entry_point: Some((naga::ShaderStage::Compute, entry.to_string())),
        },
    )
    .write(&module, &info, None)
    .unwrap_or_else(|e| panic!("{label}: HLSL: {e}"));
}

/// [`check_wgsl`] on text built for `spec` (its entry point and overrides).
/// `subgroupBarrier()` is allowed only through the tensor-core backward's
/// `sub_barrier` block, which the host writes so only for adapters with
/// the feature; anywhere else it fails, as on a device without it.
pub fn check_spec_source(label: &str, source: &str, spec: &Spec) {
    let gated = spec
        .blocks
        .iter()
        .any(|(name, text)| *name == "sub_barrier" && text.contains("subgroupBarrier"));
    check_wgsl_with(
        label,
        source,
        spec.kernel.entry_point(),
        &spec.overrides,
        spec.kernel.uses_cooperative_matrix(),
        gated,
    );
}

/// [`check_spec_source`] on `spec`'s own text.
pub fn check_spec(spec: &Spec) {
    let label = format!("{spec:?}");
    let source = spec.wgsl().unwrap_or_else(|e| panic!("{label}: {e}"));
    check_spec_source(&label, &source, spec);
}

/// A constant expression must be finite in WGSL: `bitcast<f32>(0x7fc00000u)`
/// is a shader-creation error in a browser's compiler (Chromium's refused
/// a dequantise kernel's NaN row) though naga folds it. Panics on
/// `bitcast<f32>(` applied to a hex literal whose bits are an infinity or a
/// NaN (the literal alone as the argument); such values come from a
/// runtime bitcast (`codec_bits`, `nan()`).
fn check_nonfinite_constants(label: &str, source: &str) {
    const CAST: &str = "bitcast<f32>(0x";
    for (n, line) in source.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("");
        for (at, _) in code.match_indices(CAST) {
            let rest = &code[at + CAST.len()..];
            let digits: String = rest.chars().take_while(|c| c.is_ascii_hexdigit()).collect();
            // The literal alone (`...u)`): an expression around it is a
            // runtime value.
            if !rest[digits.len()..].starts_with("u)") {
                continue;
            }
            let Ok(bits) = u32::from_str_radix(&digits, 16) else {
                continue;
            };
            assert!(
                bits & 0x7f80_0000 != 0x7f80_0000,
                "{label}: line {}: a non-finite f32 constant (WGSL refuses it): {}",
                n + 1,
                line.trim()
            );
        }
    }
}

/// WGSL makes the operands of `<<` and `>>` unary expressions: a shift
/// that meets another arithmetic or bitwise operator needs parentheses
/// (`a >> (b * c)`). naga takes C's precedence instead, so only a browser's
/// compiler would refuse such a shader (Chromium's did, in a fused bf16
/// load). Panics on a shift (written ` >> ` or ` << `, as the shaders and
/// the generators write binary operators) whose operand holds, outside
/// parentheses, one of `* / % + - & | ^` or another shift.
fn check_operator_mixing(label: &str, source: &str) {
    const OPS: [&str; 10] = [
        " * ", " / ", " % ", " + ", " - ", " & ", " | ", " ^ ", " << ", " >> ",
    ];
    // The operand of a shift on one side: the text up to the first
    // delimiter outside parentheses (an opening or closing one, a comma,
    // a statement's end, an assignment or a comparison).
    fn operand(text: &[u8], forward: bool) -> String {
        let (open, close) = if forward {
            (b"([", b")]")
        } else {
            (b")]", b"([")
        };
        let mut depth = 0i32;
        let mut out = Vec::new();
        let idx: Vec<usize> = if forward {
            (0..text.len()).collect()
        } else {
            (0..text.len()).rev().collect()
        };
        for i in idx {
            let c = text[i];
            if open.contains(&c) {
                depth += 1;
            } else if close.contains(&c) {
                if depth == 0 {
                    break;
                }
                depth -= 1;
            } else if depth == 0 {
                let spaced = |t: u8| {
                    c == t
                        && i > 0
                        && i + 1 < text.len()
                        && text[i - 1] == b' '
                        && text[i + 1] == b' '
                };
                if matches!(c, b',' | b';' | b'{' | b'}' | b'=' | b'!' | b'?')
                    || spaced(b'<')
                    || spaced(b'>')
                {
                    break;
                }
                if (c == b'&' || c == b'|') && i + 1 < text.len() && text[i + 1] == c {
                    break;
                }
                if (c == b'&' || c == b'|') && i > 0 && text[i - 1] == c {
                    break;
                }
            }
            out.push(if depth == 0 { c } else { b'_' });
        }
        if !forward {
            out.reverse();
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    for (n, line) in source.lines().enumerate() {
        let code = line.split("//").next().unwrap_or("").as_bytes();
        for shift in [" >> ", " << "] {
            let text = String::from_utf8_lossy(code);
            for (at, _) in text.match_indices(shift) {
                let left = operand(&code[..at], false);
                let right = operand(&code[at + shift.len()..], true);
                for side in [&left, &right] {
                    let padded = format!(" {side} ");
                    if let Some(op) = OPS.iter().find(|op| padded.contains(*op)) {
                        panic!(
                            "{label}: line {}: `{}` mixes a shift with `{}` without parentheses (WGSL refuses it)",
                            n + 1,
                            line.trim(),
                            op.trim()
                        );
                    }
                }
            }
        }
    }
}
