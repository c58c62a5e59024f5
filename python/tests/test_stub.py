# SPDX-License-Identifier: Apache-2.0
"""The shipped type stub (__init__.pyi) says what the module has: every public name, and every public
method of the classes with the same parameters, so that it cannot drift from the code."""
import ast
import inspect
import os

from conftest import ROOT

import sparrow

STUB = os.path.join(ROOT, "python", "sparrow", "__init__.pyi")


def stub_tree():
    with open(STUB) as f:
        return ast.parse(f.read())


def stub_names(tree):
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.AnnAssign):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets)
    return names


def stub_params(fn):
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


def test_every_public_name_is_in_the_stub():
    names = stub_names(stub_tree())
    missing = [n for n in list(sparrow.__all__) + ["__version__"] if n not in names]
    assert not missing, f"__init__.pyi lacks {missing}"


def test_public_methods_match_the_stub():
    tree = stub_tree()
    classes = {n.name: n for n in tree.body if isinstance(n, ast.ClassDef)}
    for cls in (sparrow.Communicator, sparrow.WeightSync):
        stub = {f.name: f for f in classes[cls.__name__].body if isinstance(f, ast.FunctionDef)}
        for name, member in vars(cls).items():
            if name.startswith("_") and name not in ("__init__", "__enter__", "__exit__"):
                continue
            fn = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
            if isinstance(fn, property):
                assert name in stub, f"{cls.__name__}.{name} (property) is not in __init__.pyi"
                continue
            if not callable(fn):
                continue
            assert name in stub, f"{cls.__name__}.{name} is not in __init__.pyi"
            assert stub_params(stub[name]) == runtime_params(fn), f"{cls.__name__}.{name}'s parameters differ"


def test_version_is_the_librarys():
    v = sparrow.version()
    assert sparrow.__version__ == f"{v // 10000}.{v // 100 % 100}.{v % 100}"
