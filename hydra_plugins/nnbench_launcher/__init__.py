"""nnbench's Hydra launcher plugin (Hydra finds launchers only in the hydra_plugins namespace package)."""
