"""MuJoCo reach: a scripted end-effector policy, the domain-randomisation API, and a camera image.

    MUJOCO_GL=osmesa python examples/mujoco_reach.py      # needs pip install 'robot-rl[mujoco]'

Train a policy instead with ``robot-rl train --config examples/mujoco_reach.yaml``.
"""


import robot_rl.sims.mujoco  # noqa: F401 - registers the mujoco/* tasks
from robot_rl.core.config import TASKS


def main() -> None:
    """Run 100 steps of a proportional ee_delta policy on 8 worlds, with heavier damping in half."""
    env = TASKS.get("mujoco/reach")(num_envs=8).make("cpu", seed=0)
    damping = env.get_params()["dof_damping"]
    damping[4:] *= 5.0  # worlds 4..7: five times the joint damping
    env.set_params("dof_damping", damping)
    ix, successes, episodes = env.ix, 0, 0
    for _ in range(100):
        r = env.readout
        offset = r.mocap_pos[:, ix.mocap["goal"]] - r.site_pos[:, ix.site["grip"]]
        res = env.step((offset / env.cfg.action_scale).clamp(-1, 1))
        done = res.terminated | res.truncated
        successes += int(res.info["success"][done].sum())
        episodes += int(done.sum())
    print(f"scripted ee_delta policy: {successes}/{episodes} episodes reached the goal")
    try:
        frame = env.render()
        print(f"front camera frame {tuple(frame.shape)}, mean {frame.float().mean():.1f}")
    except RuntimeError as e:  # no OpenGL on this machine
        print(f"no rendering: {e}")
    env.close()


if __name__ == "__main__":
    main()
