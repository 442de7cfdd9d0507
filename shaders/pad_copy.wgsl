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
// Row offsets (one matrix only, batch_base 0): destination row r takes
//   source row src_row0 + r (zero past src_rows) and lands at row dst_row0 +
//   r of the destination buffer, which may hold more rows than dst_rows
//   (the rows copied): the padding layer's last-row split copies one row
//   of A out and one row of the result in.
// Types: Elem is f32 or f16 (text-specialised).
//
// Entry `halves` (f16, destination rows a multiple of 8 halves, the padding
//   layer's A and B): one invocation per 16 bytes of the destination, so
//   stores are full 16-byte words and 8x fewer invocations run. The 8 source
//   halves start at any parity: 4 or 5 32-bit words are read (bindings 3 and
//   4, the same buffers as words) and funnel-shifted; halves past the source
//   row are zeroed. Pure bit moves: no f16 arithmetic, any f16 pattern
//   (NaN payloads included) is copied as it is. Grid: (ceil(dst_cols / 128),
//   ceil(dst_rows / 16), batches), workgroup 16 x 16.

alias Elem = f32;

struct Params {
    src_rows: u32,
    src_cols: u32,
    dst_rows: u32,
    dst_cols: u32,
    batch_base: u32,
    src_row0: u32,
    dst_row0: u32,
    _pad0: u32,
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
    let sr = params.src_row0 + r;
    var v = Elem(0.0);
    if sr < params.src_rows && c < params.src_cols {
        v = src[(z * params.src_rows + sr) * params.src_cols + c];
    }
    dst[(z * params.dst_rows + params.dst_row0 + r) * params.dst_cols + c] = v;
}

@group(0) @binding(3) var<storage, read> src_words: array<u32>;
@group(0) @binding(4) var<storage, read_write> dst_words: array<vec4<u32>>;

// Source word `i`, clamped into the buffer: a clamped word only ever feeds
// halves past the row's end, which are masked.
fn src_word(i: u32) -> u32 {
    return src_words[min(i, arrayLength(&src_words) - 1u)];
}

// Bits of halves `2j` and `2j + 1` kept when `valid` halves are real.
fn half_mask(j: u32, valid: u32) -> u32 {
    return select(0u, 0xffffu, 2u * j < valid) | select(0u, 0xffff0000u, 2u * j + 1u < valid);
}

@compute @workgroup_size(16, 16, 1)
fn halves(@builtin(global_invocation_id) gid: vec3<u32>) {
    let c = gid.x * 8u;
    let r = gid.y;
    let z = params.batch_base + gid.z;
    if r >= params.dst_rows || c >= params.dst_cols {
        return;
    }
    let sr = params.src_row0 + r;
    var valid = 0u;
    if sr < params.src_rows && c < params.src_cols {
        valid = min(params.src_cols - c, 8u);
    }
    var out = vec4<u32>(0u);
    if valid > 0u {
        let s = (z * params.src_rows + sr) * params.src_cols + c;
        let w = s >> 1u;
        let w0 = src_word(w);
        let w1 = src_word(w + 1u);
        let w2 = src_word(w + 2u);
        let w3 = src_word(w + 3u);
        if (s & 1u) == 0u {
            out = vec4<u32>(w0, w1, w2, w3);
        } else {
            let w4 = src_word(w + 4u);
            out = vec4<u32>(
                (w0 >> 16u) | (w1 << 16u),
                (w1 >> 16u) | (w2 << 16u),
                (w2 >> 16u) | (w3 << 16u),
                (w3 >> 16u) | (w4 << 16u),
            );
        }
        out &= vec4<u32>(
            half_mask(0u, valid),
            half_mask(1u, valid),
            half_mask(2u, valid),
            half_mask(3u, valid),
        );
    }
    dst_words[((z * params.dst_rows + params.dst_row0 + r) * params.dst_cols + c) / 8u] = out;
}
