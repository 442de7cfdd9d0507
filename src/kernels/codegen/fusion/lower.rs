//! Lowering an expression tree to SSA: leaves deduplicated, shapes
//! broadcast, each input's access (contiguous, broadcast, single) planned.

use super::*;

impl Leaf {
    pub(crate) fn shape(&self) -> &[usize] {
        match self {
            Leaf::Tensor(t) => t.shape(),
            Leaf::Symbol { shape, .. } => shape,
            Leaf::Acc => &[],
        }
    }
    pub(crate) fn dtype(&self) -> DType {
        match self {
            Leaf::Tensor(t) => t.dtype(),
            Leaf::Symbol { dtype, .. } => *dtype,
            Leaf::Acc => DType::F32,
        }
    }
}

/// NumPy broadcast of two shapes.
pub(crate) fn broadcast(a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i < rank - a.len() {
            1
        } else {
            a[i - (rank - a.len())]
        };
        let db = if i < rank - b.len() {
            1
        } else {
            b[i - (rank - b.len())]
        };
        out[i] = match (da, db) {
            (x, y) if x == y => x,
            (1, y) => y,
            (x, 1) => x,
            _ => {
                return Err(Error::shape(
                    "elementwise",
                    a,
                    b,
                    format!(
                        "dimension {} (from the right) is {da} vs {db}; broadcasting needs equal sizes or 1",
                        rank - i
                    ),
                ));
            }
        };
    }
    Ok(out)
}

pub(crate) fn lower(expr: &Expr) -> Result<Lowered> {
    lower_many(std::slice::from_ref(expr))
}

/// Lowers, then refuses tensors with padded rows (`tensor_padded`): the
/// generated kernels index every tensor as contiguous.
pub(crate) fn lower_many(exprs: &[Expr]) -> Result<Lowered> {
    let lowered = lower_many_raw(exprs)?;
    for leaf in &lowered.leaves {
        if let Leaf::Tensor(t) = leaf {
            t.require_contiguous("an elementwise expression")?;
        }
    }
    Ok(lowered)
}

/// Lowers several expressions into one SSA list sharing leaves, constants'
/// buffer and common subexpressions (for one kernel with several outputs).
pub(crate) fn lower_many_raw(exprs: &[Expr]) -> Result<Lowered> {
    lower_roots(exprs, true).map(|(lowered, _)| lowered)
}

/// [`lower_many_raw`], with the result shape of each root; `same_shape`
/// requires them equal (`Lowered::shape` is the first root's shape).
pub(crate) fn lower_roots(exprs: &[Expr], same_shape: bool) -> Result<(Lowered, Vec<Vec<usize>>)> {
    let (lowered, shapes) = lower_roots_any(exprs, same_shape)?;
    // Expressions compute in floating point: integer leaves are refused
    // (cast them first).
    for leaf in &lowered.leaves {
        Error::require_float(leaf.dtype(), "an elementwise expression")?;
    }
    Ok((lowered, shapes))
}

// Long on purpose: one recursive walk that deduplicates leaves and subexpressions and checks
// depth and broadcasting as it goes.
fn lower_roots_any(exprs: &[Expr], same_shape: bool) -> Result<(Lowered, Vec<Vec<usize>>)> {
    struct State {
        ops: Vec<Op>,
        leaves: Vec<Leaf>,
        constants: Vec<f32>,
        /// (value, shape) of nodes already lowered, by node address.
        memo: HashMap<*const Node, (usize, Vec<usize>)>,
    }
    pub(crate) fn leaf_index(st: &mut State, node: &Node) -> usize {
        let same = |l: &Leaf| match (l, node) {
            (Leaf::Tensor(a), Node::Tensor(b)) => {
                Arc::ptr_eq(&a.buffer, &b.buffer)
                    && a.shape() == b.shape()
                    && a.dtype() == b.dtype()
            }
            (Leaf::Symbol { id, .. }, Node::Input { id: other, .. }) => id == other,
            (Leaf::Acc, Node::Acc) => true,
            _ => false,
        };
        if let Some(i) = st.leaves.iter().position(same) {
            return i;
        }
        st.leaves.push(match node {
            Node::Tensor(t) => Leaf::Tensor(t.clone()),
            Node::Input { id, shape, dtype } => Leaf::Symbol {
                id: *id,
                shape: shape.clone(),
                dtype: *dtype,
            },
            Node::Acc => Leaf::Acc,
            _ => unreachable!("only leaves"),
        });
        st.leaves.len() - 1
    }
    pub(crate) fn walk(st: &mut State, e: &Expr, depth: usize) -> Result<(usize, Vec<usize>)> {
        let ptr = Arc::as_ptr(&e.0);
        if let Some(v) = st.memo.get(&ptr) {
            return Ok(v.clone());
        }
        if depth > MAX_DEPTH {
            return Err(Error::InvalidArgument(format!(
                "elementwise expression nested deeper than {MAX_DEPTH} operations"
            )));
        }
        let walk = |st: &mut State, e: &Expr| walk(st, e, depth + 1);
        let (op, shape) = match e.as_node() {
            Node::Tensor(t) => (Op::Load(leaf_index(st, e.as_node())), t.shape().to_vec()),
            Node::Input { shape, .. } => {
                // Symbols with the same id are the same input.
                (Op::Load(leaf_index(st, e.as_node())), shape.clone())
            }
            Node::Acc => (Op::Load(leaf_index(st, e.as_node())), Vec::new()),
            Node::Scalar(v) => {
                st.constants.push(*v);
                (Op::Const(st.constants.len() - 1), Vec::new())
            }
            Node::Unary(op, a) => {
                let (a, s) = walk(st, a)?;
                (Op::Unary(*op, a), s)
            }
            Node::Binary(op, a, b) => {
                let (a, sa) = walk(st, a)?;
                let (b, sb) = walk(st, b)?;
                (Op::Binary(*op, a, b), broadcast(&sa, &sb)?)
            }
            Node::Where(c, a, b) => {
                let (c, sc) = walk(st, c)?;
                let (a, sa) = walk(st, a)?;
                let (b, sb) = walk(st, b)?;
                let s = broadcast(&broadcast(&sc, &sa)?, &sb)?;
                (Op::Where(c, a, b), s)
            }
        };
        // Loads of one leaf are deduplicated too (two `Expr::from(&x)`).
        let index = match op {
            Op::Load(l) => st.ops.iter().position(|o| *o == Op::Load(l)),
            _ => None,
        }
        .unwrap_or_else(|| {
            st.ops.push(op);
            st.ops.len() - 1
        });
        st.memo.insert(ptr, (index, shape.clone()));
        Ok((index, shape))
    }
    let mut st = State {
        ops: Vec::new(),
        leaves: Vec::new(),
        constants: Vec::new(),
        memo: HashMap::new(),
    };
    let mut roots = Vec::with_capacity(exprs.len());
    let mut shapes = Vec::with_capacity(exprs.len());
    let mut shape: Option<Vec<usize>> = None;
    for expr in exprs {
        let (root, s) = walk(&mut st, expr, 0)?;
        shapes.push(s.clone());
        if !same_shape {
            shape.get_or_insert(s);
            roots.push(root);
            continue;
        }
        if let Some(first) = &shape
            && *first != s
        {
            return Err(Error::shape(
                "eval_many",
                first,
                &s,
                "every expression of one pass needs the same result shape",
            ));
        }
        shape = Some(s);
        roots.push(root);
    }
    let Some(shape) = shape else {
        return Err(Error::InvalidArgument("no expression to evaluate".into()));
    };
    let lowered = Lowered {
        ops: st.ops,
        leaves: st.leaves,
        constants: st.constants,
        shape,
        roots,
    };
    for &root in &lowered.roots {
        if lowered.leaves_of(root).is_empty() {
            return Err(Error::InvalidArgument(
                "an elementwise expression needs at least one tensor (its shape and dtype come from them)"
                    .into(),
            ));
        }
    }
    Ok((lowered, shapes))
}

impl Lowered {
    /// Indices of the leaves the value `root` depends on.
    pub(crate) fn leaves_of(&self, root: usize) -> Vec<usize> {
        let mut seen = vec![false; self.ops.len()];
        let mut stack = vec![root];
        let mut leaves = Vec::new();
        while let Some(v) = stack.pop() {
            if std::mem::replace(&mut seen[v], true) {
                continue;
            }
            match self.ops[v] {
                Op::Load(l) => leaves.push(l),
                Op::Const(_) => {}
                Op::Unary(_, a) => stack.push(a),
                Op::Binary(_, a, b) => stack.extend([a, b]),
                Op::Where(c, a, b) => stack.extend([c, a, b]),
            }
        }
        leaves
    }

    /// Output dtype of `root`: the tensors' dtype when they all share one,
    /// f32 otherwise (any f32 tensor, or f16 with bf16, as PyTorch promotes).
    pub(crate) fn dtype_of(&self, root: usize) -> DType {
        let leaves = self.leaves_of(root);
        let mut dtypes = leaves.iter().map(|&l| self.leaves[l].dtype());
        match dtypes.next() {
            Some(first) if dtypes.all(|d| d == first) => first,
            _ => DType::F32,
        }
    }
}

/// `shape` right-aligned into 4 dims.
pub(crate) fn dims4(shape: &[usize]) -> [usize; MAX_RANK] {
    let mut d = [1; MAX_RANK];
    d[MAX_RANK - shape.len()..].copy_from_slice(shape);
    d
}

/// Per-dimension element strides of `shape` read as the 4-D `out` shape
/// (0 where `shape` has size 1).
pub(crate) fn broadcast_strides(shape: &[usize], out: &[usize]) -> [usize; MAX_RANK] {
    let d = dims4(shape);
    let o = dims4(out);
    let mut s = [0; MAX_RANK];
    let mut stride = 1;
    for i in (0..MAX_RANK).rev() {
        s[i] = if d[i] == 1 && o[i] != 1 { 0 } else { stride };
        stride *= d[i];
    }
    s
}

/// Decides each input's access kind and the path (vec4 or scalar).
pub(crate) fn plan_access(lowered: &Lowered, alias: &[usize]) -> (bool, Vec<InputDesc>) {
    let out = dims4(&lowered.shape);
    let n: usize = lowered.shape.iter().product();
    let kind = |i: usize, l: &Leaf| -> Access {
        if alias.contains(&i) {
            Access::Output
        } else if l.shape().iter().product::<usize>() == 1 && n != 1 {
            Access::Single
        } else if dims4(l.shape()) == out {
            Access::Contiguous
        } else {
            Access::Broadcast {
                inner_unit: dims4(l.shape())[MAX_RANK - 1] != 1 || out[MAX_RANK - 1] == 1,
            }
        }
    };
    let kinds: Vec<Access> = lowered
        .leaves
        .iter()
        .enumerate()
        .map(|(i, l)| kind(i, l))
        .collect();
    let vec4 = n.is_multiple_of(4)
        && kinds.iter().all(|k| match k {
            Access::Broadcast { .. } => out[MAX_RANK - 1].is_multiple_of(4),
            _ => true,
        });
    let inputs = lowered
        .leaves
        .iter()
        .zip(kinds)
        .map(|(l, access)| InputDesc {
            dtype: l.dtype(),
            access,
        })
        .collect();
    (vec4, inputs)
}
