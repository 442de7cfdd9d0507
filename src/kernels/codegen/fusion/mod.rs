//! Code generation for fused elementwise kernels: an [`Expr`] becomes one WGSL
//! compute kernel.
//!
//! # Lowering
//! The tree is walked once (children before parents) into a list of SSA
//! values: a node shared by several parents (same `Arc`) is computed once,
//! and every distinct tensor (same buffer, shape and dtype) becomes one input
//! binding loaded once per output element, so `x * x` reads `x` once. Each
//! scalar occurrence becomes a slot of a constants buffer, so the constant's
//! value is NOT part of the kernel text.
//!
//! # The kernel
//! - bindings: 0 = uniform `array<vec4<u32>>` (element count, NaN/Inf bit
//!   patterns, output dims, one stride vector per input), 1 = `array<f32>`
//!   constants (only when there are scalars), 2 = output, 3.. = inputs, then
//!   any further outputs ([`Context::eval_many`]: several expressions of one
//!   shape in one pass, sharing loads and subexpressions).
//! - 256-invocation workgroups on a 2-D grid (as few rows as the adapter's
//!   per-dimension limit allows, rows of equal length, so more than 65535 x
//!   256 units fit), one unit per invocation, `if unit >= count: return`.
//! - **vec4 path** (a unit is 4 elements, 16-byte loads and stores of f32,
//!   8-byte of f16) when the element count is a multiple of 4 and every input
//!   is the output's shape, a single element, or a broadcast whose innermost
//!   dimension is either the output's (a multiple of 4) or 1. Otherwise the
//!   **scalar path** (a unit is one element).
//! - inputs of the output's shape load at the unit index; single elements
//!   load element 0 (splat); broadcast inputs decompose the element index
//!   into 4-D coordinates (output dims in the uniform) and dot them with
//!   their strides (0 along broadcast dimensions).
//! - math in f32 (`vec4<f32>` on the vec4 path) through small helper
//!   functions for the ops with edge cases (see the module docs of
//!   [`crate::Expr`] for the NaN/Inf rules); the result is
//!   converted to the output dtype once, at the store.
//!
//! # Matmul epilogues
//! [`generate_epilogue`] turns an expression of [`Expr::acc`] (the matmul
//! accumulator), a bias and a residual into the WGSL of the matmul
//! epilogue function, with the same per-op code and helpers (scalar `V`);
//! [`crate::kernels::Spec::epilogue`] splices it into any matmul kernel.
//!
//! # Row kernels
//! [`rows`] generates the load and store hook parts of the row kernels
//! (reductions, softmax, norms) from an input expression and an epilogue of
//! [`Expr::acc`], for [`crate::ops::rows::fused`]; those pipelines share this
//! cache, keyed by (kernel specialisation, structure key).
//!
//! # Cache key
//! [`Generated::key`] is a canonical string of everything the text depends
//! on and nothing else: path (vec4 or scalar), output dtype, each input's
//! dtype and access kind, the constant count and the SSA list with operand
//! numbers. Shapes, strides, buffers and scalar values are runtime data, so
//! `x*2+1` on any shape and `y*3-5` share one pipeline. Pipelines are kept per
//! device in a bounded least-recently-used cache ([`CACHE_CAPACITY`]
//! entries), compiled through [`crate::kernels`]' error-scoped `compile`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::expr::{BinaryOp, Expr, Node, UnaryOp};
use crate::gpu::{MAX_RANK, Tensor};

mod codegen;
mod lower;
pub mod rows;

pub(crate) use codegen::*;
pub use codegen::{EpilogueCode, generate, generate_epilogue, generate_many};
pub(crate) use lower::*;
pub use rows::{RowHooks, generate_row_hooks};

/// Invocations per workgroup.
pub const WORKGROUP_SIZE: u32 = 256;

/// Deepest expression accepted (operations from the root to a leaf): the
/// lowering recurses, and kernels this long are better split anyway.
pub const MAX_DEPTH: usize = 256;

pub use crate::kernels::GENERATED_CACHE_CAPACITY as CACHE_CAPACITY;

/// How a kernel input is addressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// Same shape as the output: element `i` for output element `i`.
    Contiguous,
    /// One element, splat to every output element.
    Single,
    /// Broadcast: 4-D coordinates dotted with per-dimension strides. On the
    /// vec4 path `inner_unit` says the innermost stride is 1 (a vec4 load);
    /// otherwise it is 0 (one element splat to the 4 lanes).
    Broadcast {
        /// Innermost dimension not broadcast (stride 1).
        inner_unit: bool,
    },
    /// In place: the output buffer itself, read at the unit before the
    /// store (same shape and dtype as the output).
    Output,
}

/// One input binding of a generated kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct InputDesc {
    /// Element type in memory.
    pub dtype: DType,
    /// How it is addressed.
    pub access: Access,
}

/// One SSA value of a lowered expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Op {
    Load(usize),
    Const(usize),
    Unary(UnaryOp, usize),
    Binary(BinaryOp, usize, usize),
    Where(usize, usize, usize),
}

/// A generated kernel: its WGSL and the structural key it is cached by.
#[derive(Clone, Debug)]
pub struct Generated {
    /// Canonical description of the kernel's structure (see the module docs).
    pub key: String,
    /// The complete WGSL module (entry point `main`, override `WG`).
    pub wgsl: String,
    /// Whether it is the vec4 path.
    pub vec4: bool,
    /// The kernel's input bindings (in binding order, from binding 3).
    pub inputs: Vec<InputDesc>,
    /// Number of scalar constants the kernel reads (binding 1 exists when > 0).
    pub constants: usize,
}

/// A leaf of the lowered expression.
pub(crate) enum Leaf {
    Tensor(Tensor),
    /// The matmul accumulator (epilogues only).
    Acc,
    Symbol {
        id: u32,
        shape: Vec<usize>,
        dtype: DType,
    },
}

/// An expression lowered to SSA, with its leaves and constants.
pub(crate) struct Lowered {
    pub(crate) ops: Vec<Op>,
    pub(crate) leaves: Vec<Leaf>,
    pub(crate) constants: Vec<f32>,
    /// The (common) broadcast shape of the roots.
    pub(crate) shape: Vec<usize>,
    /// The SSA value of each expression lowered together.
    pub(crate) roots: Vec<usize>,
}
