"""engine: the speculative loop and what it is made of.

The loop (draft, verify in one target batch, accept, roll back) yields events and does no I/O;
drafters, sampling, pipelined drafting, generation stats, text streaming, stop strings and
a thinking budget (the answer in phases, its end marker forced). It owns the controller
protocol and the round events, which the policy implements and reads. Never prints.

May import: llama, errors, paths.
"""
