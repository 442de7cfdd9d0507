// attention_coop_rows: reductions over the LPR adjacent lanes that share a
// softmax row in the tensor-core attention kernels (attention_flash_coop,
// attention_decode_coop; LPR = SG / 16 is the kernel's constant, 1 in the
// emulated variants, where the loops run no step).

// Max and sum over the LPR lanes of a row.
fn row_max(x: f32) -> f32 {
    var m = x;
    for (var s = 1u; s < LPR; s <<= 1u) {
        m = max(m, subgroupShuffleXor(m, s));
    }
    return m;
}

fn row_sum(x: f32) -> f32 {
    var t = x;
    for (var s = 1u; s < LPR; s <<= 1u) {
        t += subgroupShuffleXor(t, s);
    }
    return t;
}
