"""Op registry: each op declared once, keyed by its ATen overload name.

Contract
- ``defop(schema, kind, infer, impl)`` registers an op. ``schema`` is the
  ``derivatives.yaml`` ``name:`` syntax (``"mul.Tensor(Tensor self, Tensor
  other) -> Tensor"``); the op name is the part before ``(``, with
  ``.default`` added when there is no overload (``exp`` -> ``exp.default``).
- Arguments typed ``Tensor`` become node inputs, every other argument a node
  attribute of the same name. A ``Tensor[]`` argument (then the op's only tensor
  argument: ``cat``) takes any number of inputs; formulas see it as a list.
- ``infer(in_types, attrs) -> [(shape, dtype), ...]`` is the shape/dtype
  rule, ``impl(*arrays, **attrs)`` the NumPy reference (returns an array or a
  tuple of arrays). ``kind`` tells the code generators how the op iterates:
  ``elementwise`` | ``reduction`` | ``matmul`` | ``shape`` | ``composite`` |
  ``kernel`` (a statement with its own loop nest: scans, gathers ...).
- ``get_op(name)`` raises ``UnknownOpError`` naming the op and this registry.
- Errors raised for user mistakes derive from ``GradjitError`` and carry the
  user's source line (``user_site()``: first frame outside gradjit).
"""
from __future__ import annotations

import linecache
import os
import re
import sys
from dataclasses import dataclass, field

def _package_dirs():
    # tracer/, lowering/, runtime/ and gradjit/ live side by side (editable) or
    # under one folder (wheel); any frame in them is ours, not the user's.
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(here)
    return tuple(os.path.join(root, d) + os.sep for d in ("tracer", "lowering", "runtime", "gradjit")) + (here + os.sep,)


_OURS = _package_dirs()


class Site:
    """A user source line. ``op`` names the forward op when the line is attributed to a
    backward node (so anomaly errors can say which forward op produced a NaN); ``pos`` is
    that op's node position in its forward graph, so an error raised while running a
    cached backward can name the line of the *current* recording (a plan is shared by
    every graph of one structure, whatever lines recorded them)."""

    __slots__ = ("filename", "lineno", "op", "pos", "via")

    def __init__(self, filename, lineno, op=None, pos=None, via=None):
        self.filename = filename
        self.lineno = lineno
        self.op = op
        self.pos = pos
        self.via = via   # the library line the traced value met, when the user's called it

    def for_op(self, op, pos=None):
        return Site(self.filename, self.lineno, op, pos, self.via)

    @property
    def text(self):
        return linecache.getline(self.filename, self.lineno).strip()

    def __str__(self):
        head = f'File "{self.filename}", line {self.lineno}: {self.text}'
        if self.via is None:
            return head
        return (f"{head}\n    (inside library code gradjit does not trace: {self.via}; "
                f"gradjit traces your own code and the NumPy functions it lists)")


_OURS_CACHE = {}   # file name -> is it gradjit's (or Python's own frozen modules)?
LAST_USER_CODE = [None]   # the last code object found to be the user's: its file's look-up
#                           skipped when the next frame is of it again (tensor mode: an op's)


def is_user_code(code):
    """Is ``code`` the user's (not gradjit's)? Remembered in LAST_USER_CODE when it is; None
    when its file was not seen yet (``user_where`` classifies it)."""
    mine = _OURS_CACHE.get(code.co_filename)
    if mine is False:
        LAST_USER_CODE[0] = code
        return True
    return None if mine is None else False


def user_caller(skip):
    """Whether the frame ``skip`` above the function calling this one is the user's code
    (not gradjit's): where a tensor's memory is handed out to be written (tracer/tensor.py)."""
    try:
        return not sys._getframe(skip + 1).f_code.co_filename.startswith(_OURS)
    except ValueError:   # (called from C)
        return True


def _user_frame(skip):
    """The first frame outside gradjit, looking from ``skip`` frames above the function
    that calls this one (1: that function's caller)."""
    try:
        f = sys._getframe(skip + 1)
    except ValueError:   # a stack shallower than skip
        return None
    ours = _OURS_CACHE
    while f is not None:
        fn = f.f_code.co_filename
        mine = ours.get(fn)
        if mine is None:
            mine = ours[fn] = fn.startswith(_OURS) or fn.startswith("<frozen")
        if not mine:
            return f
        f = f.f_back
    return None


def user_site(skip=1):
    """The first stack frame outside gradjit (the user's line), or None. ``skip``: how many
    frames up to start looking (1: the caller's); only ever skip frames that are surely
    gradjit's, since the walk's cost is mostly making their frame objects. When that frame
    is a library's (NumPy's own Python code, SciPy's: a function gradjit does not trace
    met the traced value), the Site is the user's line that called into the library, the
    library's line as its ``via``: an error names the line the user can change."""
    f = _user_frame(skip)
    if f is None:
        return None
    site = _site(f.f_code.co_filename, f.f_lineno)
    if not _library(f.f_code.co_filename):
        return site
    u = f.f_back
    while u is not None and (_library(u.f_code.co_filename)
                             or u.f_code.co_filename.startswith(_OURS)):
        u = u.f_back
    return site if u is None else Site(u.f_code.co_filename, u.f_lineno, via=site)


_LIBRARY_CACHE = {}   # file name -> is it a library's (tracer/user_code.py ``foreign``)?


def _library(filename):
    lib = _LIBRARY_CACHE.get(filename)
    if lib is None:
        from gradjit.tracer.user_code import foreign   # (user_code imports this module)
        lib = _LIBRARY_CACHE[filename] = foreign(filename) and not filename.startswith(_OURS)
    return lib


def numpy_refusal(error):
    """``error`` (NumPy's refusal of some operands: ``-`` of bools, int8 + 300) as the
    builtin exception NumPy's derives from (a ``UFuncTypeError`` is a ``TypeError``), with
    the user's line: raised at trace time, so both tiers refuse what NumPy refuses (the
    compiled code would compute something)."""
    cls = next(c for c in type(error).__mro__ if c.__module__ == "builtins")
    return cls(f"{error}\n  at {user_site(2)}")


def user_where(skip=1):
    """``user_site``'s frame as (code object, bytecode offset): the line is looked up only
    when ``site_at`` asks. Tensor mode records one per op and reads few, so this is
    written out, not ``_user_frame``'s caller: a call is a fifth of its cost."""
    try:
        f = sys._getframe(skip)
    except ValueError:
        return None
    while f is not None:
        code = f.f_code
        mine = code is LAST_USER_CODE[0] or is_user_code(code)
        if mine:
            return code, f.f_lasti
        if mine is None:   # a file not seen yet: classified, then the frame again
            fn = code.co_filename
            _OURS_CACHE[fn] = fn.startswith(_OURS) or fn.startswith("<frozen")
            continue
        f = f.f_back
    return None


def site_at(where):
    """The Site of a ``user_where`` result (None for None)."""
    if where is None:
        return None
    code, lasti = where
    line = code.co_firstlineno
    for start, end, ln in code.co_lines():
        if start <= lasti < end:
            line = line if ln is None else ln
            break
    return _site(code.co_filename, line)


def _site(filename, line):
    key = (filename, line)
    site = _SITES.get(key)
    if site is None:
        if len(_SITES) >= 65536:
            _SITES.clear()
        site = _SITES[key] = Site(filename, line)
    return site


# One Site per line (Sites are never changed, ``for_op`` makes a new one): a recorded op
# of tensor mode then holds a shared object, not a new one the garbage collector tracks.
_SITES = {}


class GradjitError(Exception):
    """Base class of user-facing errors. ``site`` is the user's source line."""

    def __init__(self, msg, site=None):
        self.site = site
        if site is not None:
            msg = f"{msg}\n  at {site}"
        super().__init__(msg)


class ShapeError(GradjitError, ValueError):
    pass


class GradjitRuntimeError(GradjitError, RuntimeError):
    """Where torch raises RuntimeError, so ported ``except RuntimeError`` code works."""


class MaxStepsError(GradjitRuntimeError):
    """``gj.while_loop(..., max_steps=n)`` whose ``cond_fun`` still held after ``n`` steps:
    its result would be cut short. Raised at run time by every executor (the interpreter's
    reference and the generated code of ``while_steps_check``) with ``n`` only; ``located``
    adds the user's line, as ``IndexBoundsError``'s."""

    def __init__(self, max_steps, site=None):
        self.max_steps = int(max_steps)
        GradjitError.__init__(self, f"gj.while_loop: cond was still true after "
                                    f"max_steps={self.max_steps} steps; raise max_steps "
                                    f"(the loop's result would be cut short)", site)

    def located(self, site):
        """The same error at ``site`` (self when there is none, or one already)."""
        if site is None or self.site is not None:
            return self
        return MaxStepsError(self.max_steps, site)

    def __reduce__(self):
        return type(self), (self.max_steps, self.site)


class UnknownOpError(GradjitError, KeyError):
    def __str__(self):
        return self.args[0]


@dataclass
class Arg:
    type: str
    name: str
    default: object = None
    has_default: bool = False

    @property
    def is_tensor(self):
        return self.type.startswith("Tensor")

    @property
    def is_list(self):
        return self.type == "Tensor[]"


@dataclass
class Schema:
    name: str
    args: list
    returns: list
    text: str
    tensor_args: list = field(default_factory=list)
    attr_args: list = field(default_factory=list)
    list_arg: str | None = None   # the ``Tensor[]`` argument, if any: it takes every input

    def input_groups(self, n_inputs):
        """``{tensor arg name: positions among a node's n_inputs inputs}``: one position
        each, except that a ``Tensor[]`` argument (the only tensor argument of its op)
        takes all of them (``cat``)."""
        if self.list_arg is not None:
            return {self.list_arg: list(range(n_inputs))}
        return {n: [k] for k, n in enumerate(self.tensor_args[:n_inputs])}


_DEFAULTS = {"None": None, "True": True, "False": False, "[]": ()}


def _parse_default(text):
    if text in _DEFAULTS:
        return _DEFAULTS[text]
    try:
        return int(text)
    except ValueError:
        return float(text)


def split_top(s):
    """``s`` split at its top-level commas (outside brackets), parts stripped."""
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


_SCHEMA_RE = re.compile(r"^\s*([A-Za-z_][\w]*(?:\.[\w]+)?)\((.*)\)\s*->\s*(.+?)\s*$")


def parse_schema(text):
    m = _SCHEMA_RE.match(text)
    if not m:
        raise ValueError(f"malformed schema {text!r}: expected 'name.overload(args) -> returns'")
    name, argtext, ret = m.groups()
    if "." not in name:
        name += ".default"
    args = []
    for part in split_top(argtext):
        if part == "*":
            continue
        dm = re.match(r"^(\S+)\s+(\w+)(?:\s*=\s*(.+))?$", part)
        if not dm:
            raise ValueError(f"malformed argument {part!r} in schema {text!r}")
        typ, aname, default = dm.groups()
        args.append(Arg(typ, aname, _parse_default(default) if default else None, default is not None))
    ret = ret.strip()
    returns = split_top(ret[1:-1]) if ret.startswith("(") else [ret]
    s = Schema(name, args, returns, text.strip())
    s.tensor_args = [a.name for a in args if a.is_tensor]
    s.attr_args = [a for a in args if not a.is_tensor]
    lists = [a.name for a in args if a.is_list]
    if lists and len(s.tensor_args) != 1:
        raise ValueError(f"schema {text!r}: a Tensor[] argument must be its op's only tensor "
                         f"argument")
    s.list_arg = lists[0] if lists else None
    return s


@dataclass
class OpDef:
    name: str
    schema: Schema
    kind: str
    infer: object
    impl: object
    # What eager tensors run, when the runtime plugs in something other than ``impl``
    # (which stays the reference the interpreter and the tests compare against).
    eager: object = None
    # Float math on any operand (exp, div, atan2 ...: the dtype rule "float"): integer and
    # bool operands are cast to the float result dtype before the op's arithmetic, as in
    # NumPy (1 - x or -x of a uint8 must not wrap around first).
    float_math: bool = False
    # Front ends made from the record (tracer/api.py): the NumPy ufuncs that are this op
    # on one array (``np.sinh(x)``), and the methods of Tensor and traced arrays that apply
    # it with no arguments (``x.sinh()``, ``x.arcsinh()``).
    numpy: tuple = ()
    methods: tuple = ()
    # How the tensor operands' dtypes combine (the elementwise dtype rule: "promote",
    # "float", "integral", "bool"; "where": all but the condition; "" when they do not):
    # tensor mode casts them first where torch's promotion differs from NumPy's
    # (tracer/dispatch.torch_operands).
    promotion: str = ""


OPS: dict[str, OpDef] = {}
_KINDS = ("elementwise", "reduction", "matmul", "shape", "composite", "kernel")


def defop(schema, kind, infer, impl):
    s = parse_schema(schema)
    if kind not in _KINDS:
        raise ValueError(f"op {s.name}: unknown kind {kind!r}")
    if s.name in OPS:
        raise ValueError(f"op {s.name} is declared twice in the op registry")
    OPS[s.name] = OpDef(s.name, s, kind, infer, impl)
    return OPS[s.name]


def get_op(name):
    try:
        return OPS[name]
    except KeyError:
        raise UnknownOpError(
            f"unknown op {name!r}: not in the op registry (gradjit/tracer/ops.py); "
            f"known ops: {', '.join(sorted(OPS))}") from None


def bind_attrs(op, attrs):
    """Fill schema defaults; reject attributes the schema does not have."""
    out = {}
    for a in op.schema.attr_args:
        if a.name in attrs:
            out[a.name] = attrs[a.name]
        elif a.has_default:
            out[a.name] = a.default
        else:
            raise TypeError(f"{op.name}: missing argument {a.name!r} ({op.schema.text})")
    extra = set(attrs) - set(out)
    if extra:
        raise TypeError(f"{op.name}: unexpected arguments {sorted(extra)} ({op.schema.text})")
    return out


def real_only(dtype, what):
    """gradjit's ops are real-valued: a complex array would meet formulas and kernels
    written for real numbers (np.real / np.conj as the identity, a crash in Numba), so it
    is refused where it enters a trace or a tensor. So are the dtypes Numba cannot compile
    (long double, Python objects, strings, dates): the interpreter would compute with them,
    the compiled tier crash."""
    kind = getattr(dtype, "kind", None)
    if kind == "c":
        raise GradjitError(f"{what} is of dtype {dtype.name}: gradjit computes with "
                           f"real numbers only (complex arrays are not supported); pass the "
                           f"real and imaginary parts as two real arrays", user_site())
    if kind is not None and (kind not in "biuf" or dtype.itemsize > 8):
        hint = ("Numba has no long double: pass x.astype(np.float64)" if kind == "f" else
                "an array of Python objects: pass a numeric array, np.asarray(x, dtype=float)"
                if kind == "O" else "pass the numbers as a numeric array")
        raise GradjitError(f"{what} is of dtype {dtype.name}: gradjit computes with bool, "
                           f"integer and float16 / float32 / float64 arrays only; {hint}",
                           user_site())
