// rowops_store: the row kernels' per-element output store, a fusion hook
// (see rowops_load.wgsl). The elementwise code generator may replace it to
// apply an epilogue expression or write elsewhere.
//
//   store_y(row, col, v)   element (row, col), narrowed to Elem
//   store_y4(row, c, v)    elements (row, 4c .. 4c+3); only when VEC == 4

@group(0) @binding(2) var<storage, read_write> y: array<vec4<Elem>>;

fn store_y(row: u32, col: u32, v: f32) {
    let i = row * params.n + col;
    y[i / 4u][i % 4u] = Elem(v);
}

fn store_y4(row: u32, c: u32, v: vec4<f32>) {
    y[row * (params.n / 4u) + c] = vec4<Elem>(v);
}
