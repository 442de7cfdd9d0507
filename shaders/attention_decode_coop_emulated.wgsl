// attention_decode_coop_emulated: the global-memory fragment loads of
// attention_decode_coop.wgsl for the emulated matrix operations
// (attention_coop_emulated.wgsl, whose B fragments are references into
// kv_sh): the 16 x 16 block is copied into kv_sh's first 16 rows of LDKV
// (lane r copies row r; barriers on both sides, so the previous fragment's
// product is done and the copy is visible) and referenced there. Valid
// because the emulated kernel multiplies each fragment right after loading
// it and, on the direct path, keeps nothing else in kv_sh.

fn copy_block(at: u32, ld: u32, which: u32) {
    workgroupBarrier();
    let src = at + emu_lane * ld;
    for (var c4 = 0u; c4 < 4u; c4++) {
        var x: vec4<f16>;
        for (var i = 0u; i < 4u; i++) {
            if which == 0u {
                x[i] = k[src + 4u * c4 + i];
            } else {
                x[i] = v[src + 4u * c4 + i];
            }
        }
        kv_sh[(emu_lane * LDKV) / 4u + c4] = x;
    }
    workgroupBarrier();
}

fn load_bt_k(at: u32, ld: u32) -> MatB {
    copy_block(at, ld, 0u);
    return load_bt_kv(0u, LDKV);
}

fn load_b_v(at: u32, ld: u32) -> MatB {
    copy_block(at, ld, 1u);
    return load_b_kv(0u, LDKV);
}
