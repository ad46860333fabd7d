"""The write steps of a replay plan (replay.py): ``buf[key] = value`` into a buffer that ``f``
allocated itself, replayed as :meth:`~mooncake_py.tape.tape.Tape.write` records it.

A recorded write is a node whose pullback is a ``_Write`` holding the region it overwrote;
the sweep of a :class:`~mooncake_py.tape.tape.MutatingTape` splits the cotangent at that node
and swaps the region back (and forward again afterwards), so that earlier pullbacks read the
values they saw. A replayed write makes the same node from the replay's buffer, and the
replay sweeps on a MutatingTape with the same list of write nodes: the same undo and redo,
the same cotangents.

Step layouts (tuples; the kinds are numbered after replay.py's):

- ``(_WRITE, node, h, key, is_slot, ref, region, vshape, vdtype, buftype)``: ``values[h][key]
  = v`` where ``v`` is ``values[ref]`` (``is_slot``) or the constant ``ref``; ``values[node]``
  is the same buffer afterwards. ``key`` is a basic index (ints, slices, Ellipsis, None);
  ``region``, ``vshape`` and ``vdtype`` are those of the recorded write node; ``buftype`` the
  type of the recorded buffer (ndarray, or DualArray in a plan recorded on duals).
- ``(_VIEW_WRITE, node, src, pb)``: the node of an array that a write reached through a view
  of it (``y[i][j] = v`` moves ``y`` too): ``values[node]`` is ``values[src]`` (the array, not
  a copy), and ``pb`` the recorded pullback, which holds no state of its own.

Example:
    >>> import numpy as np
    >>> buf = np.zeros(3)
    >>> values, pbs = [buf, np.float64(2.0), None], [None] * 3
    >>> run_write((_WRITE, 2, 0, (1,), True, 1, (), (), np.dtype(float), np.ndarray),
    ...           values, pbs)
    >>> buf.tolist(), pbs[2].saved
    ([0.0, 2.0, 0.0], np.float64(0.0))
"""
import numpy as np

from ..dual.dual_array import DualArray
from ..tape.tape import _NP_SCALARS, MutatingTape, _DualItemWrite, _Write, begin_writes

_WRITE, _VIEW_WRITE = 10, 11
_F64 = np.float64


class WriteFailed(Exception):
    """A write step cannot run on this replay's values (the plan must be recorded again)."""


def run_write(step, values, pbs):
    """Run a _WRITE step: the write, in place, and its node's pullback."""
    _, node, h, key, is_slot, ref, region, vshape, vdtype, buftype = step
    buf = values[h]
    if type(buf) is not buftype:
        raise WriteFailed()
    v = values[ref] if is_slot else ref
    if buftype is not np.ndarray:
        made = _dual_item_write(buf, key, v, region, vshape, vdtype)
        if made is not None:
            values[node], pbs[node] = buf, made
            return
    old = buf[key]
    if type(old) not in _NP_SCALARS:
        old = np.copy(old)
    buf[key] = v
    values[node] = buf
    pbs[node] = _Write(buf, key, old, None, True, region, vshape, vdtype)


def _dual_item_write(buf, key, v, region, vshape, vdtype):
    """One float64 element of a dual buffer without lanes written with a dual scalar of the
    same tag (or a plain number): the two float64s written directly, as DualArray's own write
    does (primal, then tangent); None where its general path must run."""
    if region:
        return None
    tag = buf._tag
    if tag.lanes or tag._watch:
        return None
    p, t = buf._value, buf._tangent
    if type(p) is not np.ndarray or type(t) is not np.ndarray or not t.flags.writeable:
        return None
    D = DualArray
    tv = type(v)
    if tv is D:
        if v._tag is not tag:
            return None
        vp, vt = v._value, v._tangent
        if type(vp) is not _F64 or type(vt) is not _F64:
            return None
    elif tv is _F64 or tv is float:
        vp, vt = v, 0
    else:
        return None
    op, ot = p[key], t[key]
    if type(op) is not _F64 or type(ot) is not _F64:
        return None
    p[key] = vp
    t[key] = vt
    return _DualItemWrite(p, t, key, op, ot, region, vshape, vdtype)


def dual_item_write(buf, key, v, vshape, vdtype):
    """The tape's hook (``tape._item_write``): ``buf[key] = v`` for a dual buffer as
    :func:`_dual_item_write` does it, or None (nothing written) for anything else."""
    if type(buf) is not DualArray:
        return None
    return _dual_item_write(buf, key, v, (), vshape, vdtype)


def split_dual_item(g, key):
    """``g[key]`` of a dual cotangent ``g`` (no lanes) at one float64 element, as a new dual
    scalar, with the element zeroed in ``g`` (primal and tangent): what the write pullback's
    general path does through DualArray's getitem, copy and write; None where it must run."""
    D = DualArray
    if type(g) is not D:
        return None
    tag = g._tag
    if tag.lanes or tag._watch:
        return None
    p, t = g._value, g._tangent
    if type(p) is not np.ndarray or type(t) is not np.ndarray or not t.flags.writeable or \
            not p.flags.writeable:
        return None
    a, b = p[key], t[key]
    if type(a) is not _F64 or type(b) is not _F64:
        return None
    p[key] = 0
    t[key] = 0
    return D(a, b, tag)


def run_view_write(step, values, pbs):
    """Run a _VIEW_WRITE step."""
    _, node, src, pb = step
    values[node] = values[src]
    pbs[node] = pb


def sweeping_tape(tape, writes, splits):
    """Make the replay's sweep ``tape`` (a fresh, plain Tape) sweep as a MutatingTape whose
    write nodes are ``writes`` (and ``splits`` those and the views they moved); it records
    nothing, so no read is ever stale."""
    tape.__class__ = MutatingTape
    begin_writes(tape)
    tape._writes, tape._splits = writes, splits
