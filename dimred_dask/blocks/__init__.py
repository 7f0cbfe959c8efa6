"""Pure NumPy/SciPy kernels on in-memory blocks. Nothing here imports dask."""
