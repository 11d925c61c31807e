"""LeRobot's HIL-SERL side of the gym_hil benchmark: its train config, its actor with state-only renders, its policy.

``lerobot_config`` writes the ``TrainRLServerPipelineConfig`` JSON that ``python -m lerobot.rl.learner
--config_path=...`` and the actor read (SAC on state, the demos as the offline dataset, gRPC on 127.0.0.1).

``python benchmarks/gym_hil_lerobot.py actor --config_path=CFG`` is ``python -m lerobot.rl.actor
--config_path=CFG`` with one change in the env: LeRobot's ``make_robot_env`` builds gym_hil with
``image_obs=True`` whatever the config says, so every step renders the front and wrist cameras, which costs
~0.9 s a step with llvmpipe on this CPU (the policy here reads the state only: the images would be thrown
away); the launcher builds the same env with ``image_obs=False`` and without gym_hil's 1 s sleep at each reset,
exactly as :data:`gym_hil_demos.ENV_KWARGS` (what robot-rl's side gets too). The learner runs unchanged.

This file measures nothing, so it writes no result file of its own: the side-by-side figures that use it are
measured and written by ``lerobot_side_by_side.py`` (``results/lerobot_side_by_side*.json``).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

#: SAC settings both stacks get (names of robot-rl's algo section; lerobot_config maps them).
SAC: dict[str, Any] = {"actor_lr": 3e-4, "critic_lr": 3e-4, "temperature_lr": 3e-4, "gamma": 0.97, "tau": 0.005,
                       "batch_size": 256, "init_temperature": 0.01, "num_critics": 2, "hidden": [256, 256],
                       "learning_starts": 100, "target_entropy": -2.0, "demo_ratio": 0.5}


def lerobot_config(out: Path, demos: Path, online_steps: int, port: int, save_freq: int, fps: int, seed: int = 0,
                   resume: bool = False) -> dict[str, Any]:
    """The train config: gym_hil pick on state, SAC with a discrete gripper (as LeRobot's gym_hil example).

    ``fps`` paces the actor (``env.fps``; LeRobot's gym_hil example uses 10, the sim's real-time rate): its
    learner updates without pause, so the pace sets LeRobot's updates per env step.
    """
    state = {"observation.state": {"type": "STATE", "shape": [18]},
             "observation.environment_state": {"type": "ENV", "shape": [3]}}
    return {
        "output_dir": str(out), "job_name": "gym_hil_sac", "resume": resume, "seed": seed,
        "batch_size": SAC["batch_size"], "steps": online_steps, "log_freq": 100, "save_checkpoint": True,
        "save_freq": save_freq, "wandb": {"enable": False},
        "dataset": {"repo_id": "local/gym_hil_pick_demos", "root": str(demos), "use_imagenet_stats": False},
        "policy": {
            "type": "sac", "device": "cpu", "storage_device": "cpu", "push_to_hub": False,
            "input_features": state, "output_features": {"action": {"type": "ACTION", "shape": [3]}},
            "num_discrete_actions": 3, "online_steps": online_steps, "online_buffer_capacity": 100000,
            "offline_buffer_capacity": 100000, "online_step_before_learning": SAC["learning_starts"],
            "policy_update_freq": 1, "discount": SAC["gamma"], "temperature_init": SAC["init_temperature"],
            "num_critics": SAC["num_critics"], "critic_lr": SAC["critic_lr"], "actor_lr": SAC["actor_lr"],
            "temperature_lr": SAC["temperature_lr"], "critic_target_update_weight": SAC["tau"], "utd_ratio": 1,
            "target_entropy": SAC["target_entropy"], "use_torch_compile": False,
            "critic_network_kwargs": {"hidden_dims": SAC["hidden"], "activate_final": True},
            "actor_network_kwargs": {"hidden_dims": SAC["hidden"], "activate_final": True},
            "discrete_critic_network_kwargs": {"hidden_dims": SAC["hidden"], "activate_final": True},
            "actor_learner_config": {"learner_host": "127.0.0.1", "learner_port": port,
                                     "policy_parameters_push_frequency": 4},
            "concurrency": {"actor": "threads", "learner": "threads"},
        },
        "env": {
            "type": "gym_manipulator", "name": "gym_hil", "task": "PandaPickCube-v0", "fps": fps,
            "features": {"agent_pos": {"type": "STATE", "shape": [18]},
                         "environment_state": {"type": "ENV", "shape": [3]},
                         "action": {"type": "ACTION", "shape": [3]}},
            "features_map": {"agent_pos": "observation.state", "environment_state": "observation.environment_state",
                             "action": "action"},
            "processor": {"control_mode": "gamepad", "gripper": {"use_gripper": True, "gripper_penalty": 0.0},
                          "reset": {"terminate_on_success": True}},
        },
    }


def patch_gym_hil() -> None:
    """Make ``gym_hil/PandaPickCube-v0`` ignore LeRobot's ``image_obs=True`` and skip the reset sleep."""
    import gym_hil  # noqa: F401
    import gymnasium as gym
    from gym_hil.wrappers.factory import make_env
    from gym_hil_demos import ENV_ID, ENV_KWARGS

    def make_state_only(**kwargs: Any) -> Any:
        kwargs.update(image_obs=ENV_KWARGS["image_obs"], reset_delay_seconds=ENV_KWARGS["reset_delay_seconds"])
        return make_env(**kwargs)

    gym.registry[ENV_ID] = dataclasses.replace(gym.spec(ENV_ID), entry_point=make_state_only)


def load_policy(pretrained_model: Path) -> Any:
    """LeRobot's SAC policy from a checkpoint's ``pretrained_model`` directory."""
    from lerobot.policies.sac.modeling_sac import SACPolicy

    return SACPolicy.from_pretrained(str(pretrained_model)).eval()


def act(policy: Any, obs: dict[str, Any], deterministic: bool) -> Any:
    """One action ``[dx, dy, dz, gripper]`` in gym_hil units, as LeRobot's actor computes it."""
    import numpy as np
    import torch

    batch = {"observation.state": torch.as_tensor(obs["agent_pos"], dtype=torch.float32)[None],
             "observation.environment_state": torch.as_tensor(obs["environment_state"], dtype=torch.float32)[None]}
    with torch.no_grad():
        if not deterministic:
            return policy.select_action(batch)[0].numpy()
        _, _, means = policy.actor(batch, None)
        grip = policy.discrete_critic(batch, None).argmax(dim=-1)
    return np.concatenate([torch.tanh(means)[0].numpy(), grip.float().numpy()])


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] != "actor":
        raise SystemExit("usage: gym_hil_lerobot.py actor --config_path=CFG")
    import torch  # noqa: F401  (torch before OSMesa's LLVM: the other order crashes on import)

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    patch_gym_hil()
    from lerobot.rl.actor import actor_cli

    sys.argv = [sys.argv[0], *sys.argv[2:]]
    actor_cli()


if __name__ == "__main__":
    main()
