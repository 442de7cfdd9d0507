// pad_copy: copies a batch of row-major matrices into another row/column
// count, zero-filling where the destination is larger and cropping where it
// is smaller. The padding layer uses it to align awkward matmul shapes (A:
// K -> K', B: K, N -> K', N') and to slice the padded result back (C: N' -> N).
//
// Algorithm: one invocation per destination element; x runs along columns so
//   neighbouring invocations read and write neighbouring addresses (coalesced).
// Workgroup: 16 x 16. Grid: (ceil(dst_cols / 16), ceil(dst_rows / 16), batches).
// Batching: matrix z = batch_base + workgroup z; source and destination are
//   dense batches of their own shapes.
// Types: Elem is f32 or f16 (text-specialised).
//
// Entry `halves` (destination rows a multiple of 8 halves, the padding
//   layer's A and B; f32 matrices as rows of twice as many halves, which
//   then always start on a word): one invocation per 16 bytes of the destination, so
//   stores are full 16-byte words and 8x fewer invocations run. Workgroup 32
//   x 8: a warp of 32 covers 512 contiguous bytes of one row, so a row's
//   alignment (where its first half sits in a 16-byte word of the source) is
//   the same for the whole warp and the branches on it never diverge. The 8
//   source halves start at any half: the two aligned 16-byte words that hold
//   them are loaded (the source as vec4<u32>; the second is the neighbour's
//   first, an L1 hit) and the 4 or 5 words needed are picked and
//   funnel-shifted; halves past the source row are zeroed. Pure bit moves:
//   no f16 arithmetic, any f16 pattern (NaN payloads included) is copied as
//   it is.
//   Two copies in one dispatch (the padding layer's A and B): workgroups
//   z < jobs[2].z copy job 0 (bindings 3, 4), the rest job 1 (bindings 6,
//   7); a single copy binds placeholders for job 1 and launches none of its
//   workgroups. The branch on the job is uniform per workgroup. H200
//   (run 44): 4097 38.7 us against 21.9 + 22.0 timed alone, but whole
//   plans gain only 0-5 us: wgpu puts no barrier between two copies into
//   different buffers, so they already overlapped
//   (docs/perf/matmul.md#padding-layer).
//   Grid: (ceil(max dst_cols / 256), ceil(max dst_rows / 8), batches of job 0
//   + batches of job 1); each job checks its own shape.

alias Elem = f32;

struct Params {
    src_rows: u32,
    src_cols: u32,
    dst_rows: u32,
    dst_cols: u32,
    batch_base: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<Elem>;
@group(0) @binding(2) var<storage, read_write> dst: array<Elem>;

@compute @workgroup_size(16, 16, 1)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c = gid.x;
    let r = gid.y;
    let z = params.batch_base + gid.z;
    if r >= params.dst_rows || c >= params.dst_cols {
        return;
    }
    var v = Elem(0.0);
    if r < params.src_rows && c < params.src_cols {
        v = src[(z * params.src_rows + r) * params.src_cols + c];
    }
    dst[(z * params.dst_rows + r) * params.dst_cols + c] = v;
}

// Jobs of `halves`: jobs[j] = (src_rows, src_cols, dst_rows, dst_cols) of
// job j; jobs[2] = (first matrix of job 0, first matrix of job 1, workgroups
// z of job 0, unused).
@group(0) @binding(5) var<uniform> jobs: array<vec4<u32>, 3>;
@group(0) @binding(3) var<storage, read> src_quads: array<vec4<u32>>;
@group(0) @binding(4) var<storage, read_write> dst_words: array<vec4<u32>>;
@group(0) @binding(6) var<storage, read> src_quads_b: array<vec4<u32>>;
@group(0) @binding(7) var<storage, read_write> dst_words_b: array<vec4<u32>>;

// 16-byte word q of job `second`'s source, clamped into the buffer (a
// clamped word only feeds halves past the row's end).
fn src_word(second: bool, q: u32) -> vec4<u32> {
    if second {
        return src_quads_b[min(q, arrayLength(&src_quads_b) - 1u)];
    }
    return src_quads[min(q, arrayLength(&src_quads) - 1u)];
}

// Bits of halves `2j` and `2j + 1` kept when `valid` halves are real.
fn half_mask(j: u32, valid: u32) -> u32 {
    return select(0u, 0xffffu, 2u * j < valid) | select(0u, 0xffff0000u, 2u * j + 1u < valid);
}

@compute @workgroup_size(32, 8, 1)
fn halves(
    @builtin(global_invocation_id) gid: vec3<u32>,
    @builtin(workgroup_id) wid: vec3<u32>,
) {
    let second = wid.z >= jobs[2].z;
    let shape = jobs[u32(second)];
    let src_rows = shape.x;
    let src_cols = shape.y;
    let dst_rows = shape.z;
    let dst_cols = shape.w;
    let c = gid.x * 8u;
    let r = gid.y;
    let z = select(jobs[2].x + wid.z, jobs[2].y + (wid.z - jobs[2].z), second);
    if r >= dst_rows || c >= dst_cols {
        return;
    }
    var valid = 0u;
    if r < src_rows && c < src_cols {
        valid = min(src_cols - c, 8u);
    }
    var out = vec4<u32>(0u);
    if valid > 0u {
        // Half s of the source: word s / 2, word (s / 2) % 4 of 16-byte word q.
        let s = (z * src_rows + r) * src_cols + c;
        let w = s >> 1u;
        let q = w >> 2u;
        let o = w & 3u;
        let odd = (s & 1u) == 1u;
        let v0 = src_word(second, q);
        // The second word only when the run crosses into it.
        var v1 = vec4<u32>(0u);
        if o != 0u || odd {
            v1 = src_word(second, q + 1u);
        }
        // Words w .. w + 3 and the fifth, w + 4, for an odd start.
        var x: vec4<u32>;
        var t: u32;
        switch o {
            case 0u: {
                x = v0;
                t = v1.x;
            }
            case 1u: {
                x = vec4<u32>(v0.yzw, v1.x);
                t = v1.y;
            }
            case 2u: {
                x = vec4<u32>(v0.zw, v1.xy);
                t = v1.z;
            }
            default: {
                x = vec4<u32>(v0.w, v1.xyz);
                t = v1.w;
            }
        }
        out = x;
        if odd {
            out = vec4<u32>(
                (x.x >> 16u) | (x.y << 16u),
                (x.y >> 16u) | (x.z << 16u),
                (x.z >> 16u) | (x.w << 16u),
                (x.w >> 16u) | (t << 16u),
            );
        }
        out &= vec4<u32>(
            half_mask(0u, valid),
            half_mask(1u, valid),
            half_mask(2u, valid),
            half_mask(3u, valid),
        );
    }
    let at = ((z * dst_rows + r) * dst_cols + c) / 8u;
    if second {
        dst_words_b[at] = out;
    } else {
        dst_words[at] = out;
    }
}
