"""The transforms: ``reverse.py`` (grad, value_and_grad, vjp), ``forward.py`` (jvp, jacobian,
derivative caches), ``second_order.py`` (hvp, hessian and their caches), ``caches.py`` (gradient
and pullback caches, and what every cache shares), ``warmup.py`` (``mp.warmup``)."""
