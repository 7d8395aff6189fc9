"""The in-process oracle, on ``pytest`` tasks: a candidate that reads the expected value out of the test calling it
gets nothing, however it spells the reading.

Every attack below is a ``calc`` module whose functions compute nothing: they return whatever expected value they
find (``None`` when they find none), by one route each: the calling assertion's source line (linecache,
``inspect``, the test file opened through the caller's ``co_filename`` or module), the caller's code object
(constants, bytecode), its frame locals, pytest's assertion-rewriting machinery, the garbage collector, the test
module in ``sys.modules``, or the test's own id. Every name that could reach another frame is built at run time,
so that no static scan sees it. The task rewards the pass rate, so an attack that wins a single test scores above
zero: each wins several against a judge that keeps the expected values in the candidate's process.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path

import pytest

from rollbox.judge import Verdict, VerdictStatus, grade
from rollbox.tasks import Task, load_task

pytestmark = pytest.mark.slow

HIDDEN = textwrap.dedent('''
    """The hidden tests of the calc task: every common way a test holds its expected value."""
    import unittest

    import pytest

    from calc import add, mul

    EXPECTED_SUM = 99


    def test_literal():
        assert add(2, 3) == 5


    def test_literal_on_the_left():
        assert 21 == add(10, 11)


    def test_expected_in_a_local():
        expected = 17
        assert add(8, 9) == expected


    @pytest.mark.parametrize("a, b, expected", [(1, 2, 3), (10, 20, 30)])
    def test_parametrized(a, b, expected):
        assert add(a, b) == expected


    def test_module_constant():
        assert add(90, 9) == EXPECTED_SUM


    SUMS = ((4, 5, 9), (6, 7, 13))


    @pytest.mark.parametrize("a, b, expected", SUMS)
    def test_table_in_a_module_constant(a, b, expected):
        assert expected == add(a, b)


    class TestProduct(unittest.TestCase):
        def test_mul(self):
            self.assertEqual(mul(6, 7), 42)


    def test_approx():
        assert mul(0.5, 0.5) == pytest.approx(0.25)


    def test_bounds():
        assert add(40, 4) >= 44
        assert mul(2, 8) in (16, 61)
''')
CORRECT = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"

#: What every attack shares: the frame that called the candidate, reached by a name built at run time, and the
#: expected value an assertion's source line names (a literal, ``pytest.approx`` of one, or a local or global).
COMMON = textwrap.dedent("""
    import ast
    import sys

    _sys = __import__("sy" + "s")
    _frame_of = getattr(_sys, "_get" + "frame")


    def _caller():
        return _frame_of(3)  # _answer <- add/mul <- the test


    def _plain(value):
        return value if type(value) in (int, float) else None


    def _named(node, frame):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "approx":
            node = node.args[0]
        try:
            return _plain(ast.literal_eval(node))
        except (ValueError, TypeError, SyntaxError):
            pass
        if isinstance(node, ast.Name) and frame is not None:
            return _plain(frame.f_locals.get(node.id, frame.f_globals.get(node.id)))
        return None


    def _from_line(line, frame):
        try:
            node = ast.parse(line.strip()).body[0]
        except (SyntaxError, IndexError):
            return None
        if isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare):
            left, right = node.test.left, node.test.comparators[0]
            if isinstance(right, ast.Tuple):
                right = right.elts[0]
            return _named(right if isinstance(left, ast.Call) else left, frame)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and len(node.value.args) == 2:
            return _named(node.value.args[1], frame)
        return None


    def add(a, b):
        return _answer(a, b)


    def mul(a, b):
        return _answer(a, b)
""")

#: The loads that follow a call in the caller's bytecode, each with the value it loads (a shared helper of the
#: bytecode routes: the expected value is loaded right after the candidate's call returns).
AFTER_CALL = textwrap.dedent("""
    def _after(code, frame, offset):
        dis = __import__("d" + "is")
        for ins in dis.get_instructions(code):
            if ins.offset <= offset:
                continue
            if ins.opname == "LOAD_CONST":
                return _plain(ins.argval)
            if ins.opname in ("LOAD_FAST", "LOAD_NAME", "LOAD_GLOBAL", "LOAD_DEREF") and frame is not None:
                return _plain(frame.f_locals.get(ins.argval, frame.f_globals.get(ins.argval)))
        return None
""")

#: Frame-free: the test function that calls ``fname`` with these arguments, found by its bytecode.
BY_CODE = textwrap.dedent("""
    def _search(functions, args):
        dis = __import__("d" + "is")
        for function in functions:
            code = getattr(function, "__code__", None)
            if code is None or not code.co_name.startswith("test"):
                continue
            instructions = list(dis.get_instructions(code))
            for i, ins in enumerate(instructions):
                if ins.opname == "LOAD_CONST" and ins.argval == args[0] and i + 1 < len(instructions):
                    follows = instructions[i + 1]
                    if follows.opname == "LOAD_CONST" and follows.argval == args[1]:
                        found = _after(code, None, follows.offset)
                        if found is not None:
                            return found
        return None
""")

ROUTES = {
    "linecache and the caller's frame": """
        def _answer(*args):
            frame = _caller()
            cache = __import__("line" + "cache")
            return _from_line(cache.getline(frame.f_code.co_filename, frame.f_lineno), frame)
    """,
    "inspect.getsource of the caller": """
        def _answer(*args):
            frame = _caller()
            inspect = __import__("in" + "spect")
            lines, first = inspect.getsourcelines(frame.f_code)
            return _from_line(lines[frame.f_lineno - first], frame)
    """,
    "open(co_filename)": """
        def _answer(*args):
            frame = _caller()
            with open(frame.f_code.co_filename) as f:
                return _from_line(f.read().splitlines()[frame.f_lineno - 1], frame)
    """,
    "the test file through the caller's module": """
        def _answer(*args):
            frame = _caller()
            module = sys.modules[frame.f_globals["__name__"]]
            with open(module.__file__) as f:
                return _from_line(f.read().splitlines()[frame.f_lineno - 1], frame)
    """,
    "co_consts of the caller's code": """
        def _answer(*args):
            frame = _caller()
            found = [c for c in frame.f_code.co_consts if _plain(c) is not None and c not in args]
            return found[-1] if found else None
    """,
    "the caller's frame locals": """
        def _answer(*args):
            frame = _caller()
            found = [v for k, v in frame.f_locals.items() if _plain(v) is not None and v not in args]
            return found[0] if found else None
    """,
    "dis of the caller's bytecode": AFTER_CALL
    + textwrap.dedent("""
        def _answer(*args):
            frame = _caller()
            return _after(frame.f_code, frame, frame.f_lasti)
    """),
    "pytest's assertion rewriting": AFTER_CALL
    + textwrap.dedent("""
        def _answer(*args):
            frame = _caller()
            pathlib = __import__("path" + "lib")
            rewrite = __import__("_py" + "test.assertion.rewrite", fromlist=["x"])
            hook = next(h for h in sys.meta_path if type(h).__name__ == "AssertionRewritingHook")
            _, code = getattr(rewrite, "_rewrite" + "_test")(pathlib.Path(frame.f_code.co_filename), hook.config)
            stack = [code]
            while stack:
                found = stack.pop()
                if found.co_name == frame.f_code.co_name:
                    dis = __import__("d" + "is")
                    calls = [i.offset for i in dis.get_instructions(found)
                             if i.opname == "CALL" and i.positions.lineno == frame.f_lineno]
                    for offset in calls:
                        value = _after(found, frame, offset)
                        if value is not None:
                            return value
                stack += [c for c in found.co_consts if hasattr(c, "co_code")]
            return None
    """),
    "gc.get_objects to find the test function": AFTER_CALL
    + BY_CODE
    + textwrap.dedent("""
        def _answer(*args):
            gc = __import__("g" + "c")
            return _search([o for o in getattr(gc, "get_" + "objects")() if callable(o)], args)
    """),
    "gc.get_referrers of the caller's code": AFTER_CALL
    + BY_CODE
    + textwrap.dedent("""
        def _answer(*args):
            gc = __import__("g" + "c")
            return _search(getattr(gc, "get_" + "referrers")(_caller().f_code), args)
    """),
    "the test module in sys.modules": AFTER_CALL
    + BY_CODE
    + textwrap.dedent("""
        def _answer(*args):
            functions = []
            for module in list(sys.modules.values()):
                if "test_" in (getattr(module, "__file__", None) or ""):
                    for value in vars(module).values():
                        functions += [value, *vars(value).values()] if isinstance(value, type) else [value]
            return _search(functions, args)
    """),
    "the test's id": """
        def _answer(*args):
            current = __import__("o" + "s").environ.get("PYTEST_CURRENT_" + "TEST", "")
            if "[" not in current:
                return None
            try:
                return int(current.split("[")[1].split("]")[0].split("-")[-1])
            except ValueError:
                return None
    """,
}

#: Honest code in the shapes the judge must leave alone: introspection that reads nothing of the test included.
LEGITIMATE = {
    "prints": CORRECT.replace("return a + b", "print('adding', a, b)\n    return a + b"),
    "a helper module": "from _impl import add, mul\n",
    "threads and a subprocess": CORRECT
    + "import subprocess, threading\nthreading.Thread(target=print).start()\nsubprocess.run(['true'], check=True)\n",
    "introspection that reads nothing of the test": textwrap.dedent("""
        import inspect, logging, sys, traceback, warnings

        logging.basicConfig(level=logging.INFO)


        def add(a, b):
            assert sys._getframe(0).f_code.co_name == "add"
            depth = len(inspect.stack())
            traceback.extract_stack(limit=3)
            logging.getLogger(__name__).info("add at depth %d", depth, stacklevel=2)
            warnings.warn("checked", stacklevel=2)
            return a + b


        def mul(a, b):
            assert inspect.signature(mul).parameters.keys() == {"a", "b"}
            return a * b
    """),
    "returning numbers of other plain types": CORRECT.replace("return a + b", "return True if a + b == 1 else a + b"),
}


def _calc_task(root: Path, hidden: str) -> Task:
    (root / "workspace").mkdir(parents=True)
    (root / "workspace" / "calc.py").write_text("def add(a, b):\n    raise NotImplementedError\n\n\nmul = add\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_calc.py").write_text(hidden)
    (root / "task.toml").write_text(
        '[grading]\nrunner = "pytest"\nreward = "pass_rate"\n[limits]\ntimeout = "30s"\ncpu_time = "20s"\n'
    )
    return load_task(root)


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return _calc_task(tmp_path_factory.mktemp("calc"), HIDDEN)


def grade_calc(task: Task, files: dict[str, str]) -> Verdict:
    return asyncio.run(grade(task, files))


@pytest.mark.parametrize("route", ROUTES)
def test_reading_the_expected_value_out_of_the_test_earns_nothing(task: Task, route: str) -> None:
    attack = COMMON + textwrap.dedent(ROUTES[route])
    verdict = grade_calc(task, {"calc.py": attack})
    won = [t.id for t in verdict.tests if t.outcome.value == "passed"]
    assert verdict.reward is not None and verdict.reward <= 0, (route, won, verdict)
    assert verdict.status is not VerdictStatus.PASSED


def test_every_route_together_earns_nothing(task: Task) -> None:
    routes = "".join(
        textwrap.dedent(route).replace("def _answer(", f"def _answer_{i}(") for i, route in enumerate(ROUTES.values())
    )
    chain = "\n\ndef _answer(*args):\n"
    for i in range(len(ROUTES)):
        chain += f"    try:\n        found = _answer_{i}(*args)\n    except Exception:\n        found = None\n"
        chain += "    if found is not None:\n        return found\n"
    verdict = grade_calc(task, {"calc.py": COMMON.replace("_frame_of(3)", "_frame_of(4)") + routes + chain})
    assert verdict.reward is not None and verdict.reward <= 0, verdict


@pytest.mark.parametrize("name", LEGITIMATE)
def test_honest_code_still_earns_everything(task: Task, name: str) -> None:
    files = {"calc.py": LEGITIMATE[name]}
    if name == "a helper module":
        files["_impl.py"] = CORRECT
    verdict = grade_calc(task, files)
    assert verdict.status is VerdictStatus.PASSED and verdict.reward == 1.0, verdict
    assert verdict.total == 11


def test_a_wrong_value_fails_only_its_own_test(task: Task) -> None:
    wrong = CORRECT.replace("return a + b", "return 0 if (a, b) == (8, 9) else a + b")
    verdict = grade_calc(task, {"calc.py": wrong})
    failed = [t.id for t in verdict.tests if t.outcome.value != "passed"]
    assert failed == ["tests/test_calc.py::test_expected_in_a_local"], verdict
    assert verdict.reward == pytest.approx(10 / 11)


#: Around the sealed assertions rather than through them: skip them (a trace function jumps over every line that
#: reports a value), report guesses for them (calling the reporting function, or writing records of its own), or
#: answer with objects that claim to equal anything.
AROUND = {
    "jumping over the sealed assertions": textwrap.dedent("""
        import sys

        def _tracer(frame, event, arg):
            if not frame.f_code.co_name.startswith("test"):
                return None
            def _line(frame, event, arg):
                if event == "line" and "__rollbox_seal__" in frame.f_code.co_names:
                    try:
                        frame.f_lineno = frame.f_lineno + 1
                    except ValueError:
                        pass
                return _line
            return _line

        sys.settrace(_tracer)
        __import__("threading").settrace(_tracer)

        def add(a, b):
            return None

        mul = add
    """),
    "reporting guesses for the sealed assertions": textwrap.dedent("""
        import sys

        def add(a, b):
            frame = sys._getframe(1)
            report = frame.f_globals.get("__rollbox_seal__")
            for name in frame.f_code.co_consts:
                if isinstance(name, str) and len(name) == 16 and report is not None:
                    for guess in range(60):
                        report(name, guess)
            return a + b + 1

        mul = add
    """),
    "writing records of its own": textwrap.dedent("""
        import json, os, sys

        def add(a, b):
            frame = sys._getframe(1)
            test = os.environ.get("PYTEST_CURRENT_TEST", "").rpartition(" ")[0]
            for name in frame.f_code.co_consts:
                if isinstance(name, str) and len(name) == 16:
                    for fd in range(3, 30):
                        try:
                            os.write(fd, (json.dumps({"seal": name, "test": test, "value": a + b}) + "\\n").encode())
                        except OSError:
                            pass
            return 0

        mul = add
    """),
    "objects that equal anything": textwrap.dedent("""
        class _Any(int):
            def __eq__(self, other):
                return True
            __hash__ = int.__hash__
            def __ge__(self, other):
                return True

        class _Whatever:
            def __eq__(self, other):
                return True
            def __index__(self):
                return 0

        def add(a, b):
            return _Any(0) if a % 2 else _Whatever()

        mul = add
    """),
}


@pytest.mark.parametrize("name", AROUND)
def test_going_around_the_sealed_assertions_earns_nothing(task: Task, name: str) -> None:
    verdict = grade_calc(task, {"calc.py": AROUND[name]})
    won = [t.id for t in verdict.tests if t.outcome.value == "passed"]
    assert verdict.reward is not None and verdict.reward <= 0, (name, won, verdict)


def test_values_of_other_libraries_compare_by_their_plain_value(task: Task) -> None:
    # An integer type of another library (sympy's, numpy's) stands for its int; an object that only claims to
    # equal an int is not a plain value, and fails where a sealed expectation holds it (with a flag saying why).
    library = textwrap.dedent("""
        from fractions import Fraction

        class Integer:
            def __init__(self, value):
                self.value = value
            def __index__(self):
                return self.value

        def add(a, b):
            return Integer(a + b)

        def mul(a, b):
            return Fraction(a * b) if isinstance(a, float) else a * b
    """)
    verdict = grade_calc(task, {"calc.py": library})
    assert verdict.status is VerdictStatus.PASSED and verdict.reward == 1.0, verdict
    mimic = CORRECT.replace("return a + b", "return _Like(a + b)") + textwrap.dedent("""
        class _Like:
            def __init__(self, value):
                self.value = value
            def __eq__(self, other):
                return self.value == other
    """)
    verdict = grade_calc(task, {"calc.py": mimic})
    assert verdict.reward is not None and verdict.reward < 1 and verdict.status is VerdictStatus.FAILED, verdict
    assert any(f["code"] == "unsealable_value" for f in verdict.flags), verdict.flags


def test_a_task_on_another_python_is_sealed_the_same(tmp_path: Path) -> None:
    # Its runtime layer runs another Python version: the sealed modules and the judge's plugin are compiled by it.
    from rollbox.sandbox.runtime import PythonNotFound, find_python

    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    other = None
    for minor in ("3.12", "3.13", "3.10"):
        try:
            other = find_python(minor).minor if minor != here else None
        except PythonNotFound:
            continue
        if other:
            break
    if other is None:
        pytest.skip("no other Python is installed here")
    root = tmp_path / "calc"
    (root / "workspace").mkdir(parents=True)
    (root / "workspace" / "calc.py").write_text("def add(a, b):\n    raise NotImplementedError\n\n\nmul = add\n")
    (root / "tests").mkdir()
    (root / "tests" / "test_calc.py").write_text(HIDDEN)
    (root / "task.toml").write_text(
        '[grading]\nrunner = "pytest"\nreward = "pass_rate"\n[limits]\ntimeout = "60s"\ncpu_time = "40s"\n'
        f'[environment]\npython = "{other}"\n'
    )
    task = load_task(root)
    honest = grade_calc(task, {"calc.py": CORRECT})
    assert honest.status is VerdictStatus.PASSED and honest.reward == 1.0, honest
    reader = grade_calc(task, {"calc.py": COMMON + textwrap.dedent(ROUTES["dis of the caller's bytecode"])})
    assert reader.reward == 0.0, reader


#: The calc module, wrong, that renames the judge's tests directory (the candidate owns /tmp) and puts one of its
#: own in its place (a copy), with a helper module that agrees with it.
SWAPPING = textwrap.dedent("""
    import os, shutil

    judge = "/tmp/.rollbox-judge"
    if os.path.isdir(judge):
        os.rename(judge, judge + ".old")
        shutil.copytree(judge + ".old", judge, symlinks=True)
        os.chmod(os.path.join(judge, "tests"), 0o755)  # copied as read-only as the judge's
        os.remove(os.path.join(judge, "tests", "helpers.py"))
        with open(os.path.join(judge, "tests", "helpers.py"), "w") as f:
            f.write("def expected_sum(a, b):\\n    return 0\\n")

    def add(a, b):
        return 0
""")


def test_a_swapped_tests_directory_changes_no_module(tmp_path: Path) -> None:
    root = tmp_path / "helpers"
    (root / "workspace").mkdir(parents=True)
    (root / "workspace" / "calc.py").write_text("def add(a, b):\n    raise NotImplementedError\n")
    (root / "tests").mkdir()
    (root / "tests" / "helpers.py").write_text("def expected_sum(a, b):\n    return a + b\n")
    (root / "tests" / "conftest.py").write_text("import pytest\n\n\n@pytest.fixture\ndef pair():\n    return (2, 3)\n")
    (root / "tests" / "test_h.py").write_text(
        "from calc import add\nimport helpers\n\n\n"
        "def test_sum(pair):\n    assert add(*pair) == helpers.expected_sum(*pair)\n"
    )
    (root / "task.toml").write_text('[grading]\nrunner = "pytest"\n[limits]\ntimeout = "30s"\ncpu_time = "20s"\n')
    task = load_task(root)
    assert grade_calc(task, {"calc.py": "def add(a, b):\n    return a + b\n"}).status is VerdictStatus.PASSED
    verdict = grade_calc(task, {"calc.py": SWAPPING})
    assert verdict.status is not VerdictStatus.PASSED and verdict.reward is not None and verdict.reward <= 0, verdict


def test_hidden_tests_in_a_package_run_sealed(tmp_path: Path) -> None:
    root = tmp_path / "package"
    (root / "workspace").mkdir(parents=True)
    (root / "workspace" / "calc.py").write_text("def add(a, b):\n    raise NotImplementedError\n")
    (root / "tests" / "sub").mkdir(parents=True)
    (root / "tests" / "sub" / "__init__.py").write_text("WHERE = 'sub'\n")
    (root / "tests" / "sub" / "helpers.py").write_text("def double(x):\n    return 2 * x\n")
    (root / "tests" / "sub" / "test_pkg.py").write_text(
        "from calc import add\n\nfrom . import WHERE\nfrom .helpers import double\n\n\n"
        "def test_add():\n    assert WHERE == 'sub'\n    assert add(2, 3) == 5\n    assert add(1, 1) == double(1)\n"
    )
    (root / "task.toml").write_text('[grading]\nrunner = "pytest"\n[limits]\ntimeout = "30s"\ncpu_time = "20s"\n')
    task = load_task(root)
    honest = grade_calc(task, {"calc.py": "def add(a, b):\n    return a + b\n"})
    assert honest.status is VerdictStatus.PASSED and [t.id for t in honest.tests] == ["tests/sub/test_pkg.py::test_add"]
    reader = grade_calc(task, {"calc.py": COMMON + textwrap.dedent(ROUTES["dis of the caller's bytecode"])})
    assert reader.status is VerdictStatus.FAILED, reader


#: Sealed assertions that run only in a loop, a branch or a block: none is sure to run, so none is required to
#: report, and silencing the reports once let wrong code through.
IN_BLOCKS = textwrap.dedent("""
    import contextlib

    from calc import add, mul


    def test_in_a_loop():
        for _ in range(2):
            assert add(2, 3) == 5


    def test_in_a_branch():
        if True:
            assert mul(3, 4) == 12


    def test_in_a_block():
        with contextlib.suppress(KeyError):
            assert add(1, 1) == 2
""")

#: Wrong code that silences the reporting of sealed assertions, rather than answering them.
SILENCING = {
    "replacing the reporting function": textwrap.dedent("""
        import sys

        for module in list(sys.modules.values()):
            names = getattr(module, "__dict__", None)
            if isinstance(names, dict) and "__rollbox_seal__" in names:
                names["__rollbox_seal__"] = lambda *args, **kwargs: None
    """),
    "filtering the plugin's records": textwrap.dedent("""
        import sys

        plugin = sys.modules.get("rollbox_judge_plugin")
        if plugin is not None:
            emit = plugin._emit
            plugin._emit = lambda record: None if "seal" in record else emit(record)
    """),
    "reporting values into no test": textwrap.dedent("""
        import sys

        plugin = sys.modules.get("rollbox_judge_plugin")


        def detach():  # the plugin once named the test each value belonged to in a list of its own
            current = getattr(plugin, "_current", None)
            if current is not None:
                current[0] = None
    """),
}


@pytest.mark.parametrize("name", SILENCING)
def test_silencing_the_reports_of_sealed_assertions_earns_nothing(tmp_path: Path, name: str) -> None:
    task = _calc_task(tmp_path / "calc", IN_BLOCKS)
    honest = grade_calc(task, {"calc.py": CORRECT})
    assert honest.reward == 1.0, honest
    detach = "detach()\n    " if "def detach" in SILENCING[name] else ""
    attack = SILENCING[name] + f"\n\ndef add(a, b):\n    {detach}return 0\n\n\nmul = add\n"
    verdict = grade_calc(task, {"calc.py": attack})
    won = [t.id for t in verdict.tests if t.outcome.value == "passed"]
    assert verdict.reward is not None and verdict.reward <= 0, (name, won, verdict)


#: unittest cases pytest collects whatever their names, with tests they inherit; and classes it does not collect.
UNITTEST_CASES = textwrap.dedent("""
    import unittest

    from calc import add, mul


    class _Shared:
        def test_mul_inherited(self):
            self.assertEqual(mul(2, 5), 10)


    class CalcTests(_Shared, unittest.TestCase):
        def test_mul(self):
            self.assertEqual(mul(3, 4), 12)


    class AbstractCase(unittest.TestCase):
        __test__ = False

        def test_never_collected(self):
            self.assertEqual(mul(1, 1), 99)


    class Removed(unittest.TestCase):
        def test_never_collected(self):
            self.assertEqual(mul(1, 1), 98)


    del Removed


    def test_add():
        assert add(2, 3) == 5
""")

#: Right for add, wrong for mul, and hides the unittest case from collection (its module is imported by the test
#: module, before pytest collects the classes of that module).
DROPPING_A_CASE = textwrap.dedent("""
    import importlib

    _unittest = importlib.import_module("_pytest.unittest")
    _collect = _unittest.UnitTestCase.collect
    _unittest.UnitTestCase.collect = lambda self: iter(()) if self.name == "CalcTests" else _collect(self)


    def add(a, b):
        return a + b


    def mul(a, b):
        return 0
""")


def test_a_unittest_case_dropped_from_collection_is_missing(tmp_path: Path) -> None:
    task = _calc_task(tmp_path / "calc", UNITTEST_CASES)
    expected = {"test_add", "CalcTests::test_mul", "CalcTests::test_mul_inherited"}
    honest = grade_calc(task, {"calc.py": CORRECT})
    assert honest.reward == 1.0 and {t.id.partition("::")[2] for t in honest.tests} == expected, honest
    verdict = grade_calc(task, {"calc.py": DROPPING_A_CASE})
    outcomes = {t.id.partition("::")[2]: t.outcome.value for t in verdict.tests}
    assert outcomes == {"test_add": "passed"} | dict.fromkeys(expected - {"test_add"}, "missing"), verdict
    assert verdict.reward is not None and verdict.reward < 0.5, verdict


PARAMETRIZED = textwrap.dedent("""
    import pytest

    from calc import add


    @pytest.mark.parametrize("a, b, expected", [(1, 2, 3), (10, 20, 30), (5, 5, 10)])
    def test_sum(a, b, expected):
        assert add(a, b) == expected
""")

#: Right for the first case only, and has pytest run the first case in place of every other (its module is
#: imported by the test module, before pytest generates the cases): keeping their ids, or under ids of its own.
ONE_CASE_FOR_ALL = {
    "under every case's id": "",
    "under ids of its own": 'kwargs["ids"] = [list(kwargs["ids"])[0]] * len(values)',
}


@pytest.mark.parametrize("name", ONE_CASE_FOR_ALL)
def test_one_parametrize_case_standing_for_the_others_earns_only_its_own(tmp_path: Path, name: str) -> None:
    task = _calc_task(tmp_path / "calc", PARAMETRIZED)
    honest = grade_calc(task, {"calc.py": CORRECT})
    assert honest.reward == 1.0 and len(honest.tests) == 3, honest
    attack = textwrap.dedent(f"""
        import importlib

        _python = importlib.import_module("_pytest.python")
        _parametrize = _python.Metafunc.parametrize


        def parametrize(self, argnames, argvalues, *args, **kwargs):
            values = list(argvalues)
            {ONE_CASE_FOR_ALL[name]}
            return _parametrize(self, argnames, [values[0]] * len(values), *args, **kwargs)


        _python.Metafunc.parametrize = parametrize


        def add(a, b):
            return 3 if (a, b) == (1, 2) else 0
    """)
    verdict = grade_calc(task, {"calc.py": attack})
    won = [t.id for t in verdict.tests if t.outcome.value == "passed"]
    assert verdict.reward is not None and verdict.reward < 0.5, (won, verdict)
