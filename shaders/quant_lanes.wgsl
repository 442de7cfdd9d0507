// quant_lanes: the per-word row quantisers' invocation ids and the
// exchange of a block's statistics through workgroup memory (each word's
// in its slot, a barrier, the block's slots merged). Same interface as
// quant_lanes_subgroup.wgsl.

struct Ids {
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
}

// The invocation's index in its workgroup, which places its word.
fn lane(ids: Ids) -> u32 {
    return ids.lid;
}

// The statistics of the block whose words are lanes slot0 .. slot0 + wpb - 1,
// `own` being this lane's word's.
fn block_stats(l: u32, own: Stats, slot0: u32) -> Stats {
    put_stats(l, own);
    stats_barrier();
    return slot_stats(slot0, 1u);
}
