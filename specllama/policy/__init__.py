"""policy: how much to draft, and from what, on this machine.

The adaptive controller, the cost model, the calibration that measures it, and the simulator
that replays recorded answers against a controller. Never prints.

May import: engine, llama, errors, paths.
"""
