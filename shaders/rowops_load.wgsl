// rowops_load: the row kernels' element load, a fusion hook. The elementwise
// code generator may replace this whole part with functions of the same
// signatures computing an expression of other buffers (bindings 5 and up are
// free for it); nothing else in a row kernel reads the input.
//
//   load_x(row, col) -> f32      element (row, col), widened to f32
//   load_x4(row, c)  -> vec4<f32> elements (row, 4c .. 4c+3); called only
//                                 when VEC == 4 (n % 4 == 0)
//
// Both may read `params.n` (the row length). `x` is declared as vec4 so a
// chunk is one 16-byte (f32) / 8-byte (f16) load; tensor buffers are padded
// to 16 bytes, so the scalar path's x[i / 4][i % 4] stays inside them.

@group(0) @binding(1) var<storage, read> x: array<vec4<Elem>>;

fn load_x(row: u32, col: u32) -> f32 {
    let i = row * params.n + col;
    return f32(x[i / 4u][i % 4u]);
}

fn load_x4(row: u32, c: u32) -> vec4<f32> {
    return vec4<f32>(x[row * (params.n / 4u) + c]);
}
