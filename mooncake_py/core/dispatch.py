"""Which transformation handles a call: the innermost one, i.e. the wrapper of highest level.

A tape (reverse mode) and a dual tag (forward mode) each take a *level* from one shared counter
when they are created. Nested transformations wrap values inside each other, the most recently
started outermost, so a call on wrapped values must be handled by the wrapper of highest level:
its rule then runs on the unwrapped values, where the next wrapper takes over. This is what makes
forward-over-reverse (a tape whose values are duals) and reverse-over-forward compose with no
special cases, and what keeps two nested tapes (or two nested duals) from confusing perturbations.

Wrapper classes register themselves in ``WRAPPER_TYPES`` and provide ``_mc_level()`` (an int)
and a class-level ``_mc_apply(top, fn, args, kwargs)``.
"""
import itertools

_levels = itertools.count(1)
WRAPPER_TYPES = set()
_SEQ = (list, tuple)


def new_level():
    """A fresh nesting level, higher than every level handed out before."""
    return next(_levels)


def top_wrapper(args, kwargs=None):
    """The wrapped value of highest level among args and kwargs (one level into lists/tuples)."""
    top = None
    best = 0
    wt = WRAPPER_TYPES
    for a in ((*args, *kwargs.values()) if kwargs else args):
        t = type(a)
        if t in wt:
            lv = a._mc_level()
            if lv > best:
                top, best = a, lv
        elif t in _SEQ:
            for b in a:
                if type(b) in wt:
                    lv = b._mc_level()
                    if lv > best:
                        top, best = b, lv
    return top


def _deep_top(x, found):
    """Search nested lists/tuples/dicts at any depth (``np.block([[a, b], [c, d]])``)."""
    t = type(x)
    if t in WRAPPER_TYPES:
        if found is None or x._mc_level() > found._mc_level():
            return x
    elif t in _SEQ:
        for y in x:
            found = _deep_top(y, found)
    elif t is dict:
        for y in x.values():
            found = _deep_top(y, found)
    return found


def dispatch(fn, args, kwargs):
    """Call ``fn`` through the rules of the innermost transformation present in its arguments."""
    top = top_wrapper(args, kwargs)
    if top is None:
        # NumPy found a wrapper deeper than one level of nesting: calling fn again would come
        # straight back here, so look for it at any depth.
        top = _deep_top((args, kwargs), None)
        if top is None:
            return fn(*args, **kwargs)
    return type(top)._mc_apply(top, fn, args, kwargs)
