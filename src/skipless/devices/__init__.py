"""How a process of the suite uses its machine: the run's processes, ranks and devices and how its global batch
is made of them (``world``), torch's CPU threads (``cpu_threads``), code run outside autocast in the
tensors' own dtypes (``full_precision``), step scalars made on the device without a host sync
(``step_scalars``), and the host memory a training loader holds against what the machine has available
(``host_memory``)."""
