// split_f32: the arithmetic of f32 values split into two f16 halves, shared
// by the tensor-core kernels' f32 forms (attention_flash_coop.wgsl and
// matmul_coop.wgsl with SPLIT = 1; appended by the registry to both).
//
// A value x (scaled by a power of two 2^e first) is hi + lo: hi is x rounded
// to 11 significant bits, exact in f16, and lo = x - hi, rounded to f16 when
// stored. A product then takes three tensor-core products, lo*hi + hi*lo +
// hi*hi: each within ~2^-20 of exact (3xTF32's idea on f16 tensor cores).
// Measurements: docs/perf/matmul.md#f32-split,
// docs/perf/attention.md#f32-on-tensor-cores.

// The exponent e that puts m * 2^e in [2^14, 2^15) (0 for m = 0 or not
// finite; clamped so that 2^e and 2^-e stay normal f32): with m an
// operand's largest finite magnitude (attention_split_scale.wgsl,
// matmul_split_scale.wgsl), every value times 2^e has a finite hi.
fn split_exponent(m: f32) -> i32 {
    if !(m > 0.0) || m > 3.4028235e38 {
        return 0;
    }
    // m = f * 2^x with f in [0.5, 1): m * 2^(15 - x) is in [2^14, 2^15).
    return clamp(15 - frexp(m).exp, -120, 120);
}

// hi of x: x rounded to 11 significant bits with integer operations (half
// the dropped range added to the bits, the 13 low mantissa bits cleared:
// exact in f16 for |x| in [2^-14, 2^15]); lo = x - hi is exact in f32
// (|lo| <= 2^-11 |x|). Not hi = f16(x), lo = x - f32(hi): the NVIDIA
// compiler folds f32(f16(x)) into x (H200, run 71), which left every lo
// 0 and the products with f16's error (6.5e-5 against f32's 1e-7).
fn split_hi(x: vec4<f32>) -> vec4<f32> {
    return bitcast<vec4<f32>>((bitcast<vec4<u32>>(x) + vec4<u32>(0x1000u)) & vec4<u32>(0xffffe000u));
}
