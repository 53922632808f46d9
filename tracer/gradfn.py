"""``GradFn``: one recorded op of tensor mode's history.

Contract
- ``edges[i]`` is ``(GradFn, output index)`` for an input made by a recorded op,
  or the input ``Tensor`` itself (a leaf or a constant), never an
  intermediate Tensor object, so freeing ``out_data`` after backward frees
  the saved arrays.
- ``out_data`` holds the output arrays; None while a deferred op is pending
  (tracer/deferred.py) and after ``release()`` (``freed`` tells which), but for
  arrays something else still holds (``kept``: an eagerly computed op's Tensor
  the caller keeps), with None in place of the others.
- ``HookHandle`` is what ``Tensor.register_hook`` returns; ``LeafHooks`` holds a
  leaf's hooks; ``FREED`` is torch's error message for values of a node that
  backward freed.
- ``in_versions`` records each Tensor edge's version when it was used;
  ``versions`` each output's (box, version), so backward can refuse values an
  in-place op changed. A deferred node sets only ``_vbox`` (its one output's
  box, at version 0): the list is made each time it is read (most steps never
  read it, and a kept list would count as a holder of the box: ``held``).
- ``held()``: is a Tensor still holding a deferred node's value box (its
  output, or an alias of it)? Read from the box's reference count, so a
  deferred node needs no weak reference to its output (one object less to
  make and free per op of every step). Backward computes the values of held
  nodes and keeps them (``release`` leaves their ``out_data``, which their
  Tensor reads when first asked: ``Tensor.data``); it frees the rest.
"""
from __future__ import annotations

import itertools
from sys import getrefcount
from types import CodeType

from gradjit.tracer.registry import site_at

_seq = itertools.count()
FREED = ("Trying to backward through the graph a second time (or directly access saved "
         "tensors after they have already been freed). Saved intermediate values of the graph "
         "are freed when you call .backward() or autograd.grad(). Specify retain_graph=True if "
         "you need to backward through the graph a second time or if you need to access saved "
         "tensors after calling backward.")   # torch's message, for a freed node's values
_NEW = object.__new__


def _backward_name(op):
    base = op.split(".")[0].lstrip("_")
    return "".join(p.capitalize() for p in base.split("_")) + "Backward0"


class GradFn:
    """One recorded op. ``edges[i]`` is (GradFn, output index) or a Tensor."""

    __slots__ = ("op", "attrs", "edges", "out_types", "out_data", "seq", "_site", "freed",
                 "_lasti", "_versions", "_vbox", "in_versions", "_key", "_tgen", "_tpos",
                 "__dict__", "__weakref__")
    # Set on few nodes, so not slots: these class defaults stand until a node sets its own
    # (in its __dict__, made then). A slot must be assigned on every node made, and tensor
    # mode makes one per op of every step.
    hooks = None      # {output index: [hook, ...]}
    retains = None    # {output index: weakref to the Tensor whose .grad to fill}
    ctx = None        # custom Function context
    boundary = None   # device copies: the leaf standing for this node on its device

    def __init__(self, op, attrs, edges, out_types, out_data, site):
        # Version of each Tensor edge (leaf or constant) when it was used.
        in_versions = [e._box[0] if not isinstance(e, tuple) else None for e in edges]
        self._fill(op, attrs, edges, in_versions, out_types, out_data, site, None)

    def _fill(self, op, attrs, edges, in_versions, out_types, out_data, site, key):
        self.op, self.attrs, self.edges = op, attrs, edges
        self.out_types, self.out_data, self._site = out_types, out_data, site
        self.seq = next(_seq)
        self.freed = False
        self._versions = None  # [(version box, version)] per output, set by the front end
        self._vbox = None      # (deferred nodes: see ``versions``)
        self.in_versions = in_versions
        self._key = key       # structural key piece (None: computed on first backward)
        self._tgen = 0        # the recording tape (tracer/tape.py) this node is on, if any

    @property
    def versions(self):
        """[(version box, version)] per output."""
        v = self._versions
        if v is None and self._vbox is not None:
            return [(self._vbox, 0)]   # (not kept: a reference to the box would count in held)
        return v

    @versions.setter
    def versions(self, value):
        self._versions = value

    @property
    def site(self):
        """The user's source line (a Site), or None. Tensor mode's hot path records a
        ``registry.user_where`` pair instead, or its two parts (the code object here,
        the bytecode offset in ``_lasti``), looked up here when first read."""
        s = self._site
        if s.__class__ is CodeType:   # (tracer/tensor.py's pending nodes: no tuple to make)
            s = self._site = site_at((s, self._lasti))
        elif s.__class__ is tuple:
            s = self._site = site_at(s)
        return s

    @site.setter
    def site(self, site):
        self._site = site

    def name(self):
        if self.ctx is not None:
            return f"{self.attrs['function'].__name__}Backward"
        return _backward_name(self.op)

    def __repr__(self):
        return f"<{self.name()}>"

    def held(self):
        """Does a Tensor hold this deferred node's value box? (Its Tensor and any alias
        share the box; else only ``_vbox`` and the call's own reference count.)"""
        return self._vbox is not None and getrefcount(self._vbox) > 2

    def release(self):
        """Backward is done with this node: its values go, but for a held node's (its
        Tensor reads them later, and keeps them alive anyway)."""
        if not self.held():
            self.out_data = kept(self.out_data)
        self.freed = True


def kept(out):
    """What a backward leaves of a node's output arrays: those something else holds
    (the caller's Tensor of an eagerly computed op; its refcount is over the list's,
    the loop's and the call's). Freeing them would free nothing, and a new graph built
    on that Tensor (h = cat(...) backwarded, then h * h) reads its value from here.
    None when nothing is held."""
    if out is None:
        return None
    out = [a if getrefcount(a) > 3 else None for a in out]
    return out if any(a is not None for a in out) else None


class LeafHooks(list):
    """A leaf's hooks (``Tensor._hooks``): the gradient hooks are the list's items;
    ``post`` holds the post-accumulate-grad hooks. True when either has one, so the
    fast backward paths (runtime/fast_backward.py, which skip leaves with hooks) leave
    every hooked leaf to the engine."""

    __slots__ = ("post",)

    def __init__(self):
        super().__init__()
        self.post = []

    def __bool__(self):
        return len(self) > 0 or len(self.post) > 0


class HookHandle:
    """What ``register_hook`` returns: ``remove()`` takes the hook off."""

    def __init__(self, hooks, hook):
        self._hooks, self._hook = hooks, hook

    def remove(self):
        if self._hook in self._hooks:
            self._hooks.remove(self._hook)
