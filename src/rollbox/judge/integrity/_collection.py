"""Which classes of a test module pytest collects, read from its syntax (the candidate's code runs during
collection, so what collection yields cannot say what there is to run): those named ``Test...`` and every unittest
case (a ``TestCase`` base, directly or through classes of the same module), unless the class says
``__test__ = False`` or the module deletes it; each with its methods, its own and those it inherits from classes of
the module."""

from __future__ import annotations

import ast

__all__ = ["collected_classes"]

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _bases(node: ast.ClassDef) -> list[str]:
    return [b.id if isinstance(b, ast.Name) else b.attr if isinstance(b, ast.Attribute) else "" for b in node.bases]


def _disabled(node: ast.ClassDef) -> bool:
    """Whether the class says ``__test__ = False``."""
    return any(
        isinstance(item, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "__test__" for t in item.targets)
        and isinstance(item.value, ast.Constant)
        and item.value.value is False
        for item in node.body
    )


def collected_classes(tree: ast.Module) -> list[tuple[ast.ClassDef, list[Function]]]:
    """The classes pytest collects from the module, in order, each with its methods (its own first, then those it
    inherits from classes of the module that it does not override)."""
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    deleted = {
        target.id
        for node in tree.body
        if isinstance(node, ast.Delete)
        for target in node.targets
        if isinstance(target, ast.Name)
    }

    def unittest_case(node: ast.ClassDef, seen: frozenset[str]) -> bool:
        return any(
            name == "TestCase" or (name in classes and name not in seen and unittest_case(classes[name], seen | {name}))
            for name in _bases(node)
        )

    def methods(node: ast.ClassDef, seen: frozenset[str]) -> list[Function]:
        found = [item for item in node.body if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)]
        names = {f.name for f in found}
        for name in _bases(node):
            if name in classes and name not in seen:
                for inherited in methods(classes[name], seen | {name}):
                    if inherited.name not in names:
                        names.add(inherited.name)
                        found.append(inherited)
        return found

    return [
        (node, methods(node, frozenset({name})))
        for name, node in classes.items()
        if name not in deleted
        and not _disabled(node)
        and (name.startswith("Test") or unittest_case(node, frozenset({name})))
    ]
