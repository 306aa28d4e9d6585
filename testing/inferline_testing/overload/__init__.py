"""Overload, measured: the pipeline's capacity, a crowd of ten times it (closed and open
loop), how fast refusals come, each process's memory meanwhile, and how soon latency recovers
once the crowd leaves, and how requests with a deadline shorter than the fastest answer are
refused. Shared by the overload test (tests/e2e/test_overload.py), which asserts what is
refused and how, and ``make bench-overload``, which reports these figures against the goals
(how fast, how much), so both come from one code.

Modules: :mod:`.usage` (what the stack's processes and this one use while a block runs),
:mod:`.crowds` (a crowd offered to the public endpoint, and what a paced caller sees),
:mod:`.scenario` (capacity, then the closed and the open crowd), :mod:`.short_deadlines`
(deadlines shorter than the fastest answer, under load) and :mod:`.report` (the table).
"""
