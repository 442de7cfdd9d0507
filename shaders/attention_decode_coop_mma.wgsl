// attention_decode_coop_mma: the global-memory fragment loads of
// attention_decode_coop.wgsl on cooperative matrices: K^T's B fragment read
// column-major and V's row-major straight from the storage buffers (k and
// v, attention_common's f16 views at bindings 2 and 3; `at` an element
// index that is a multiple of 8, `ld` the row stride, a multiple of 8).
// Appended after attention_coop_mma.wgsl. Vulkan only.

fn load_bt_k(at: u32, ld: u32) -> MatB {
    return coopLoad<MatB>(&k[at], ld);
}

fn load_b_v(at: u32, ld: u32) -> MatB {
    return coopLoadT<MatB>(&v[at], ld);
}
