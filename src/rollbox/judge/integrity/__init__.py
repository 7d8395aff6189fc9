"""What the judge does not trust: the candidate's changes minus protected paths (``_workspace``), a static scan
for known hack signatures (``_scan``), and must-fail canaries made from the task's own tests (``_canary``)."""
