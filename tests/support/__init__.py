"""Helpers shared by the test tiers: paths, small scenarios, ``privsilo`` subprocesses, run outputs, processes
and ports; and the modules that Ray workers and test subprocesses import by name (``tests.support.<module>``)."""
