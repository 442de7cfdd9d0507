// rowops_write: `store_chunk`, the chunk-wide store of the row kernels that
// write a row (softmax, norm, copy; not reduce), built on the fusion hooks
// `store_y4` / `store_y` of rowops_store.wgsl. Kept apart from that hook part
// so a generated store part needs only those two functions.

// Writes the lanes of chunk `c` that are columns of the row through the
// fusion hooks `store_y4` / `store_y`.
fn store_chunk(row: u32, c: u32, v: vec4<f32>) {
    if VEC == 4u {
        store_y4(row, c, v);
        return;
    }
    let col = c * 4u;
    for (var j = 0u; j < 4u; j++) {
        if col + j < params.n {
            store_y(row, col + j, v[j]);
        }
    }
}
