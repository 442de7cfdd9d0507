// rowops_subgroup: row reductions with subgroup operations, for adapters with
// the `subgroups` feature. Same interface as rowops_plain.wgsl.
// No `enable subgroups;` directive: naga 30 rejects it ("not yet
// implemented") and gates subgroup operations by the device feature instead.
// A browser (Tint) needs the directive; it would go first in the module.
//
// Algorithm (one row per workgroup, T == WG): `subgroupAdd`/`subgroupMax`
//   within each subgroup; lane 0 of subgroup k writes red[k] (k =
//   `subgroup_id`, so nothing assumes how invocations map to subgroups);
//   one barrier; every subgroup then reads the `num_subgroups` partials
//   (strided by `subgroup_size`) and reduces them again with a subgroup op,
//   so all invocations get the result: 2 barriers instead of log2(WG).
// The subgroup size is read from the builtin, never assumed (lavapipe 8,
// NVIDIA 32, AMD 32/64). Several rows per workgroup (T < WG) fall back to the
// workgroup-memory tree: a subgroup may span two rows.

struct Ids {
    @builtin(local_invocation_index) lid: u32,
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(num_subgroups) sg_count: u32,
}

var<private> sg_size: u32;
var<private> sg_lane: u32;
var<private> sg_id: u32;
var<private> sg_count: u32;

fn init_ids(ids: Ids) {
    lid = ids.lid;
    wid = ids.wid;
    sg_size = ids.sg_size;
    sg_lane = ids.sg_lane;
    sg_id = ids.sg_id;
    sg_count = ids.sg_count;
}

fn row_sum(v: f32) -> f32 {
    if T != WG {
        return tree_sum(v);
    }
    let s = subgroupAdd(v);
    if sg_lane == 0u {
        red[sg_id] = s;
    }
    workgroupBarrier();
    var acc = 0.0;
    for (var i = sg_lane; i < sg_count; i += sg_size) {
        acc += red[i];
    }
    let r = subgroupAdd(acc);
    workgroupBarrier();
    return r;
}

fn row_max(v: f32) -> f32 {
    if T != WG {
        return tree_max(v);
    }
    let s = subgroupMax(v);
    if sg_lane == 0u {
        red[sg_id] = s;
    }
    workgroupBarrier();
    var acc = neg_inf();
    for (var i = sg_lane; i < sg_count; i += sg_size) {
        acc = max(acc, red[i]);
    }
    let r = subgroupMax(acc);
    workgroupBarrier();
    return r;
}
