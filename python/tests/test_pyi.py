# SPDX-License-Identifier: Apache-2.0
"""The type hints shipped as __init__.pyi say what the module has: every public name, and every
public function and method with the same parameters, so that the file cannot drift from the code."""
import ast
import inspect
import os

from conftest import ROOT

import sparrow

PYI = os.path.join(ROOT, "python", "sparrow", "__init__.pyi")


def pyi_tree():
    with open(PYI) as f:
        return ast.parse(f.read())


def pyi_names(tree):
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets)
    return names


def pyi_params(fn):
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    if a.vararg:
        names.append("*" + a.vararg.arg)
    if a.kwarg:
        names.append("**" + a.kwarg.arg)
    return [n for n in names if n not in ("self", "cls")]


def runtime_params(obj):
    out = []
    for p in inspect.signature(obj).parameters.values():
        prefix = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
        out.append(prefix + p.name)
    return [n for n in out if n not in ("self", "cls")]


def test_every_public_name_is_in_the_pyi():
    names = pyi_names(pyi_tree())
    missing = [n for n in list(sparrow.__all__) + ["__version__"] if n not in names]
    assert not missing, f"__init__.pyi lacks {missing}"


def test_public_functions_match_the_pyi():
    declared = {f.name: f for f in pyi_tree().body if isinstance(f, ast.FunctionDef)}
    for name in sparrow.__all__:
        fn = getattr(sparrow, name)
        if inspect.isfunction(fn):
            assert pyi_params(declared[name]) == runtime_params(fn), f"{name}'s parameters differ"


def test_public_methods_match_the_pyi():
    tree = pyi_tree()
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    for cls in (sparrow.Communicator, sparrow.WeightSync):
        declared = {f.name: f for f in classes[cls.__name__].body if isinstance(f, ast.FunctionDef)}
        for name, member in vars(cls).items():
            if name.startswith("_") and name not in ("__init__", "__enter__", "__exit__"):
                continue
            fn = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
            if isinstance(fn, property):
                assert name in declared, f"{cls.__name__}.{name} (property) is not in __init__.pyi"
                continue
            if not callable(fn):
                continue
            assert name in declared, f"{cls.__name__}.{name} is not in __init__.pyi"
            assert pyi_params(declared[name]) == runtime_params(fn), f"{cls.__name__}.{name}'s parameters differ"


def test_version_is_the_librarys():
    v = sparrow.version()
    assert sparrow.__version__ == f"{v // 10000}.{v // 100 % 100}.{v % 100}"
