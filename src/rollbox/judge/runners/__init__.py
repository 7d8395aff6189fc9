"""The runners, one per ``[grading] runner``: ``pytest``, ``function`` (cases, or a ``check`` with its canaries),
``stdio`` and ``script``; each turns a grading tree into a :class:`~._report.RunnerReport`.

The ``*_driver.py`` and ``_pytest_plugin.py`` files are programs that run *inside* grading sandboxes (shipped as
bytecode by ``_drivers``); ``_channel`` is what they share with the host.
"""
