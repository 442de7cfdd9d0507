//! Helpers shared by the `wgtile-dev` programs (see `README.md` next to
//! this crate's manifest): seeded matrices with an f64 check of a product,
//! and the timing and comparison helpers of the attention programs.

/// The attention programs' shared cases and helpers, the `attention`
/// example's own.
#[path = "../../examples/common/attention.rs"]
pub mod attention;
/// Seeded matrices and a sampled f64 check of a product: the examples' own
/// helpers, shared rather than copied.
#[path = "../../examples/common/mod.rs"]
pub mod matrix;
/// The `batch` example's MLP stack (op by op and as plans).
#[path = "../../examples/common/mlp.rs"]
pub mod mlp;
