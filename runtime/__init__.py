"""Stage 3: compilation, caches and the backward / grad / jit engines."""
