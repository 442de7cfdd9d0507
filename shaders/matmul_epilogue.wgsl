// matmul_epilogue: the fused epilogue appended to every matmul kernel. It is
// applied in registers to each accumulator before the single store, so a
// bias, a scale, an activation and a residual add cost no extra pass over C:
//   C[z, r, c] = act(alpha * acc + bias[c]) + residual[z, r, c]
// Which terms exist is text-specialised (EPI_BIAS, EPI_RESIDUAL: 0 or 1;
// EPI_ACT: 0 none, 1 relu, 2 gelu (tanh form), 3 silu), so an unused term
// compiles away; alpha comes from the kernel's Params (1.0 when unset).
// Bindings 5 (bias, N elements) and 6 (residual, shaped like C), both in the
// output's type `Out` (declared by every matmul kernel), are always
// declared; the launch binds a small dummy buffer for a term that is off.
// Kernels call it with the logical (row, col) of C; reads of the bias and
// residual are guarded, so register tiles past the edge may call it too.

const EPI_BIAS: u32 = 0u;
const EPI_RESIDUAL: u32 = 0u;
const EPI_ACT: u32 = 0u;

@group(0) @binding(5) var<storage, read> epi_bias: array<Out>;
@group(0) @binding(6) var<storage, read> epi_residual: array<Out>;

fn epilogue(acc: f32, z: u32, row: u32, col: u32) -> f32 {
    var v = params.alpha * acc;
    let inside = row < params.m && col < params.n;
    if EPI_BIAS == 1u && inside {
        v += f32(epi_bias[col]);
    }
    if EPI_ACT == 1u {
        v = max(v, 0.0);
    } else if EPI_ACT == 2u {
        // 0.5 v (1 + tanh(sqrt(2 / pi) (v + 0.044715 v^3))); the clamp keeps
        // tanh away from large arguments where some backends lose accuracy.
        let u = clamp(0.7978845608 * (v + 0.044715 * v * v * v), -15.0, 15.0);
        v = 0.5 * v * (1.0 + tanh(u));
    } else if EPI_ACT == 3u {
        v = v / (1.0 + exp(-v));
    }
    if EPI_RESIDUAL == 1u && inside {
        v += f32(epi_residual[(z * params.m + row) * params.n + col]);
    }
    return v;
}

fn epilogue4(acc: vec4<f32>, z: u32, row: u32, col: u32) -> vec4<f32> {
    return vec4<f32>(
        epilogue(acc.x, z, row, col),
        epilogue(acc.y, z, row, col + 1u),
        epilogue(acc.z, z, row, col + 2u),
        epilogue(acc.w, z, row, col + 3u),
    );
}
