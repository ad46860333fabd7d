"""Core: what every layer above uses (dispatch of wrapped values, the array module, array
methods, containers, arguments, BLAS threads, the allocator). Imports nothing above it."""
