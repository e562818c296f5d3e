"""One server process for a whole room: the heavy-work gate, dynamic batching, byte-bounded caches, shared figures and
the gate's metrics.
"""
