"""The test process's CPU threads: ``skipless.devices.cpu_threads``'s rule with no loader workers (one thread on a
2-core machine), or ``OMP_NUM_THREADS`` when it is set. torch's default, a thread per core, made 127 tests
of this suite take 620 s beside another 2-thread job against 64 s with one thread, and the same on idle
cores (docs/results.md, "CPU threads"). A test that starts an entry point in this process leaves the
threads that entry point's rule sets."""
from skipless.devices.cpu_threads import set_cpu_threads

set_cpu_threads(None, workers=0)
