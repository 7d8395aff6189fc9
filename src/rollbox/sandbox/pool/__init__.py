"""Reuse: warm pools of sandboxes made as good as new between uses (``_pool``), and batch execution over them
(``_batch``)."""
