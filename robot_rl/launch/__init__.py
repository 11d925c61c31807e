"""`robot-rl launch`: one learner and N actors placed and supervised by an engine (local processes, Ray, SLURM).

ZeroMQ stays the data path; the engine only starts, places and restarts processes. The learner's exactly-once
delivery covers a restarted actor's data. See docs/scale-out.md.
"""
