"""Replay buffers and rollout storage."""
