// quant_product_params: the uniform of the quantised products that are not
// matmul kernels (the GEMVs and the tensor-core GEMM's f32 fallback),
// appended by the registry; one Rust writer, `Context::
// quant_product_params`. It has the words the fused matmul epilogue reads
// (matmul_epilogue.wgsl: params.m, params.n, params.alpha, params.epi_k;
// bindings 5 and 6 as Out).

// The output and epilogue tensors' type.
alias Out = f32;

struct Params {
    m: u32,
    n: u32,
    k: u32,
    // blocks per weight line (K / block, rounded up)
    nb: u32,
    // workgroups per grid row
    gx: u32,
    // quant_gemv: words of a weight row that hold elements below K
    words: u32,
    // quant_matmul_naive: elements per block
    block: u32,
    // the epilogue's scale and a generated epilogue's scalars
    alpha: f32,
    epi_k: array<vec4<f32>, 2>,
}

@group(0) @binding(0) var<uniform> params: Params;
