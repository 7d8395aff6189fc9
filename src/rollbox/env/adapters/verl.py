"""verl: a custom reward function, an agent loop and agent-loop tools backed by rollbox sandboxes
(``pip install 'rollbox[verl]'``); see :mod:`rollbox.env.adapters._verl` for how each part works.

verl's reward-function loader takes this module in both of the forms it documents:
``custom_reward_function.path=pkg://rollbox.env.adapters.verl`` or the file's own path (``python -c "import
rollbox.env.adapters.verl as m; print(m.__file__)"``), with ``custom_reward_function.name=compute_score``. A file is
loaded under a name of verl's making, outside its package: so this file imports only absolute names, and the
implementation lives in one module that every form shares.
"""

from rollbox.env.adapters._verl import RollboxAgentLoop, RollboxTool, agent_loop_config, compute_score, tool_config

__all__ = ["RollboxAgentLoop", "RollboxTool", "agent_loop_config", "compute_score", "tool_config"]
