// cols_finish: the third entry of the column kernels that write the column
// again (softmax_cols, norm_cols), after cols_driver.wgsl: each segment
// written (`write_rows`) from its column's merged partial, which
// `combined` stored at partials[split * cols + c].

@compute @workgroup_size(WG, 1, 1)
fn finish(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let cols = params.outer * params.inner;
    let c = wid.x * WG + lid;
    if c >= cols {
        return;
    }
    let r0 = wid.y * params.seg;
    let r1 = min(params.n, r0 + params.seg);
    write_rows(column_base(c), r0, r1, partials[params.split * cols + c]);
}
