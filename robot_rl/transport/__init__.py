"""Actor↔learner transports: the in-process queue transport here, ZeroMQ in ``transport.zmq``."""
