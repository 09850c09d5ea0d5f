"""Test configuration: float64 on for the whole session (float32 paths pass float32 arrays)."""
import jax

jax.config.update("jax_enable_x64", True)
