"""Sample covariance and correlation: np.cov, np.corrcoef.

Both are :func:`~.registry.composite`: NumPy's computation (centre by the weighted mean, one
matrix product, scale by the degrees of freedom) written with ops that have rules, so they are
differentiable in the observations ``m`` and ``y`` to any order. The frequency and
reliability weights (``fweights``, ``aweights``) are constants, as NumPy converts them with
``np.asarray``. As in NumPy, the result is float64 unless ``dtype`` says otherwise.

Example:
    >>> import numpy as np, mooncake_py as mp
    >>> x = np.array([[0.0, 1.0, 2.0], [1.0, 0.0, 2.0]])
    >>> mp.grad(lambda x: np.cov(x)[0, 1])(x)
    array([[ 0. , -0.5,  0.5],
           [-0.5,  0. ,  0.5]])
"""
import warnings

import numpy as np

from ..core import array_module as am
from ..core.array_ops import astype
from .broadcasting import shape_of
from .differences import as_array
from .registry import composite


def _rows(v, dtype, rowvar):
    """``v`` as a 2-D array of variables (rows) by observations (columns) in ``dtype``."""
    if v.dtype != dtype:
        v = astype(v, dtype)
    if len(shape_of(v)) < 2:
        return np.reshape(v, (1, -1)), True
    return (v if rowvar else np.transpose(v)), False


def _sample_weights(fweights, aweights, n):
    """NumPy's checks and product of the two weight vectors (plain arrays), or None."""
    w = None
    if fweights is not None:
        fweights = am.asarray(fweights, dtype=float)
        if not np.all(fweights == np.around(fweights)):
            raise TypeError("fweights must be integer")
        if fweights.ndim > 1:
            raise RuntimeError("cannot handle multidimensional fweights")
        if fweights.shape[0] != n:
            raise RuntimeError("incompatible numbers of samples and fweights")
        if np.any(fweights < 0):
            raise ValueError("fweights cannot be negative")
        w = fweights
    if aweights is not None:
        aweights = am.asarray(aweights, dtype=float)
        if aweights.ndim > 1:
            raise RuntimeError("cannot handle multidimensional aweights")
        if aweights.shape[0] != n:
            raise RuntimeError("incompatible numbers of samples and aweights")
        if np.any(aweights < 0):
            raise ValueError("aweights cannot be negative")
        w = aweights if w is None else w * aweights
    return w, aweights


@composite(np.cov)
def _cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *,
         dtype=None):
    if ddof is not None and ddof != int(ddof):
        raise ValueError("ddof must be integer")
    m = as_array(m)
    if len(shape_of(m)) > 2:
        raise ValueError("m has more than 2 dimensions")
    if y is not None:
        y = as_array(y)
        if len(shape_of(y)) > 2:
            raise ValueError("y has more than 2 dimensions")
    if dtype is None:
        dtype = np.result_type(m, np.float64) if y is None else \
            np.result_type(m, y, np.float64)
    dtype = np.dtype(dtype)
    X, _ = _rows(m, dtype, rowvar)
    if shape_of(X)[0] == 0:
        return np.array([]).reshape(0, 0)
    if y is not None:
        Y, _vector = _rows(y, dtype, rowvar)
        X = np.concatenate((X, Y), axis=0)
    if ddof is None:
        ddof = 0 if bias else 1
    n = shape_of(X)[1]
    w, aweights = _sample_weights(fweights, aweights, n)
    avg = np.average(X, axis=1, weights=w)
    w_sum = n if w is None else float(np.sum(w))
    if w is None:
        fact = n - ddof
    elif ddof == 0:
        fact = w_sum
    elif aweights is None:
        fact = w_sum - ddof
    else:
        fact = w_sum - ddof * float(np.sum(w * aweights)) / w_sum
    if fact <= 0:
        warnings.warn("Degrees of freedom <= 0 for slice", RuntimeWarning, stacklevel=2)
        fact = 0.0
    X = X - avg[:, None]
    X_T = np.transpose(X if w is None else X * w)
    if dtype.kind == "c":  # NumPy's complex covariance: E[(x − μ)·conj(y − μ)]
        X_T = np.conjugate(X_T)
    with np.errstate(divide="ignore"):
        scale = np.true_divide(1, fact)
    return np.squeeze(np.dot(X, X_T) * scale)


@composite(np.corrcoef)
def _corrcoef(x, y=None, rowvar=True, *, dtype=None):
    c = np.cov(x, y, rowvar, dtype=dtype)
    if len(shape_of(c)) == 0:  # a single variable: NumPy returns c / c
        return c / c
    stddev = np.sqrt(np.diagonal(c))
    c = c / stddev[:, None]
    c = c / stddev[None, :]
    return np.clip(c, -1, 1)
