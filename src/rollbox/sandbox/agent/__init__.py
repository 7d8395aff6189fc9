"""The processes rollbox puts in a sandbox, and the host's end of talking to them.

One native binary (``agent.c``, built by ``_build``) serves three roles: the *spawner* (a small helper of
rollbox's own that starts launchers, ``_spawner``), the *launcher* (builds a sandbox's root and namespaces), and
the *agent* (pid 1 inside, which runs commands on the host's requests: ``_protocol``, with ``_streams`` for their
outputs and ``_health`` for checking that nothing inside crippled it). ``zygote.py`` is the pre-started Python
that forks warm-Python commands.
"""
