// rowops_copy: copies a tensor through the row kernels' load/store hooks,
// the bandwidth reference the row-op benchmarks compare against (a kernel
// that reads and writes every byte once, with the same access width).
//
// Algorithm: the tensor as one row of n elements; one chunk of 4 per
//   invocation (`load_chunk` / `store_chunk`: one vec4 access when VEC == 4).
// Workgroup: WG x 1 x 1 (override); 2-D grid of ceil(chunks / WG) workgroups.

alias Elem = f32;
const VEC: u32 = 4u;

@compute @workgroup_size(WG, 1, 1)
fn main(ids: Ids) {
    init_ids(ids);
    let c = group_index() * WG + lid;
    if c < chunk_count() {
        store_chunk(0u, c, load_chunk(0u, c, 0.0));
    }
}
