"""Runtime images (see the core modules); this branch holds only the builder until they merge."""
