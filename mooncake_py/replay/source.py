"""Source replay: the scalar runs of a replay plan as generated straight-line Python.

A replay plan (replay.py) of a scalar loop is thousands of steps, each a few nanoseconds of
float arithmetic inside a microsecond of interpreter work (the step's tuple, type checks, a
pullback object, the tape's sweep). Here every run of at least :data:`MIN_RUN` scalar steps
becomes Python source, written once per plan (on its first replay) and compiled with
``compile()``: forward statements on Python floats (``v12 = v10 * v11``, ``v13 = _m_sin(v12)``),
the guards (``if not v12 > 0.5: raise _Failed()``), then the reverse statements on float
cotangents (``g10 += g12 * v11``). The vocabulary is compiled.py's (:func:`compiled._step_spec`):
element reads ``x[i]`` / ``x[i, j]`` of float64 arrays, ``+ - * /`` of float64 scalars with
float or exactly convertible int constants, the unary ops of fastpath.py whose table
derivatives use the table's elementary calls, comparisons and ``bool`` that ``f`` branched on.
The derivative expressions are the table's ``d1`` strings spelled with ``math`` functions
(:func:`compiled.spell`), the binary ones the short paths' formulas.

Two forms:

* a plan made only of such steps reading float64 array arguments (the scalar-loop rows) is
  one function, forward and reverse, that takes the arrays and returns the value and the
  gradients (:class:`_WholeProgram`). Its results are the Python replay's bit for bit
  wherever no transcendental function is involved (``+ - * /`` and ``sqrt`` are correctly
  rounded in both; the cotangents are summed in the tape's order, and a first contribution
  is stored, not added to a zero, as the tape does, so -0.0 survives where it does there);
  ``math.sin`` and NumPy's ``sin`` may differ in the last bit.
* any other plan keeps its other steps (array ops, BLAS, reductions, writes it cannot fold,
  steps of kinds compiled.py does not know, after which no segment is formed) as Python
  replay and has each run replaced by a segment, in the form of compiled.py's mixed plans
  (:func:`compiled.splice_segments`): a forward step that runs the generated forward code and
  keeps its values, and output steps; the segment's reverse code runs when the sweep reaches
  its first node. Results as above, except that a value read from outside the segment gets
  the segment's cotangents as one sum where the tape adds them one by one (a difference in the
  last bits when that value has other readers too). Chains of scalar writes into a float64
  buffer that ``f`` allocated (``y[i, j] = v``, :func:`_write_specs`) are part of a run.

Plans recorded on dual numbers (HVP caches) take the same two forms (:class:`_DualSource`):
forward on (value, tangent) pairs, reverse on cotangents that are plain or dual where the
tape's are, with the dual layer's ``ew_pullback`` programs (compiled.py's HVP kernel's).

A function holds at most :data:`MAX_RUN` steps (a longer run becomes several segments).
``compile()`` costs about 30-40 µs a step (gradient) and 80-100 µs (HVP): a 3000-step plan's
first replay takes 0.1-0.2 s (gradient) and 0.25-0.35 s (HVP) on the benchmark machine, once
per process and source: code objects are memoised and cached on disk next to the numba
kernels (a later process loads them in ~10 ms). :data:`TIMES` sums these costs.

Python floats raise where NumPy returns inf or nan with a RuntimeWarning (``x / 0``,
``math.log(0)``, ``math.exp(1000)``, ``math.sqrt(-1)``); a call where the generated code
raises, or whose value or gradient is not finite (NumPy would have warned on the way), is run
again the ordinary Python-replay way, which gives the recording's results and warnings (an
intermediate inf that does not reach a result, e.g. ``1 / (x * 1e308 * 10)``, is the one
case where NumPy's warning is not repeated).

Example:
    >>> import numpy as np, mooncake_py as mp
    >>> def f(x):
    ...     s = 0.0
    ...     for i in range(len(x)):
    ...         s = s + np.sin(x[i]) * x[i]
    ...     return s
    >>> c = mp.prepare_gradient_cache(f, np.ones(4))
    >>> _ = mp.value_and_gradient(c, f, np.ones(4))                   # records
    >>> y, (g,) = mp.value_and_gradient(c, f, np.linspace(0, 1, 4))   # generates, runs
    >>> type(c._replay.plan).__name__, c._replay.plan.runs
    ('SourcePlan', 1)
"""
import hashlib
import marshal
import math
import os
import re
import sys
import tempfile
import time
import types

import numpy as np

from ..dual.dual_array import DualArray
from ..dual.kernels_cpu import kernel_dir
from ..rules.derivative_table import BY_UFUNC, TABLE
from . import compiled as _c
from .lean import attach
from .plans import (
    _ALLOCATORS,
    _FRESH_LIKE,
    _LIKE,
    _OP,
    _SLOT,
    Plan,
    PullbackReplayer,
    Replayer,
    _Failed,
)

# Runs of scalar steps shorter than this stay Python replay: a segment costs a forward step,
# an output step per value read after it and a few calls, about the replay of ~8 steps.
MIN_RUN = 8
# Steps per generated function: compile() time is about linear in the source, a few µs a
# line; this keeps one function's compile under ~0.1 s and its code object modest.
MAX_RUN = 4000
# Seconds spent generating source and compiling it (or loading its code object), summed over
# all plans, and how many functions were built ("compiled": by compile(); "loaded": from the
# cache), for benchmarks and tests.
TIMES = {"generate_s": 0.0, "compile_s": 0.0, "functions": 0, "compiled": 0, "loaded": 0}

_F64 = np.float64
_F64_DT = np.dtype(np.float64)
_fromiter = np.fromiter
_ravel = np.ravel
# Python float arithmetic raises where NumPy gives inf/nan and warns: such a call is replayed
# the NumPy way instead. (_NonFinite: a non-finite result, where NumPy may have warned.)


class _NonFinite(ArithmeticError):
    """The generated code's value or gradient is not finite: NumPy would have warned."""


class _Unfit(Exception):
    """This call's values are not of the kinds the generated code was written for (another
    shape, a tangent with lanes, a cotangent of another tag...): the plan replays them the
    Python way, which decides (and re-records where the plan does not hold)."""


_FLOAT_ERRORS = (ArithmeticError, ValueError)
_PYTHON_WAY = _FLOAT_ERRORS + (_Unfit,)
_SYM = {1: "+", 2: "-", 3: "*", 4: "/", 5: ">", 6: ">=", 7: "<", 8: "<=", 9: "==", 10: "!="}
_MATH = {"arctan": math.atan, "abs": math.fabs}
_NOTHING = object()  # a plan with no run worth generating: plain Python replay


def _namespace():
    ns = {"_Failed": _Failed, "_inf": math.inf, "_ninf": -math.inf, "_nan": math.nan,
          "_F64": _F64, "_put": np.put, "_ravel": np.ravel, "_sum": sum,
          "_NonFinite": _NonFinite}
    for name in _c._NB_CALLS:
        ns["_m_" + name] = _MATH.get(name) or getattr(math, name)
    return ns


def _unary_table():
    """opcode -> (forward source, d1 source) templates for the table's unary ops, with
    ``{a}`` for the input's name and ``{y}`` for the output's."""
    out = _UNARY_TABLE
    if not out:
        for k, (_, name, d1, _) in enumerate(_c.table_unary_ops()):
            d1 = _c.spell(d1, _math_call, {"a": "__a__", "y": "__y__"})
            out[_c._UNARY0 + k] = ("{a} * {a}" if name == "square" else f"_m_{name}({{a}})",
                                   d1.replace("__a__", "{a}").replace("__y__", "{y}"))
    return out


_UNARY_TABLE = {}


def _math_call(name):
    return "_m_" + name


def _pow_templates():
    """(∂y/∂a, ∂y/∂b) of ``a ** b`` as templates in ``{a}``, ``{b}``, ``{y}``."""
    if not _POW_TEMPLATES:
        names = {"a": "__a__", "b": "__b__", "y": "__y__"}
        for d in _c._pow_derivatives(_math_call, names):
            d = d.replace("{", "{{").replace("}", "}}")
            _POW_TEMPLATES.append(d.replace("__a__", "{a}").replace("__b__", "{b}")
                                  .replace("__y__", "{y}"))
    return _POW_TEMPLATES


_POW_TEMPLATES = []


def _lit(c):
    """Source for the float constant ``c`` (exactly: repr round-trips; -0.0 stays -0.0)."""
    c = float(c)
    if not math.isfinite(c):
        return "_nan" if c != c else "_inf" if c > 0 else "_ninf"  # noqa: PLR0124  (the NaN test)
    r = repr(c)
    return f"({r})" if r.startswith("-") else r


def _operand(e, const):
    return _lit(const) if e is None else f"v{e[1]}"


class _Source:
    """The statements of one run of specs (compiled._step_spec's tuples): the forward pass
    and, for a set of seeded nodes, the reverse pass. Array elements are read from ``L<node>``
    (the array as a list) or, when few of a large array's elements are read, ``A<node>``."""

    def __init__(self, specs, unary):
        self.specs, self.unary = specs, unary
        reads, root = {}, {}
        for code, ea, eb, _, d in specs:
            if code == 0:
                reads.setdefault(ea[1], set()).add(ea[2])
            elif code == _WRITE_CODE:
                root[d] = root.get(eb[1], eb[1])
        self.arrays = reads  # array node -> offsets read
        self.root = root  # write node -> the buffer node its chain of writes starts from

    def listed(self, node, size):
        """Whether array ``node`` is unpacked by ``.tolist()`` (else read by ``.item``)."""
        return 4 * len(self.arrays[node]) + 16 >= size

    def forward(self, sizes):
        lines, unary = [], self.unary
        for code, ea, eb, c, d in self.specs:
            if code == 0:
                p, off = ea[1], ea[2]
                src = f"L{p}[{off}]" if self.listed(p, sizes[p]) else f"A{p}.item({off})"
                lines.append(f"v{d} = {src}")
            elif code <= 4:
                lines.append(f"v{d} = {_operand(ea, c)} {_SYM[code]} {_operand(eb, c)}")
            elif code == _c._POW:
                lines.append(f"v{d} = _m_pow({_operand(ea, c)}, {_operand(eb, c)})")
            elif code <= 10:
                test = f"{_operand(ea, c)} {_SYM[code]} {_operand(eb, c)}"
                lines.append(f"if {'not ' if d else ''}{test}: raise _Failed()")
            elif code == _c._TRUTH:
                lines.append(f"if {'not ' if d else ''}v{ea[1]}: raise _Failed()")
            elif code == _c._NEG:
                lines.append(f"v{d} = -v{ea[1]}")
            elif code == _WRITE_CODE:
                continue  # (written all at once at the end: see writes())
            else:
                lines.append(f"v{d} = " + unary[code][0].format(a=f"v{ea[1]}"))
        return lines

    def writes(self):
        """Statements making the writes of the run into their buffers (``B<root>``), per chain
        in the order recorded (offsets within a chain are distinct: see _write_specs)."""
        chains = {}
        for code, ea, eb, c, d in self.specs:
            if code == _WRITE_CODE:
                offs, vals = chains.setdefault(self.root[d], ([], []))
                offs.append(str(eb[2]))
                vals.append(_operand(ea, c))
        out = []
        for r, (o, v) in chains.items():
            # (a value NumPy would have warned about on the way, inf or nan, is checked here:
            # a written value may be no output of the run)
            out += [f"_w = [{', '.join(v)}]", f"_put(B{r}, [{', '.join(o)}], _w)",
                    "_s = _sum(_w)", "if _s - _s != 0.0: raise _NonFinite()"]
        return out

    def reverse(self, seeded):
        """(statements, scalar nodes given a cotangent ``g<node>``, per array node the names
        ``e<node>_<offset>`` of its elements' cotangents) of the sweep from the nodes in
        ``seeded`` (whose ``g<node>`` the caller assigns first). Every node's cotangent takes
        its contributions in the tape's order, the first one assigned; an array's elements as
        the tape's buffer gets them (with one contribution in all, the value itself; with more,
        each element's first added to 0.0)."""
        has = set(seeded)
        lines, marks = [], []  # marks: (line index, array node, offset, expression)

        def give(e, expr):
            if e is None:
                return
            p = e[1]
            if p in has:
                lines.append(f"g{p} += {expr}")
            else:
                lines.append(f"g{p} = {expr}")
                has.add(p)

        for code, ea, eb, c, d in reversed(self.specs):
            if 5 <= code <= _c._TRUTH or d not in has:
                continue
            g = f"g{d}"
            if code == _WRITE_CODE:
                # as the tape's write pullback: the value gets the buffer's cotangent where it
                # landed, the buffer before gets it with that element zeroed (one list per
                # chain, passed down the chain as the sweep passes its owned buffer)
                w = f"W{self.root[d]}[{eb[2]}]"
                give(ea, w)
                lines.append(f"{w} = 0.0")
                has.add(eb[1])
            elif code == 0:
                marks.append((len(lines), ea[1], ea[2], g))
                lines.append(None)
            elif code == 1:
                give(ea, g)
                give(eb, g)
            elif code == 2:
                give(ea, g)
                give(eb, f"-{g}")
            elif code == 3:
                give(ea, f"{g} * {_operand(eb, c)}")
                give(eb, f"{g} * {_operand(ea, c)}")
            elif code == 4:
                b = _operand(eb, c)
                give(ea, f"{g} * (1 / {b})")
                give(eb, f"{g} * (-v{d} / {b})")
            elif code == _c._NEG:
                give(ea, f"-{g}")
            elif code == _c._POW:
                a, b = _operand(ea, c), _operand(eb, c)
                da, db = _pow_templates()
                give(ea, f"{g} * ({da.format(a=a, b=b, y=f'v{d}')})")
                give(eb, f"{g} * ({db.format(a=a, b=b, y=f'v{d}')})")
            else:
                d1 = self.unary[code][1].format(a=f"v{ea[1]}", y=f"v{d}")
                give(ea, f"{g} * ({d1})")
        total = {}
        for _, p, _, _ in marks:
            total[p] = total.get(p, 0) + 1
        elems = {}
        for at, p, off, expr in marks:
            names = elems.setdefault(p, {})
            name = names.get(off)
            if name is not None:
                lines[at] = f"{name} += {expr}"
                continue
            name = names[off] = f"e{p}_{off}"
            lines[at] = f"{name} = {expr}" if total[p] == 1 else f"{name} = 0.0 + {expr}"
        return lines, has, elems


def _gradient_list(names, size):
    """Source of a list of ``size`` cotangents: the named elements, 0.0 elsewhere."""
    if 2 * len(names) >= size:
        return "[" + ", ".join(names.get(k, "0.0") for k in range(size)) + "]"
    return None


def _build(name, params, body):
    """Compile ``def name(params): body`` in the generated code's namespace (the code object
    from this process's memo or the on-disk cache when the same source was compiled before)."""
    t0 = time.perf_counter()
    src = f"def {name}({', '.join(params)}):\n" + "".join(f"    {ln}\n" for ln in body)
    t1 = time.perf_counter()
    code = _code_for(src, name)
    t2 = time.perf_counter()
    ns = _namespace()
    exec(code, ns)  # noqa: S102  (generated source, compiled here by design)
    TIMES["generate_s"] += t1 - t0
    TIMES["compile_s"] += t2 - t1
    TIMES["functions"] += 1
    return ns[name]


# Code objects of generated sources, by the source's SHA-1: this process's (the last
# _CODE_MAX) and, in the kernel cache directory, those of earlier processes (marshal files
# checked by a digest of their contents: a damaged file is compiled and written again).
_CODE = {}
_CODE_MAX = 64
_MAGIC = b"mooncake_py source replay 1\n"


def _cache_dir():
    return kernel_dir()


def _code_path(key):
    d = _cache_dir()
    if d is None:
        return None
    return os.path.join(d, f"source_{key}.{sys.implementation.cache_tag}.marshal")


def _code_for(src, name):
    key = hashlib.sha1(src.encode()).hexdigest()
    code = _CODE.get(key)
    if code is None:
        path = _code_path(key)
        code = _read_code(path) if path is not None else None
        if code is None:
            code = compile(src, f"<mooncake_py source replay {name} {key[:12]}>", "exec")
            TIMES["compiled"] += 1
            if path is not None:
                _write_code(path, code)
        else:
            TIMES["loaded"] += 1
        if len(_CODE) >= _CODE_MAX:
            _CODE.pop(next(iter(_CODE)))
        _CODE[key] = code
    return code


def _read_code(path):
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError:
        return None
    n = len(_MAGIC)
    if data[:n] != _MAGIC or hashlib.sha1(data[n + 20:]).digest() != data[n:n + 20]:
        return None
    try:
        code = marshal.loads(data[n + 20:])
    except (ValueError, EOFError, TypeError):
        return None
    if type(code) is not types.CodeType:
        return None
    try:
        os.utime(path)  # used now: eviction removes the files unused the longest
    except OSError:
        pass
    return code


def _write_code(path, code):
    payload = marshal.dumps(code)
    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            fh.write(_MAGIC + hashlib.sha1(payload).digest() + payload)
        os.replace(tmp, path)  # (atomic: a concurrent reader sees the old file or the new)
    except OSError:
        return
    evict(os.path.dirname(path))


# Bytes of generated-source files the cache directory may hold (every plan a program ever
# replayed leaves one; a program that builds new functions in a loop would fill the disk).
CACHE_LIMIT_ENV = "MOONCAKE_PY_SOURCE_CACHE_MB"
_DEFAULT_LIMIT_MB = 256


def cache_limit_bytes():
    """The byte budget of the generated-source files: ``$MOONCAKE_PY_SOURCE_CACHE_MB``
    megabytes (default 256; 0 keeps none on disk)."""
    raw = os.environ.get(CACHE_LIMIT_ENV, "")
    try:
        mb = float(raw) if raw.strip() else _DEFAULT_LIMIT_MB
    except ValueError:
        mb = _DEFAULT_LIMIT_MB
    return max(0, int(mb * (1 << 20)))


def evict(d, limit=None):
    """Remove the generated-source files of directory ``d`` least recently used first
    (modification time, which a load refreshes) until they fit in ``limit`` bytes (default
    :func:`cache_limit_bytes`); returns how many were removed. Kernel sources and numba's
    cache are not touched: their number is bounded by the derivative table.

    Example:
        >>> import tempfile, os
        >>> d = tempfile.mkdtemp()
        >>> for i in range(3):
        ...     with open(os.path.join(d, f"source_{i}.x.marshal"), "wb") as fh:
        ...         _ = fh.write(b"0" * 100)
        >>> evict(d, limit=250), sorted(os.listdir(d))
        (1, ['source_1.x.marshal', 'source_2.x.marshal'])
    """
    limit = cache_limit_bytes() if limit is None else limit
    files = []
    try:
        with os.scandir(d) as it:
            for e in it:
                if e.name.startswith("source_") and e.name.endswith(".marshal"):
                    try:
                        st = e.stat()
                    except OSError:
                        continue
                    files.append((st.st_mtime, e.name, st.st_size))
    except OSError:
        return 0
    total = sum(size for _, _, size in files)
    removed = 0
    for _, name, size in sorted(files):
        if total <= limit:
            break
        try:
            os.remove(os.path.join(d, name))
        except OSError:
            continue  # (another process removed it first)
        total -= size
        removed += 1
    return removed


def _unpack(node, shape, src):
    """Statements making array ``node`` readable as ``L<node>`` (a list) or ``A<node>``."""
    if src.listed(node, int(np.prod(shape))):
        return [f"L{node} = A{node}.tolist()" if len(shape) == 1 else
                f"L{node} = A{node}.ravel().tolist()"]
    return []


def _array_out(node, shape, elems, lines, var):
    """Statements setting ``var`` to array ``node``'s cotangent list (or a float64 array)."""
    size = int(np.prod(shape))
    lst = _gradient_list(elems, size)
    if lst is not None:
        lines.append(f"{var} = {lst}")
    else:
        lines.append(f"{var} = [0.0] * {size}")
        lines.extend(f"{var}[{k}] = {nm}" for k, nm in elems.items())


class _WholeProgram:
    """A plan made only of scalar steps on float64 array arguments, as one generated function
    ``(arrays) -> (value, cotangent lists)``; :meth:`run` is :meth:`Plan.run`'s equivalent."""

    def __init__(self, plan, specs, shapes, fns, unary):
        self.shapes, self.fns = shapes, fns
        self.sizes = [int(np.prod(s)) for s in shapes]
        src = _Source(specs, unary)
        ninp = len(plan.inputs)
        read = [p for p in range(ninp) if p in src.arrays]
        body = []
        for p in read:
            body += _unpack(p, shapes[p], src)
        body += src.forward({p: self.sizes[p] for p in read})
        body.append(f"g{plan.ynode} = 1.0")
        rev, _has, elems = src.reverse([plan.ynode])
        body += rev
        outs = []
        for p in range(ninp):
            if p in elems:
                _array_out(p, shapes[p], elems[p], body, f"G{p}")
                outs.append(f"G{p}")
            else:
                outs.append("None")
        body.append(f"return v{plan.ynode}, ({', '.join(outs)},)")
        self.fn = _build("mp_whole", [f"A{p}" for p in range(ninp)], body)

    def run(self, leaves):
        if len(leaves) != len(self.shapes):
            raise _Unfit()
        for leaf, shape in zip(leaves, self.shapes):
            if not _c._f64_array(leaf, shape):
                raise _Unfit()
        _c._check_rules(self.fns)
        y, gs = self.fn(*leaves)
        if y - y != 0.0:
            raise _NonFinite()
        cts = []
        for g, shape in zip(gs, self.shapes):
            if g is None:
                cts.append(np.zeros(shape))
                continue
            s = sum(g)
            if s - s != 0.0:
                raise _NonFinite()
            a = _fromiter(g, _F64, len(g))
            cts.append(a if len(shape) == 1 else a.reshape(shape))
        return _F64(y), cts


_PROGRAM_VARS = ("a", "b", "y", "g", "ta", "tb", "tg")
_PROGRAMS = {}


def _program(entry, kind, k, present, const_b=None):
    """(statements, output expressions) of the dual layer's program for these parameters as
    Python templates: ``{a}``, ``{ta}``, ``{y}``, ``{g}``... for the program's variables,
    ``_m_<name>`` for its calls (compiled._ProgramToNumba's conversion, memoised)."""
    key = (entry.name, kind, k, present, const_b)
    got = _PROGRAMS.get(key)
    if got is None:
        conv = _c._ProgramToNumba(_math_call, {v: f"__{v}__" for v in _PROGRAM_VARS})
        stmts, outs = conv.lines(entry, kind, k, present, const_b)

        def template(text):
            text = text.replace("{", "{{").replace("}", "}}")
            for v in _PROGRAM_VARS:
                text = text.replace(f"__{v}__", "{" + v + "}")
            return text
        got = _PROGRAMS[key] = _inline([template(t) for t in stmts],
                                       [template(t) for t in outs])
    return got


_ASSIGN = re.compile(r"^(\w+) = (.*)$")
_ATOM = re.compile(r"^(\{\w+\}|\w+|\d+\.?\d*(e-?\d+)?)$")


def _inline(stmts, outs):
    """A program's statements with its copies (``d = {b}``) substituted into the statements
    after them, and each temporary that only an output reads written into that output, in
    parentheses: the same operations in the same order, in fewer statements (the generated
    code runs each of them once per step)."""
    subst, kept = {}, []

    def sub(text):
        for name, atom in subst.items():
            text = re.sub(rf"(?<![\w{{]){name}(?![\w}}])", lambda _, atom=atom: atom, text)
        return text
    for st in stmts:
        m = _ASSIGN.match(st)
        if m is None:
            return stmts, outs  # (a form not expected: left as it is)
        target, expr = m.group(1), sub(m.group(2))
        subst.pop(target, None)
        if _ATOM.match(expr):
            subst[target] = expr
        else:
            kept.append((target, expr))
    outs = [sub(o) for o in outs]
    names = [t for t, _ in kept]
    if len(set(names)) != len(names):
        return [f"{t} = {e}" for t, e in kept], outs  # (a temporary assigned twice: as it is)
    k = len(kept) - 1
    while k >= 0:  # from the last: a temporary read exactly once is written where it is read
        target, expr = kept[k]
        word = re.compile(rf"(?<![\w{{]){target}(?![\w}}])")
        uses = [len(word.findall(e)) for _, e in kept[k + 1:]] + \
            [len(word.findall(o)) for o in outs]
        if sum(uses) == 1:
            put = (lambda _, e=expr: f"({e})")
            kept = kept[:k] + [(t, word.sub(put, e)) for t, e in kept[k + 1:]]
            outs = [word.sub(put, o) for o in outs]
        k -= 1
    final = [f"{t} = {e}" for t, e in kept]
    return final, outs


def _dual_entries():
    """opcode -> table entry, for the ops a dual program runs."""
    out = {1: TABLE["add"], 2: TABLE["subtract"], 3: TABLE["multiply"],
           4: BY_UFUNC[np.true_divide], _c._NEG: TABLE["negative"],
           _c._POW: BY_UFUNC[np.power]}
    for k, (uf, _, _, _) in enumerate(_c.table_unary_ops()):
        out[_c._UNARY0 + k] = BY_UFUNC[uf]
    return out


class _DualSource(_Source):
    """The statements of a plan recorded on dual numbers (an HVP cache's), forward on (value
    ``v<node>``, tangent ``t<node>``) pairs, then the reverse sweep on cotangents that are
    plain (``g<node>``) or dual (with tangent ``h<node>``) exactly where the tape's are: the
    seed is a plain 1, ``+``/``-`` pass a cotangent on as it is, the other pullbacks are the
    dual layer's programs of ``ew_pullback`` for the operands and cotangent present (as
    compiled.py's HVP kernel and dual_scalars.py's DualPullback run them); a dual contribution
    adds its tangent to a node's, a plain one leaves it."""

    def __init__(self, specs, unary):
        _Source.__init__(self, specs, unary)
        self.entries = _dual_entries()

    @staticmethod
    def _names(ea, eb, c):
        a = _operand(ea, c)
        b = _operand(eb, c)
        return {"a": a, "b": b, "ta": "0.0" if ea is None else f"t{ea[1]}",
                "tb": "0.0" if eb is None else f"t{eb[1]}"}

    def forward(self, sizes):
        lines, unary = [], self.unary
        for code, ea, eb, c, d in self.specs:
            if code == 0:
                p, off = ea[1], ea[2]
                if self.listed(p, sizes[p]):
                    lines += [f"v{d} = L{p}[{off}]", f"t{d} = T{p}[{off}]"]
                else:
                    lines += [f"v{d} = A{p}.item({off})", f"t{d} = B{p}.item({off})"]
                continue
            if 5 <= code <= _c._TRUTH:
                lines += _Source(((code, ea, eb, c, d),), unary).forward(sizes)
                continue
            if code == _WRITE_CODE:
                continue  # (see writes())
            names = self._names(ea, eb, c)
            names["y"] = f"v{d}"
            const_b = None
            if code <= 4:
                lines.append(f"v{d} = {names['a']} {_SYM[code]} {names['b']}")
                present = (ea is not None, eb is not None)
            elif code == _c._POW:
                lines.append(f"v{d} = _m_pow({names['a']}, {names['b']})")
                present = (ea is not None, eb is not None)
                const_b = _c.const_exponent(c) if eb is None else None
            elif code == _c._NEG:
                lines.append(f"v{d} = -v{ea[1]}")
                present = (True,)
            else:
                lines.append(f"v{d} = " + unary[code][0].format(a=f"v{ea[1]}"))
                present = (True,)
            stmts, (ty,) = _program(self.entries[code], "f", 0, present, const_b)
            lines += [st.format(**names) for st in stmts]
            lines.append(f"t{d} = " + ty.format(**names))
        return lines

    def writes(self):
        """As :meth:`_Source.writes`, into a dual buffer ``Q<root>``: values into its primal,
        tangents (0 for a number written, as the dual layer's write) into its tangent."""
        chains = {}
        for code, ea, eb, c, d in self.specs:
            if code == _WRITE_CODE:
                offs, vals, tans = chains.setdefault(self.root[d], ([], [], []))
                offs.append(str(eb[2]))
                vals.append(_operand(ea, c))
                tans.append("0.0" if ea is None else f"t{ea[1]}")
        out = []
        for r, (o, v, t) in chains.items():
            out += [f"_w = [{', '.join(v)}]", f"_u = [{', '.join(t)}]",
                    f"_put(Q{r}._value, [{', '.join(o)}], _w)",
                    f"_put(Q{r}._tangent, [{', '.join(o)}], _u)",
                    "_s = _sum(_w) + _sum(_u)", "if _s - _s != 0.0: raise _NonFinite()"]
        return out

    def reverse(self, seeded, duals=None):
        """As :meth:`_Source.reverse`, with the seeds' cotangents plain (``g<node>``) or, where
        ``duals`` says so, dual (also ``h<node>``); :attr:`dual_at` then tells which nodes'
        cotangents came out dual. Returns the array elements' tangent names as well."""
        has = set(seeded)
        dual = self.dual_at = dict(zip(seeded, duals or (False,) * len(seeded)))
        lines, marks = [], []

        def give(e, r, tr):
            if e is None:
                return
            p = e[1]
            if p not in has:
                lines.append(f"g{p} = {r}")
                if tr is not None:
                    lines.append(f"h{p} = {tr}")
                has.add(p)
                dual[p] = tr is not None
                return
            lines.append(f"g{p} += {r}")
            if tr is not None:
                lines.append(f"h{p} += {tr}" if dual[p] else f"h{p} = {tr}")
                dual[p] = True

        for code, ea, eb, c, d in reversed(self.specs):
            if 5 <= code <= _c._TRUTH or d not in has:
                continue
            g = f"g{d}"
            tg = f"h{d}" if dual[d] else None
            if code == _WRITE_CODE:  # (see _Source.reverse; a dual buffer's cotangent is
                r, off = self.root[d], eb[2]  # dual or plain, as the tape's)
                give(ea, f"WV{r}[{off}]", f"WT{r}[{off}]" if dual[d] else None)
                lines.append(f"WV{r}[{off}] = 0.0")
                if dual[d]:
                    lines.append(f"WT{r}[{off}] = 0.0")
                has.add(eb[1])
                dual[eb[1]] = dual[d]
                continue
            if code == 0:
                marks.append((len(lines), ea[1], ea[2], g, tg))
                lines.append(None)
            elif code == 1:
                give(ea, g, tg)
                give(eb, g, tg)
            elif code == 2:
                give(ea, g, tg)
                give(eb, f"-{g}", None if tg is None else f"-{tg}")
            elif code == _c._NEG:
                give(ea, f"-{g}", None if tg is None else f"-{tg}")
            else:
                names = self._names(ea, eb, c)
                names.update(y=f"v{d}", g=g, tg="0.0" if tg is None else tg)
                binary = code <= 4 or code == _c._POW
                for k, e in ((0, ea), (1, eb)) if binary else ((0, ea),):
                    if e is None:
                        continue
                    present = (tg is not None, ea is not None, eb is not None) if binary \
                        else (tg is not None, True)
                    const_b = _c.const_exponent(c) if code == _c._POW and eb is None else None
                    stmts, outs = _program(self.entries[code], "p", k, present, const_b)
                    lines += [st.format(**names) for st in stmts]
                    give(e, outs[0].format(**names),
                         outs[1].format(**names) if len(outs) > 1 else None)
        total = {}
        for _, p, _, _, _ in marks:
            total[p] = total.get(p, 0) + 1
        elems, telems = {}, {}
        for at, p, off, r, tr in marks:
            names, tnames = elems.setdefault(p, {}), telems.setdefault(p, {})
            out = []
            name = names.get(off)
            if name is None:
                name = names[off] = f"e{p}_{off}"
                out.append(f"{name} = {r}" if total[p] == 1 else f"{name} = 0.0 + {r}")
            else:
                out.append(f"{name} += {r}")
            if tr is not None:
                tname = tnames.get(off)
                if tname is None:
                    tname = tnames[off] = f"f{p}_{off}"
                    out.append(f"{tname} = {tr}" if total[p] == 1 else f"{tname} = 0.0 + {tr}")
                else:
                    out.append(f"{tname} += {tr}")
            lines[at] = "; ".join(out)
        return lines, has, (elems, telems)


class _DualWholeProgram:
    """A plan recorded on dual numbers (an HVP cache's) made only of scalar steps on dual
    float64 array arguments, as one generated function; :meth:`run` returns what the Python
    replay (and compiled.CompiledHVPPlan) returns: the value and the gradients as duals of
    this call's tag whose tangents are the direction's derivatives (for the gradients, H·v)."""

    def __init__(self, plan, specs, shapes, fns, unary):
        self.shapes, self.fns = shapes, fns
        self.sizes = [int(np.prod(s)) for s in shapes]
        src = _DualSource(specs, unary)
        ninp = len(plan.inputs)
        read = [p for p in range(ninp) if p in src.arrays]
        body = []
        for p in read:
            if src.listed(p, self.sizes[p]):
                ravel = "" if len(shapes[p]) == 1 else ".ravel()"
                body += [f"L{p} = A{p}{ravel}.tolist()", f"T{p} = B{p}{ravel}.tolist()"]
        body += src.forward({p: self.sizes[p] for p in read})
        body.append(f"g{plan.ynode} = 1.0")
        rev, _has, (elems, telems) = src.reverse([plan.ynode])
        body += rev
        outs = []
        for p in range(ninp):
            if p in elems:
                _array_out(p, shapes[p], elems[p], body, f"G{p}")
                _array_out(p, shapes[p], telems[p], body, f"H{p}")
                outs.append(f"G{p}, H{p}")
            else:
                outs.append("None, None")
        body.append(f"return v{plan.ynode}, t{plan.ynode}, ({', '.join(outs)},)")
        params = [f"A{p}" for p in range(ninp)] + [f"B{p}" for p in range(ninp)]
        self.fn = _build("mp_dual_whole", params, body)

    def run(self, leaves):
        dual = DualArray
        if len(leaves) != len(self.shapes) or not leaves:
            raise _Unfit()
        tag = leaves[0]._tag
        for leaf, shape in zip(leaves, self.shapes):
            # (a tangent with lanes, a Hessian's, fails the shape check: Python replay)
            if type(leaf) is not dual or leaf._tag is not tag or \
                    not _c._f64_array(leaf._value, shape) or \
                    not _c._f64_array(leaf._tangent, shape):
                raise _Unfit()
        _c._check_rules(self.fns)
        y, yt, gs = self.fn(*[leaf._value for leaf in leaves],
                            *[leaf._tangent for leaf in leaves])
        if y - y != 0.0 or yt - yt != 0.0:
            raise _NonFinite()
        cts = []
        for k, shape in enumerate(self.shapes):
            g, h = gs[2 * k], gs[2 * k + 1]
            if g is None:
                cts.append(dual(np.zeros(shape), np.zeros(shape), tag))
                continue
            s = sum(g) + sum(h)
            if s - s != 0.0:
                raise _NonFinite()
            a, b = _fromiter(g, _F64, len(g)), _fromiter(h, _F64, len(h))
            if len(shape) != 1:
                a, b = a.reshape(shape), b.reshape(shape)
            cts.append(dual(a, b, tag))
        return dual(_F64(y), _F64(yt), tag), cts




class _SegmentState:
    """A source segment's values in one call: ``values`` (its outputs, by position),
    ``saved`` (what its reverse reads) and the ``seeds`` its outputs received in the sweep
    (``tag``: a dual segment's tag). Stands in the plan for the segment's first node (dtype
    and shape as its step records)."""
    __slots__ = ("saved", "seeds", "shape", "tag", "values")
    dtype = _F64_DT


class _SourceSegment:
    """A run of a plan's steps as generated forward and reverse functions, in a mixed plan
    (the segment object of :func:`compiled.splice_segments`)."""

    def __init__(self, specs, lo, outputs, info, fns):
        self.fns, self.lo = fns, lo
        scalars, arrays, buffers = {}, {}, {}
        for _, ea, eb, _, _ in specs:
            for e in (ea, eb):
                if e is None:
                    continue
                if e[0] == "s" and e[1] < lo:
                    scalars.setdefault(e[1], None)
                elif e[0] == "e":
                    arrays.setdefault(e[1], None)
                elif e[0] == "w" and e[1] < lo:
                    buffers.setdefault(e[1], None)
        self.scalars, self.arrays = tuple(scalars), tuple(arrays)
        self.buffers = tuple(buffers)  # buffers written (the chains' first nodes)
        self.shapes = tuple(info[p][0] for p in self.arrays)
        self.buffer_shapes = tuple(info[p][0] for p in self.buffers)
        self.external = self.scalars + self.arrays + self.buffers
        self.outputs = {node: k for k, node in enumerate(outputs)}
        self.n = len(outputs)
        self.src = _Source(specs, _unary_table())
        self._fwd = None
        self._revs = {}  # seeded output nodes (sorted) -> generated reverse

    def _make_forward(self):
        src = self.src
        body = [f"v{p} = float(v{p})" for p in self.scalars]
        sizes = {}
        for p, shape in zip(self.arrays, self.shapes):
            sizes[p] = int(np.prod(shape))
            body += _unpack(p, shape, src)
        body += src.forward(sizes) + src.writes()
        saved = self._saved()
        outs = [f"B{src.root[n]}" if n in src.root else f"_F64(v{n})" for n in self.outputs]
        body.append(f"return [{', '.join(outs)}], "
                    f"({', '.join(saved)}{',' if len(saved) == 1 else ''})")
        self._saved_names = saved
        self._fwd = _build("mp_segment_forward", [f"v{p}" for p in self.scalars] +
                           [f"A{p}" for p in self.arrays] + [f"B{p}" for p in self.buffers],
                           body)
        return self._fwd

    def _saved(self):
        """The forward values the reverse may read (operands of * and /, unary ops' ins/outs)."""
        names = []
        for code, ea, eb, _, d in self.src.specs:
            if code in (3, 4, _c._POW) or _c._UNARY0 <= code < _WRITE_CODE:
                for e in (ea, eb):
                    if e is not None and e[0] == "s":
                        names.append(f"v{e[1]}")
                if code != 3:
                    names.append(f"v{d}")
        return list(dict.fromkeys(names))

    def _make_reverse(self, seeded):
        src = self.src
        rev, has, elems = src.reverse(seeded)
        body = []
        saved = self._saved_names
        if saved:
            body.append(f"{', '.join(saved)}{',' if len(saved) == 1 else ''} = S")
        body += [f"W{src.root[n]} = _ravel(g{n}).tolist()" if n in src.root else
                 f"g{n} = float(g{n})" for n in seeded] + rev
        outs = [f"_F64(g{p})" if p in has else "None" for p in self.scalars]
        for p, shape in zip(self.arrays, self.shapes):
            if p in elems:
                _array_out(p, shape, elems[p], body, f"G{p}")
                outs.append(f"G{p}")
            else:
                outs.append("None")
        outs += [f"W{p}" if p in has else "None" for p in self.buffers]
        body.append(f"return ({', '.join(outs)},)")
        fn = _build("mp_segment_reverse", ["S"] + [f"g{n}" for n in seeded], body)
        self._revs[seeded] = fn
        return fn

    def forward(self, values):
        _c._check_rules(self.fns)
        E = len(self.scalars)
        for v, shape in zip(values[E:], self.shapes + self.buffer_shapes):
            if not _c._f64_array(v, shape):
                raise _Unfit()
        fwd = self._fwd or self._make_forward()
        outs, saved = fwd(*values)
        for v in outs:
            if type(v) is _F64 and v - v != 0.0:  # (a scalar; else a buffer: see writes())
                raise _NonFinite()
        state = _SegmentState()
        state.values, state.saved, state.seeds, state.shape = outs, saved, {}, (self.n,)
        return state, lambda g: self.reverse(state)

    def reverse(self, state):
        seeds = state.seeds
        if not seeds:
            return (None,) * len(self.external)
        seeded = tuple(sorted(self.outputs_of(seeds)))
        rev = self._revs.get(seeded) or self._make_reverse(seeded)
        cts = rev(state.saved, *[seeds[self.outputs[n]] for n in seeded])
        E = len(self.scalars)
        out = list(cts[:E])
        for v in out:
            if v is not None and v - v != 0.0:
                raise _NonFinite()
        for g, shape in zip(cts[E:], self.shapes + self.buffer_shapes):
            if g is None:
                out.append(None)
                continue
            s = sum(g)
            if s - s != 0.0:
                raise _NonFinite()
            a = _fromiter(g, _F64, len(g))
            out.append(a if len(shape) == 1 else a.reshape(shape))
        return tuple(out)

    def outputs_of(self, seeds):
        """The output nodes whose positions are the keys of ``seeds``."""
        nodes = {k: n for n, k in self.outputs.items()}
        return [nodes[k] for k in seeds]


class _DualSegment(_SourceSegment):
    """A run of a plan recorded on dual numbers (an HVP cache's) as generated forward and
    reverse functions in a mixed plan: it reads dual scalars and dual float64 arrays of one
    tag from outside, makes its outputs as dual scalars, and sweeps the cotangents its outputs
    received (plain numbers or duals of that tag) back as :class:`_DualSource` does."""

    def __init__(self, specs, lo, outputs, info, fns):
        _SourceSegment.__init__(self, specs, lo, outputs, info, fns)
        self.src = _DualSource(specs, _unary_table())

    def _make_forward(self):
        src = self.src
        body, sizes = [], {}
        for p, shape in zip(self.arrays, self.shapes):
            sizes[p] = int(np.prod(shape))
            if src.listed(p, sizes[p]):
                ravel = "" if len(shape) == 1 else ".ravel()"
                body += [f"L{p} = A{p}{ravel}.tolist()", f"T{p} = B{p}{ravel}.tolist()"]
        body += src.forward(sizes) + src.writes()
        saved = self._saved()
        outs = ", ".join(f"Q{src.root[n]}" if n in src.root else
                         f"_D(_F64(v{n}), _F64(t{n}), tag)" for n in self.outputs)
        body.append(f"return [{outs}], ({', '.join(saved)}{',' if len(saved) == 1 else ''})")
        self._saved_names = saved
        params = [f"v{p}" for p in self.scalars] + [f"t{p}" for p in self.scalars] + \
            [f"A{p}" for p in self.arrays] + [f"B{p}" for p in self.arrays] + \
            [f"Q{p}" for p in self.buffers] + ["tag", "_D"]
        self._fwd = _build("mp_dual_segment_forward", params, body)
        return self._fwd

    def _saved(self):
        """Every value and tangent the segment reads or makes (its reverse may read any)."""
        names = [f"{c}{p}" for p in self.scalars for c in "vt"]
        for code, _, _, _, d in self.src.specs:
            if not 5 <= code <= _c._TRUTH and code != _WRITE_CODE:
                names += [f"v{d}", f"t{d}"]
        return list(dict.fromkeys(names))

    def _make_reverse(self, key):
        seeded, duals = key
        src = self.src
        rev, has, (elems, telems) = src.reverse(seeded, duals)
        body = []
        saved = self._saved_names
        if saved:
            body.append(f"{', '.join(saved)}{',' if len(saved) == 1 else ''} = S")
        for n, d in zip(seeded, duals):
            if n in src.root:
                body.append(f"WV{src.root[n]} = g{n}")
                if d:
                    body.append(f"WT{src.root[n]} = h{n}")
        body += rev
        outs = []
        for p in self.scalars:
            if p not in has:
                outs.append("None")
            elif src.dual_at.get(p):
                outs.append(f"_D(_F64(g{p}), _F64(h{p}), tag)")
            else:
                outs.append(f"_F64(g{p})")
        for p, shape in zip(self.arrays, self.shapes):
            if p in elems:
                _array_out(p, shape, elems[p], body, f"G{p}")
                _array_out(p, shape, telems[p], body, f"H{p}")
                outs.append(f"(G{p}, H{p}, {bool(telems[p])})")
            else:
                outs.append("None")
        for p in self.buffers:
            outs.append("None" if p not in has else f"(WV{p}, WT{p}, True)" if src.dual_at[p]
                        else f"(WV{p}, None, False)")
        body.append(f"return ({', '.join(outs)},)")
        params = ["S", "tag", "_D"] + [f"g{n}" for n in seeded] + \
            [f"h{n}" for n, d in zip(seeded, duals) if d]
        fn = _build("mp_dual_segment_reverse", params, body)
        self._revs[key] = fn
        return fn

    def forward(self, values):
        _c._check_rules(self.fns)
        D = DualArray
        E = len(self.scalars)
        tag = None
        vs, ts = [], []
        for d in values[:E]:
            if type(d) is not D or (tag is not None and d._tag is not tag):
                raise _Unfit()
            tag = d._tag
            vs.append(float(d._value))
            ts.append(float(d._tangent))
        arrs, tans = [], []
        A = len(self.arrays)
        for d, shape in zip(values[E:], self.shapes + self.buffer_shapes):
            if type(d) is not D or (tag is not None and d._tag is not tag) or \
                    not _c._f64_array(d._value, shape) or not _c._f64_array(d._tangent, shape):
                raise _Unfit()
            tag = d._tag
            arrs.append(d._value)
            tans.append(d._tangent)
        for d in values[E + A:]:  # (buffers written: their tangent too, in place)
            if not d._tangent.flags.writeable:
                raise _Unfit()
        if tag is None or tag.lanes or tag._watch:
            raise _Unfit()
        fwd = self._fwd or self._make_forward()
        outs, saved = fwd(*vs, *ts, *arrs[:A], *tans[:A], *values[E + A:], tag, D)
        for v in outs:
            if type(v._value) is _F64 and (v._value - v._value != 0.0 or
                                           v._tangent - v._tangent != 0.0):
                raise _NonFinite()
        state = _SegmentState()
        state.values, state.saved, state.seeds, state.shape = outs, saved, {}, (self.n,)
        state.tag = tag
        return state, lambda g: self.reverse(state)

    def reverse(self, state):
        seeds = state.seeds
        if not seeds:
            return (None,) * len(self.external)
        D = DualArray
        tag = state.tag
        nodes = self.outputs_of(seeds)
        order = sorted(range(len(nodes)), key=nodes.__getitem__)
        ks = list(seeds)
        gs, hs, duals = [], [], []
        root = self.src.root
        for i in order:
            g = seeds[ks[i]]
            if nodes[i] in root:  # a buffer's cotangent: its elements, as lists
                if type(g) is D:
                    if g._tag is not tag:
                        raise _Unfit()
                    gs.append(_ravel(g._value).tolist())
                    hs.append(_ravel(g._tangent).tolist())
                    duals.append(True)
                else:
                    gs.append(_ravel(g).tolist())
                    duals.append(False)
            elif type(g) is D:
                if g._tag is not tag:
                    raise _Unfit()
                gs.append(float(g._value))
                hs.append(float(g._tangent))
                duals.append(True)
            else:
                gs.append(float(g))
                duals.append(False)
        key = (tuple(nodes[i] for i in order), tuple(duals))
        rev = self._revs.get(key) or self._make_reverse(key)
        cts = rev(state.saved, tag, D, *gs, *hs)
        E = len(self.scalars)
        out = list(cts[:E])
        for v in out:
            if v is not None and (v - v != 0.0 if type(v) is _F64 else
                                  v._value - v._value != 0.0 or v._tangent - v._tangent != 0.0):
                raise _NonFinite()
        for got, shape in zip(cts[E:], self.shapes + self.buffer_shapes):
            if got is None:
                out.append(None)
                continue
            g, h, dual = got
            s = sum(g) + (sum(h) if dual else 0.0)
            if s - s != 0.0:
                raise _NonFinite()
            a = _fromiter(g, _F64, len(g))
            if len(shape) != 1:
                a = a.reshape(shape)
            if dual:
                b = _fromiter(h, _F64, len(h))
                a = D(a, b if len(shape) == 1 else b.reshape(shape), tag)
            out.append(a)
        return tuple(out)


class _MixedSource(Plan):
    """A plan whose scalar runs are source segments, replayed as a :class:`Plan`."""


class SourcePlan:
    """A replay :class:`~mooncake_py.replay.plans.Plan` whose scalar runs run as generated
    Python source (module docstring), made on its first replay; used by the replayers exactly
    as the plan it wraps. ``runs``: calls served by generated code; ``fallbacks``: calls run
    the Python-replay way after the generated code raised (a float error) or gave a
    non-finite result, or found this call's values of another kind than it was written for.

    Example:
        >>> import numpy as np
        >>> r = SourceReplayer()
        >>> f = lambda x: x[0] * x[1] + x[0] * x[0] + x[1] - 1.0 - x[1] * 2
        >>> _ = r.call(f, (np.array([1.0, 2.0]),), (0,))        # records, plans
        >>> y, (g,) = r.call(f, (np.array([3.0, 5.0]),), (0,))  # generates, runs
        >>> float(y), g.tolist(), r.plan.runs
        (18.0, [11.0, 2.0], 1)
    """

    def __init__(self, plan, owner=None):
        self.base, self.owner = plan, owner
        self.constants, self.finish, self.short = plan.constants, plan.finish, plan.short
        self._how = None  # None: not made yet; _NOTHING: Python replay; else what runs
        self.runs = 0
        self.fallbacks = 0

    def __getattr__(self, name):  # (ytree, outs, steps...: the plan's own)
        if name in ("base", "owner"):
            raise AttributeError(name)
        return getattr(self.base, name)

    def _make(self, leaves):
        try:
            how = _source_for(self.base, leaves)
        except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
            how = None  # (a plan the generator cannot write: replay it the usual way)
        if how is None:
            how = _NOTHING
            owner = self.owner
            if owner is not None and owner.plan is self:
                # (nothing generated: no indirection left on its calls)
                owner.plan = attach(self.base, owner.dual)
        self._how = how
        return how

    def run(self, leaves):
        how = self._how or self._make(leaves)
        if how is _NOTHING:
            return self.base.run(leaves)
        try:
            out = how.run(leaves)
        except _PYTHON_WAY:
            self.fallbacks += 1
            return self.base.run(leaves)
        self.runs += 1
        return out

    def run_pullback(self, leaves, seeds):
        how = self._how or self._make(leaves)
        if how is _NOTHING:
            return self.base.run_pullback(leaves, seeds)
        try:
            out = how.run_pullback(leaves, seeds)
        except _PYTHON_WAY:
            self.fallbacks += 1
            return self.base.run_pullback(leaves, seeds)
        self.runs += 1
        return out


def _source_for(plan, leaves):
    """What runs ``plan`` with generated source: a :class:`_WholeProgram`, a mixed plan
    with source segments, or None when it has no run of :data:`MIN_RUN` scalar steps."""
    codes = _OPCODES or _OPCODES.update(_c._opcodes()) or _OPCODES
    if any(type(leaf) is DualArray for leaf in leaves):
        # a plan on duals (an HVP cache's): one function when it is all scalar steps, else
        # dual source segments between Python steps. With a plain leaf among the duals (an
        # argument given no direction) Python replay: the dual segments read duals only
        if not all(type(leaf) is DualArray for leaf in leaves):
            return None
        values = [leaf._value for leaf in leaves]
        if plan.ynode is None or not all(
                type(leaf) is DualArray and _c._f64_array(leaf._tangent, np.shape(v))
                for leaf, v in zip(leaves, values)):
            return None
        info = _c._node_info(plan, values)
        specs = [_c._step_spec(st, info, codes) for st in plan.steps]
        if len(specs) <= MAX_RUN and _whole(plan, specs, values):
            return _DualWholeProgram(plan, specs, tuple(v.shape for v in values),
                                     _functions(plan), _unary_table())
        if getattr(plan, "writes", None):
            _write_specs(plan, specs, info, dual=True)
        return _mixed(plan, specs, info, (), _DualSegment)
    info = _c._node_info(plan, leaves)
    specs = [_c._step_spec(st, info, codes) for st in plan.steps]
    if plan.ynode is not None and len(specs) <= MAX_RUN and _whole(plan, specs, leaves):
        return _WholeProgram(plan, specs, tuple(leaf.shape for leaf in leaves),
                             _functions(plan), _unary_table())
    keep = () if plan.ynode is not None else \
        {r for k, r in getattr(plan, "outs", ()) if k == _SLOT}
    if getattr(plan, "writes", None):
        _write_specs(plan, specs, info)
    return _mixed(plan, specs, info, keep, _SourceSegment)


_WRITE_CODE = 40  # a spec (40, value operand, ("w", buffer node, offset), constant, node)


def _write_specs(plan, specs, info, dual=False):
    """Give each write step that a segment can make a spec (in place), and ``info`` its node:
    ``buf[i, j] = v`` of a float64 scalar (or number) into one element of a float64 ndarray
    buffer that ``f`` allocated, in a chain of such writes (the buffer, and each state of it
    before the last, read by nothing but the next write; each element written once; with
    ``dual``, of duals into a dual buffer, as a plan on duals has them). Then no
    pullback ever reads the buffer before the chain's end, which is why a segment may make the
    writes at once and leave out the undo and redo that the sweep makes around each write."""
    steps = plan.steps
    readers, made_by = {}, {}
    for k, st in enumerate(steps):
        for p in _c._step_refs(st) or ():
            readers.setdefault(p, []).append(k)
        kind = st[0]
        node = st[6] if kind == _OP else st[1] if kind in (_c._WRITE, _LIKE) else None
        if node is not None:
            made_by[node] = k
            if kind == _LIKE and type(st[7]) is tuple:  # (a buffer made by np.zeros(like=x))
                info[node] = (st[7], st[8])
    written = {}  # chain's first node -> offsets written
    root = {}
    for k, st in enumerate(steps):
        if st[0] != _c._WRITE:
            continue
        _, node, h, key, is_slot, ref, region, vshape, vdtype, buftype = st
        if buftype is not (DualArray if dual else np.ndarray) or region != () or \
                vshape != () or \
                info[h] is None or info[h][1] != _F64_DT or not info[h][0] or \
                readers.get(h) != [k] or h not in made_by or (vdtype is not None and
                                                                vdtype != _F64_DT):
            continue
        first = steps[made_by[h]]
        if not (first[0] == _c._WRITE and h in root) and not (
                first[0] == _OP and first[1] in _ALLOCATORS) and not (
                first[0] == _LIKE and first[2] in _FRESH_LIKE):
            continue
        off = _c._flat_index(key, info[h][0])
        r = root.get(h, h)
        if off is None or off in written.setdefault(r, set()):
            continue
        if is_slot:
            if info[ref] != ((), _F64_DT):
                continue
            value, const = ("s", ref), 0.0
        else:
            const = _c._number(ref)
            if const is None:
                continue
            value = None
        written[r].add(off)
        root[node] = r
        info[node] = info[h]
        specs[k] = (_WRITE_CODE, value, ("w", h, off), const, node)


def _made(step):
    """The node a step with a spec makes (its written buffer's, for a write)."""
    return step[1] if step[0] == _c._WRITE else _c._step_node(step)


def _mixed(plan, specs, info, keep, segment):
    """``plan`` with its runs as ``segment``s (a _MixedSource), or None when it has none."""
    segments = _c.plan_segments(plan, specs, MIN_RUN, MAX_RUN, keep, _made)
    if not segments:
        return None
    mixed = _MixedSource.__new__(_MixedSource)
    mixed.__dict__.update(plan.__dict__)
    mixed.__dict__.pop("_dual_steps", None)  # (made from the plan's own steps)
    mixed.__dict__.pop("run", None)  # (a lean run of the plan itself: replay/lean.py)
    mixed.steps, mixed.parents, mixed.segments = _c.splice_segments(plan, segments, specs, info,
                                                                    segment)
    folded = {plan.steps[k][1] for s, e, _, _ in segments for k in range(s, e)
              if plan.steps[k][0] == _c._WRITE}
    if folded:  # (writes a segment makes: no undo and redo around them in the sweep)
        mixed.writes = [w for w in plan.writes if w not in folded]
        mixed.splits = [w for w in plan.splits if w not in folded]
    return mixed


_OPCODES = {}  # compiled._opcodes(), once


def _functions(plan):
    """The functions whose built-in rules ``plan``'s steps stand for (checked every run)."""
    return tuple({st[1] for st in plan.steps if st[0] not in (_c._GUARD, _c._OBSERVE)})


def _whole(plan, specs, leaves):
    """Whether every step of ``plan`` is a scalar step reading only its float64 array
    arguments and its own scalars, with a scalar value it makes as the output."""
    ninp = len(plan.inputs)
    if not specs or any(sp is None for sp in specs) or plan.ynode < ninp or \
            len(leaves) != ninp or not all(
                type(x) is np.ndarray and x.dtype == _F64_DT and x.ndim for x in leaves):
        return False
    for _, ea, eb, _, _ in specs:
        for e in (ea, eb):
            if e is not None and ((e[0] == "s") != (e[1] >= ninp)):
                return False
    return True


class SourceReplayer(Replayer):
    """A :class:`~mooncake_py.replay.plans.Replayer` whose plans replay their scalar runs as
    generated source (:class:`SourcePlan`); guards, the fallback to recording and the give-up
    after repeated failures are the Replayer's. With ``dual=True`` (an HVP cache) a plan made
    only of scalar steps runs as one generated forward-over-reverse function.

    Example:
        >>> import numpy as np
        >>> r = SourceReplayer()
        >>> f = lambda x: sum(x[i] * x[i] for i in range(5))
        >>> _ = r.call(f, (np.ones(5),), (0,))
        >>> y, (g,) = r.call(f, (np.arange(5.0),), (0,))
        >>> float(y), g.tolist()
        (30.0, [0.0, 2.0, 4.0, 6.0, 8.0])
    """

    def planned(self, plan):
        # (a new plan is wrapped here, once per recording: the calls themselves are the
        # Replayer's, with nothing added on their path)
        Replayer.planned(self, plan)
        if plan is not None and plan is self.plan:
            self.plan = _wrapped(plan, self)
            if self.plan is plan and self.kind != "pullback":
                attach(plan, self.dual)


class SourcePullbackReplayer(PullbackReplayer):
    """A :class:`~mooncake_py.replay.plans.PullbackReplayer` whose plans replay their scalar
    runs as generated source (segments; the sweep from the caller's seeds is the plan's).

    Example:
        >>> import numpy as np
        >>> r = SourcePullbackReplayer()
        >>> f = lambda x: sum(x[i] * x[i] for i in range(5))
        >>> _ = r.call(f, (np.ones(5),), (0,), 1.0)
        >>> y, (g,) = r.call(f, (np.arange(5.0),), (0,), 2.0)
        >>> float(y), g.tolist()
        (30.0, [0.0, 4.0, 8.0, 12.0, 16.0])
    """

    planned = SourceReplayer.planned


def _wrapped(plan, owner):
    """``plan`` as ``owner`` (a replayer) keeps it: as a :class:`SourcePlan` when it is long
    enough to hold a run of MIN_RUN steps."""
    if type(plan) is Plan and len(plan.steps) >= MIN_RUN:
        return SourcePlan(plan, owner)
    return plan
