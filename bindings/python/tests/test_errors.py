"""Error model, version and ABI checks of the eldr package."""

from __future__ import annotations

import ast
import os
import pickle
import subprocess
import sys

import pytest

import eldr


def test_every_status_has_its_class_and_the_library_name() -> None:
    for status in eldr.Status:
        if status == eldr.Status.OK:
            assert eldr.status_name(0) == "ELDR_OK"
            continue
        cls = eldr.error_class(status)
        assert cls is not eldr.Error and issubclass(cls, eldr.Error)
        err = cls("detail", status)
        assert err.status == status and err.name == eldr.status_name(status)
        assert err.name == "ELDR_E_" + status.name
        assert eldr.status_string(status)  # a description from the library
    assert eldr.error_class(-999) is eldr.Error
    assert eldr.Error("x", -999).name == "ELDR_E_UNKNOWN" == eldr.status_name(-999)


def test_argument_errors_are_value_errors() -> None:
    for cls in (eldr.InvalidArgument, eldr.ShapeMismatch, eldr.OutOfRange):
        assert issubclass(cls, ValueError)
    assert eldr.Timeout("t").status == -13  # the class's status by default


def test_errors_pickle_with_their_status() -> None:
    err = pickle.loads(pickle.dumps(eldr.RingFull("ring full", -12)))
    assert type(err) is eldr.RingFull and err.status == -12 and str(err) == "ring full"


def test_library_errors_carry_status_name_and_message(tmp_path) -> None:
    with pytest.raises(eldr.Error) as info:
        eldr.ClusterTable.load(tmp_path / "missing.eldr")
    assert isinstance(info.value, eldr.IoError)
    assert (info.value.status, info.value.name) == (-4, "ELDR_E_IO")
    assert info.value.message and "IoError" in repr(info.value)


def test_version_and_abi() -> None:
    major, minor, patch = (int(x) for x in eldr.__version__.split("."))
    assert eldr.version_number() == major * 10000 + minor * 100 + patch
    assert eldr.abi_version() == eldr.ABI_VERSION
    assert isinstance(eldr.cuda_available(), bool)


def test_abi_mismatch_fails_the_import_check() -> None:
    eldr._eldr._check_abi(eldr.ABI_VERSION)
    with pytest.raises(ImportError, match="ABI version"):
        eldr._eldr._check_abi(eldr.ABI_VERSION + 1)


def test_package_imports_in_a_fresh_interpreter() -> None:
    out = subprocess.run([sys.executable, "-c", "import eldr; print(eldr.__version__)"],
                         capture_output=True, text=True, env=os.environ, check=True)
    assert out.stdout.strip() == eldr.__version__


def _stub_tree() -> ast.Module:
    package = os.path.dirname(eldr.__file__)
    assert os.path.isfile(os.path.join(package, "py.typed"))
    with open(os.path.join(package, "__init__.pyi")) as stubs:
        return ast.parse(stubs.read())


def test_stubs_declare_every_public_name() -> None:
    tree = _stub_tree()
    declared = {node.name for node in tree.body if isinstance(node, (ast.ClassDef,
                                                                     ast.FunctionDef))}
    declared |= {target.id for node in tree.body if isinstance(node, ast.AnnAssign)
                 for target in [node.target] if isinstance(target, ast.Name)}
    # Re-exports of typed modules: `from ._gpu import GpuFootprints as GpuFootprints`.
    declared |= {alias.name for node in tree.body if isinstance(node, ast.ImportFrom)
                 for alias in node.names if alias.asname == alias.name}
    missing = set(eldr.__all__) - declared
    assert not missing, f"missing from __init__.pyi: {sorted(missing)}"


def test_stubs_declare_every_method_and_property() -> None:
    classes = {node.name: node for node in _stub_tree().body if isinstance(node, ast.ClassDef)}
    for cls in (eldr.ClusterTable, eldr.Router, eldr.Client, eldr.Decision):
        stubbed = {item.name for item in classes[cls.__name__].body
                   if isinstance(item, ast.FunctionDef)}
        public = {name for name in dir(cls) if not name.startswith("_")}
        public |= {"__enter__", "__exit__"} & set(vars(cls))
        stubbed.discard("__init__")  # pybind11 defines one on every class
        assert public == stubbed, (f"{cls.__name__}: stubs differ: missing "
                                   f"{sorted(public - stubbed)}, extra {sorted(stubbed - public)}")
