"""The one IR of gradjit: ``Graph``, ``Node``, ``Value``.

Contract
- A ``Graph`` is an SSA list of ``Node``s in topological order, plus input and
  output ``Value``s. Every stage (tracer, adjoint, passes, code generators,
  interpreter) reads and writes this structure and nothing else.
- A ``Value`` has a static ``shape`` (tuple of ints) and a NumPy ``dtype``; it is
  produced by exactly one node (``value.node``) or is a graph input (``node is None``).
- A ``Node`` has an op name (an ATen overload name such as ``mul.Tensor``), its
  tensor inputs, its non-tensor attributes (a dict of hashable Python values)
  and its outputs. ``site`` is the user's source line that recorded it, used in
  error messages.
- ``Graph.key()`` is the structural key: ops, attributes, shapes, dtypes and
  wiring, never array contents. Two graphs with equal keys compute the same
  function of their inputs.
- Nodes are added with ``Graph.add_node`` given already-inferred output
  shapes/dtypes; shape inference lives in the op registry (``tracer/ops.py``).
"""
from __future__ import annotations

import numpy as np

_DTYPE_NAMES = {}   # dtype (as given) -> its name


def dtype_name(dt):
    """``np.dtype(dt).name``, looked up once per dtype: NumPy's ``name`` is a slow Python
    property, and generated code spells a dtype on most lines (comments included)."""
    name = _DTYPE_NAMES.get(dt)
    if name is None:
        name = _DTYPE_NAMES[dt] = np.dtype(dt).name
    return name


class Value:
    __slots__ = ("id", "shape", "dtype", "node", "index", "graph", "__weakref__")

    def __init__(self, graph, vid, shape, dtype, node=None, index=0):
        self.graph = graph
        self.id = vid
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.node = node
        self.index = index

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def type_str(self):
        return f"{dtype_name(self.dtype)}[{','.join(map(str, self.shape))}]"

    def __repr__(self):
        return f"%{self.id}:{self.type_str()}"


class Node:
    __slots__ = ("op", "inputs", "attrs", "outputs", "site")

    def __init__(self, op, inputs, attrs, site=None):
        self.op = op
        self.inputs = list(inputs)
        self.attrs = dict(attrs)
        self.outputs = []
        self.site = site

    def __repr__(self):
        return format_node(self)


def _fmt_attr(v):
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, np.dtype):
        return dtype_name(v)
    return repr(v)


def format_node(node):
    outs = ", ".join(f"%{v.id}:{v.type_str()}" for v in node.outputs)
    args = [f"%{v.id}" for v in node.inputs]
    args += [f"{k}={_fmt_attr(v)}" for k, v in node.attrs.items()]
    return f"{outs} = {node.op}({', '.join(args)})"


class Graph:
    """An SSA graph. Build it with ``add_input`` / ``add_node``; read ``nodes``."""

    def __init__(self, name="graph"):
        self.name = name
        self.inputs: list[Value] = []
        self.nodes: list[Node] = []
        self.outputs: list[Value] = []
        self._next_id = 0
        # While the adjoint instantiates a formula, new nodes are attributed to
        # the forward node they differentiate (errors then name the user's line).
        self.site_override = None
        # In-place buffer updates a traced function asks for (batch_norm's running stats):
        # [(target, statistic Value, momentum)]; runtime/transforms.py applies them.
        self.running_updates = []
        # Graph inputs that are captured arrays (fed at call time, never baked
        # into generated source): Value -> ndarray.
        self.constants = {}
        self.constant_ids = {}
        # while a function transform traces: which tracers are NumPy views of which
        # (tracer/tracer_setitem.py); None otherwise
        self.view_tree = None
        # False for a graph the CUDA target compiles: it has no region nodes, so
        # lowering/fold_loops.py leaves the loops a trace unrolled as they are
        self.loop_regions = True

    def _new_value(self, shape, dtype, node=None, index=0):
        v = Value(self, self._next_id, shape, dtype, node, index)
        self._next_id += 1
        return v

    def add_input(self, shape, dtype):
        v = self._new_value(shape, dtype)
        self.inputs.append(v)
        return v

    def add_node(self, op, inputs, attrs, out_types, site=None):
        """Append a node; ``out_types`` is a list of (shape, dtype)."""
        for v in inputs:
            if v.graph is not self:
                raise ValueError(f"{op}: input {v!r} belongs to another graph")
        node = Node(op, inputs, attrs, self.site_override or site)
        node.outputs = [self._new_value(s, d, node, i) for i, (s, d) in enumerate(out_types)]
        self.nodes.append(node)
        return node.outputs

    # -- reading ----------------------------------------------------------------
    def key(self):
        """Structural key: ops, attrs, shapes, dtypes, wiring; not array contents."""
        local = {}
        parts = []
        for v in self.inputs:
            local[v] = len(local)
            parts.append(("in", v.shape, v.dtype.str))
        for n in self.nodes:
            ins = tuple(local[v] for v in n.inputs)
            attrs = tuple((k, _key_attr(a)) for k, a in n.attrs.items())
            outs = []
            for v in n.outputs:
                local[v] = len(local)
                outs.append((v.shape, v.dtype.str))
            parts.append((n.op, ins, attrs, tuple(outs)))
        parts.append(("out", tuple(local[v] for v in self.outputs)))
        return tuple(parts)

    def users(self):
        """Map each value to the list of nodes that read it."""
        use = {}
        for n in self.nodes:
            for v in n.inputs:
                use.setdefault(v, []).append(n)
        return use

    def __str__(self):
        ins = ", ".join(f"%{v.id}:{v.type_str()}" for v in self.inputs)
        lines = [f"{self.name}({ins}) {{"]
        for n in self.nodes:
            lines.append("  " + format_node(n))
        outs = ", ".join(f"%{v.id}" for v in self.outputs)
        lines.append(f"  return ({outs})")
        lines.append("}")
        return "\n".join(lines)


def _key_attr(a):
    if isinstance(a, float):
        # -0.0 and 0.0 differ in generated code (signs); keep the exact bits.
        return ("f", a.hex())
    if isinstance(a, np.dtype):
        return ("dt", a.str)
    if isinstance(a, list):
        return tuple(a)
    return a
