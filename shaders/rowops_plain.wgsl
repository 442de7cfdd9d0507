// rowops_plain: row reductions through workgroup memory only (adapters
// without the `subgroups` feature). Defines what the row kernels call:
// `struct Ids` (the entry point's builtins), `init_ids`, `row_sum`, `row_max`.

struct Ids {
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
}

fn init_ids(ids: Ids) {
    lid = ids.lid;
    wid = ids.wid;
}

// Sum of `v` over the T invocations of this invocation's row.
fn row_sum(v: f32) -> f32 {
    return tree_sum(v);
}

// Max of `v` over the T invocations of this invocation's row.
fn row_max(v: f32) -> f32 {
    return tree_max(v);
}
