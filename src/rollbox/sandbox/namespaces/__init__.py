"""The ``namespaces`` backend: kernel isolation around the agent.

``_backend`` builds a sandbox (namespaces, root, uid maps) through the agent's launcher; ``_cgroup`` counts,
limits and kills each command's processes (cgroup v2 or v1); ``_seccomp`` writes the syscall filter; ``_state``
keeps the host-side state (the state directory, sandbox uids, writable trees) and reaps what a dead rollbox left.
"""
