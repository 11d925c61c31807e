"""Flow-matching vision-language-action policies: the model, chunk execution, SFT and RL fine-tuning.

See docs/flow-vla.md. Importing this package registers ``flow_ppo``, ``hiors`` and ``flow_qc`` in
``robot_rl.core.config.ALGOS`` and the ``dsrl`` task.
"""

from robot_rl.policies.flow.chunking import ChunkExecutor, ChunkExecutorConfig
from robot_rl.policies.flow.dsrl import DSRLConfig, LatentNoiseEnv
from robot_rl.policies.flow.hiors import HiORSAlgorithm, HiORSConfig
from robot_rl.policies.flow.model import FlowVLAConfig, FlowVLAPolicy
from robot_rl.policies.flow.ppo import FlowPPOAlgorithm, FlowPPOConfig
from robot_rl.policies.flow.qchunk import FlowQCAlgorithm, FlowQCConfig, FlowQCPolicy

__all__ = ["ChunkExecutor", "ChunkExecutorConfig", "DSRLConfig", "FlowPPOAlgorithm", "FlowPPOConfig", "FlowQCAlgorithm",
           "FlowQCConfig", "FlowQCPolicy", "FlowVLAConfig", "FlowVLAPolicy", "HiORSAlgorithm", "HiORSConfig",
           "LatentNoiseEnv"]
