"""Import companion before anything imports jax: it sets the CUDA plugin's environment."""

import companion  # noqa: F401
