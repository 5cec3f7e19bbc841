"""Where student code runs while a class is graded: the grading process tree, away from the instructor.

The parent (grader/gradebook/batch.py) drives a pool of workers; each grades one submission at a time.

- worker_pool.py    the parent's side: start workers, send job lines, read results, kill a hung job's tree
- grading_worker.py one plain worker process (`python -m grader.isolation.grading_worker`), cold start per worker
- result_channel.py the worker's two private descriptors to the parent: job lines in, results out
- sandbox.py        the bubblewrap command a worker (or a nursery) runs in: no network, no answers, no classmates
- sandbox_env.py    the environment a sandbox's processes inherit (Python's, the driver's, NCCL on the loopback)
- seccomp_filter.py the system calls no sandboxed process may make (kernel keys, bpf, io_uring, ...), loaded by bwrap
- nursery.py        one long-lived, torch-preloaded process per phase that forks each job (pays the cold start once)
- nursery_client.py the parent's side of the nurseries: a job looks to worker_pool.py like a worker process
- nursery_job.py    one job forked from a nursery: own namespaces, then grade one submission
- namespaces.py     the Linux namespace, mount and capability calls a nursery job makes (libc via ctypes)
- job_limits.py     a cgroup per job: pids.max and memory.max, so one job's fork bomb or hog costs no classmate
- slot_uids.py      as root, a uid of its own for each job (a range no account, group or process uses)
- gpu_gate.py       before grading: can the ranks use this machine's GPUs inside the sandbox? (exit 2 if not)
- gpu_share.py      each job its own GPUs, never two jobs on one device

What each layer defends, with the test that shows it: docs/security.md.
"""
