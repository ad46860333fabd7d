"""Graph colorings that compress sparse Jacobians and Hessians into a few directions.

- **Columns of a Jacobian** (forward mode): two columns may share a color when no row has a
  nonzero in both (they are *structurally orthogonal*), i.e. a distance-1 coloring of the column
  intersection graph ``JᵀJ``. Then ``J @ S`` (S: one 0/1 seed per color) holds every entry of J
  unmixed. Rows likewise for reverse mode (graph ``JJᵀ``).
- **Hessians**: a *star coloring* of the adjacency graph of H (a proper coloring in which every
  path on four vertices uses at least three colors; Gebremedhin, Manne and Pothen, SIAM Review
  47(4), 2005). It allows *direct* recovery of a symmetric H from ``H @ S``: for each nonzero
  ``H[i, j]``, either j is the only vertex of its color among i's neighbours, or i is the only
  one of its color among j's, and that compressed entry is ``H[i, j]`` itself. It needs far fewer
  colors than a distance-2 coloring (an arrowhead: 2 instead of n).

Greedy, in *largest-first* order (vertices by decreasing degree, ties by index, as networkx's
``greedy_color(G, "largest_first")``): each vertex takes the smallest color its constraints
allow. The loops are numba-compiled on first use (cached on disk; numba is imported then, so
that ``import mooncake_py`` stays fast).
"""
import numpy as np

from . import rows as R


def _forbid_neighbours(indptr, indices, color, forbidden, v, w):  # pragma: no cover
    """Forbid v the colors of w's colored neighbours (v's own with w = v): ``forbidden``
    holds, per color, the last vertex it was forbidden to, so it needs no clearing."""
    for q in range(indptr[w], indptr[w + 1]):
        x = indices[q]
        if x != w and color[x] >= 0:
            forbidden[color[x]] = v


def _first_free(forbidden, v):  # pragma: no cover  (compiled)
    c = 0
    while forbidden[c] == v:
        c += 1
    return c


def _greedy_distance1(indptr, indices, order, n):  # pragma: no cover  (compiled)
    color = np.full(n, -1, dtype=np.int64)
    forbidden = np.full(n + 1, -1, dtype=np.int64)
    for v in order:
        _forbid_neighbours(indptr, indices, color, forbidden, v, v)
        color[v] = _first_free(forbidden, v)
    return color


def _greedy_star_simple(indptr, indices, order, n):  # pragma: no cover  (compiled)
    # Gebremedhin–Manne–Pothen's first greedy star-coloring algorithm, O(n·d³): the reference
    # that the faster star-based version is tested against. Invariant: two colored
    # vertices with an uncolored common neighbour differ, so a bicolored P4 can only be closed by
    # its last colored vertex, as an endpoint; the checks below forbid exactly those colors.
    color = np.full(n, -1, dtype=np.int64)
    forbidden = np.full(n + 1, -1, dtype=np.int64)
    for v in order:
        _forbid_neighbours(indptr, indices, color, forbidden, v, v)
        for p in range(indptr[v], indptr[v + 1]):
            w = indices[p]
            if w == v:
                continue
            cw = color[w]
            for q in range(indptr[w], indptr[w + 1]):
                x = indices[q]
                if x == v or x == w or color[x] < 0 or forbidden[color[x]] == v:
                    continue  # (an already forbidden color needs no second reason)
                if cw < 0:  # v - w - x with w uncolored: v and x must differ
                    forbidden[color[x]] = v
                else:  # v - w - x - y with c(y) = c(w): v may not take c(x)
                    for r in range(indptr[x], indptr[x + 1]):
                        y = indices[r]
                        if y != w and y != x and color[y] == cw:
                            forbidden[color[x]] = v
                            break
        color[v] = _first_free(forbidden, v)
    return color


def _position(indptr, indices, u, v):  # pragma: no cover  (compiled)
    """Where v sits in the sorted row u of a CSR pattern."""
    lo, hi = indptr[u], indptr[u + 1]
    while lo < hi:
        mid = (lo + hi) // 2
        if indices[mid] < v:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _greedy_star_stars(indptr, indices, order, n):  # pragma: no cover  (compiled)
    # Gebremedhin, Tarafdar, Manne and Pothen's star coloring (SIAM J. Sci. Comput. 29(3),
    # 2007, Alg. 4.1), O(n·d²): the edges between colored vertices are kept as 2-colored stars,
    # each with its hub (-1 while the star is one edge). Coloring v with c closes a bicolored
    # path on four vertices exactly when (1) a colored neighbour w is joined to the hub x of
    # their star, c = c(x); or (2) two neighbours w, w' of v share a color and c is the color of
    # some neighbour of w or w'. Those colors are forbidden.
    color = np.full(n, -1, dtype=np.int64)
    forbidden = np.full(n + 1, -1, dtype=np.int64)
    first_v = np.full(n + 1, -1, dtype=np.int64)   # per color: the vertex that met it first...
    first_w = np.full(n + 1, -1, dtype=np.int64)   # ...and the neighbour of that color it met
    treated = np.full(n, -1, dtype=np.int64)
    star = np.full(indices.size, -1, dtype=np.int64)  # star id of every stored edge
    hub = np.full(indices.size + 1, -1, dtype=np.int64)
    n_stars = 0
    for v in order:
        for p in range(indptr[v], indptr[v + 1]):
            w = indices[p]
            if w == v or color[w] < 0:
                continue
            cw = color[w]
            forbidden[cw] = v
            if first_v[cw] == v:  # case (2): w is the second neighbour of color cw
                q = first_w[cw]
                if treated[q] != v:
                    _forbid_neighbours(indptr, indices, color, forbidden, v, q)
                    treated[q] = v
                _forbid_neighbours(indptr, indices, color, forbidden, v, w)
                treated[w] = v
            else:
                first_v[cw] = v
                first_w[cw] = w
                for q in range(indptr[w], indptr[w + 1]):  # case (1)
                    x = indices[q]
                    if x != v and x != w and color[x] >= 0 and hub[star[q]] == x:
                        forbidden[color[x]] = v
        c = _first_free(forbidden, v)
        color[v] = c
        # Put every new edge (v, w) into its star.
        for p in range(indptr[v], indptr[v + 1]):
            w = indices[p]
            if w == v or color[w] < 0:
                continue
            s = -1
            for q in range(indptr[w], indptr[w + 1]):
                x = indices[q]
                if x != v and x != w and color[x] == c:  # w - x already in a star: w is its hub
                    s = star[q]
                    hub[s] = w
                    break
            if s < 0:
                qv = first_w[color[w]]
                if first_v[color[w]] == v and qv != w:  # v - qv, v - w: v is the hub
                    s = star[_position(indptr, indices, v, qv)]
                    hub[s] = v
                else:
                    s = n_stars
                    n_stars += 1
                    hub[s] = -1
            star[p] = s
            star[_position(indptr, indices, w, v)] = s
    return color


_LOOPS = ("_position", "_forbid_neighbours", "_first_free", "_greedy_distance1",
          "_greedy_star_simple", "_greedy_star_stars")
_compiled = []


def _compile():
    """Replace the loop functions above by their numba-compiled versions (once); helpers first,
    so that the functions calling them compile against the compiled helpers."""
    if not _compiled:
        import numba
        g = globals()
        for name in _LOOPS:
            g[name] = numba.njit(cache=True)(g[name])
        _compiled.append(True)


def _adjacency(pattern):
    """Canonical CSR arrays of a square pattern (any scipy sparse matrix or dense bool array)."""
    sp = R.sparse()
    A = sp.csr_matrix(pattern, dtype=bool)
    A.sum_duplicates()
    A.sort_indices()
    return A


def largest_first_order(A):
    """Vertices by decreasing degree (self-loops not counted), ties by index.

    Example:
        >>> import numpy as np
        >>> A = np.array([[0, 1, 0], [1, 0, 1], [0, 1, 0]], dtype=bool)
        >>> largest_first_order(A)
        array([1, 0, 2])
    """
    A = _adjacency(A)
    deg = np.diff(A.indptr) - (A.diagonal() != 0)
    return np.argsort(-deg, kind="stable")


def _order(A, order):
    if order is None or (isinstance(order, str) and order == "largest_first"):
        return largest_first_order(A)
    if isinstance(order, str) and order == "natural":
        return np.arange(A.shape[0])
    order = np.asarray(order, dtype=np.int64)
    if sorted(order.tolist()) != list(range(A.shape[0])):
        raise ValueError("order must be 'largest_first', 'natural' or a permutation of the "
                         f"{A.shape[0]} vertices.")
    return order


def greedy_coloring(adjacency, order="largest_first"):
    """A distance-1 coloring of the graph with this (symmetric) adjacency pattern.

    Example:
        >>> import numpy as np
        >>> ring = np.roll(np.eye(4, dtype=bool), 1, 0) | np.roll(np.eye(4, dtype=bool), -1, 0)
        >>> greedy_coloring(ring)
        array([0, 1, 0, 1])
    """
    A = _adjacency(adjacency)
    n = A.shape[0]
    _compile()
    return _greedy_distance1(A.indptr.astype(np.int64), A.indices.astype(np.int64),
                             _order(A, order), n)


def star_coloring(hessian_pattern, order="largest_first", algorithm="stars"):
    """A star coloring of the adjacency graph of a symmetric pattern (diagonal ignored), from
    which the matrix is recovered directly (see :func:`is_star_coloring`). ``algorithm="stars"``
    (default, O(n·d²) for maximum degree d) keeps the 2-colored stars; ``"simple"`` is the
    O(n·d³) first algorithm of Gebremedhin, Manne and Pothen (2005); ``"best"`` runs both and
    keeps the one with fewer colors (worth it for a cache reused many times: each color is a
    lane of every sweep).

    Example (an arrowhead: the hub alone, every other vertex shares one color):
        >>> import numpy as np
        >>> H = np.eye(5, dtype=bool); H[0, :] = H[:, 0] = True
        >>> star_coloring(H)
        array([0, 1, 1, 1, 1])
    """
    A = _adjacency(hessian_pattern)
    n = A.shape[0]
    if algorithm not in ("stars", "simple", "best"):
        raise ValueError(f"star_coloring: algorithm must be 'stars', 'simple' or 'best', not "
                         f"{algorithm!r}.")
    if algorithm == "best":
        a, b = (star_coloring(A, order, alg) for alg in ("stars", "simple"))
        return a if a.max(initial=-1) <= b.max(initial=-1) else b
    _compile()
    run = _greedy_star_stars if algorithm == "stars" else _greedy_star_simple
    return run(A.indptr.astype(np.int64), A.indices.astype(np.int64), _order(A, order), n)


def column_coloring(jacobian_pattern, order="largest_first"):
    """A coloring of the columns of a Jacobian pattern in which no row meets two columns of one
    color (a distance-1 coloring of the column intersection graph ``JᵀJ``).

    Example:
        >>> import numpy as np
        >>> J = np.array([[1, 1, 0, 0], [0, 1, 1, 0], [0, 0, 1, 1]], dtype=bool)
        >>> column_coloring(J)
        array([1, 0, 1, 0])
    """
    J = R.sparse().csr_matrix(jacobian_pattern, dtype=bool)
    return greedy_coloring((J.T @ J).tocsr(), order)


def row_coloring(jacobian_pattern, order="largest_first"):
    """A coloring of the rows of a Jacobian pattern in which no column meets two rows of one
    color (for reverse mode: one pullback per color).

    Example:
        >>> import numpy as np
        >>> row_coloring(np.eye(3, dtype=bool))
        array([0, 0, 0])
    """
    J = R.sparse().csr_matrix(jacobian_pattern, dtype=bool)
    return greedy_coloring((J @ J.T).tocsr(), order)


def _pair_counts(A, colors):
    """For every stored entry (i, j): how many neighbours of i (row i) have color c(j)."""
    n = A.shape[0]
    k = int(colors.max()) + 1 if colors.size else 1
    i = np.repeat(np.arange(n), np.diff(A.indptr))
    j = A.indices
    key = i * k + colors[j]
    counts = np.bincount(key, minlength=n * k)
    return i, j, counts, k


def is_star_coloring(hessian_pattern, colors):
    """Whether ``colors`` is a star coloring of the (symmetric) pattern's adjacency graph:
    proper, and every nonzero ``H[i, j]`` is alone in its color in row i or in row j (which is
    the same as: no path on four vertices uses only two colors).

    Example:
        >>> import numpy as np
        >>> P = np.eye(4, dtype=bool) | np.eye(4, k=1, dtype=bool) | np.eye(4, k=-1, dtype=bool)
        >>> is_star_coloring(P, np.array([0, 1, 0, 1])), is_star_coloring(P, np.array([0, 1, 2, 0]))
        (False, True)
    """
    A = _adjacency(hessian_pattern)
    colors = np.asarray(colors)
    i, j, counts, k = _pair_counts(A, colors)
    off = i != j
    if np.any(colors[i[off]] == colors[j[off]]):
        return False
    ok = (counts[i * k + colors[j]] == 1) | (counts[j * k + colors[i]] == 1)
    return bool(np.all(ok[off]))


def is_column_coloring(jacobian_pattern, colors):
    """Whether no row of the pattern has two nonzeros in columns of one color.

    Example:
        >>> import numpy as np
        >>> is_column_coloring(np.array([[1, 1], [0, 1]], dtype=bool), np.array([0, 0]))
        False
    """
    J = R.sparse().csr_matrix(jacobian_pattern, dtype=bool)
    J.sum_duplicates()
    colors = np.asarray(colors)
    k = int(colors.max()) + 1 if colors.size else 1
    i = np.repeat(np.arange(J.shape[0]), np.diff(J.indptr))
    counts = np.bincount(i * k + colors[J.indices], minlength=J.shape[0] * k)
    return bool(np.all(counts <= 1))
