//! The fused epilogue of the matmul family's kernels (the matmuls, the
//! quantised products): what it computes, as data the op families share,
//! and how a kernel is specialised and parameterised for it.

use std::borrow::Cow;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::gpu::Tensor;
use crate::kernels::Spec;
use crate::kernels::codegen::fusion::EPILOGUE_DATA_CONSTANTS;
use crate::runtime::Context;

/// Activation applied in a matmul's epilogue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Activation {
    /// None.
    #[default]
    None,
    /// `max(x, 0)`.
    Relu,
    /// GELU, the exact form (PyTorch's default, `nn.GELU()`):
    /// `0.5 x (1 + erf(x / sqrt(2)))`, through a generated epilogue
    /// (erfc by a Chebyshev fit, relative error below 1.2e-7).
    Gelu,
    /// GELU, tanh approximation (PyTorch's `approximate="tanh"`):
    /// `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
    GeluTanh,
    /// SiLU (swish): `x / (1 + exp(-x))`.
    Silu,
}

impl Activation {
    /// The built-in epilogue's `EPI_ACT` code; `None` for the exact GELU,
    /// which runs as a generated epilogue ([`Epilogue::resolved`]).
    pub(crate) const fn code(self) -> Option<u32> {
        match self {
            Activation::None => Some(0),
            Activation::Relu => Some(1),
            Activation::GeluTanh => Some(2),
            Activation::Silu => Some(3),
            Activation::Gelu => None,
        }
    }
}

/// Work fused into a matmul's store, in registers, before the single write:
/// `C = act(alpha * (A @ B) + bias) + residual`, where `bias` has one value
/// per output column (shape `[N]`) and `residual` has the output's shape.
#[derive(Clone, Debug)]
pub struct Epilogue {
    pub(crate) alpha: f32,
    pub(crate) bias: Option<Tensor>,
    pub(crate) residual: Option<Tensor>,
    pub(crate) activation: Activation,
    /// Generated epilogue text ([`Epilogue::expr`]) and the scalars it reads
    /// from the parameters, or why it failed.
    pub(crate) generated: Option<std::result::Result<(String, Vec<f32>), String>>,
}

impl Default for Epilogue {
    fn default() -> Self {
        Self {
            alpha: 1.0,
            bias: None,
            residual: None,
            activation: Activation::None,
            generated: None,
        }
    }
}

impl Epilogue {
    /// The identity epilogue (`C = A @ B`).
    pub fn new() -> Self {
        Self::default()
    }

    /// Multiplies the product by `alpha`.
    pub fn scale(mut self, alpha: f32) -> Self {
        self.alpha = alpha;
        self
    }

    /// Adds `bias[col]` (shape `[N]`, the operands' dtype).
    pub fn bias(mut self, bias: &Tensor) -> Self {
        self.bias = Some(bias.clone());
        self
    }

    /// Adds a tensor of the output's shape after the activation.
    pub fn residual(mut self, residual: &Tensor) -> Self {
        self.residual = Some(residual.clone());
        self
    }

    /// Applies `activation` after scale and bias.
    pub fn activation(mut self, activation: Activation) -> Self {
        self.activation = activation;
        self
    }

    /// ReLU after scale and bias.
    pub fn relu(self) -> Self {
        self.activation(Activation::Relu)
    }

    /// GELU after scale and bias, the exact erf form (PyTorch's default;
    /// [`Activation::Gelu`]).
    pub fn gelu(self) -> Self {
        self.activation(Activation::Gelu)
    }

    /// The same as [`Epilogue::gelu`]: the exact, erf form.
    pub fn gelu_erf(self) -> Self {
        self.gelu()
    }

    /// GELU after scale and bias, the tanh approximation
    /// ([`Activation::GeluTanh`], PyTorch's `approximate="tanh"`).
    pub fn gelu_tanh(self) -> Self {
        self.activation(Activation::GeluTanh)
    }

    /// SiLU after scale and bias.
    pub fn silu(self) -> Self {
        self.activation(Activation::Silu)
    }

    /// An epilogue generated from an elementwise expression of the
    /// accumulator [`Expr::acc`](crate::Expr::acc) (f32), for example
    /// `(Expr::acc() * 0.5 + bias.expr()).gelu_erf() + residual.expr()`. It
    /// REPLACES the other settings (scale, activation, bias, residual): the
    /// expression's tensors become the bias (a rank-1 tensor of `N` values,
    /// one per output column) and the residual (a tensor of the output's
    /// shape), at most one of each, in the operands' dtype. The first
    /// eight scalars are data (expressions that differ only in them share a
    /// pipeline); any further ones are baked into the kernel text. An
    /// expression that breaks these rules (or has a symbolic
    /// [`Expr::input`](crate::Expr::input)) makes the matmul return `Err`.
    pub fn expr(mut self, expr: &crate::Expr) -> Self {
        match crate::kernels::codegen::fusion::generate_epilogue(expr) {
            Ok(code) if code.symbolic => {
                self.generated = Some(Err(
                    "an expression with symbolic inputs (Expr::input) cannot be evaluated".into(),
                ))
            }
            Ok(code) => {
                self.alpha = 1.0;
                self.activation = Activation::None;
                self.bias = code.bias;
                self.residual = code.residual;
                self.generated = Some(Ok((code.wgsl, code.data_constants)));
            }
            Err(e) => self.generated = Some(Err(e.to_string())),
        }
        self
    }

    /// This epilogue with an activation the built-in epilogue lacks (the
    /// exact GELU) turned into the generated epilogue of the same
    /// expression, `gelu_erf(alpha * acc + bias) + residual`.
    pub(crate) fn resolved(&self) -> Cow<'_, Epilogue> {
        if self.activation.code().is_some() || self.generated.is_some() {
            return Cow::Borrowed(self);
        }
        let mut e = crate::Expr::acc();
        if self.alpha != 1.0 {
            e = e * self.alpha;
        }
        if let Some(b) = &self.bias {
            e = e + b.expr();
        }
        e = e.gelu_erf();
        if let Some(r) = &self.residual {
            e = e + r.expr();
        }
        Cow::Owned(Epilogue::new().expr(&e))
    }

    /// True when it leaves `A @ B` unchanged.
    pub fn is_identity(&self) -> bool {
        self.generated.is_none()
            && self.alpha == 1.0
            && self.bias.is_none()
            && self.residual.is_none()
            && self.activation == Activation::None
    }

    /// Whether it reads tensors (which the padded path cannot index).
    pub(crate) fn reads_tensors(&self) -> bool {
        self.bias.is_some() || self.residual.is_some()
    }

    /// Adds the `EPI_*` specialisation of a kernel that has the epilogue part.
    /// The epilogue's words of a kernel's parameters: alpha's bits, then the
    /// generated epilogue's scalars (`epi_k`, zeros past them).
    pub(crate) fn param_words(&self) -> [u32; 1 + EPILOGUE_DATA_CONSTANTS] {
        let mut words = [0u32; 1 + EPILOGUE_DATA_CONSTANTS];
        words[0] = self.alpha.to_bits();
        for (slot, c) in words[1..].iter_mut().zip(self.data_constants()) {
            *slot = c.to_bits();
        }
        words
    }

    /// The bias and residual tensors the epilogue reads.
    pub(crate) fn tensors(&self) -> [Option<&Tensor>; 2] {
        [self.bias.as_ref(), self.residual.as_ref()]
    }

    /// The same epilogue with its residual viewed as `shape` (the same
    /// elements: a product flattened to 2-D).
    pub(crate) fn with_residual_shape(&self, shape: &[usize]) -> Result<Epilogue> {
        let mut e = self.clone();
        if let Some(r) = &self.residual {
            e.residual = Some(r.reshape(shape)?);
        }
        Ok(e)
    }

    /// The scalars of a generated epilogue passed as data (`epi_k`).
    pub(crate) fn data_constants(&self) -> &[f32] {
        match &self.generated {
            Some(Ok((_, k))) => k,
            _ => &[],
        }
    }

    pub(crate) fn specialise(&self, spec: Spec) -> Spec {
        if !spec.kernel.has_epilogue() {
            return spec;
        }
        let mut spec = spec;
        if let Some(Ok((text, _))) = &self.generated {
            return spec.epilogue_text(text.clone());
        }
        if self.bias.is_some() {
            spec = spec.constant("EPI_BIAS", 1);
        }
        if self.residual.is_some() {
            spec = spec.constant("EPI_RESIDUAL", 1);
        }
        match self.activation.code() {
            Some(0) => {}
            Some(code) => spec = spec.constant("EPI_ACT", code),
            // Not resolved: `check` refuses the epilogue before any kernel.
            None => {}
        }
        spec
    }

    pub(crate) fn check(
        &self,
        ctx: &Context,
        dtype: DType,
        n: usize,
        out_shape: &[usize],
    ) -> Result<()> {
        if self.activation.code().is_none() && self.generated.is_none() {
            return Err(Error::InvalidArgument(format!(
                "matmul epilogue: {:?} must be resolved into a generated epilogue first",
                self.activation
            )));
        }
        if let Some(Err(e)) = &self.generated {
            return Err(Error::InvalidArgument(format!(
                "matmul epilogue expression: {e}"
            )));
        }
        if let Some(bias) = &self.bias {
            if bias.shape() != [n] {
                return Err(Error::shape(
                    "matmul bias",
                    bias.shape(),
                    &[n],
                    "the bias needs one value per output column",
                ));
            }
            ctx.check_operand(bias, dtype, "matmul bias")?;
        }
        if let Some(residual) = &self.residual {
            if residual.shape() != out_shape {
                return Err(Error::shape(
                    "matmul residual",
                    residual.shape(),
                    out_shape,
                    "the residual needs the output's shape",
                ));
            }
            ctx.check_operand(residual, dtype, "matmul residual")?;
        }
        Ok(())
    }
}
