// rowops_copy: copies a tensor through the row kernels' load/store hooks,
// the bandwidth reference the row-op benchmarks compare against (a kernel
// that reads and writes every byte once, with the same access width).
//
// Algorithm: the tensor as one row of n elements in chunks of 4; workgroup g
//   copies chunks [g * 4 * WG, (g + 1) * 4 * WG): each invocation issues its
//   4 loads (strided by WG, so each load instruction is coalesced across the
//   workgroup) before its 4 stores, like the row kernels' register loads.
//   `load_chunk` / `store_chunk`: one vector access per chunk when VEC == 4.
// Workgroup: WG x 1 x 1 (override); 2-D grid of ceil(chunks / (4 WG)) groups.
// Measurements: docs/perf/rows.md.

alias Elem = f32;
const VEC: u32 = 4u;
// Chunks per invocation.
const COPY_CHUNKS: u32 = 4u;

@compute @workgroup_size(WG, 1, 1)
fn main(ids: Ids) {
    init_ids(ids);
    let base = group_index() * COPY_CHUNKS * WG + lid;
    let chunks = chunk_count();
    var v: array<vec4<f32>, COPY_CHUNKS>;
    for (var i = 0u; i < COPY_CHUNKS; i++) {
        let c = base + i * WG;
        if c < chunks {
            v[i] = load_chunk(0u, c, 0.0);
        }
    }
    for (var i = 0u; i < COPY_CHUNKS; i++) {
        let c = base + i * WG;
        if c < chunks {
            store_chunk(0u, c, v[i]);
        }
    }
}
