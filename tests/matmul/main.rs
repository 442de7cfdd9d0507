//! Matmul on a real adapter against the f64 CPU reference: the kernels
//! (`matmul`), fused epilogues (`epilogue`, and `epilogue_expr` for those
//! built from elementwise expressions), tensors allocated padded
//! (`padded`) and the padding layer (`pad`).

#[path = "../common/mod.rs"]
mod common;

mod epilogue;
mod epilogue_expr;
mod matmul;
mod pad;
mod padded;
