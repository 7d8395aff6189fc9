"""What a pytest grading run reported, read and judged: the plugin's records, the ids the run gave sealed
parametrize cases turned back into pytest's own, and every sealed expectation held against the value the test
reported for it, outside the candidate's process.

A test passes when its run reported it ``passed``, every value it reported meets its sealed expectation, and every
sealed assertion that runs whenever the test completes (at the top of its body) reported a value. A value that was
not plain (an object of the code under test) cannot be compared outside, and does not meet its expectation.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from rollbox.judge._verdict import Outcome
from rollbox.judge.integrity._expectations import holds
from rollbox.judge.integrity._seal import Seal, SealedModule
from rollbox.tasks._values import decode

from ._channel import ForgedChannel, read_records

__all__ = ["PytestRun", "Sealed"]

_OPAQUE_ID = re.compile(r"c[0-9a-f]{12}")
#: What pytest appends to an id it gives twice.
_RENAMING = frozenset("0123456789_")


@dataclass
class Sealed:
    """What the judge keeps of a grading's sealed modules, by the module's path in test ids (``tests/test_x.py``)."""

    modules: dict[str, SealedModule] = field(default_factory=dict)

    def real_id(self, nodeid: str) -> str:
        """The id pytest gives a test whose sealed parametrize cases the run named with opaque ids."""
        if "[" not in nodeid:
            return nodeid
        module = self.modules.get(nodeid.partition("::")[0])
        if module is None or not module.ids:
            return nodeid
        return _OPAQUE_ID.sub(lambda m: module.ids.get(m.group(), m.group()), nodeid)

    def renamed(self, nodeid: str) -> bool:
        """Whether pytest renamed a sealed case's id to tell it from another of the same id (``c...0``): two tests
        of one case, never a case of the task."""
        module = self.modules.get(nodeid.partition("::")[0])
        return module is not None and any(
            m.group() in module.ids and nodeid[m.end() : m.end() + 1] in _RENAMING for m in _OPAQUE_ID.finditer(nodeid)
        )

    def seal(self, seal_id: str) -> tuple[Seal, SealedModule] | None:
        for module in self.modules.values():
            if seal_id in module.seals:
                return module.seals[seal_id], module
        return None

    def certain(self, test_id: str) -> tuple[str, ...]:
        """The seals of the test's function that report whenever it completes."""
        path, _, rest = test_id.partition("::")
        module = self.modules.get(path)
        return module.certain.get(rest.partition("[")[0], ()) if module is not None else ()


@dataclass
class PytestRun:
    """The plugin's records of one run, checked as they are read: anything malformed or repeated is a forgery."""

    collected: list[str] | None = None
    #: The opaque ids of the sealed parametrize cases in the collected tests' ids, as the run named them.
    cases_collected: set[str] = field(default_factory=set)
    outcomes: dict[str, Outcome] = field(default_factory=dict)
    #: Real test id -> (seal id, token, reported value or None when it was not plain) of each sealed assertion.
    values: dict[str, list[tuple[str, str | None, Any]]] = field(default_factory=dict)
    forged: str | None = None
    #: Real test ids whose reported value was not plain.
    unsealable: dict[str, str] = field(default_factory=dict)
    #: The test whose ``start`` came and whose outcome has not yet: the values reported meanwhile are its own.
    running: str | None = None
    started: set[str] = field(default_factory=set)
    #: Real test ids that reported the value of a parametrize case other than their own, or that repeat a case.
    misplaced: set[str] = field(default_factory=set)

    @classmethod
    def read(cls, stdout: str, *, truncated: bool, sealed: Sealed) -> PytestRun:
        run = cls()
        try:
            records = read_records(stdout, truncated=truncated)
        except ForgedChannel as exc:
            run.forged = str(exc)
            return run
        for record in records:
            run._read(record, sealed)
            if run.forged:
                break
        return run

    def _read(self, record: dict[str, Any], sealed: Sealed) -> None:
        if "collected" in record and self.collected is None and isinstance(record["collected"], list):
            raw = [str(i) for i in record["collected"]]
            self.cases_collected = {case for i in raw for case in _OPAQUE_ID.findall(i)}
            self.collected = [sealed.real_id(i) for i in raw]
        elif "collect_error" in record:
            pass
        elif "seal" in record:
            self._seal(record, sealed)
        elif isinstance(record.get("start"), str) and self.running is None and record["start"] not in self.started:
            self.running = record["start"]
            self.started.add(self.running)
            if sealed.renamed(self.running):
                self.misplaced.add(sealed.real_id(self.running))
        elif (
            isinstance(record.get("id"), str)
            and record["id"] == self.running
            and sealed.real_id(record["id"]) not in self.outcomes
        ):
            self.running = None
            try:
                self.outcomes[sealed.real_id(record["id"])] = Outcome(record.get("outcome"))
            except ValueError:
                self.forged = f"the result channel carried an unknown outcome for {record['id']!r}"
        else:
            self.forged = f"the result channel carried a forged or repeated report: {json.dumps(record)[:200]}"

    def _seal(self, record: dict[str, Any], sealed: Sealed) -> None:
        seal_id, test, token = record.get("seal"), self.running, record.get("token")
        found = sealed.seal(seal_id) if isinstance(seal_id, str) else None
        if (
            found is None
            or not isinstance(seal_id, str)
            or (token is not None and (not isinstance(token, str) or token not in found[1].cases))
        ):
            self.forged = f"the result channel carried a report for no sealed expectation: {json.dumps(record)[:200]}"
            return
        if test is None:
            return  # reported outside any test (at import, or by a thread left running): no test's value
        real = sealed.real_id(test)
        if token is not None and found[1].token_cases.get(token, "") not in test:
            self.misplaced.add(real)  # a case's expectation, reported by a test of another case
        value: Any = None
        if "value" in record:
            try:
                value = (decode(record["value"]),)
            except ValueError:
                value = None
        if value is None:
            self.unsealable.setdefault(real, str(record.get("unsealable", "a malformed value"))[:200])
        self.values.setdefault(real, []).append((seal_id, token, value))

    def outcome(self, test_id: str, sealed: Sealed) -> Outcome:
        """The test's outcome, its sealed expectations held against what it reported."""
        outcome = self.outcomes.get(test_id, Outcome.MISSING)
        if outcome is not Outcome.PASSED:
            return outcome
        if test_id in self.misplaced:
            return Outcome.FAILED
        reported = self.values.get(test_id, [])
        if not set(sealed.certain(test_id)) <= {seal_id for seal_id, _, _ in reported}:
            return Outcome.FAILED  # a sealed assertion that always runs reported nothing: it was skipped over
        for seal_id, token, value in reported:
            found = sealed.seal(seal_id)
            assert found is not None
            seal, module = found
            expected: Any = module.cases[token] if token is not None else seal.expected
            if value is None or not holds(seal, value[0], expected):
                return Outcome.FAILED
        return Outcome.PASSED

    def flags(self) -> tuple[dict[str, str], ...]:
        """A flag for each test whose value could not be compared outside its process."""
        return tuple(
            {
                "code": "unsealable_value",
                "path": test.partition("::")[0],
                "detail": f"{test} compared a value of type {kind} with a sealed expectation; only plain values "
                "(numbers, strings, lists, dicts...) can be compared outside the candidate's process",
            }
            for test, kind in self.unsealable.items()
        )
