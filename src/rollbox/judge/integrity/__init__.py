"""What the judge does not trust: the candidate's changes minus protected paths (``_workspace``), a static scan
for known hack signatures (``_scan``), must-fail canaries made from the task's own tests (``_canary``), and the
candidate's process with the tests' expected values, which sealing takes out of pytest modules (``_seal``,
``_parametrize``, and the constant folder in ``rollbox.tasks._constants``) and the judge compares outside
(``_expectations``)."""
