"""A command the judge runs that the task's image does not have: the task's failure (``infra_error``, saying what to
add to the image), never the candidate's.

The agent reports a program it cannot find as exit status 127, which a program that ran can give too (and print
the same words): so the image itself is asked, on the host, whether the name is on the command's PATH there. Only
where it certainly is not does the run become ``infra_error``: a PATH directory the image alone cannot tell about
(a runtime layer's, the writable /workspace or /tmp) leaves the run as it was.
"""

from __future__ import annotations

from collections.abc import Sequence

from rollbox.sandbox import ExecResult, Sandbox, Status
from rollbox.sandbox.namespaces._backend import image_path

__all__ = ["unless_missing"]


def unless_missing(sb: Sandbox, argv: Sequence[str], result: ExecResult, *, runner: str) -> ExecResult:
    """``result`` of running ``argv`` in ``sb``; or ``infra_error`` when its program is not in ``sb``'s image."""
    image = sb.image
    if image is None or result.status is not Status.NONZERO_EXIT or result.exit_code != 127 or not argv:
        return result
    path = image_path(image, sb.runtime)
    if image.has_program(argv[0], path) is not False:
        return result
    return ExecResult.infra_error(
        f"the task's image ({image.short}) has no {argv[0]!r} on its PATH ({path}), which the {runner} runner runs: "
        "add it to the image, or name a program the image has"
    )
