"""The actor loop, the learner loop, evaluation and the in-process runner."""
