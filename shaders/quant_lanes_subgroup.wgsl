// quant_lanes_subgroup: quant_lanes.wgsl's interface with subgroup
// shuffles, for adapters with the `subgroups` feature whose subgroups hold
// a whole block's words (words per block a power of two dividing the
// smallest subgroup). Invocations are numbered subgroup by subgroup, so a
// block's words are adjacent lanes of one subgroup whatever order the
// driver puts invocations in; the statistics meet by XOR shuffles, with no
// barrier. No `enable subgroups;` (naga gates the operations by the
// device feature).

struct Ids {
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(subgroup_id) sg_id: u32,
    @builtin(subgroup_size) sg_size: u32,
    @builtin(subgroup_invocation_id) sg_lane: u32,
}

fn lane(ids: Ids) -> u32 {
    return ids.sg_id * ids.sg_size + ids.sg_lane;
}

// `l` and `slot0` (the workgroup-memory form's slots) go unused here.
fn block_stats(l: u32, own: Stats, slot0: u32) -> Stats {
    var st = own;
    for (var o = 1u; o < block_words(); o <<= 1u) {
        if FORMAT == 6u {
            let other = Stats(
                subgroupShuffleXor(st.amax_b, o),
                subgroupShuffleXor(u32(st.finite), o) != 0u,
                subgroupShuffleXor(st.lo, o),
                subgroupShuffleXor(st.hi, o),
            );
            st = stats_merge(st, other);
        } else {
            st.amax_b = max(st.amax_b, subgroupShuffleXor(st.amax_b, o));
        }
    }
    return stats_done(st);
}
