"""What the package's own threads stand on: a lock-free counter any thread bumps
(``counters``), locks renewed in a forked child (``forks``), and threads that never die
(``thread_faults``). Leaf modules: they import nothing of the package but each other.
"""
